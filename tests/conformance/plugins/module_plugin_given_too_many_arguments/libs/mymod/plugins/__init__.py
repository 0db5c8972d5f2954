from inmanta.plugins import plugin


@plugin
def double(p: "mymod::port") -> "int":
    return p * 2
