from inmanta.plugins import plugin, Context, PluginException

@plugin
def f(a: int | str) -> str:
    return type(a).__name__
