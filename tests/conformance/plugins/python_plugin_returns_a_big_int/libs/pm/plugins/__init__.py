from inmanta.plugins import plugin
@plugin
def big() -> "int":
    return 2**70
