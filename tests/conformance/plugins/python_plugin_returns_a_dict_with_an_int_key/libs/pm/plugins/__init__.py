from inmanta.plugins import plugin
@plugin
def d() -> "dict":
    return {1: "a", "b": 2.5}
