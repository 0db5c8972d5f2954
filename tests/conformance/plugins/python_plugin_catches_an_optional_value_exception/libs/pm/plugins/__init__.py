from inmanta.plugins import plugin
from inmanta.ast import OptionalValueException


@plugin
def f(a: "pm::A") -> "string":
    try:
        a.b
    except OptionalValueException:
        return "none"
    return "some"
