from inmanta.plugins import plugin


@plugin
def rename(host: "std::Entity") -> "string":
    host.name = "other"
    return "done"
