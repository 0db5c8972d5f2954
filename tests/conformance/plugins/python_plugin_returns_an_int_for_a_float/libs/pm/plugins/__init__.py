from inmanta.plugins import plugin
@plugin
def f() -> "int":
    return 2.0
@plugin
def g() -> "float":
    return 2
