from inmanta.plugins import plugin
from inmanta_plugins.pb import bump


@plugin
def twice(x: "int") -> "int":
    bump()
    return 2 * x
