import typing
import inmanta.plugins
from inmanta.plugins import plugin

Thing = typing.Annotated[typing.Any, inmanta.plugins.ModelType["pm::A"]]


@plugin
def f(a: Thing) -> str:
    return a.name
