import inmanta_plugins.std
from inmanta.plugins import Context, plugin


@plugin
def fact(ctx: Context, resource: "any", name: "string") -> "any":
    return inmanta_plugins.std.getfact(ctx, resource, name)


@plugin
def fact_or_why(ctx: Context, resource: "any", name: "string") -> "string":
    try:
        value = inmanta_plugins.std.getfact(ctx, resource, name, default_value="dflt")
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return f"value {value}"
