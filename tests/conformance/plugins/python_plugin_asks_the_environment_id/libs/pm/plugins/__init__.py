from inmanta.plugins import plugin, Context, PluginException

@plugin
def f(ctx: Context) -> "string":
    try:
        return ctx.get_environment_id()
    except Exception as e:
        return "err:" + type(e).__name__
