import inmanta.plugins
from inmanta.plugins import plugin


@plugin
def own(x: "any") -> "string":
    t = x._type()
    names = [f"{name}:{type(a).__name__}" for name, a in t.attributes.items()]
    parents = [p.get_full_name() for p in t.parent_entities]
    return f"{t.get_full_name()} own={names} parents={parents} name={inmanta.plugins.allow_reference_values(x).name}"
