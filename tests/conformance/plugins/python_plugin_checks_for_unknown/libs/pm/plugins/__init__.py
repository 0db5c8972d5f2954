from inmanta.plugins import plugin
from inmanta.execute.util import Unknown, NoneValue
import inmanta.execute.util


@plugin
def f(x: "any") -> "string":
    return str(isinstance(x, Unknown)) + str(isinstance(x, inmanta.execute.util.Unknown))
