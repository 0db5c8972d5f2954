from inmanta.plugins import plugin


@plugin
def f(x: " int ") -> "string":
    return "x"
