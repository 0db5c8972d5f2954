import inmanta.ast
from inmanta.plugins import plugin


@plugin
def f(x: "string") -> "string":
    raise inmanta.ast.RuntimeException(None, "bad " + x)
