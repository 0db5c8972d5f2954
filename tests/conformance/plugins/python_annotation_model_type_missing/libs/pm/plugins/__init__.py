from typing import Annotated, Any

from inmanta.plugins import plugin, ModelType


@plugin
def f(a: Annotated[Any, ModelType["pm::Missing"]]) -> None:
    pass
