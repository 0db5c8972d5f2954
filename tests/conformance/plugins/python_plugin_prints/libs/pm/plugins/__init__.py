from inmanta.plugins import plugin


@plugin
def shout(word: "string") -> "string":
    print("plugin says " + word)
    print("second line\nthird line")
    return word.upper()
