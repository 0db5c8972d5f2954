import inmanta.plugins


@inmanta.plugins.plugin
def a(x: "string") -> "string":
    return "a" + x


@inmanta.plugins.plugin()
def b(x: str) -> str:
    return "b" + x


@inmanta.plugins.plugin("renamed")
def c(x: str) -> str:
    return "c" + x
