"""
Plugin signatures of weft's own `std` module (interface of inmanta-module-std 8.7.5).

Weft implements every plugin of std natively, in Rust. This file only declares their
signatures, so that weft's frontend can resolve and check plugin calls exactly as the
reference compiler would: plugin names (including renamed ones), parameter names and kinds,
annotations, default values, return annotations, whether a `Context` is passed, and the
`allow_unknown`, `emits_statements` and `@deprecated` flags. Weft reads this file as data and
never executes it, which is why every body is `...`.

Keep the declarations in sync with the reference: a signature that differs changes which
calls are accepted and how arguments are validated. Annotations are written exactly as the
reference writes them (DSL types as strings, Python types as expressions), because weft
interprets both kinds.

The reference defines the reference classes and the plugins that create them inside a
`try` block that only succeeds on inmanta-core versions with reference support. Weft always
supports references, so they are declared here at top level, unconditionally.

std itself defines no Python dataclasses: `std::Dataclass` is only a base entity for other
modules, whose plugins provide the counterparts.

The reference also registers an export hook (`dir_before_file`, a dependency manager) that
only acts on `std::File` and `std::Directory` resources. Those entities do not exist in this
version of std, so the hook never has an effect and is not declared here.
"""

import typing
from collections.abc import Mapping, Sequence

from inmanta.agent.handler import LoggerABC
from inmanta.execute import proxy
from inmanta.plugins import Context, ModelType, deprecated, plugin
from inmanta.references import Reference, reference


# Templates and files


@plugin
def unique_file(
    prefix: "string", seed: "string", suffix: "string", length: "int" = 20
) -> "string":
    """Builds prefix + hex MD5 digest of seed + suffix; length is accepted but unused."""
    ...


@plugin("template")
def template(ctx: Context, path: "string", **kwargs: "any") -> "string":
    """Renders a Jinja2 template from a module's templates directory, with the caller's scope or kwargs as variables."""
    ...


# Passwords


@plugin
def generate_password(
    context: Context, pw_id: "string", length: "int" = 20
) -> "string":
    """Returns the alphanumeric password stored under pw_id, generating and storing one first if needed."""
    ...


@plugin
def password(context: Context, pw_id: "string") -> "string":
    """Returns the password stored under pw_id and fails when there is none."""
    ...


# General helpers


@plugin("print")
def printf(message: object | Reference):
    """Writes the value to standard output."""
    ...


@plugin
def replace(string: "string", old: "string", new: "string") -> "string":
    """Replaces every occurrence of old in string by new."""
    ...


@deprecated(replaced_by="the `==` binary operator")
@plugin
def equals(arg1: "any", arg2: "any", desc: "string" = None):
    """Fails with an assertion error, mentioning desc if given, when the two values differ."""
    ...


@plugin("assert")
def assert_function(expression: "bool", message: "string" = ""):
    """Fails with an assertion error carrying message when expression is false."""
    ...


@deprecated(replaced_by="using a list comprehension")
@plugin
def select(objects: "list", attr: "string") -> "list":
    """Collects the attribute named attr of every object in the list."""
    ...


@plugin
def item(objects: "list", index: "int") -> "list":
    """Collects element index of every sublist in the list."""
    ...


@plugin
def key_sort(items: "list", key: "any") -> "list":
    """Sorts the list by the attribute named key (or by a tuple of attribute names)."""
    ...


@plugin
def timestamp(dummy: "any" = None) -> "int":
    """Returns the current Unix time in whole seconds; the argument is ignored."""
    ...


@plugin
def capitalize(string: "string") -> "string":
    """Upper-cases the first character and lower-cases the rest."""
    ...


@plugin
def upper(string: "string") -> "string":
    """Converts the string to upper case."""
    ...


@plugin
def lower(string: "string") -> "string":
    """Converts the string to lower case."""
    ...


@plugin
def limit(string: "string", length: "int") -> "string":
    """Truncates the string to at most length characters."""
    ...


@plugin
def type(obj: "any") -> "any":
    """Returns the definition of the type of obj.value."""
    ...


@plugin
def sequence(i: "int", start: "int" = 0) -> "list":
    """Returns the list of i consecutive ints beginning at start."""
    ...


@plugin
def dict_keys(dct: Mapping[str, object]) -> list[str]:
    """Returns the keys of the dict as a list."""
    ...


@plugin
def inlineif(conditional: "bool", a: "any", b: "any") -> "any":
    """Returns a when conditional is true and b otherwise."""
    ...


@plugin
def at(objects: Sequence[object | Reference], index: "int") -> object | Reference:
    """Returns the element of the list at the given index."""
    ...


@plugin
def attr(obj: "any", attr: "string") -> object | Reference:
    """Returns the attribute of obj with the given name, references allowed."""
    ...


@plugin
def isset(value: "any") -> "bool":
    """Tells whether the value is not null."""
    ...


@plugin
def objid(value: "any") -> "string":
    """Returns a string identifying the instance: the instance, its Python id and its Python class."""
    ...


@plugin
def count(item_list: Sequence[object | Reference]) -> "int":
    """Returns the number of elements, counting unknown elements like any other."""
    ...


@plugin("len")
def list_len(item_list: Sequence[object | Reference]) -> "int":
    """Returns the number of elements, or an unknown when any element is unknown."""
    ...


@plugin
def unique(item_list: "list") -> "bool":
    """Tells whether no element occurs twice in the list."""
    ...


@plugin
def flatten(item_list: "list") -> "list":
    """Concatenates a list of lists into one list."""
    ...


@plugin
def split(string_list: "string", delim: "string") -> "list":
    """Splits the string on every occurrence of delim."""
    ...


@plugin
def source(ctx: Context, path: "string") -> "string":
    """Returns the text of a file from a module's files directory."""
    ...


@plugin
def file(ctx: Context, path: "string") -> "string":
    """Returns a marker string ("imp-module-source:file://" + absolute path) for a file in a module's files directory."""
    ...


@plugin
def familyof(member: "std::OS", family: "string") -> "bool":
    """Tells whether the OS is named family or has an ancestor named family."""
    ...


# Orchestrator and environment


@plugin
def getfact(
    context: Context, resource: "any", fact_name: "string", default_value: "any" = None
) -> "any":
    """Returns a fact of a resource from the orchestrator, or default_value (else unknown) while it is not known."""
    ...


@plugin
def environment() -> "string":
    """Returns the id of the configured environment and fails when none is configured."""
    ...


@plugin
def environment_name(ctx: Context) -> "string":
    """Returns the name the orchestrator knows the environment by, or unknown."""
    ...


@plugin
def environment_server(ctx: Context) -> "string":
    """Returns the host name of the orchestrator the compiler talks to, or unknown."""
    ...


@plugin
def server_ca() -> "string":
    """Returns the content of the configured CA certificate file, or an empty string."""
    ...


@plugin
def server_ssl() -> "bool":
    """Tells whether the connection to the orchestrator uses SSL."""
    ...


@plugin
def server_token(context: Context, client_types: "string[]" = ["agent"]) -> "string":
    """Requests a new token for the given client types, or returns an empty string when authentication is off."""
    ...


@plugin
def server_port() -> "int":
    """Returns the configured port of the orchestrator (8888 by default)."""
    ...


@plugin
def get_env(name: "string", default_value: "string?" = None) -> "string":
    """Returns an environment variable of the compiler process, default_value, or else unknown."""
    ...


@deprecated(replaced_by="int(std::get_env(...))")
@plugin
def get_env_int(name: "string", default_value: "int?" = None) -> "int":
    """Returns an environment variable converted to int, default_value, or else unknown."""
    ...


# Type checks and collections


@plugin
def is_instance(ctx: Context, obj: "any", cls: "string") -> "bool":
    """Tells whether the instance is of the entity type named cls (or a subtype)."""
    ...


@plugin
def length(value: "string") -> "int":
    """Returns the number of characters in the string."""
    ...


@deprecated(replaced_by="using a list comprehension")
@plugin
def filter(values: "list", not_item: "std::Entity") -> "list":
    """Returns the list without the given instance."""
    ...


@deprecated(replaced_by="using the `<dict>[<key>]` construct")
@plugin
def dict_get(dct: "dict", key: "string") -> "string":
    """Returns the value stored under key and fails when the key is absent."""
    ...


@deprecated(replaced_by="the `<key> in <dict>` construct")
@plugin
def contains(dct: "dict", key: "string") -> "bool":
    """Tells whether the dict has the key."""
    ...


@plugin("getattr", allow_unknown=True)
def getattribute(
    entity: "std::Entity",
    attribute_name: "string",
    default_value: object | Reference = None,
    no_unknown: "bool" = True,
) -> object | Reference:
    """Returns the named attribute, or default_value when it does not exist (or is unknown and no_unknown holds)."""
    ...


@deprecated(replaced_by="the `not` unary operator")
@plugin
def invert(value: "bool") -> "bool":
    """Returns the negation of the boolean."""
    ...


@plugin
def list_files(ctx: Context, path: "string") -> "list":
    """Returns the names of the regular files in a directory under a module's files directory."""
    ...


@plugin(allow_unknown=True)
def is_unknown(value: object | Reference) -> "bool":
    """Tells whether the value is unknown."""
    ...


@plugin
def validate_type(
    fq_type_name: "string", value: "any", validation_parameters: "dict" = None
) -> "bool":
    """Tells whether the value is valid for the named Python or pydantic type, constrained by validation_parameters."""
    ...


@plugin
def is_base64_encoded(s: "string") -> "bool":
    """Tells whether the string is strictly valid base64."""
    ...


# Host names and IP addresses


@plugin
def hostname(fqdn: "string") -> "string":
    """Returns the part of the name before the first dot."""
    ...


@plugin
def prefixlength_to_netmask(prefixlen: "int") -> "std::ipv4_address":
    """Converts an IPv4 prefix length to the dotted netmask."""
    ...


@plugin
def prefixlen(addr: "std::ipv_any_interface") -> "int":
    """Returns the prefix length of an interface address."""
    ...


@plugin
def network_address(addr: "std::ipv_any_interface") -> "std::ipv_any_address":
    """Returns the network address of an interface address."""
    ...


@plugin
def netmask(addr: "std::ipv_any_interface") -> "std::ipv_any_address":
    """Returns the netmask of an interface address."""
    ...


@plugin
def ipindex(
    addr: "std::ipv_any_network", position: "int", keep_prefix: "bool" = False
) -> "string":
    """Returns the address at the given position in the network, with /prefix appended if keep_prefix."""
    ...


@plugin
def add_to_ip(addr: "std::ipv_any_address", n: "int") -> "std::ipv_any_address":
    """Returns the address n further on."""
    ...


@plugin
def ip_address_from_interface(
    ip_interface: "std::ipv_any_interface",
) -> "std::ipv_any_address":
    """Returns the address of an interface address without its prefix."""
    ...


# Serialization and formatting


@plugin
def json_loads(s: "string") -> "any":
    """Parses a JSON document into DSL values."""
    ...


@plugin
def json_dumps(obj: "any") -> "string":
    """Serializes a value to JSON text."""
    ...


@plugin
def format(__string: "string", *args: "any", **kwargs: "any") -> "string":
    """Applies Python str.format to the string with the other arguments."""
    ...


# References. Each class is registered under the name given to @reference; the parameters of
# __init__ are the arguments a reference is exported with.


@reference("std::IntReference")
class IntReference(Reference[int]):
    """Resolves to the int conversion of the value (itself possibly a reference)."""

    def __init__(self, value: object | Reference) -> None:
        """Stores the value or reference to convert."""
        ...

    def resolve(self, logger: LoggerABC) -> int:
        """Resolves the value and converts it with Python int()."""
        ...


@plugin
def create_int_reference(value: object | Reference) -> Reference[int]:
    """Wraps the value in an IntReference."""
    ...


@reference("std::Environment")
class EnvironmentReference(Reference[str]):
    """Resolves to an environment variable of the agent process."""

    def __init__(self, name: str | Reference[str]) -> None:
        """Stores the name (or a reference to the name) of the variable."""
        ...

    def resolve(self, logger: LoggerABC) -> str:
        """Returns the variable's value; a variable that is not set raises LookupError."""
        ...

    def __eq__(self, value: object) -> bool:
        """Equal to another EnvironmentReference with an equal name, unequal to anything else."""
        ...


@plugin
def create_environment_reference(name: str | Reference[str]) -> Reference[str]:
    """Wraps the variable name in an EnvironmentReference."""
    ...


@reference("std::FactReference")
class FactReference(Reference[str]):
    """Resolves, at deploy time, to a fact of a resource, or to a mocked fact when mocked_facts is given."""

    def __init__(
        self,
        environment: str,
        resource_id: str,
        fact_name: str,
        mocked_facts: dict | None,
    ) -> None:
        """Stores the environment, the resource id, the fact name and the optional mocked facts."""
        ...

    def resolve(self, logger: LoggerABC) -> str:
        """Looks the fact up (mocked or on the orchestrator); a missing fact raises LookupError."""
        ...

    def __str__(self) -> str:
        """Renders as FactReference[resource_id=<resource_id>,fact_name=<fact_name>]."""
        ...


@plugin
def create_fact_reference(
    context: Context,
    resource: typing.Annotated[proxy.DynamicProxy, ModelType["std::Resource"]],
    fact_name: str,
) -> FactReference:
    """Creates a FactReference for a fact of the given resource in the current environment."""
    ...
