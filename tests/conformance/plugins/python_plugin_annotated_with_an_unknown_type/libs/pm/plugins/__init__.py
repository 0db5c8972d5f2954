from inmanta.plugins import plugin


@plugin
def f(x: "string") -> "string":
    return x


@plugin
def never_called(x: "nosuch[]") -> "string":
    return "x"
