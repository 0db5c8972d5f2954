from inmanta.plugins import plugin

calls = 0


@plugin
def label(host: "std::Entity") -> "string":
    global calls
    calls += 1
    return f"{host.name}-{host.size}"


@plugin
def count() -> "int":
    return calls
