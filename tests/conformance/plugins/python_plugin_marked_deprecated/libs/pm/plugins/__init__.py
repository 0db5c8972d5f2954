from inmanta.plugins import plugin, Context, PluginException

from inmanta.plugins import deprecated
@deprecated(replaced_by="pm::g")
@plugin
def f(x: "int") -> "int":
    return x + 1
