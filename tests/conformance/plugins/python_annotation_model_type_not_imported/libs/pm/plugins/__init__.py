from typing import Annotated, Any

from inmanta.plugins import plugin, ModelType


@plugin
def f(a: "int") -> list[Annotated[Any, ModelType['other::A[]']]]:
    return []
