from inmanta.plugins import plugin


@plugin
def parent_name(node: "std::Entity") -> "string":
    return node.parent.name
