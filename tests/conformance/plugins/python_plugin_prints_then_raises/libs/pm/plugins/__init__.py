from inmanta.plugins import plugin


@plugin
def fail(word: "string") -> "string":
    print("about to fail")
    raise ValueError("bad " + word)
