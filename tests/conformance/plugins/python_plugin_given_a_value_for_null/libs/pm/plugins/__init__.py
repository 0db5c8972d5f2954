from inmanta.plugins import plugin, Context, PluginException

@plugin
def f(a: "null") -> "string":
    return repr(a)
