from inmanta.plugins import plugin
@plugin
def f() -> "int":
    return 1
