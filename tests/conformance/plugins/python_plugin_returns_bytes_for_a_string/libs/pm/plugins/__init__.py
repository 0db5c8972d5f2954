from inmanta.plugins import plugin, Context, PluginException

@plugin
def f() -> "string":
    return b"abc"
