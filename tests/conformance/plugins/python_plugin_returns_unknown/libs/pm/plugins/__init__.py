from inmanta.plugins import plugin
from inmanta.execute.util import Unknown


@plugin
def f(x: "string") -> "string":
    return Unknown(source=x)


@plugin
def g() -> "any":
    return Unknown(None)


@plugin
def h() -> "list":
    return [Unknown(None), 1]
