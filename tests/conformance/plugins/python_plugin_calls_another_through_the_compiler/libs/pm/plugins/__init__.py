import inmanta.plugins
from inmanta.plugins import plugin


@plugin
def g(ctx: inmanta.plugins.Context, x: "string") -> "string":
    return "g" + x


@plugin
def f(ctx: inmanta.plugins.Context, x: "string") -> "string":
    g = ctx.get_compiler().get_plugins()["pm::g"]
    args = [x]
    args.insert(g._context, ctx)
    return g(*args)
