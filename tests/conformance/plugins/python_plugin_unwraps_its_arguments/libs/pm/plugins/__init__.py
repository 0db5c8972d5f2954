from inmanta.plugins import plugin
from inmanta.execute.proxy import DynamicProxy


@plugin
def f(l: "list", d: "dict") -> "string":
    u = DynamicProxy.unwrap(l)
    i = d._get_instance()
    return " ".join(str(x) for x in [u, type(u).__name__, type(u[1]).__name__, i, type(i).__name__, DynamicProxy.return_value(3)])
