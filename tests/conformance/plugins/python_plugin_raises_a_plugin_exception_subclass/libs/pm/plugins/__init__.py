from inmanta.plugins import plugin, Context, PluginException

class MyErr(PluginException):
    pass
@plugin
def f() -> "int":
    raise MyErr("mine")
