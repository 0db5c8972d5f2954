from inmanta.plugins import plugin, Context, PluginException

@plugin
def f(a: "string[]") -> "string":
    return "|".join(a)
