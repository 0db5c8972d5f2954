from inmanta.plugins import plugin, Context, PluginException

import typing
from inmanta.plugins import ModelType
@plugin
def f(a: typing.Annotated[typing.Any, ModelType["pm::A"]]) -> str:
    return a.n
