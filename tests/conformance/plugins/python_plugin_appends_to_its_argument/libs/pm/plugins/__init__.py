from inmanta.plugins import plugin
@plugin
def f(l: "list") -> "list":
    l.append(4)
    return l
