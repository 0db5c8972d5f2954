from inmanta.plugins import plugin


@plugin
def describe(l: "list", d: "dict") -> "string":
    parts = [
        str(len(l)),
        str(l[0]),
        str(l[-1]),
        str(list(l[1:])),
        str(sorted(d)),
        str(d["b"][1]),
        str(d.get("z", "none")),
        str("a" in d),
        str(2 in l),
        str(isinstance(l, list)),
        str(isinstance(d, dict)),
        str(l == [1, 2, 3]),
        str(dict(d.items())["a"]),
    ]
    return " ".join(parts)


@plugin
def echo(l: "list") -> "list":
    return l


@plugin
def nested(d: "dict") -> "list":
    return [d["b"], d["a"], list(d.keys())]
