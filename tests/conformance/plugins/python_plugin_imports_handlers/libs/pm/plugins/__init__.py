from inmanta.agent import handler
import inmanta.agent.handler
from inmanta.agent.handler import CRUDHandler, HandlerContext, ResourcePurged, SkipResource, provider, cache, LoggerABC, PythonLogger
import inmanta.const
from inmanta import const
from inmanta.util import dict_path
from inmanta.plugins import plugin


@provider("pm::Thing", name="thing")
class ThingHandler(CRUDHandler):
    @cache(timeout=10)
    def read_resource(self, ctx: HandlerContext, resource) -> None:
        raise ResourcePurged()


@plugin
def f(x: "string") -> "string":
    return x
