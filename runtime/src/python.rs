//! The Python bridge: plugins that weft has no native implementation for (a module's own
//! Python plugins) run in a `python3` subprocess.
//!
//! The plugin packages of a set of modules share one long-lived subprocess (a *server*) per
//! evaluation, started at the first call of one of their plugins and stopped when the
//! evaluation ends ([`Servers`]). The server imports the packages, from a sandbox that links
//! every module's (so that one module's plugins may import another's), with a stand-in for the `inmanta` package (the reference's
//! compiler): `inmanta.plugins` (the `@plugin` and `deprecated` decorators, `Context`,
//! `ModelType`, `PluginException`), the proxy classes of `inmanta.execute.proxy`, `Unknown`
//! and `NoneValue`, the compiler errors of `inmanta.ast`, `inmanta.util`'s JSON encoders,
//! `inmanta.module`'s `Project`, and placeholders for every other name of inmanta-core's
//! modules (resources, handlers, the exporter), which a plugin package defines next to its
//! plugins and so must import, though a compile never runs them; `std`'s plugin package is a
//! stand-in too (`is_unknown`; `get_file_content` and `getfact`, which ask the evaluator). It
//! then answers calls, one JSON line per request and one per response. Instances of
//! `std::Dataclass` entities are passed as their Python dataclass, built from the instance's
//! attributes, as the reference does; other instances as
//! read-only proxies whose attribute reads are questions back to the evaluator during the
//! call (a `getattr` line, answered on the request pipe); lists and dicts as read-only views.
//!
//! One process for all the calls is what the reference does too: it imports the modules'
//! plugins once per compile, into one interpreter, so module-level state (a counter, a cache, an allocator of
//! addresses) carries from one call to the next, and a model can rely on it. It is also what
//! makes a call cheap: starting `python3` takes tens of milliseconds, a call to a running
//! server tens of microseconds.
//!
//! What a plugin writes to `sys.stdout` is captured per call and added to the evaluation's
//! prints, where the reference's `print` in a plugin lands, between the lines of `std::print`
//! around it; what it writes to `sys.stderr` becomes the evaluation's plugin messages. The
//! protocol has the process's own standard input and output to itself: the plugin's file
//! descriptor 0 reads nothing and 1 writes to the server's error stream, which goes to a file
//! in the sandbox, emptied before each call and shown only when the server dies in one.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use weft_ir::value::Value;

/// Runs in the server. Reads requests on its (duplicated) standard input, one JSON object
/// per line, and answers each with one line on its (duplicated) standard output. `sys.argv[1]`
/// is the sandbox directory, which holds the `inmanta_plugins` package to import from.
const DRIVER: &str = r#"
import dataclasses, datetime, enum, importlib, importlib.abc, importlib.machinery, importlib.util
import builtins, hashlib, io, json, os, re, sys, types, typing, uuid
from collections.abc import Mapping

# The plugins by Python module and the name the model calls them by, which
# `@plugin("name")` makes other than the function's.
registered = {}

def plugin(function=None, **options):
    def register(f, name=None):
        registered[(f.__module__, name or f.__name__)] = f
        return f
    if callable(function):
        return register(function)
    return lambda f: register(f, function if isinstance(function, str) else None)

class Context:
    """What weft's bridge can give of the reference's plugin context: `get_data_dir`,
    `get_environment_id`, `get_compiler` (for its Python plugins) and the namespace of the
    calling statement (`owner.namespace`)."""

    def __init__(self, data_dir=None, namespace=None):
        self._data_dir = data_dir
        self.owner = Caller(namespace)

    def get_data_dir(self):
        os.makedirs(self._data_dir, exist_ok=True)
        return self._data_dir

    def get_environment_id(self):
        # A compile without an orchestrator has no environment, which the reference's
        # `str()` of the missing setting turns into this text.
        return "None"

    def get_compiler(self):
        return Compiler()

class Caller:
    """The statement that called the plugin (the reference's `FunctionCall`), as far as the
    bridge knows it: its namespace, by which a plugin finds the module that called it."""

    def __init__(self, namespace):
        self.namespace = Namespace(namespace) if namespace is not None else None

class Namespace:
    """A namespace of the model (`module::sub`, `__config__` for `main.cf`), by its name."""

    def __init__(self, full_name):
        self._full_name = full_name
        self.name = full_name.split("::")[-1]

    def get_full_name(self):
        return self._full_name

    def get_name(self):
        return self.name

    def __str__(self):
        return self._full_name

    def __repr__(self):
        return self._full_name

class Compiler:
    """What plugins ask of the reference's compiler: its plugins, to call them as filters in
    a template. Those are the Python plugins of the packages this server imported; weft's
    own (std's) are not Python, and are missing."""

    def get_plugins(self):
        return {
            "::".join(module.split(".")[1:] + [name]): PluginFunction(function)
            for (module, name), function in registered.items()
        }

class PluginFunction:
    """A plugin as `get_plugins` gives it: callable, with the position of its `Context`
    parameter (`_context`, -1 for none), which the caller fills."""

    def __init__(self, function):
        self._function = function
        self._context = -1
        try:
            import inspect
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        for position, parameter in enumerate(parameters):
            annotation = parameter.annotation
            if annotation is Context or annotation == "Context":
                self._context = position
                break

    def __call__(self, *args, **kwargs):
        return self._function(*args, **kwargs)

def deprecated(function=None, **options):
    if callable(function):
        return function
    return lambda f: f

class ModelType:
    """`Annotated[T, ModelType["ns::name"]]` names the model's type of a parameter; weft reads
    annotations from the source, so at run time this only has to exist."""

    def __class_getitem__(cls, name):
        return cls

# The reference's compiler errors (`inmanta.ast`), in its hierarchy, so that a plugin that
# catches one (`OptionalValueException` for an empty relation) catches what the evaluator
# raises under that name.
class CompilerException(Exception):
    pass

class RuntimeException(CompilerException):
    """Made as the reference makes its compiler errors, with the statement first (a plugin
    gives `None`); the message is what the bridge reports."""

    def __init__(self, stmt=None, msg="", *rest):
        super().__init__(msg)
        self.msg = msg

class ExternalException(RuntimeException):
    pass

class ExplicitPluginException(ExternalException):
    pass

class WrappingRuntimeException(RuntimeException):
    pass

class AttributeException(WrappingRuntimeException):
    pass

class PluginTypeException(WrappingRuntimeException):
    pass

class TypingException(RuntimeException):
    pass

class DuplicateException(TypingException):
    pass

class TypeNotFoundException(RuntimeException):
    pass

class OptionalValueException(RuntimeException):
    pass

class IndexException(RuntimeException):
    pass

class KeyException(RuntimeException):
    pass

class NotFoundException(RuntimeException):
    def __init__(self, stmt=None, name="", msg=None):
        super().__init__(stmt, msg or f"could not find value {name}")

class DoubleSetException(RuntimeException):
    pass

class ModifiedAfterFreezeException(RuntimeException):
    pass

class UnsetException(RuntimeException):
    """An attribute the plugin read has no value yet. Let through, it makes weft call the
    plugin again once the attribute has one, as the reference's exception of that name does."""

    def __init__(self, cell):
        super().__init__(None, "the attribute has no value yet")
        self.cell = cell

class PluginException(Exception):
    def __init__(self, message=""):
        super().__init__(message)
        self.message = message

compiler_errors = {
    cls.__name__: cls
    for cls in (
        CompilerException, RuntimeException, ExternalException, ExplicitPluginException,
        WrappingRuntimeException, AttributeException, PluginTypeException, TypingException,
        DuplicateException, TypeNotFoundException, OptionalValueException, IndexException,
        KeyException, NotFoundException, DoubleSetException, ModifiedAfterFreezeException,
    )
}

def compiler_error(kind, message):
    """The evaluator's error `kind` with its message, to raise in a plugin; a kind the table
    does not name is a `RuntimeException`, as every error the evaluator raises during a call
    is. Made without the classes' constructors, whose arguments differ."""
    if kind not in compiler_errors:
        compiler_errors[kind] = type(kind, (RuntimeException,), {})
    error = Exception.__new__(compiler_errors[kind])
    Exception.__init__(error, message)
    error.msg = message
    return error

class Unknown:
    """The reference's value for what is not known yet. A plugin returns one (in a list, or
    alone) for what it can not know before the orchestrator deploys; the evaluator does not
    call a Python plugin with one."""

    def __init__(self, source=None):
        self.source = source

class NoneValue:
    pass

class UnknownException(Exception):
    """Raised by a proxy for an attribute whose value is not known: a plugin that lets it
    through returns an unknown value, an exported field that reads it is undefined."""

    def __init__(self, unknown):
        super().__init__()
        self.unknown = unknown

class Placeholder(type):
    """The class of weft's placeholders for the names of `inmanta` the bridge does not stand in
    for: resources, handlers, the exporter, the orchestrator's client. A plugin package defines
    its resources and handlers next to its plugins, so it must import them; a compile never
    runs them. A placeholder is a class (it can be subclassed, subscripted and joined with `|`
    in an annotation), and any attribute of it is another placeholder. Called while a module
    is imported, it is a decorator: given one class or function and nothing else it gives
    that back, given anything else another placeholder (a decorator's factory, as in
    `@provider("ns::Type", name="x")`). Called from a function while a plugin runs, it raises:
    the bridge has nothing that would do what the reference's object does."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return placeholder(cls.__module__, f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        # Module and class bodies run without fast locals, functions with them: a module a
        # plugin imports as it runs still defines its classes and functions.
        if running and sys._getframe(1).f_code.co_flags & CO_OPTIMIZED:
            raise NotImplementedError(
                f"{cls.__module__}.{cls.__qualname__} is not available in weft's Python bridge"
            )
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return placeholder(cls.__module__, f"{cls.__qualname__}()")

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

CO_OPTIMIZED = 1

# Whether a plugin function is running (rather than its module being imported).
running = False

def placeholder(module, qualname):
    made = Placeholder(qualname.rsplit(".", 1)[-1], (), {"__module__": module, "__qualname__": qualname})
    return made

# The modules of inmanta-core 18.0.1 (the reference), without its tests: a plugin package can
# import any of them, and no other (`inmanta.agent.io` is gone in 18, and fails as it does in
# the reference).
CORE_MODULES = frozenset("""
inmanta agent agent.agent agent.agent_new agent.cache agent.code_manager agent.config
agent.executor agent.forking_executor agent.handler agent.in_process_executor agent.reporting
agent.resourcepool agent.write_barier_executor app ast ast.attribute ast.blocks ast.constraint
ast.constraint.expression ast.entity ast.export ast.statements ast.statements.assign
ast.statements.call ast.statements.define ast.statements.generator ast.type ast.variables
command compiler compiler.config compiler.data compiler.help compiler.help.explainer config
const data data.dataview data.model data.schema data.sqlalchemy db db.util deploy
deploy.persistence deploy.scheduler deploy.state deploy.tasks deploy.timers deploy.work
docstring_parser env exceptions execute execute.dataflow execute.dataflow.datatrace
execute.dataflow.graphic execute.dataflow.root_cause execute.proxy execute.runtime
execute.scheduler execute.util export file_parser graphql graphql.graphql graphql.schema loader
logging main model module moduletool mypy parser plugins profile_mem protocol protocol.auth
protocol.auth.auth protocol.auth.decorators protocol.auth.policy_engine protocol.auth.providers
protocol.common protocol.decorators protocol.endpoints protocol.exceptions protocol.ipc_light
protocol.methods protocol.methods_v2 protocol.openapi protocol.openapi.converter
protocol.openapi.model protocol.rest protocol.rest.client protocol.rest.server
protocol.return_value_meta references reporter resources server signals stable_api tornado
tracing types user_setup util util.async_lru util.collections util.dict_path validation_type
warnings
""".split())

# What the bridge stands in for, by module; every other name of these modules, and of the
# other modules of `CORE_MODULES`, is a placeholder.
STAND_INS = {
    "inmanta.plugins": lambda: {
        "plugin": plugin, "Context": Context, "PluginException": PluginException,
        "deprecated": deprecated, "ModelType": ModelType,
        # The reference's proxy that lets a plugin read reference values; weft's proxies
        # already read every value.
        "allow_reference_values": lambda value: value,
    },
    "inmanta.ast": lambda: dict(
        compiler_errors, UnsetException=UnsetException, PluginException=PluginException,
        UnknownException=UnknownException,
    ),
    "inmanta.resources": lambda: {
        "resource": resource, "Resource": Resource, "PurgeableResource": PurgeableResource,
        "ManagedResource": ManagedResource, "DiscoveryResource": DiscoveryResource,
        "IgnoreResourceException": IgnoreResourceException, "ResourceException": ResourceException,
        "ResourceMeta": ResourceMeta, "Id": Id,
    },
    "inmanta.export": lambda: {"Exporter": Exporter, "dependency_manager": dependency_manager},
    "inmanta.ast.entity": lambda: {"Entity": Entity},
    "inmanta.ast.attribute": lambda: {"Attribute": Attribute, "RelationAttribute": RelationAttribute},
    "inmanta.execute.proxy": lambda: {
        "DynamicProxy": DynamicProxy, "SequenceProxy": SequenceProxy, "DictProxy": DictProxy,
        "NoneValue": NoneValue, "Unknown": Unknown,
    },
    "inmanta.execute.util": lambda: {"Unknown": Unknown, "NoneValue": NoneValue},
    "inmanta.util": lambda: {
        "internal_json_encoder": json_encoder, "api_boundary_json_encoder": json_encoder,
        "JSONSerializable": JSONSerializable,
    },
    "inmanta.module": lambda: {"Project": Project},
    # weft's `std` has no Python package of its own; this stands in for the reference's.
    "inmanta_plugins.std": lambda: {
        "is_unknown": lambda value: isinstance(value, Unknown),
        "JinjaDynamicProxy": JinjaDynamicProxy,
        "get_file_content": get_file_content,
        "getfact": lambda context, resource, fact_name, default_value=None: call_std(
            "getfact", resource, fact_name, default_value=default_value, source=resource
        ),
    },
}

class JSONSerializable:
    """What `inmanta.util`'s JSON encoders ask the next step of serialization of."""

    def json_serialization_step(self):
        raise NotImplementedError()

def json_encoder(o, *args, **kwargs):
    """`inmanta.util`'s `internal_json_encoder` (for `json.dumps(..., default=...)`), for what
    a compile hands plugins: views are their values, as the reference's proxies serialize."""
    if isinstance(o, View):
        return o._target
    if isinstance(o, JSONSerializable) or hasattr(o, "json_serialization_step"):
        return o.json_serialization_step()
    if isinstance(o, uuid.UUID):
        return str(o)
    if isinstance(o, datetime.datetime):
        return o.isoformat(timespec="microseconds")
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, enum.Enum):
        return o.name
    if isinstance(o, Exception):
        return str(o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    raise TypeError(repr(o) + " is not JSON serializable")

# Modules of inmanta-core that import nothing of it but each other and the standard library
# (`dict_path` is how plugins address nested config): where the interpreter's environment
# has inmanta-core, as it does where its v2 modules are installed, the real module is loaded
# instead of placeholders.
REAL_WHEN_INSTALLED = ("inmanta.stable_api", "inmanta.const", "inmanta.util.dict_path")

def installed_inmanta():
    """The directory of the environment's own `inmanta` package, if it has one."""
    spec = importlib.machinery.PathFinder.find_spec("inmanta", [p for p in sys.path if p != sys.argv[1]])
    return list(spec.submodule_search_locations or [])[:1] if spec is not None else []

class Module:
    """What plugins read of one of the reference's modules: its name and root directory."""

    def __init__(self, name, path):
        self.name = name
        self._path = path

class ProjectModules(Mapping):
    """The modules whose plugin packages the server can import, by name, found when asked."""

    def __getitem__(self, name):
        try:
            spec = importlib.util.find_spec(f"inmanta_plugins.{name}") if name.isidentifier() else None
        except ImportError:
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise KeyError(name)
        package = os.path.realpath(locations[0])
        # A v1 module's package is its `plugins` directory; a v2 module's is its root.
        root = os.path.dirname(package) if os.path.basename(package) == "plugins" else package
        return Module(name, root)

    def __iter__(self):
        package = sys.modules.get("inmanta_plugins")
        seen = set()
        for directory in list(getattr(package, "__path__", [])):
            for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
                if name.isidentifier() and name not in seen and name in self:
                    seen.add(name)
                    yield name

    def __len__(self):
        return sum(1 for _ in self)

    def __contains__(self, name):
        try:
            self[name]
            return True
        except KeyError:
            return False

class Project:
    """The reference's project, as plugins ask it (`Project.get().project_path`, its modules'
    directories to resolve `inmanta://<module>/...` paths): the server runs in the project's
    directory."""

    _project = None

    def __init__(self):
        self.project_path = PROJECT_DIR
        self.modules = ProjectModules()

    @classmethod
    def get(cls):
        if cls._project is None:
            cls._project = cls()
        return cls._project

PROJECT_DIR = os.getcwd()

def get_file_content(ctx, module_dir, path):
    """std's `get_file_content`: the text of a module's file, which the evaluator reads (from
    the module's directory or from an artifact) as `std::source` does; the calling statement's
    module resolves `./` paths."""
    return answer_of(ask({"module_file": str(module_dir), "path": str(path)}))

def ask(message):
    """Sends a request to the evaluator in the middle of a call and returns its reply."""
    responses.write(json.dumps(message) + "\n")
    responses.flush()
    return json.loads(requests.readline())

def answer_of(reply, source=None):
    """The value the evaluator's reply gives (`Unknown(source)` for what it does not know), or
    the exception it stands for: an unset value, an error of the evaluator, a Python
    exception."""
    if "ok" in reply:
        return view(decode(reply["ok"]))
    if "unknown" in reply:
        return Unknown(source=source)
    if "unset" in reply:
        raise UnsetException(reply["unset"])
    if "error" in reply:
        raise compiler_error(reply["error"], reply["message"])
    raise_exception(reply["exception"], reply["message"])

class Entity:
    """The reference's entity type (`inmanta.ast.entity.Entity`), as plugins read it from an
    instance (`_type()`): names, parents, attributes and indices, described by the evaluator
    once per type."""

    _known = {}

    @classmethod
    def named(cls, name):
        entity = cls._known.get(name)
        if entity is None:
            reply = ask({"entity": name})
            if "ok" not in reply:
                raise compiler_error("TypeNotFoundException", reply.get("not_found", f"could not find type {name}"))
            entity = cls._known[name] = cls(reply["ok"])
        return entity

    def __init__(self, description):
        self._description = description
        self._attributes = {}
        self.name = description["name"].rsplit("::", 1)[-1]

    def get_full_name(self):
        return self._description["name"]

    def type_string(self):
        return self.get_full_name()

    @property
    def parent_entities(self):
        return [Entity.named(name) for name in self._description["parents"]]

    def get_all_parent_names(self):
        # As the reference: the direct parents, then each one's, repeats included.
        parents = list(self._description["parents"])
        for parent in self.parent_entities:
            parents.extend(parent.get_all_parent_names())
        return parents

    def get_all_attribute_names(self):
        names = [a["name"] for a in self._description["attributes"]]
        for parent in self.parent_entities:
            names.extend(parent.get_all_attribute_names())
        return names

    def get_attribute(self, name):
        """The attribute of this type or, failing that, the first parent's that has one."""
        attribute = self._attributes.get(name)
        if attribute is None:
            found = [a for a in self._description["attributes"] if a["name"] == name]
            if found:
                attribute = (RelationAttribute if found[0]["relation"] else Attribute)(found[0])
                self._attributes[name] = attribute
        if attribute is None:
            for parent in self.parent_entities:
                attribute = parent.get_attribute(name)
                if attribute is not None:
                    break
        return attribute

    def get_indices(self):
        return [list(index) for index in self._description["indices"]]

    @property
    def attributes(self):
        """The type's own attributes, by name, in definition order."""
        return {a["name"]: self.get_attribute(a["name"]) for a in self._description["attributes"]}

    def __str__(self):
        return self.get_full_name()

    __repr__ = __str__

class Attribute:
    """An attribute of an entity type (`inmanta.ast.attribute.Attribute`)."""

    def __init__(self, description):
        self._description = description
        self.name = description["name"]

    def get_name(self):
        return self.name

    @property
    def entity(self):
        return Entity.named(self._description["owner"])

    def is_optional(self):
        return self._description["optional"]

    def is_multi(self):
        return self._description["multi"]

class RelationAttribute(Attribute):
    """A relation end (`inmanta.ast.attribute.RelationAttribute`): its arity, its target type,
    and the other end when the relation has one."""

    @property
    def low(self):
        return self._description["low"]

    @property
    def high(self):
        return self._description["high"]

    @property
    def type(self):
        return Entity.named(self._description["target"])

    def get_type(self):
        return self.type

    @property
    def end(self):
        end = self._description["end"]
        return None if end is None else Entity.named(end[0]).get_attribute(end[1])

def raise_exception(name, message):
    """Raises the Python exception of class `name` (a builtin's, or one of that name)."""
    builtin = getattr(builtins, name, None)
    try:
        error = builtin(message) if isinstance(builtin, type) and issubclass(builtin, Exception) else None
    except TypeError:
        # A class that takes more than a message (`UnicodeDecodeError`): its name is kept.
        error = None
    raise error if error is not None else type(name, (Exception,), {})(message)

def call_std(function, *args, source=None, **kwargs):
    """A function of std's package that weft implements natively, run by the evaluator as
    its plugin of that name runs; what it does not know is `Unknown(source)`."""
    message = {"std_call": function, "args": [encode(a) for a in args], "kwargs": {k: encode(v) for k, v in kwargs.items()}}
    return answer_of(ask(message), source)

class JinjaDynamicProxy:
    """std's wrapper of a value for a template; weft's proxies read as the values already."""

    @staticmethod
    def return_value(value):
        return value

def module_getattr(module):
    def getattr_(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        # A submodule not imported yet: `from inmanta.execute import proxy` asks for it so.
        full = f"{module.__name__}.{name}"
        if full.removeprefix("inmanta.") in CORE_MODULES or full in STAND_INS:
            return importlib.import_module(full)
        made = placeholder(module.__name__, name)
        setattr(module, name, made)
        return made
    return getattr_

class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `inmanta` and its modules (and `inmanta_plugins.std`) before anything on the path,
    so that the stand-ins are what a plugin imports even where the reference is installed."""

    def find_spec(self, name, path=None, target=None):
        if name in REAL_WHEN_INSTALLED:
            for root in installed_inmanta():
                file = os.path.join(root, *name.split(".")[1:]) + ".py"
                if os.path.isfile(file):
                    return importlib.util.spec_from_file_location(name, file)
        if name in STAND_INS or name == "inmanta" or (name.startswith("inmanta.") and name[8:] in CORE_MODULES):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__dict__.update(STAND_INS.get(spec.name, dict)())
        module.__getattr__ = module_getattr(module)
        return module

    def exec_module(self, module):
        pass

sys.meta_path.insert(0, StandIns())

# The protocol keeps the process's standard input and output for itself: a plugin that reads
# its standard input gets end of file, and one that writes to file descriptor 1 below Python
# (a C extension, a child process) writes to the error stream, not into a response.
requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
responses = os.fdopen(os.dup(1), "w", encoding="utf-8")
nothing = os.open(os.devnull, os.O_RDONLY)
os.dup2(nothing, 0)
os.close(nothing)
os.dup2(2, 1)
sys.path.insert(0, sys.argv[1])

class DynamicProxy:
    """A read-only proxy of an instance of the model, as the reference passes: each attribute
    read asks the evaluator, through the protocol, in the middle of the call. As in the
    reference, the views of lists and dicts are proxies too (`isinstance(v, DynamicProxy)`)."""

    __slots__ = ("_id", "_display", "_known")

    def __init__(self, id, display, known=None):
        object.__setattr__(self, "_id", id)
        object.__setattr__(self, "_display", display)
        # Attribute values the evaluator sent along (final ones, during the export): read
        # without a question.
        object.__setattr__(self, "_known", known or {})

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        known = self._known
        if name in known:
            return view(known[name])
        reply = ask({"getattr": self._id, "name": name})
        if "not_found" in reply:
            raise AttributeError(reply["not_found"])
        if "unknown" in reply:
            raise UnknownException(Unknown())
        return answer_of(reply)

    def __setattr__(self, name, value):
        raise Exception("Readonly object")

    def _type(self):
        """The instance's entity type (not part of the reference's stable API, but plugins use
        it)."""
        reply = ask({"entity_of": self._id})
        if "ok" not in reply:
            raise compiler_error("RuntimeException", reply.get("not_found", "no such instance"))
        return Entity.named(reply["ok"])

    @classmethod
    def unwrap(cls, item, **options):
        """The reference's conversion from the plugin's values to the model's: views become
        the lists and dicts they show, `None` a `NoneValue`. An instance stays its proxy:
        the bridge has no other form of it."""
        if item is None:
            return NoneValue()
        if isinstance(item, View):
            return item._target
        if isinstance(item, DynamicProxy):
            return item
        if isinstance(item, list):
            return [cls.unwrap(x) for x in item]
        if isinstance(item, dict):
            return {k: cls.unwrap(v) for k, v in item.items()}
        return item

    @classmethod
    def return_value(cls, value, **options):
        """The reference's conversion from the model's values to the plugin's."""
        if value is None or isinstance(value, NoneValue):
            return None
        return view(value)

    def __eq__(self, other):
        return isinstance(other, DynamicProxy) and not isinstance(other, View) and other._id == self._id

    def __hash__(self):
        return hash(("instance", self._id))

    def __repr__(self):
        return "@" + self._display

class View(DynamicProxy):
    """A read-only view of a list or dict the model passes to a plugin, as the reference's
    proxies are: a plugin can read it but not change the model's value (`append` does not
    exist, setting an attribute raises). What it reads from it is viewed the same way. The
    classes are named as the reference's, whose names Python's messages show."""

    __slots__ = ("_target",)

    def __init__(self, target):
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name):
        # Not the instance proxy's question to the evaluator: a view has what its value has.
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _get_instance(self):
        return self._target

    def json_serialization_step(self):
        return self._target

    def __setattr__(self, name, value):
        raise Exception("Readonly object")

    def __eq__(self, other):
        return self._target == (other._target if isinstance(other, View) else other)

    def __hash__(self):
        return hash(self._target)

    def __repr__(self):
        return "@" + repr(self._target)

    def __len__(self):
        return len(self._target)

class SequenceProxy(View):
    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, str):
            raise TypeError(f"can not get a attribute {key}, {self._target} is a list")
        return view(self._target[key])

    def __iter__(self):
        return (view(x) for x in self._target)

class DictProxy(View, Mapping):
    __slots__ = ()

    def __getitem__(self, key):
        if not isinstance(key, str):
            raise TypeError(f"Expected string key, but got {key}, {self._target} is a dict")
        return view(self._target[key])

    def __iter__(self):
        return iter(self._target)

def view(v):
    if isinstance(v, list):
        return SequenceProxy(v)
    if isinstance(v, dict):
        return DictProxy(v)
    return v

# Final attribute values the evaluator sent with an instance's proxy (only during the export),
# by instance: sent once, kept for the instance's later proxies.
known_by_id = {}

def decode(v):
    if isinstance(v, dict) and "__weft_dict__" in v:
        return {k: decode(x) for k, x in v["__weft_dict__"]}
    if isinstance(v, dict) and "__weft_instance__" in v:
        id = v["__weft_instance__"]
        if "known" in v:
            known_by_id[id] = {k: decode(x) for k, x in v["known"]}
        return DynamicProxy(id, v["display"], known_by_id.get(id))
    if isinstance(v, dict) and "__weft_dataclass__" in v:
        module = importlib.import_module(v["__weft_module__"])
        cls = getattr(module, v["__weft_dataclass__"])
        return cls(**{k: decode(x) for k, x in v["fields"].items()})
    if isinstance(v, dict):
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v

class ReturnedDataclass(Exception):
    """weft can not turn a returned dataclass into an instance."""

class ReturnedValueError(Exception):
    """A returned value the model can not hold; the reference raises a RuntimeException."""

def encode(v):
    if isinstance(v, View):
        return encode(v._target)
    if isinstance(v, DynamicProxy):
        return {"__weft_instance__": v._id}
    if isinstance(v, Unknown):
        # What the model does not know yet (a fact of a resource not deployed): the result, or
        # the element, is unknown.
        return {"__weft_unknown__": None}
    if dataclasses.is_dataclass(v):
        raise ReturnedDataclass("returning a dataclass is not supported by weft's Python bridge")
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise ReturnedValueError(f"dict keys should be strings, got {k!r} of type {type(k)} with dict value {x!r}")
        # As pairs: a JSON object's keys may come out in another order, a dict's may not.
        return {"__weft_dict__": [[k, encode(x)] for k, x in v.items()]}
    if isinstance(v, tuple):
        # Told apart from a list: the reference's `list` annotation refuses a tuple.
        return {"__weft_tuple__": [encode(x) for x in v]}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
        return {"__weft_int__": str(v)}
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {"__weft_float__": repr(v)}
    return v

# The resource classes registered by `@resource`, by entity type: (class, options).
resource_classes = {}

class resource:
    """`inmanta.resources.resource`: registers a resource class for an entity type."""

    def __init__(self, name, id_attribute, agent):
        self._cls_name = name
        self._options = {"agent": agent, "name": id_attribute}

    def __call__(self, cls):
        resource_classes[self._cls_name] = (cls, self._options)
        return cls

class IgnoreResourceException(Exception):
    """Raised by a getter to leave its resource out of the export."""

class ResourceException(Exception):
    pass

class ResourceMeta(type):
    """Merges a resource class's `fields` with those of its bases, as the reference's
    metaclass does. The reference keeps them as a set, whose order changes with the hash
    seed; these keep the first place of each, and the export decides the order."""

    @classmethod
    def _parent_fields(cls, bases):
        fields = []
        for base in bases:
            if "fields" in base.__dict__:
                if not isinstance(base.__dict__["fields"], (tuple, list)):
                    raise Exception("fields attribute of %s should be a tuple or list" % base)
                fields.extend(base.__dict__["fields"])
            fields.extend(cls._parent_fields(base.__bases__))
        return fields

    def __new__(cls, class_name, bases, dct):
        fields = cls._parent_fields(bases)
        if "fields" in dct:
            if not isinstance(dct["fields"], (tuple, list)):
                raise Exception("fields attribute of %s should be a tuple or list" % class_name)
            fields.extend(dct["fields"])
        dct["fields"] = tuple(dict.fromkeys(fields))
        return type.__new__(cls, class_name, bases, dct)

class Resource(metaclass=ResourceMeta):
    """`inmanta.resources.Resource`, as far as the export reads it: the fields every resource
    has and their getters (which weft's export runs natively, see `getter_kind`)."""

    fields = ("send_event", "receive_events", "references", "mutators", "report_only")

    def __init__(self, _id=None):
        self.id = _id

    @staticmethod
    def get_send_event(_exporter, obj):
        try:
            return obj.send_event
        except Exception:
            return False

    @staticmethod
    def get_references(_exporter, instance):
        return []

    @staticmethod
    def get_mutators(_exporter, instance):
        return []

    @staticmethod
    def get_receive_events(_exporter, obj):
        try:
            return obj.receive_events
        except Exception:
            return True

    @staticmethod
    def get_report_only(_exporter, obj):
        try:
            return obj.report_only
        except Exception:
            return False

class PurgeableResource(Resource):
    fields = ("purged", "purge_on_delete")

class DiscoveryResource(Resource):
    fields = ()

class ManagedResource(Resource):
    fields = ("managed",)

    @staticmethod
    def get_managed(exporter, obj):
        if not obj.managed:
            raise IgnoreResourceException()
        return obj.managed

# The getters of the bases above, which weft's export has natively (`export::types::Getter`),
# by what the export calls them.
BASE_GETTERS = {
    Resource.get_send_event: "send_event", Resource.get_receive_events: "receive_events",
    Resource.get_report_only: "report_only", Resource.get_references: "references",
    Resource.get_mutators: "mutators", ManagedResource.get_managed: "managed",
}

class Exporter:
    """What a getter is given as the exporter: its file store (`upload_file`)."""

    def __init__(self):
        self.files = {}

    def upload_file(self, content):
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        digest = hashlib.sha1(data).hexdigest()
        self.files[digest] = data
        return digest

# The dependency managers modules register (`@dependency_manager`).
dependency_managers = []

def dependency_manager(function):
    dependency_managers.append(function)
    return function

def getter_kind(cls, field):
    """How the export maps a field of a resource class: as `map_field` of the reference looks
    for a `get_<field>` method, then a `map` entry, then reads the instance's attribute."""
    getter = getattr(cls, "get_" + field, None)
    if getter is not None:
        try:
            return BASE_GETTERS.get(getter, "python")
        except TypeError:
            return "python"
    if hasattr(cls, "map") and field in cls.map:
        return "python"
    return "attr"

def describe_resource(request):
    try:
        for module in request["modules"]:
            importlib.import_module(module)
        name = request["resource_type"]
        if name not in resource_classes:
            modules = ", ".join(request["modules"])
            return json.dumps({"error": "weft", "message": f"importing {modules} registered no resource class for {name}"})
        cls, options = resource_classes[name]
        fields = [[field, getter_kind(cls, field)] for field in cls.fields]
        return json.dumps({"ok": {
            "agent": options["agent"], "id_attribute": options["name"],
            "id_kind": getter_kind(cls, options["name"]), "fields": fields,
        }})
    except BaseException as e:
        return json.dumps({"error": type(e).__name__, "message": str(e)})

def serializable(value, path):
    """A field's value as the reference's reference collector checks it: lists and dicts (and
    views of them) element by element; an instance or an unknown value is refused."""
    if isinstance(value, (list, SequenceProxy)):
        return [serializable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (dict, DictProxy)):
        return {k: serializable(v, f"{path}.'{k}'") for k, v in value.items()}
    if isinstance(value, (DynamicProxy, Unknown)):
        raise TypeError(f"{value!r} in resource is not JSON serializable at path {path}")
    return value

def field_outcome(cls, field, obj, exporter, as_text=False):
    """One field of a resource, as the reference's `Resource.map_field` gets it."""
    try:
        if hasattr(cls, "get_" + field):
            value = getattr(cls, "get_" + field)(exporter, obj)
        elif hasattr(cls, "map") and field in cls.map:
            value = cls.map[field](exporter, obj)
        else:
            value = getattr(obj, field)
        if as_text:
            if isinstance(value, Unknown):
                return {"unknown": True}
            return {"ok": str(value._target if isinstance(value, View) else value)}
        encoded = encode(serializable(value, field))
        # What JSON can not hold (a set, bytes, an object) fails here, as the field's error.
        json.dumps(encoded, allow_nan=False)
        return {"ok": encoded}
    except IgnoreResourceException:
        return {"ignore": True}
    except UnknownException:
        return {"unknown": True}
    except BaseException as e:
        # An `UnsetException` too: at the export every value is final, and the export fails.
        return raised(e)

def raised(e):
    """The response for an exception a module's code let through: a compiler error by its
    kind, a `PluginException` by its class, any other by its class and message."""
    if isinstance(e, CompilerException):
        return {"compiler_error": type(e).__name__, "message": str(e)}
    if isinstance(e, PluginException):
        return {"plugin_error": str(e.message), "class": type(e).__name__}
    return {"error": type(e).__name__, "message": str(e)}

def export_fields(request):
    global running
    try:
        cls, options = resource_classes[request["export"]]
        obj = decode(request["instance"])
        exporter = Exporter()
        out = {}
        running = True
        try:
            if request.get("id") is not None:
                out["id"] = field_outcome(cls, request["id"], obj, None, as_text=True)
            out["fields"] = [field_outcome(cls, field, obj, exporter) for field in request["fields"]]
        finally:
            running = False
        out["files"] = [[digest, data.hex()] for digest, data in exporter.files.items()]
        return json.dumps({"ok": out}, allow_nan=False)
    except BaseException as e:
        return json.dumps({"error": type(e).__name__, "message": str(e)})

PARSE_ID = re.compile(
    r"^(?P<id>(?P<type>(?P<ns>[\w-]+(::[\w-]+)*)::(?P<class>[\w-]+))\[(?P<hostname>[^,]+),"
    r"(?P<attr>[^=]+)=(?P<value>[^\]]+)\])(,v=(?P<version>[0-9]+))?$"
)

class Id:
    """`inmanta.resources.Id`: a resource's id (`type[agent,attribute=value]`)."""

    def __init__(self, entity_type, agent_name, attribute, attribute_value, version=0):
        self.entity_type = entity_type
        self.agent_name = agent_name
        self.attribute = attribute
        self.attribute_value = attribute_value
        self.version = version

    def get_entity_type(self):
        return self.entity_type

    def get_agent_name(self):
        return self.agent_name

    def get_attribute(self):
        return self.attribute

    def get_attribute_value(self):
        return self.attribute_value

    def get_version(self):
        return self.version

    def resource_str(self):
        return f"{self.entity_type}[{self.agent_name},{self.attribute}={self.attribute_value}]"

    def resource_version_str(self):
        return f"{self.resource_str()},v={self.version}"

    def __str__(self):
        return self.resource_version_str() if self.version > 0 else self.resource_str()

    def __repr__(self):
        return str(self)

    def __hash__(self):
        return hash(str(self))

    def __eq__(self, other):
        return str(self) == str(other) and type(self) is type(other)

    @classmethod
    def parse_id(cls, resource_id, version=None):
        match = PARSE_ID.match(resource_id)
        if match is None:
            raise ValueError(f"Invalid id for resource {resource_id}")
        parts = match.groupdict()
        version = version if version is not None else int(parts["version"] or 0)
        return cls(parts["type"], parts["hostname"], parts["attr"], parts["value"], version)

class ModelTypes(Mapping):
    """The model's entity types by name, for a dependency manager's first argument."""

    def __getitem__(self, name):
        return Entity.named(name)

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

def run_dependency_managers(request):
    """The reference's `Exporter._call_dep_manager`: every manager is given the model's types
    and the resources by id, and may add to their `requires`; what it added is then read back
    as ids."""
    global running
    try:
        native = tuple(request["native"])
        managers = [m for m in dependency_managers if not (m.__module__ + ".").startswith(tuple(n + "." for n in native))]
        if not managers:
            return json.dumps({"ok": None})
        objects = []
        for item in request["dependency_managers"]:
            cls = resource_classes.get(item["id"][0], (Resource, None))[0]
            obj = cls.__new__(cls)
            obj.__dict__.update({k: decode(v) for k, v in item["fields"].items()})
            obj.id = Id(*item["id"])
            obj.model = DynamicProxy(item["instance"], item["display"], known_by_id.get(item["instance"]))
            objects.append(obj)
        for obj, item in zip(objects, request["dependency_managers"]):
            obj.requires = {objects[i].id for i in item["requires"]}
        resources = {obj.id: obj for obj in objects}
        running = True
        try:
            for manager in managers:
                try:
                    manager(ModelTypes(), resources)
                except UnknownException:
                    pass
                except BaseException as e:
                    name = f"{manager.__module__}.{manager.__qualname__}"
                    return json.dumps({"error": type(e).__name__, "message": str(e), "manager": name})
        finally:
            running = False
        def cleanup(required):
            if isinstance(required, str):
                return Id.parse_id(required)
            if isinstance(required, Resource):
                return required.id
            if isinstance(required, Id):
                return required
            raise Exception(
                f"A dependency manager inserted the object {required!r} of type {type(required)} into a requires "
                "relation. However, only string, Resource or Id are allowable types "
            )
        return json.dumps({"ok": [sorted(cleanup(r).resource_str() for r in obj.requires) for obj in objects]})
    except BaseException as e:
        return json.dumps({"error": type(e).__name__, "message": str(e)})

functions = {}

def answer(request):
    if "resource_type" in request:
        return describe_resource(request)
    if "export" in request:
        return export_fields(request)
    if "dependency_managers" in request:
        return run_dependency_managers(request)
    try:
        name = (request["module"], request["function"])
        function = functions.get(name)
        if function is None:
            module = importlib.import_module(name[0])
            function = registered.get(name) or getattr(module, name[1])
            functions[name] = function
        args = [view(decode(a)) for a in request["args"]]
        context = request.get("context")
        if context is not None:
            args.insert(context["position"], Context(context["data_dir"], context.get("namespace")))
        kwargs = {k: view(decode(v)) for k, v in request["kwargs"].items()}
        global running
        running = True
        try:
            result = function(*args, **kwargs)
        finally:
            running = False
        try:
            return json.dumps({"ok": encode(result)}, allow_nan=False)
        except (TypeError, ValueError):
            # A set, bytes, a generator, an object: the model has no value for it (the
            # reference keeps it as it is where the annotation is `any`).
            return json.dumps({"unencodable": str(result)})
    except UnknownException:
        return json.dumps({"ok": {"__weft_unknown__": None}})
    except UnsetException as e:
        return json.dumps({"unset": e.cell})
    except ReturnedValueError as e:
        return json.dumps({"runtime_error": str(e)})
    except BaseException as e:
        # `SystemExit` and `KeyboardInterrupt` too: a plugin ends its call, not the server.
        return json.dumps(raised(e))

class Tee(io.TextIOBase):
    """The plugin's `sys.stderr` during a call: kept for the call's response, and written to
    the server's error log too, which is what weft shows if the server dies in the call."""

    def __init__(self):
        self.text = io.StringIO()

    def write(self, s):
        self.text.write(s)
        sys.__stderr__.write(s)
        sys.__stderr__.flush()
        return len(s)

    def getvalue(self):
        return self.text.getvalue()

for line in requests:
    captured, errors = io.StringIO(), Tee()
    sys.stdout, sys.stderr = captured, errors
    try:
        response = answer(json.loads(line))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    out, err = json.dumps(captured.getvalue()), json.dumps(errors.getvalue())
    responses.write(response[:-1] + ', "out": ' + out + ', "err": ' + err + "}\n")
    responses.flush()
"#;

/// How a bridged call failed.
#[derive(Clone, Debug)]
pub enum BridgeError {
    /// The plugin raised a Python exception (class, message).
    Python(String, String),
    /// The plugin raised `PluginException` or a subclass (class, message).
    Plugin(String, String),
    /// The plugin returned what the model can not hold (a dict with a key that is not a
    /// string): the reference's `RuntimeException`, wrapped.
    Runtime(String),
    /// The plugin read an attribute without a value (the cell) and let the `UnsetException`
    /// through: the call is made again once the cell has a value.
    Unset(u32),
    /// The plugin returned a Python value the model has no value for (a set, bytes, an
    /// object), shown as Python's `str` of it.
    Unencodable(String),
    /// The plugin let through an evaluator error raised in it (kind, message).
    Compiler(String, String),
    /// The bridge itself could not run the plugin.
    Unavailable(String),
}

/// A value for the bridge: how the evaluator hands over instances of dataclass entities.
pub enum BridgeValue {
    /// A value without instances.
    Plain(Value),
    Dataclass {
        module: String,
        class: String,
        fields: Vec<(String, BridgeValue)>,
    },
    /// An instance of an entity that is not a dataclass: the plugin gets a read-only proxy
    /// that asks for each attribute it reads (`AttributeReply`). `display` is the instance's
    /// text (`__config__::A (instantiated at ./main.cf:3)`). `known` are attribute values the
    /// proxy answers without asking: only final values without instances, unknowns or
    /// references in them, which the export knows (during the evaluation it is empty).
    Instance {
        id: u32,
        display: String,
        known: Vec<(String, Value)>,
    },
    /// A list or dict that holds instances.
    List(Vec<BridgeValue>),
    Dict(Vec<(String, BridgeValue)>),
}

/// The evaluator's answer to a plugin reading an attribute of an instance proxy.
pub enum AttributeReply {
    Value(BridgeValue),
    /// The attribute has no value yet (the cell): the plugin's call is abandoned and made again
    /// once it has one, as the reference's `UnsetException` does.
    Unset(u32),
    /// The entity has no such attribute: the plugin sees an `AttributeError`.
    NotFound(String),
    /// The attribute's value is not known: the proxy raises `UnknownException`, which makes
    /// the plugin's result unknown, or the exported field undefined, as in the reference.
    Unknown,
    /// Another error of the evaluator (`OptionalValueException` for an empty `[0:1]`
    /// relation): raised in the plugin under that name; if the plugin lets it through, its call
    /// fails with it, wrapped.
    Error {
        kind: String,
        message: String,
    },
}

/// What a running plugin asks of the evaluator, in the middle of its call.
pub enum Request<'a> {
    /// An attribute of an instance proxy; answered with an [`AttributeReply`].
    Attribute { instance: u32, name: &'a str },
    /// The text of a module's file, through std's `get_file_content(ctx, module_dir, path)`
    /// (see `plugins::std_plugins::file_content`): from the module's directory or from an
    /// artifact, as `std::source` reads it.
    ModuleFile { module_dir: &'a str, path: &'a str },
    /// A function of std's package that weft implements natively (`getfact`), called with
    /// these arguments: answered as the plugin of that name answers.
    StdCall { function: &'a str, args: Vec<Value>, kwargs: Vec<(String, Value)> },
    /// The entity type of an instance: its full name.
    EntityOf { instance: u32 },
    /// The description of an entity type, by full name (see `inmanta.ast.entity.Entity` in
    /// the driver).
    Entity { name: &'a str },
}

/// The evaluator's answer to a [`Request`].
pub enum Reply {
    Attribute(AttributeReply),
    /// The file's text, or why there is none.
    ModuleFile(Result<String, Refusal>),
    /// The function's value (`Value::Unknown` for what is not known), or why it failed.
    StdCall(Result<Value, Refusal>),
    /// For [`Request::EntityOf`] and [`Request::Entity`]: the answer, or why there is none.
    Entity(Result<Json, String>),
}

/// Why a [`Request::ModuleFile`] or a [`Request::StdCall`] has no answer: what the plugin
/// raises instead (the driver's `answer_of`).
pub enum Refusal {
    /// An attribute the evaluator read has no value yet (its cell).
    Unset(u32),
    /// An error of the evaluator: its kind and message.
    Compiler { kind: String, message: String },
    /// A Python exception: its class and message.
    Exception { class: String, message: String },
}

/// Where what plugins write goes: the lines of their `sys.stdout` join the evaluation's prints,
/// as in the reference; those of their `sys.stderr` (messages, `warnings`, `logging`'s
/// default) are the evaluation's plugin messages, which `weft` shows on its error stream.
pub struct Output<'a> {
    pub prints: &'a mut Vec<String>,
    pub errors: &'a mut Vec<String>,
}

/// What a plugin returned.
#[derive(Debug)]
pub struct Returned {
    pub value: Value,
    /// It was a Python tuple, which the reference's annotations other than `any` refuse; the
    /// value is its list.
    pub is_tuple: bool,
}

/// One call of a module's Python plugin.
pub struct PluginCall<'a> {
    /// Every module's plugin package, by module name: the directory of the package
    /// `inmanta_plugins.<module>` (see [`crate::modules::Modules::python_packages`]). The
    /// plugin's own module is one of them; the others are there because the reference imports
    /// every module's plugins into one interpreter, where a plugin may import another module's.
    pub packages: &'a [(String, PathBuf)],
    /// The Python module that defines the plugin (`inmanta_plugins.mod.sub`).
    pub module: &'a str,
    pub function: &'a str,
    pub args: Vec<BridgeValue>,
    pub kwargs: Vec<(String, BridgeValue)>,
    /// For a plugin with a `Context` parameter: where it goes, and what it answers.
    pub context: Option<PluginContext>,
}

/// The `Context` a plugin with such a parameter is given.
pub struct PluginContext {
    /// Its place among the function's positional parameters.
    pub position: usize,
    /// What `get_data_dir` answers (and makes): `<data directory>/<namespace>`, as the
    /// reference's `data/<namespace>`.
    pub data_dir: PathBuf,
    /// The namespace of the calling statement (`owner.namespace`): `module::sub`, or
    /// `__config__` for `main.cf`; `None` where the call has none (a typedef's constraint).
    pub namespace: Option<String>,
}

/// What a request to the Python bridge goes through: the sandboxes, the evaluation's servers,
/// every module's plugin package, and where the Python code's output goes.
pub struct Bridge<'h> {
    pub sandboxes: &'h Sandboxes,
    pub servers: &'h mut Servers,
    pub packages: &'h [(String, PathBuf)],
    pub output: Output<'h>,
}

/// Sends one request to the server of `packages` (started if it is not running) and reads
/// its response, answering the questions the server asks on the way. What the server's code
/// wrote goes to `output`. Returns the response, and what takes host paths out of its texts.
fn exchange(
    Bridge { sandboxes, servers, packages, output }: Bridge<'_>,
    request: &Json,
    requests: &mut dyn FnMut(Request<'_>) -> Reply,
) -> Result<(Json, Scrub), BridgeError> {
    // Held for the whole exchange: calls into Python are one at a time.
    let mut sandboxes = sandboxes.lock();
    let sandbox = sandboxes.get(packages).map_err(|e| BridgeError::Unavailable(e.to_string()))?;
    let scrub = sandbox.scrub.clone();
    let response = servers.exchange(&sandbox.dir, &scrub, request, requests)?;
    let lines = |key: &str| {
        let text = response.get(key).and_then(Json::as_str).filter(|text| !text.is_empty())?;
        // `print` ends its text with a newline, which the lines leave implicit.
        let text = scrub.apply(text);
        Some(text.strip_suffix('\n').unwrap_or(&text).split('\n').map(str::to_string).collect::<Vec<_>>())
    };
    output.prints.extend(lines("out").unwrap_or_default());
    output.errors.extend(lines("err").unwrap_or_default());
    Ok((response, scrub))
}

/// Calls `function` of the Python module `module` (`inmanta_plugins.mod.sub`), whose
/// package `inmanta_plugins.mod` is the directory `package` (see
/// [`crate::modules::Modules::python_dir`]), in the package's server (started if it is not
/// running). The lines the plugin printed are appended to `prints`, whether the call
/// succeeded or not.
///
/// Messages of the plugin and of Python name the package's files by their import path
/// (`inmanta_plugins/mod/__init__.py`), not by where they are on this host: the directory
/// differs between processes, and between a module on disk and one materialized from an
/// artifact, and the outcome must not.
pub fn call(
    sandboxes: &Sandboxes,
    servers: &mut Servers,
    call: PluginCall<'_>,
    output: Output<'_>,
    requests: &mut dyn FnMut(Request<'_>) -> Reply,
) -> Result<Returned, BridgeError> {
    let PluginCall { packages, module, function, args, kwargs, context } = call;
    let request = json!({
        "module": module,
        "function": function,
        "args": args.iter().map(to_json).collect::<Vec<_>>(),
        "kwargs": kwargs.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<serde_json::Map<_, _>>(),
        "context": context.map(|c| {
            json!({"position": c.position, "data_dir": c.data_dir.to_string_lossy(), "namespace": c.namespace})
        }),
    });
    let (response, scrub) = exchange(Bridge { sandboxes, servers, packages, output }, &request, requests)?;
    returned(&response, &scrub)
}

/// What a response of the driver (`answer`, `field_outcome`) says a Python function gave:
/// its value, or how it failed.
fn returned(response: &Json, scrub: &Scrub) -> Result<Returned, BridgeError> {
    match response.get("ok") {
        Some(v) => {
            let is_tuple = v.as_object().is_some_and(|m| m.len() == 1 && m.contains_key("__weft_tuple__"));
            Ok(Returned { value: from_json(v), is_tuple })
        }
        None => Err(refused(response, scrub)),
    }
}

/// How a response of the driver without a value says the call failed.
fn refused(response: &Json, scrub: &Scrub) -> BridgeError {
    if let Some(text) = response.get("unencodable").and_then(Json::as_str) {
        return BridgeError::Unencodable(scrub.apply(text));
    }
    if let Some(cell) = response.get("unset").and_then(Json::as_u64) {
        return BridgeError::Unset(cell as u32);
    }
    if let Some(kind) = response.get("compiler_error").and_then(Json::as_str) {
        let message = response.get("message").and_then(Json::as_str).unwrap_or_default();
        return BridgeError::Compiler(kind.to_string(), scrub.apply(message));
    }
    if let Some(m) = response.get("plugin_error") {
        let class = response.get("class").and_then(Json::as_str).unwrap_or("PluginException");
        return BridgeError::Plugin(class.to_string(), scrub.apply(m.as_str().unwrap_or_default()));
    }
    if let Some(m) = response.get("runtime_error") {
        return BridgeError::Runtime(scrub.apply(m.as_str().unwrap_or_default()));
    }
    BridgeError::Python(
        response.get("error").and_then(Json::as_str).unwrap_or("Exception").to_string(),
        scrub.apply(response.get("message").and_then(Json::as_str).unwrap_or_default()),
    )
}

/// A resource class that a module's Python code registers (`@resource`), as the driver
/// describes it for the export.
#[derive(Debug)]
pub struct ResourceClass {
    /// The attribute path to the agent (`host.name`).
    pub agent: String,
    pub id_attribute: String,
    /// How the id attribute is mapped (as for a field, below): the id need not be a field.
    pub id_kind: String,
    /// Every field (the class's `fields` merged with its bases'), each with how it is mapped:
    /// `attr` (read from the instance), `python` (a `get_<field>` method or a `map` entry of
    /// the module's code), or the name of one of the getters of the bases that the stand-in
    /// `inmanta.resources` defines (`send_event`, `receive_events`, `report_only`, `managed`,
    /// `references`, `mutators`).
    pub fields: Vec<(String, String)>,
}

/// Asks the server of `packages` for the resource class registered for the entity type
/// `entity`, importing the Python modules `modules` first (the one that registers it).
pub fn describe_resource(
    bridge: Bridge<'_>,
    entity: &str,
    modules: &[String],
    requests: &mut dyn FnMut(Request<'_>) -> Reply,
) -> Result<ResourceClass, BridgeError> {
    let request = json!({"resource_type": entity, "modules": modules});
    let (response, scrub) = exchange(bridge, &request, requests)?;
    let Some(class) = response.get("ok") else { return Err(refused(&response, &scrub)) };
    let text = |key: &str| class.get(key).and_then(Json::as_str).unwrap_or_default().to_string();
    let fields = class.get("fields").and_then(Json::as_array).map_or(&[][..], Vec::as_slice);
    Ok(ResourceClass {
        agent: text("agent"),
        id_attribute: text("id_attribute"),
        id_kind: text("id_kind"),
        fields: fields
            .iter()
            .filter_map(|field| match field.as_array().map(Vec::as_slice) {
                Some([Json::String(name), Json::String(kind)]) => Some((name.clone(), kind.clone())),
                _ => None,
            })
            .collect(),
    })
}

/// What one field's getter gave, for the export.
#[derive(Debug)]
pub enum FieldOutcome {
    Value(Value),
    /// It read a value that is not known (`UnknownException`): the field is undefined.
    Unknown,
    /// It raised `IgnoreResourceException`: the resource is left out.
    Ignore,
    Failed(BridgeError),
}

/// The Python-mapped fields of one resource, for the export.
#[derive(Debug)]
pub struct ExportedFields {
    /// The id attribute's `str()`, when the class maps it.
    pub id: Option<FieldOutcome>,
    /// The fields asked for, in order.
    pub fields: Vec<FieldOutcome>,
    /// The files the getters uploaded (`exporter.upload_file`): hash and content.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Runs the getters of `fields` of the resource class registered for `entity` on an
/// instance (a proxy, as the reference's exporter passes), and of `id_field` first if the
/// class maps the id attribute. The class must have been described first
/// ([`describe_resource`]).
pub fn export_fields(
    bridge: Bridge<'_>,
    entity: &str,
    instance: &BridgeValue,
    id_field: Option<&str>,
    fields: &[&str],
    requests: &mut dyn FnMut(Request<'_>) -> Reply,
) -> Result<ExportedFields, BridgeError> {
    let request = json!({"export": entity, "instance": to_json(instance), "id": id_field, "fields": fields});
    let (response, scrub) = exchange(bridge, &request, requests)?;
    let Some(exported) = response.get("ok") else { return Err(refused(&response, &scrub)) };
    let outcome = |response: &Json| {
        if response.get("unknown").is_some() {
            FieldOutcome::Unknown
        } else if response.get("ignore").is_some() {
            FieldOutcome::Ignore
        } else {
            match returned(response, &scrub) {
                Ok(returned) => FieldOutcome::Value(returned.value),
                Err(e) => FieldOutcome::Failed(e),
            }
        }
    };
    let files = exported.get("files").and_then(Json::as_array).map_or(&[][..], Vec::as_slice);
    Ok(ExportedFields {
        id: exported.get("id").map(outcome),
        fields: exported
            .get("fields")
            .and_then(Json::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(outcome)
            .collect(),
        files: files
            .iter()
            .filter_map(|file| match file.as_array().map(Vec::as_slice) {
                Some([Json::String(hash), Json::String(hex)]) => Some((hash.clone(), from_hex(hex)?)),
                _ => None,
            })
            .collect(),
    })
}

/// How running the dependency managers failed: the error, and the manager that raised it
/// (`module.function`) when one did.
#[derive(Debug)]
pub struct ManagerFailure {
    pub manager: Option<String>,
    pub error: BridgeError,
}

/// Runs the dependency managers that the imported Python code registered, except those of
/// the packages in `native` (which the export runs natively), over `resources` (each with its
/// id's parts, instance, fields and `requires` as indices into the list). Gives every
/// resource's `requires` afterwards, as id texts, or `None` when no manager ran.
pub fn dependency_managers(
    bridge: Bridge<'_>,
    resources: &[Json],
    native: &[&str],
    requests: &mut dyn FnMut(Request<'_>) -> Reply,
) -> Result<Option<Vec<Vec<String>>>, ManagerFailure> {
    let request = json!({"dependency_managers": resources, "native": native});
    let (response, scrub) =
        exchange(bridge, &request, requests).map_err(|error| ManagerFailure { manager: None, error })?;
    let manager = response.get("manager").and_then(Json::as_str).map(str::to_string);
    match response.get("ok") {
        Some(Json::Null) => Ok(None),
        Some(Json::Array(lists)) => Ok(Some(
            lists
                .iter()
                .map(|ids| {
                    ids.as_array().into_iter().flatten().filter_map(|id| id.as_str().map(str::to_string)).collect()
                })
                .collect(),
        )),
        _ => Err(ManagerFailure { manager, error: refused(&response, &scrub) }),
    }
}

/// Bytes written as hexadecimal digits (Python's `bytes.hex()`).
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// A running `python3` serving one plugin package's calls.
#[derive(Debug)]
struct Server {
    child: Child,
    /// `None` once the server was told to stop.
    requests: Option<ChildStdin>,
    responses: BufReader<ChildStdout>,
    /// The server's error stream: Python's messages when the server itself fails, and what
    /// plugins write there.
    errors: File,
    /// The processor the server is bound to: the one its caller last ran on.
    cpu: Option<i32>,
}

impl Server {
    /// How long a server that was told to stop (its requests closed) may take before it is
    /// killed: a plugin may have left a thread that keeps Python from exiting.
    const GRACE: Duration = Duration::from_secs(1);

    fn start(interpreter: &Path, working_dir: Option<&Path>, sandbox: &Path) -> Result<Server, BridgeError> {
        let unavailable = |e: std::io::Error| {
            BridgeError::Unavailable(format!(
                "cannot run {}: {e} (plugins implemented in Python need python3 on this host)",
                interpreter.display()
            ))
        };
        // In the sandbox, which is private to this user and removed with the server.
        // Appending, so that emptying it before each call (see `exchange`) is safe while the
        // server writes to it.
        let errors = File::options()
            .read(true)
            .append(true)
            .create(true)
            .open(sandbox.join("python-errors.log"))
            .and_then(|file| file.set_len(0).map(|()| file))
            .map_err(|e| BridgeError::Unavailable(format!("cannot make the Python bridge's error log: {e}")))?;
        // Absolute: the server may run in another directory than this process.
        let sandbox = std::path::absolute(sandbox).unwrap_or_else(|_| sandbox.to_path_buf());
        let mut command = Command::new(interpreter);
        if let Some(dir) = working_dir {
            command.current_dir(dir);
        }
        // `-B`: no `__pycache__` written into the module's sources or a materialized package.
        let mut child = command
            .arg("-B")
            .arg("-c")
            .arg(DRIVER)
            .arg(sandbox)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(errors.try_clone().map_err(unavailable)?)
            .spawn()
            .map_err(unavailable)?;
        let (Some(requests), Some(responses)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BridgeError::Unavailable("python3 started without its pipes".to_string()));
        };
        Ok(Server { child, requests: Some(requests), responses: BufReader::new(responses), errors, cpu: None })
    }

    /// Sends one request and reads its response. `None` when the server is gone: it exited or
    /// died during the call.
    fn exchange(&mut self, request: &Json, requests: &mut dyn FnMut(Request<'_>) -> Reply) -> Option<Json> {
        let _shared = self.share_processor();
        // The log keeps what one call wrote: the message if the server dies in it.
        let _ = self.errors.set_len(0);
        self.send(request)?;
        loop {
            let mut line = String::new();
            match self.responses.read_line(&mut line) {
                Ok(n) if n > 0 => {}
                _ => return None,
            }
            // The driver answers every request with one JSON object; an unreadable line would
            // be its bug, reported as a response without a result rather than a death.
            let message: Json = serde_json::from_str(&line).unwrap_or_else(
                |e| json!({"error": "weft", "message": format!("unreadable response of the Python bridge: {e}")}),
            );
            // The plugin asks the evaluator something (an attribute of an instance proxy, a
            // module's file): the evaluator answers, and the call goes on.
            let text = |key: &str| message.get(key).and_then(Json::as_str);
            let request = if let (Some(instance), Some(name)) =
                (message.get("getattr").and_then(Json::as_u64), text("name"))
            {
                Request::Attribute { instance: instance as u32, name }
            } else if let (Some(module_dir), Some(path)) = (text("module_file"), text("path")) {
                Request::ModuleFile { module_dir, path }
            } else if let Some(instance) = message.get("entity_of").and_then(Json::as_u64) {
                Request::EntityOf { instance: u32::try_from(instance).unwrap_or(u32::MAX) }
            } else if let Some(name) = text("entity") {
                Request::Entity { name }
            } else if let Some(function) = text("std_call") {
                let args = message.get("args").and_then(Json::as_array);
                let kwargs = message.get("kwargs").and_then(Json::as_object);
                Request::StdCall {
                    function,
                    args: args.map_or(Vec::new(), |a| a.iter().map(from_json).collect()),
                    kwargs: kwargs.map_or(Vec::new(), |k| k.iter().map(|(k, v)| (k.clone(), from_json(v))).collect()),
                }
            } else {
                return Some(message);
            };
            let reply = match requests(request) {
                Reply::Attribute(AttributeReply::Value(value)) => json!({"ok": to_json(&value)}),
                Reply::Attribute(AttributeReply::Unset(cell)) => json!({"unset": cell}),
                Reply::Attribute(AttributeReply::NotFound(message)) => json!({"not_found": message}),
                Reply::Attribute(AttributeReply::Unknown) => json!({"unknown": true}),
                Reply::Attribute(AttributeReply::Error { kind, message }) => json!({"error": kind, "message": message}),
                Reply::ModuleFile(Ok(text)) => json!({"ok": text}),
                Reply::Entity(Ok(answer)) => json!({"ok": answer}),
                Reply::Entity(Err(message)) => json!({"not_found": message}),
                Reply::StdCall(Ok(Value::Unknown)) => json!({"unknown": true}),
                Reply::StdCall(Ok(value)) => json!({"ok": plain_to_json(&value)}),
                Reply::ModuleFile(Err(Refusal::Unset(cell))) | Reply::StdCall(Err(Refusal::Unset(cell))) => {
                    json!({"unset": cell})
                }
                Reply::ModuleFile(Err(Refusal::Compiler { kind, message }))
                | Reply::StdCall(Err(Refusal::Compiler { kind, message })) => {
                    json!({"error": kind, "message": message})
                }
                Reply::ModuleFile(Err(Refusal::Exception { class, message }))
                | Reply::StdCall(Err(Refusal::Exception { class, message })) => {
                    json!({"exception": class, "message": message})
                }
            };
            self.send(&reply)?;
        }
    }

    /// Writes one message to the server.
    fn send(&mut self, message: &Json) -> Option<()> {
        let mut line = message.to_string();
        line.push('\n');
        let requests = self.requests.as_mut()?;
        requests.write_all(line.as_bytes()).ok()?;
        requests.flush().ok()
    }

    /// Keeps the server and its caller on one processor for the call: the returned guard
    /// gives the calling thread back its own set of processors when dropped.
    ///
    /// A call is a ping-pong: the caller writes and sleeps, the server wakes, answers and
    /// sleeps, the caller wakes. On different processors each wake-up is an interrupt between
    /// them, which on the 2-vCPU VM cost about 80 us per call against 12 us on one processor
    /// (10,000 calls: 0.85 s against 0.22 s). Binding only the server is not enough: the
    /// kernel wakes the caller on the idle processor. Each sleeps while the other works, so
    /// sharing a processor takes nothing from either, and between calls the caller is free.
    #[cfg(target_os = "linux")]
    fn share_processor(&mut self) -> Option<RestoreAffinity> {
        // SAFETY: `sched_getcpu` takes no argument and only reads the calling thread's state.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 || cpu as usize >= libc::CPU_SETSIZE as usize {
            return None;
        }
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is a plain bit set, for which all zeroes is a valid value.
        let mut own: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `sched_getaffinity` writes at most `size` bytes, the size of `own`, and reads
        // only the calling thread's (pid 0) state.
        if unsafe { libc::sched_getaffinity(0, size, &mut own) } != 0 {
            return None;
        }
        // SAFETY: `CPU_ZERO` initialises `one` and `CPU_SET` writes within it (`cpu` is below
        // `CPU_SETSIZE`, checked above); `sched_setaffinity` reads `size` bytes of it and
        // changes only the scheduling of the thread (0) or the server (its pid).
        unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut one);
            libc::CPU_SET(cpu as usize, &mut one);
            if self.cpu != Some(cpu) {
                let bound = libc::sched_setaffinity(self.child.id() as libc::pid_t, size, &one);
                // Where binding is refused (a container forbidding it), calls only go slower.
                self.cpu = (bound == 0).then_some(cpu);
            }
            if libc::sched_setaffinity(0, size, &one) != 0 {
                return None;
            }
        }
        Some(RestoreAffinity(own))
    }

    #[cfg(not(target_os = "linux"))]
    fn share_processor(&mut self) -> Option<()> {
        None
    }

    /// What the server wrote to its error stream, for the message of its death.
    fn errors(&mut self) -> String {
        let mut text = String::new();
        if self.errors.seek(SeekFrom::Start(0)).is_ok() {
            let _ = (&self.errors).take(64 * 1024).read_to_string(&mut text);
        }
        text
    }
}

/// The calling thread's own set of processors, given back when dropped.
#[cfg(target_os = "linux")]
struct RestoreAffinity(libc::cpu_set_t);

#[cfg(target_os = "linux")]
impl Drop for RestoreAffinity {
    fn drop(&mut self) {
        // SAFETY: the set was filled by `sched_getaffinity` for this thread; the call reads
        // `size_of::<cpu_set_t>()` bytes of it and changes only this thread's scheduling.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing its requests ends the server's loop; a server still running after the grace
        // period is killed, so that dropping a set of modules never hangs.
        drop(self.requests.take());
        let deadline = Instant::now() + Self::GRACE;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host paths a message may contain, each with what it is replaced by.
#[derive(Clone, Debug)]
struct Scrub {
    replacements: Vec<(String, String)>,
}

impl Scrub {
    fn new(sandbox: &Path, packages: &[(String, PathBuf)]) -> Scrub {
        let mut replacements = Vec::new();
        let mut add = |path: &Path, suffix: &str, by: &str| {
            let mut forms = vec![path.to_path_buf()];
            forms.extend(std::fs::canonicalize(path).ok());
            for form in forms {
                let text = format!("{}{suffix}", form.display());
                if text.len() > suffix.len() + 1 && !replacements.iter().any(|(t, _)| *t == text) {
                    replacements.push((text, by.to_string()));
                }
            }
        };
        // Python names the files by the import path it found them under, the sandbox.
        add(sandbox, "/", "");
        for (name, package) in packages {
            add(package, "", &format!("inmanta_plugins/{name}"));
        }
        // The longest first, so a path is replaced whole rather than by its prefix.
        replacements.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        Scrub { replacements }
    }

    fn apply(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (path, by) in &self.replacements {
            if out.contains(path.as_str()) {
                out = out.replace(path.as_str(), by);
            }
        }
        out
    }
}

/// The sandboxes made for one set of modules (see [`crate::modules::Modules`]), by the
/// canonical package directories they import. Each is removed when the set is dropped, so a
/// host that evaluates again and again does not collect directories in its temporary
/// directory.
#[derive(Debug, Default)]
pub struct Sandboxes(Mutex<SandboxMap>);

#[derive(Debug, Default)]
struct SandboxMap {
    /// By the modules' names and canonical package directories, sorted by name.
    by_packages: BTreeMap<Packages, Sandbox>,
    /// The canonical key of each list of packages as callers give it, so that a call does
    /// not resolve the paths again (six `readlink`s for a path in a materialized artifact).
    canonical: HashMap<Packages, Packages>,
}

/// Plugin packages by module name: the directory of each `inmanta_plugins.<name>`.
type Packages = Vec<(String, PathBuf)>;

/// A sandbox directory, removed when dropped. It holds a symbolic link to each package, which
/// the removal deletes without following.
#[derive(Debug)]
struct Sandbox {
    dir: PathBuf,
    scrub: Scrub,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One evaluation's Python servers, by the sandbox each imports from.
///
/// They belong to the evaluation, not to the modules (which a host may evaluate again and
/// again, from several threads): the reference imports the plugins afresh for each compile, so
/// module state must not carry from one evaluation into the next. They live with the runtime's
/// host, which an evaluated model keeps for its export (the reference exports in the process
/// that compiled, so the resource classes see the plugins' module state); dropping the host,
/// when the evaluation failed or the model is let go, stops them, before the modules and their
/// sandboxes go.
#[derive(Debug)]
pub struct Servers {
    /// The interpreter the servers run: a Python environment's, or `python3` from `PATH`.
    interpreter: PathBuf,
    working_dir: Option<PathBuf>,
    running: BTreeMap<PathBuf, Server>,
}

impl Default for Servers {
    fn default() -> Servers {
        Servers::new(None, None)
    }
}

impl Servers {
    /// Servers run by `interpreter`, or by `python3` as `PATH` finds it.
    /// Servers run by `interpreter`, or by `python3` as `PATH` finds it, in `working_dir`, or
    /// in this process's.
    pub fn new(interpreter: Option<&Path>, working_dir: Option<&Path>) -> Servers {
        Servers {
            interpreter: interpreter.unwrap_or(Path::new("python3")).to_path_buf(),
            working_dir: working_dir.map(Path::to_path_buf),
            running: BTreeMap::new(),
        }
    }

    /// One call's request and response, through the sandbox's server, started if need be.
    fn exchange(
        &mut self,
        sandbox: &Path,
        scrub: &Scrub,
        request: &Json,
        requests: &mut dyn FnMut(Request<'_>) -> Reply,
    ) -> Result<Json, BridgeError> {
        let server = match self.running.entry(sandbox.to_path_buf()) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(Server::start(&self.interpreter, self.working_dir.as_deref(), sandbox)?)
            }
        };
        if let Some(response) = server.exchange(request, requests) {
            return Ok(response);
        }
        // The server died (the plugin ended the interpreter, or Python could not start); the
        // next call starts a fresh one. Module state is lost with it, as the reference's would
        // be with its process.
        let mut dead = self.running.remove(sandbox).expect("the server just called");
        let errors = dead.errors();
        let errors = errors.trim();
        let errors = if errors.is_empty() { "it exited without a response".to_string() } else { scrub.apply(errors) };
        Err(BridgeError::Unavailable(format!("python3 failed: {errors}")))
    }
}

impl Sandboxes {
    fn lock(&self) -> SandboxesGuard<'_> {
        SandboxesGuard(self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The sandboxes, locked for one call: calls into Python are one at a time.
struct SandboxesGuard<'a>(std::sync::MutexGuard<'a, SandboxMap>);

impl SandboxesGuard<'_> {
    /// The sandbox where `inmanta_plugins.<name>` imports the package of each module named
    /// in `packages` (a link to it), made once per set of packages, private to this user. Two
    /// modules with the same name in different places (two projects compiled by one process, a
    /// module on disk and the same module materialized from an artifact) get different
    /// sandboxes, and servers.
    fn get(&mut self, packages: &[(String, PathBuf)]) -> std::io::Result<&mut Sandbox> {
        let map = &mut *self.0;
        let key = match map.canonical.get(packages) {
            Some(key) => key.clone(),
            None => {
                let mut key = packages
                    .iter()
                    .map(|(name, package)| Ok((name.clone(), std::fs::canonicalize(package)?)))
                    .collect::<std::io::Result<Packages>>()?;
                key.sort();
                key.dedup_by(|a, b| a.0 == b.0);
                map.canonical.insert(packages.to_vec(), key.clone());
                key
            }
        };
        if !map.by_packages.contains_key(&key) {
            let dir = private_dir(&format!("weft-python-{}", std::process::id()))?;
            // A namespace package, as the reference's `inmanta_plugins` is: the plugin packages
            // of the v2 modules in the interpreter's environment join the sandbox's, so a
            // plugin can import another module's, as it can a module's of the project.
            let ns = dir.join("inmanta_plugins");
            let made = std::fs::create_dir(&ns)
                .and_then(|()| key.iter().try_for_each(|(name, package)| symlink(package, &ns.join(name))));
            if let Err(e) = made {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            let scrub = Scrub::new(&dir, &key);
            map.by_packages.insert(key.clone(), Sandbox { dir, scrub });
        }
        Ok(map.by_packages.get_mut(&key).expect("inserted above"))
    }
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("the Python bridge needs symbolic links"))
}

/// A new directory under the temporary directory, named `<prefix>-<n>`, that did not exist
/// before (so nobody else prepared it) and that only this user can enter (mode 0700).
pub(crate) fn private_dir(prefix: &str) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let dir = base.join(format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            // Left by an earlier process with the same id, or made by someone else: not ours.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `name` as part of a file name: characters other than ASCII letters, digits, `_` and `-`
/// become `_`.
pub(crate) fn file_name_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

fn to_json(v: &BridgeValue) -> Json {
    match v {
        BridgeValue::Plain(v) => plain_to_json(v),
        BridgeValue::Instance { id, display, known } if known.is_empty() => {
            json!({"__weft_instance__": id, "display": display})
        }
        BridgeValue::Instance { id, display, known } => json!({
            "__weft_instance__": id,
            "display": display,
            "known": known.iter().map(|(name, value)| json!([name, plain_to_json(value)])).collect::<Vec<_>>(),
        }),
        BridgeValue::List(items) => Json::Array(items.iter().map(to_json).collect()),
        BridgeValue::Dict(entries) => {
            json!({"__weft_dict__": entries.iter().map(|(k, v)| json!([k, to_json(v)])).collect::<Vec<_>>()})
        }
        BridgeValue::Dataclass { module, class, fields } => json!({
            "__weft_dataclass__": class,
            "__weft_module__": module,
            "fields": fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<serde_json::Map<_, _>>(),
        }),
    }
}

fn plain_to_json(v: &Value) -> Json {
    match v {
        Value::Null(_) | Value::Unknown | Value::Instance(_) | Value::Reference(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => json!(i),
        Value::BigInt(i) => serde_json::from_str(&i.to_string()).unwrap_or(Json::Null),
        Value::Float(f) => json!(f),
        Value::Str(s) => Json::String(s.to_string()),
        Value::List(items) => Json::Array(items.iter().map(plain_to_json).collect()),
        // As pairs: serde_json's objects keep their keys sorted, a dict keeps its order.
        Value::Dict(entries) => {
            json!({"__weft_dict__": entries.iter().map(|(k, v)| json!([k.as_ref(), plain_to_json(v)])).collect::<Vec<_>>()})
        }
    }
}

/// A value the server sent. Integers beyond 64 bits, non-finite floats, tuples and `Unknown`
/// come marked (`encode` in the driver), since JSON has no words for them; a tuple becomes a
/// list.
fn from_json(v: &Json) -> Value {
    match v {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Bool(*b),
        // Beyond 64 bits the driver's integers come marked, so a number that is not an `i64`
        // is a float.
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::str(s),
        Json::Array(items) => Value::List(Arc::from(items.iter().map(from_json).collect::<Vec<_>>())),
        Json::Object(map) => {
            if map.len() == 1 {
                if let Some(Ok(i)) =
                    map.get("__weft_int__").and_then(Json::as_str).map(|digits| digits.parse::<num_bigint::BigInt>())
                {
                    return Value::int(i);
                }
                if map.contains_key("__weft_unknown__") {
                    return Value::Unknown;
                }
                if let Some(text) = map.get("__weft_float__").and_then(Json::as_str) {
                    return Value::Float(match text {
                        "inf" => f64::INFINITY,
                        "-inf" => f64::NEG_INFINITY,
                        _ => f64::NAN,
                    });
                }
                if let Some(Json::Array(pairs)) = map.get("__weft_dict__") {
                    let entries = pairs.iter().filter_map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([Json::String(k), v]) => Some((Arc::from(k.as_str()), from_json(v))),
                        _ => None,
                    });
                    return Value::Dict(entries.collect());
                }
                if let Some(Json::Array(items)) = map.get("__weft_tuple__") {
                    return Value::List(Arc::from(items.iter().map(from_json).collect::<Vec<_>>()));
                }
                // An instance proxy the plugin returned (the caller checks the id).
                if let Some(id) = map.get("__weft_instance__").and_then(Json::as_u64) {
                    return Value::Instance(u32::try_from(id).unwrap_or(u32::MAX));
                }
            }
            Value::Dict(map.iter().map(|(k, v)| (Arc::from(k.as_str()), from_json(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages name the plugin's files by import path, wherever the package and the sandbox
    /// are on this host.
    #[test]
    fn messages_do_not_name_host_paths() {
        let scratch = tempfile::tempdir().unwrap();
        let package = scratch.path().join("pkg");
        std::fs::create_dir(&package).unwrap();
        let sandboxes = Sandboxes::default();
        let sandbox_of =
            |package: &Path| sandboxes.lock().get(&[("m".to_string(), package.to_path_buf())]).unwrap().dir.clone();
        let sandbox = sandbox_of(&package);
        assert_eq!(sandbox_of(&package), sandbox, "one sandbox per set of packages");
        let scrub = Scrub::new(&sandbox, &[("m".to_string(), package.clone())]);
        let message = format!(
            "bad input in {}/inmanta_plugins/m/sub.py and {}/data.txt",
            sandbox.display(),
            std::fs::canonicalize(&package).unwrap().display()
        );
        assert_eq!(scrub.apply(&message), "bad input in inmanta_plugins/m/sub.py and inmanta_plugins/m/data.txt");
        // Another package of the same name gets its own sandbox.
        let other = scratch.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let other_sandbox = sandbox_of(&other);
        assert_ne!(other_sandbox, sandbox);
        // Dropping the set removes its sandboxes, and not the packages they link to.
        drop(sandboxes);
        assert!(!sandbox.exists() && !other_sandbox.exists(), "the sandboxes are removed with their set");
        assert!(package.is_dir() && other.is_dir(), "the packages stay");
    }

    /// A plugin of a module embedded in an artifact runs from its materialized package when
    /// the module's sources are gone, and its messages are those of the module on disk.
    #[test]
    fn embedded_plugins_run_without_their_sources() {
        use crate::modules::Modules;

        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("m");
        std::fs::create_dir_all(root.join("plugins/sub")).unwrap();
        std::fs::write(
            root.join("plugins/__init__.py"),
            "from inmanta.plugins import plugin\nfrom .sub import twice\n\n@plugin\ndef f(x: int) -> int:\n    return \
             twice(x)\n\n@plugin\ndef where() -> None:\n    raise ValueError(__file__)\n",
        )
        .unwrap();
        std::fs::write(root.join("plugins/sub/__init__.py"), "def twice(x):\n    return 2 * x\n").unwrap();
        let on_disk = Modules::from_dirs([("m".to_string(), root.clone())].into());
        let embedded = Modules::from_embedded(on_disk.embed().unwrap());
        let run = |modules: &Modules, function: &str, args: Vec<BridgeValue>| {
            call(
                modules.sandboxes(),
                &mut Servers::default(),
                PluginCall {
                    packages: &modules.python_packages(),
                    module: "inmanta_plugins.m",
                    function,
                    args,
                    kwargs: Vec::new(),
                    context: None,
                },
                Output { prints: &mut Vec::new(), errors: &mut Vec::new() },
                &mut |_| Reply::Attribute(AttributeReply::NotFound(String::new())),
            )
        };
        let where_message = |modules: &Modules| match run(modules, "where", Vec::new()) {
            Err(BridgeError::Python(class, message)) => format!("{class}: {message}"),
            other => panic!("{other:?}"),
        };
        let from_disk = where_message(&on_disk);
        assert_eq!(from_disk, "ValueError: inmanta_plugins/m/__init__.py");
        std::fs::remove_dir_all(&root).unwrap();
        assert!(matches!(
            run(&embedded, "f", vec![BridgeValue::Plain(Value::Int(21))]),
            Ok(Returned { value: Value::Int(42), .. })
        ));
        assert_eq!(where_message(&embedded), from_disk);
    }

    /// What plugins ask of the stand-in `inmanta` beyond the corpus, which records the
    /// reference's outcomes in directories the reference chooses: the project is the
    /// server's working directory and a v1 module's directory is its root; a placeholder
    /// decorates where the module is defined and refuses to stand for a function in a call.
    #[test]
    fn the_stand_in_inmanta_package_answers_what_plugins_ask() {
        let scratch = tempfile::tempdir().unwrap();
        let project = scratch.path().join("project");
        let root = project.join("libs/m");
        std::fs::create_dir_all(root.join("plugins")).unwrap();
        std::fs::write(root.join("module.yml"), "name: m\n").unwrap();
        std::fs::write(
            root.join("plugins/__init__.py"),
            "import os\nimport inmanta.module, inmanta.util\nfrom inmanta.agent.handler import provider, \
             CRUDHandler\n\n@provider(\"m::A\", name=\"a\")\nclass H(CRUDHandler[int]):\n    pass\n\ndef \
             where():\n    p = inmanta.module.Project.get()\n    return [os.path.samefile(p.project_path, \
             os.getcwd()), p.modules['m']._path, 'm' in p.modules, 'x' in p.modules, H.__name__]\n\ndef \
             run_a_placeholder():\n    return inmanta.util.get_compiler_version()\n",
        )
        .unwrap();
        let sandboxes = Sandboxes::default();
        let mut servers = Servers::new(None, Some(&project));
        let packages = [("m".to_string(), root.join("plugins"))];
        let mut run = |function: &str| {
            let call_of = PluginCall {
                packages: &packages,
                module: "inmanta_plugins.m",
                function,
                args: Vec::new(),
                kwargs: Vec::new(),
                context: None,
            };
            let output = Output { prints: &mut Vec::new(), errors: &mut Vec::new() };
            call(&sandboxes, &mut servers, call_of, output, &mut |_| {
                Reply::Attribute(AttributeReply::NotFound(String::new()))
            })
        };
        let root_text = std::fs::canonicalize(&root).unwrap().to_string_lossy().into_owned();
        match run("where") {
            Ok(Returned { value: Value::List(items), .. }) => assert_eq!(
                items.to_vec(),
                [
                    Value::Bool(true),
                    Value::Str(root_text.as_str().into()),
                    Value::Bool(true),
                    Value::Bool(false),
                    Value::Str("H".into())
                ]
            ),
            other => panic!("{other:?}"),
        }
        match run("run_a_placeholder") {
            Err(BridgeError::Python(class, message)) => {
                assert_eq!(class, "NotImplementedError");
                assert_eq!(message, "inmanta.util.get_compiler_version is not available in weft's Python bridge");
            }
            other => panic!("{other:?}"),
        }
    }

    /// One server answers a set of packages' calls, so module state carries from call to call, and
    /// keeps apart what a plugin prints and what it writes to `sys.stderr`; a server that died
    /// is reported with what it wrote in that call, replaced at the next call, and none outlives
    /// its evaluation's set of servers.
    #[test]
    fn a_server_keeps_state_and_a_dead_one_is_replaced() {
        let scratch = tempfile::tempdir().unwrap();
        let package = scratch.path().join("pkg");
        std::fs::create_dir(&package).unwrap();
        std::fs::write(
            package.join("__init__.py"),
            "import os, sys\nn = 0\n\ndef count():\n    global n\n    n += 1\n    print('call', n)\n    \
             print('counted', file=sys.stderr)\n    return n\n\ndef die():\n    sys.stderr.write('going away\\n')\n    os._exit(3)\n",
        )
        .unwrap();
        let sandboxes = Sandboxes::default();
        let mut servers = Servers::default();
        let mut prints = Vec::new();
        let mut errors = Vec::new();
        let packages = [("pkg".to_string(), package.clone())];
        let mut run = |function: &str, prints: &mut Vec<String>, errors: &mut Vec<String>| {
            let call_of = PluginCall {
                packages: &packages,
                module: "inmanta_plugins.pkg",
                function,
                args: Vec::new(),
                kwargs: Vec::new(),
                context: None,
            };
            let output = Output { prints, errors };
            call(&sandboxes, &mut servers, call_of, output, &mut |_| {
                Reply::Attribute(AttributeReply::NotFound(String::new()))
            })
        };
        assert!(matches!(run("count", &mut prints, &mut errors), Ok(Returned { value: Value::Int(1), .. })));
        assert!(matches!(run("count", &mut prints, &mut errors), Ok(Returned { value: Value::Int(2), .. })));
        assert_eq!(prints, ["call 1", "call 2"]);
        assert_eq!(errors, ["counted", "counted"], "what goes to sys.stderr is kept apart");
        match run("die", &mut prints, &mut errors) {
            Err(BridgeError::Unavailable(message)) => assert_eq!(message, "python3 failed: going away"),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(run("count", &mut prints, &mut errors), Ok(Returned { value: Value::Int(1), .. })),
            "a fresh server"
        );
        let pid = servers.running.values().next().unwrap().child.id();
        drop(servers);
        if cfg!(target_os = "linux") {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the server is gone with its set");
        }
    }
}
