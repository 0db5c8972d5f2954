from inmanta.plugins import plugin, Context, PluginException

@plugin
def f() -> dict[str, list[int]]:
    return {"a": [1, "x"]}
