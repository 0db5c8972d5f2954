import inmanta.export
import inmanta.resources
from inmanta.resources import resource, PurgeableResource, ManagedResource, Resource
from inmanta.plugins import plugin


@resource("pm::Thing", agent="host", id_attribute="name")
class Thing(PurgeableResource, ManagedResource):
    fields = ("name",)


@inmanta.export.dependency_manager
def deps(model, resources):
    pass


@plugin
def f(x: "string") -> "string":
    return x + Thing.__name__
