from inmanta.plugins import plugin
from inmanta.execute.proxy import DynamicProxy, SequenceProxy, DictProxy
import inmanta.execute.proxy


@plugin
def f(x: "any") -> "string":
    return " ".join(str(b) for b in [
        isinstance(x, DynamicProxy),
        isinstance(x, SequenceProxy),
        isinstance(x, DictProxy),
        isinstance(x, inmanta.execute.proxy.DynamicProxy),
    ])
