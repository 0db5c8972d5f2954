from inmanta.plugins import plugin


@plugin
def describe(host: "std::Entity") -> "string":
    names = sorted(nic.name for nic in host.nics)
    return f"{host.name} has {len(host.nics)} nics: {names}, first ip {host.nics[0].ip}"


@plugin
def same(a: "std::Entity", b: "std::Entity") -> "bool":
    return a == b


@plugin
def pick(hosts: "list") -> "std::Entity":
    return sorted(hosts, key=lambda h: h.name)[-1]


@plugin
def has(host: "std::Entity", name: "string") -> "bool":
    return hasattr(host, name)
