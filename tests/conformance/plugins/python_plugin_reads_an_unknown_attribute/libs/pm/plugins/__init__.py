from inmanta.ast import UnknownException
from inmanta.execute.util import Unknown
from inmanta.plugins import plugin


@plugin
def unknown() -> "any":
    return Unknown(None)


@plugin
def bigger(item: "pm::Item") -> "int":
    return item.size + 1


@plugin
def catches(item: "pm::Item") -> "string":
    try:
        return str(item.size)
    except UnknownException:
        return "unknown"
