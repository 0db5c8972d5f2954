from inmanta.plugins import plugin
from inmanta.ast.attribute import RelationAttribute
from inmanta.ast.entity import Entity


def describe(t):
    out = [t.get_full_name(), t.type_string(), "parents=" + ",".join(sorted(t.get_all_parent_names())),
           "attrs=" + ",".join(sorted(t.get_all_attribute_names())), "indices=" + repr(t.get_indices()),
           "entity=" + str(isinstance(t, Entity))]
    for name in sorted(t.get_all_attribute_names()):
        a = t.get_attribute(name)
        rel = isinstance(a, RelationAttribute)
        line = f"{name}: rel={rel} opt={a.is_optional()} multi={a.is_multi()}"
        if rel:
            line += f" low={a.low} high={a.high} end={a.end.name if a.end is not None else None} endent={a.end.entity.get_full_name() if a.end is not None else None} type={a.type.get_full_name()}"
        out.append(line)
    out.append("missing=" + repr(t.get_attribute("nothere")))
    return out


@plugin
def show(x: "any") -> "string":
    return "\n".join(describe(x._type()))
