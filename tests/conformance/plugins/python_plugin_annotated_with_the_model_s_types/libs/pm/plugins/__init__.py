from inmanta.plugins import plugin


@plugin
def describe(
    a: "std::Entity?",
    b: "string[]",
    c: "Thing",
    d: "pm::Thing",
    e: "any",
    f: "int?",
    g: "list",
    h: "dict",
    i: "std::hoststring",
    j: "mytd",
    k: "int[]?",
) -> "string":
    return "described"


@plugin
def never_called(x: "expression") -> "string[]":
    return []
