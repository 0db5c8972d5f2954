from inmanta.plugins import plugin

_counter = 0


@plugin
def next_id() -> "int":
    global _counter
    _counter += 1
    return _counter


@plugin
def double(x: "int") -> "int":
    return 2 * x
