from inmanta.plugins import plugin
@plugin
def nan() -> "float":
    return float("nan")
@plugin
def inf() -> "float":
    return float("-inf")
