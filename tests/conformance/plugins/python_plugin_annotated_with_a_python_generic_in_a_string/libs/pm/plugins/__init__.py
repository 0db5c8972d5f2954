from inmanta.plugins import plugin


@plugin
def f(x: "list[string]") -> "string":
    return "x"
