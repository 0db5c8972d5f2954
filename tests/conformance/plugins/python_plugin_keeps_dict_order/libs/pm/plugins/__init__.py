from inmanta.plugins import plugin, Context, PluginException

@plugin
def f() -> "dict":
    return {"b": 1, "a": 2, "c": {"z": 1, "y": 2}}
@plugin
def keys(d: "dict") -> "string":
    return ",".join(d.keys())
