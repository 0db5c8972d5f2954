from typing import Annotated, Any

from inmanta.plugins import plugin, ModelType


@plugin
def f(a: Annotated[Any, ModelType["pm::A"]]) -> Annotated[Any, ModelType["std::Entity?"]]:
    return None
