from inmanta.plugins import Context, plugin


@plugin
def caller(ctx: Context, tag: "string") -> "string":
    ns = ctx.owner.namespace
    return f"{tag}: {ns.get_full_name()} ({ns.get_name()})"
