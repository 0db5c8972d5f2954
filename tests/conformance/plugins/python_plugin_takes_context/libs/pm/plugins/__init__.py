import os

from inmanta.plugins import Context, plugin


@plugin
def first(context: Context, x: "int") -> "int":
    return x + 1


@plugin
def last(x: "int", context: Context) -> "int":
    return x * 2


@plugin
def data_dir(context: Context) -> "string":
    path = context.get_data_dir()
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path)) + " " + str(os.path.isdir(path))
