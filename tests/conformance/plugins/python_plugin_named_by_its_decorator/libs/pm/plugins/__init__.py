from inmanta.plugins import plugin, Context, PluginException

@plugin("renamed")
def f(x: "int") -> "int":
    return x + 1
