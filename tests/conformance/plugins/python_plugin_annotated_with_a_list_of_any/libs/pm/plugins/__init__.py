from inmanta.plugins import plugin


@plugin
def f(x: "any[]") -> "string":
    return "x"
