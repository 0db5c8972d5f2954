from inmanta.plugins import plugin
import inmanta_plugins.std


@plugin
def f(x: "string") -> "string":
    return str(inmanta_plugins.std.is_unknown(x))
