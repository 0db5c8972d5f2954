from inmanta.plugins import plugin

# Module state lives as long as the compile: the reference imports a module's plugins once.
_counter = 0
_addresses = {}


@plugin
def next_id() -> "int":
    global _counter
    _counter += 1
    return _counter


@plugin
def allocate(name: "string") -> "int":
    if name not in _addresses:
        _addresses[name] = len(_addresses) + 100
    return _addresses[name]
