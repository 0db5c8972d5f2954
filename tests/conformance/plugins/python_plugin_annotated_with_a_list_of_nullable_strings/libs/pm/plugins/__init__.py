from inmanta.plugins import plugin


@plugin
def f(x: "string?[]") -> "string":
    return "x"
