from inmanta.plugins import plugin, Context, PluginException

@plugin
def f() -> "list":
    return {1}
