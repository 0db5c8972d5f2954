from inmanta.plugins import plugin
@plugin
def t() -> "string[]":
    return ("a",)
