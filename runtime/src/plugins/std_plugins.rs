//! The native implementations of std's plugins (inmanta-module-std 8.7.5), with the
//! behaviour of their Python code: what they return, and the Python exceptions they raise.
//!
//! Every plugin of std is here. Those that need more than the model:
//!
//! * `password` and `generate_password` keep passwords in `std/passwordfile.txt` of the
//!   host's data directory ([`PluginHost::data_dir`]), as the reference's compiler does in its
//!   own (`data/std` in its working directory) when it runs without a server;
//! * `getfact`, `environment` and the `server_*` plugins ask the orchestrator in the reference;
//!   weft answers as the reference does when none is configured, or from the facts given
//!   ([`crate::Options::facts`]);
//! * `type` reads `obj.value.type()`, which fails (or is Unknown) for every value a model can
//!   pass: its outcomes are reproduced, there is no Python type to return.

use std::path::Path;
use std::sync::Arc;

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive};
use weft_ir::ErrorKind;
use weft_ir::plugin::{ParamKind, PluginParam};
use weft_ir::value::{Reference, Value, str_repr};

use super::bind;
use super::registry::{Call, NativeModule, NativePlugin, ReferenceType};
use super::{
    Flow, NativeResult, PluginError, PluginHost, facts, format, json, net, pyfmt, template, titlecase, validate,
};
use crate::modules::{ModulePath, Modules, read_text};

/// What a native implementation gets: the host and its bound arguments.
pub(crate) type Ctx<'a> = Call<'a>;

pub(crate) fn type_error(message: impl Into<String>) -> Flow {
    Flow::Error(PluginError::external("TypeError", message))
}

pub(crate) fn value_error(message: impl Into<String>) -> Flow {
    Flow::Error(PluginError::external("ValueError", message))
}

fn exception(message: impl Into<String>) -> Flow {
    Flow::Error(PluginError::exception(message))
}

/// A table entry: name, Python function name, Python parameters, return annotation,
/// `allow_unknown`, implementation (see [`NativePlugin`]).
macro_rules! native {
    ($name:literal, $py:literal, $params:literal, $returns:expr, $unknown:expr, $run:expr) => {
        NativePlugin {
            name: $name,
            py_name: $py,
            params: $params,
            returns: $returns,
            allow_unknown: $unknown,
            pure: false,
            run: $run,
        }
    };
}

/// std's plugins (all of them: the reference's list is `inmanta_plugins/std/__init__.py`).
static NATIVES: &[NativePlugin] = &[
    native!("unique_file", "unique_file", "prefix, seed, suffix, length=20", Some("\"string\""), false, unique_file),
    native!("template", "template", "path, **kwargs", Some("\"string\""), false, template::template_plugin),
    native!("generate_password", "generate_password", "pw_id, length=20", Some("\"string\""), false, generate_password),
    native!("password", "password", "pw_id", Some("\"string\""), false, password),
    native!("print", "printf", "message", None, false, print),
    native!("replace", "replace", "string, old, new", Some("\"string\""), false, replace),
    native!("equals", "equals", "arg1, arg2, desc=None", None, false, equals),
    native!("assert", "assert_function", "expression, message=\"\"", None, false, assert),
    native!("select", "select", "objects, attr", Some("\"list\""), false, select),
    native!("item", "item", "objects, index", Some("\"list\""), false, item),
    native!("key_sort", "key_sort", "items, key", Some("\"list\""), false, key_sort),
    native!("timestamp", "timestamp", "dummy=None", Some("\"int\""), false, timestamp),
    native!("capitalize", "capitalize", "string", Some("\"string\""), false, capitalize),
    native!("upper", "upper", "string", Some("\"string\""), false, upper),
    native!("lower", "lower", "string", Some("\"string\""), false, lower),
    native!("limit", "limit", "string, length", Some("\"string\""), false, limit),
    native!("type", "type", "obj", Some("\"any\""), false, type_plugin),
    native!("sequence", "sequence", "i, start=0", Some("\"list\""), false, sequence),
    native!("dict_keys", "dict_keys", "dct", Some("list[str]"), false, dict_keys),
    native!("inlineif", "inlineif", "conditional, a, b", Some("\"any\""), false, inlineif),
    native!("at", "at", "objects, index", Some("object | Reference"), false, at),
    native!("attr", "attr", "obj, attr", Some("object | Reference"), false, attr),
    native!("isset", "isset", "value", Some("\"bool\""), false, isset),
    native!("objid", "objid", "value", Some("\"string\""), false, objid),
    native!("count", "count", "item_list", Some("\"int\""), false, count),
    native!("len", "list_len", "item_list", Some("\"int\""), false, list_len),
    native!("unique", "unique", "item_list", Some("\"bool\""), false, unique),
    native!("flatten", "flatten", "item_list", Some("\"list\""), false, flatten),
    native!("split", "split", "string_list, delim", Some("\"list\""), false, split),
    native!("source", "source", "path", Some("\"string\""), false, source),
    native!("file", "file", "path", Some("\"string\""), false, file),
    native!("familyof", "familyof", "member, family", Some("\"bool\""), false, familyof),
    native!("getfact", "getfact", "resource, fact_name, default_value=None", Some("\"any\""), false, getfact),
    native!("environment", "environment", "", Some("\"string\""), false, environment),
    native!("environment_name", "environment_name", "", Some("\"string\""), false, environment_name),
    native!("environment_server", "environment_server", "", Some("\"string\""), false, environment_server),
    native!("server_ca", "server_ca", "", Some("\"string\""), false, server_ca),
    native!("server_ssl", "server_ssl", "", Some("\"bool\""), false, server_ssl),
    native!("server_token", "server_token", "client_types=[\"agent\"]", Some("\"string\""), false, server_token),
    native!("server_port", "server_port", "", Some("\"int\""), false, server_port),
    native!("get_env", "get_env", "name, default_value=None", Some("\"string\""), false, get_env),
    native!("get_env_int", "get_env_int", "name, default_value=None", Some("\"int\""), false, get_env_int),
    native!("is_instance", "is_instance", "obj, cls", Some("\"bool\""), false, is_instance),
    native!("length", "length", "value", Some("\"int\""), false, length).pure(),
    native!("filter", "filter", "values, not_item", Some("\"list\""), false, filter),
    native!("dict_get", "dict_get", "dct, key", Some("\"string\""), false, dict_get),
    native!("contains", "contains", "dct, key", Some("\"bool\""), false, contains),
    native!(
        "getattr",
        "getattribute",
        "entity, attribute_name, default_value=None, no_unknown=True",
        Some("object | Reference"),
        true,
        getattribute
    ),
    native!("invert", "invert", "value", Some("\"bool\""), false, invert),
    native!("list_files", "list_files", "path", Some("\"list\""), false, list_files),
    native!("is_unknown", "is_unknown", "value", Some("\"bool\""), true, is_unknown),
    native!(
        "validate_type",
        "validate_type",
        "fq_type_name, value, validation_parameters=None",
        Some("\"bool\""),
        false,
        validate_type
    )
    .pure(),
    native!("is_base64_encoded", "is_base64_encoded", "s", Some("\"bool\""), false, is_base64_encoded).pure(),
    native!("hostname", "hostname", "fqdn", Some("\"string\""), false, hostname),
    native!(
        "prefixlength_to_netmask",
        "prefixlength_to_netmask",
        "prefixlen",
        Some("\"std::ipv4_address\""),
        false,
        prefixlength_to_netmask
    ),
    native!("prefixlen", "prefixlen", "addr", Some("\"int\""), false, prefixlen),
    native!("network_address", "network_address", "addr", Some("\"std::ipv_any_address\""), false, network_address),
    native!("netmask", "netmask", "addr", Some("\"std::ipv_any_address\""), false, netmask),
    native!("ipindex", "ipindex", "addr, position, keep_prefix=False", Some("\"string\""), false, ipindex),
    native!("add_to_ip", "add_to_ip", "addr, n", Some("\"std::ipv_any_address\""), false, add_to_ip),
    native!(
        "ip_address_from_interface",
        "ip_address_from_interface",
        "ip_interface",
        Some("\"std::ipv_any_address\""),
        false,
        ip_address_from_interface
    ),
    native!("json_loads", "json_loads", "s", Some("\"any\""), false, json_loads),
    native!("json_dumps", "json_dumps", "obj", Some("\"string\""), false, json_dumps),
    native!("format", "format", "__string, *args, **kwargs", Some("\"string\""), false, format_plugin),
    native!(
        "create_int_reference",
        "create_int_reference",
        "value",
        Some("Reference[int]"),
        false,
        create_int_reference
    ),
    native!(
        "create_environment_reference",
        "create_environment_reference",
        "name",
        Some("Reference[str]"),
        false,
        create_environment_reference
    ),
    native!(
        "create_fact_reference",
        "create_fact_reference",
        "resource, fact_name",
        Some("FactReference"),
        false,
        create_fact_reference
    ),
];

/// std as a native module: its plugins and the reference classes they create.
struct Std;

impl NativeModule for Std {
    fn name(&self) -> &'static str {
        "std"
    }

    fn plugins(&self) -> Vec<NativePlugin> {
        NATIVES.to_vec()
    }

    fn reference_types(&self) -> Vec<ReferenceType> {
        let std = |name, class, resolves_to| ReferenceType { name, module: "inmanta_plugins.std", class, resolves_to };
        vec![
            std("std::Environment", "EnvironmentReference", "string"),
            std("std::IntReference", "IntReference", "int"),
            std("std::FactReference", "FactReference", "string"),
        ]
    }
}

/// The plugins of one other module in [`MODULE_NATIVES`], named without the module prefix.
struct TableModule {
    name: &'static str,
    plugins: Vec<NativePlugin>,
}

impl NativeModule for TableModule {
    fn name(&self) -> &'static str {
        self.name
    }

    fn plugins(&self) -> Vec<NativePlugin> {
        self.plugins.clone()
    }
}

/// The modules of [`PluginRegistry::builtin`](super::PluginRegistry::builtin): std, then the
/// modules of [`MODULE_NATIVES`] in order of first appearance.
pub(crate) fn builtin_modules() -> Vec<Box<dyn NativeModule>> {
    let mut modules: Vec<TableModule> = Vec::new();
    for native in MODULE_NATIVES {
        let (module, name) = native.name.split_once("::").unwrap_or(("", native.name));
        let plugin = NativePlugin { name, ..*native };
        match modules.iter_mut().find(|m| m.name == module) {
            Some(m) => m.plugins.push(plugin),
            None => modules.push(TableModule { name: module, plugins: vec![plugin] }),
        }
    }
    let mut out: Vec<Box<dyn NativeModule>> = vec![Box::new(Std)];
    out.extend(modules.into_iter().map(|m| Box::new(m) as Box<dyn NativeModule>));
    out
}

/// Plugins of other public modules that weft implements natively, by qualified name (each
/// module's entries become one [`NativeModule`] in [`builtin_modules`]): the `exec` module's
/// Python package imports the agent's handler code, which the Python bridge cannot load, and
/// these two are pure string functions.
static MODULE_NATIVES: &[NativePlugin] = &[
    native!("exec::in_shell", "in_shell", "command", Some("\"string\""), false, exec_in_shell),
    native!("exec::shlex_join", "shlex_join", "cmd", Some("\"string\""), false, exec_shlex_join),
];

/// `subprocess.list2cmdline(["sh", "-c", command])`.
fn exec_in_shell(ctx: &mut Ctx) -> NativeResult {
    let command = ctx.str_arg("command")?.to_string();
    Ok(Value::str(&list2cmdline(&["sh", "-c", &command])))
}

/// Python's `subprocess.list2cmdline`: the MS C runtime's quoting rules.
fn list2cmdline(args: &[&str]) -> String {
    let mut out = String::new();
    for arg in args {
        if !out.is_empty() {
            out.push(' ');
        }
        let quote = arg.is_empty() || arg.contains(' ') || arg.contains('\t');
        if quote {
            out.push('"');
        }
        let mut backslashes = 0usize;
        for c in arg.chars() {
            match c {
                '\\' => backslashes += 1,
                '"' => {
                    out.push_str(&"\\".repeat(backslashes * 2));
                    backslashes = 0;
                    out.push_str("\\\"");
                }
                c => {
                    out.push_str(&"\\".repeat(backslashes));
                    backslashes = 0;
                    out.push(c);
                }
            }
        }
        out.push_str(&"\\".repeat(backslashes));
        if quote {
            out.push_str(&"\\".repeat(backslashes));
            out.push('"');
        }
    }
    out
}

/// `shlex.join(cmd)`.
fn exec_shlex_join(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("cmd")?;
    let mut words = Vec::with_capacity(items.len());
    for item in items.iter() {
        let Value::Str(word) = item else {
            return Err(Flow::Error(PluginError::external(
                "TypeError",
                format!("expected string or bytes-like object, got '{}'", item.type_name()),
            )));
        };
        words.push(shlex_quote(word));
    }
    Ok(Value::str(&words.join(" ")))
}

/// `shlex.quote`: words of safe characters as they are, others in single quotes.
fn shlex_quote(word: &str) -> String {
    if word.is_empty() {
        return "''".to_string();
    }
    let safe = word.chars().all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if safe { word.to_string() } else { format!("'{}'", word.replace('\'', "'\"'\"'")) }
}

/// std's native plugins.
#[cfg(test)]
pub(crate) fn all() -> &'static [NativePlugin] {
    NATIVES
}

impl NativePlugin {
    #[cfg(test)]
    pub(crate) fn parameter_names(&self) -> Vec<String> {
        self.parameters().into_iter().map(|p| p.name).collect()
    }

    /// Calls the plugin (`qualified` is its name with the module's) as Python code would
    /// (`Plugin.__call__`, as templates call filters): Python's own binding and `TypeError`s,
    /// no argument validation, the return value validated. An Unknown argument makes the
    /// result Unknown.
    pub(crate) fn call_python(&self, qualified: &str, args: Vec<Value>, host: &mut dyn PluginHost) -> NativeResult {
        let params = self.parameters();
        let positional: Vec<&PluginParam> =
            params.iter().filter(|p| p.kind == ParamKind::PositionalOrKeyword).collect();
        let has_var = params.iter().any(|p| p.kind == ParamKind::VarPositional);
        if !has_var && args.len() > positional.len() {
            let required = positional.iter().filter(|p| p.default.is_none()).count();
            let takes = match (required, positional.len()) {
                (r, n) if r == n => format!("{n} positional argument{}", if n == 1 { "" } else { "s" }),
                (r, n) => format!("from {r} to {n} positional arguments"),
            };
            let were = if args.len() == 1 { "was" } else { "were" };
            return Err(type_error(format!("{}() takes {takes} but {} {were} given", self.py_name, args.len())));
        }
        let missing: Vec<&str> =
            positional.iter().skip(args.len()).filter(|p| p.default.is_none()).map(|p| p.name.as_str()).collect();
        if let [rest @ .., last] = missing.as_slice() {
            let names = if rest.is_empty() {
                format!("'{last}'")
            } else {
                let rest: Vec<String> = rest.iter().map(|n| format!("'{n}'")).collect();
                format!("{} and '{last}'", rest.join(", "))
            };
            let s = if missing.len() == 1 { "" } else { "s" };
            return Err(type_error(format!(
                "{}() missing {} required positional argument{s}: {names}",
                self.py_name,
                missing.len()
            )));
        }
        if !self.allow_unknown && args.iter().any(|a| matches!(a, Value::Unknown)) {
            return Err(Flow::Unknown);
        }
        let namespace = qualified.rsplit_once("::").map_or("", |(namespace, _)| namespace);
        let bound = bind::bind(&params, args, Vec::new());
        let value = (self.run)(&mut Ctx { host: &mut *host, args: bound })?;
        super::check_return(self.return_annotation().as_ref(), namespace, qualified, &value, host)?;
        Ok(value)
    }
}

/// Reads an attribute of an instance as a plugin does through its proxy: an Unknown value
/// makes the call's result Unknown, a reference is refused unless allowed, and an attribute
/// that does not exist is an `AttributeError`.
pub(crate) fn read_attribute(
    instance: u32,
    name: &str,
    host: &mut dyn PluginHost,
    allow_references: bool,
    path: &str,
) -> Result<Value, Flow> {
    match host.attribute(instance, name) {
        Ok(Value::Unknown) => Err(Flow::Unknown),
        Ok(Value::Reference(r)) if !allow_references => Err(unexpected_reference(&Value::Reference(r), path, host)),
        Ok(value) => Ok(value),
        // The proxy raises `AttributeError(e.stmt, e.name)` from the `NotFoundException`,
        // whose statement is `None`: the message is that pair.
        Err(PluginError::Wrapped { kind: ErrorKind::NotFoundException, .. }) => {
            Err(Flow::Error(PluginError::external("AttributeError", format!("(None, {})", str_repr(name)))))
        }
        Err(e) => Err(e.into()),
    }
}

/// The reference's `UnexpectedReference` for a reference read through a proxy.
pub(crate) fn unexpected_reference(value: &Value, path: &str, host: &dyn PluginHost) -> Flow {
    Flow::Error(PluginError::Wrapped {
        kind: ErrorKind::UnexpectedReference,
        message: format!(
            "Encountered unexpected reference value during plugin execution. Plugins are only allowed to access \
             reference values when declared explicitly. Either use a dataclass entity that supports references (e.g. \
             `int | Reference[int]` attribute annotation), or explicitly allow references on attribute access with the \
             `inmanta.plugins.allow_reference_values()` wrapper. Encountered at {path} (= `{}`).",
            pyfmt::plugin_repr(value, host)
        ),
    })
}

/// An element read from a list argument: Unknown makes the result Unknown.
fn element(value: &Value) -> Result<Value, Flow> {
    match value {
        Value::Unknown => Err(Flow::Unknown),
        v => Ok(v.clone()),
    }
}

fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::from(items))
}

// ---------------------------------------------------------------------------------------
// General helpers.

fn print(ctx: &mut Ctx) -> NativeResult {
    // `print` takes `str()` of its argument, which CPython refuses for an int of too many
    // digits.
    if weft_ir::value::holds_int_too_long_for_text(ctx.arg("message")) {
        return Err(value_error(weft_ir::value::INT_TO_TEXT_LIMIT_MESSAGE));
    }
    let text = pyfmt::plugin_str(ctx.arg("message"), ctx.host);
    ctx.host.print(&text);
    Ok(Value::NULL)
}

fn replace(ctx: &mut Ctx) -> NativeResult {
    let s = ctx.str_arg("string")?;
    let (old, new) = (ctx.str_arg("old")?, ctx.str_arg("new")?);
    // CPython's `str.replace` returns the string itself when it finds nothing to replace, or
    // when `old` and `new` are one object (see `Value::formatted` for why objects matter).
    let same_object =
        matches!((ctx.arg("old"), ctx.arg("new")), (Value::Str(a), Value::Str(b)) if Value::same_str_object(a, b));
    if !s.contains(old) || same_object {
        return Ok(ctx.arg("string").clone());
    }
    Ok(Value::str(&s.replace(old, new)))
}

fn equals(ctx: &mut Ctx) -> NativeResult {
    let (a, b) = (ctx.arg("arg1"), ctx.arg("arg2"));
    if !a.py_eq(b) {
        let text = format!("{} != {}", pyfmt::plugin_str(a, ctx.host), pyfmt::plugin_str(b, ctx.host));
        let message = match ctx.arg("desc") {
            Value::Null(_) => text,
            desc => format!("{text}: {}", pyfmt::plugin_str(desc, ctx.host)),
        };
        return Err(Flow::Error(PluginError::external("AssertionError", message)));
    }
    Ok(Value::NULL)
}

fn assert(ctx: &mut Ctx) -> NativeResult {
    if !ctx.arg("expression").truthy() {
        let message = pyfmt::plugin_str(ctx.arg("message"), ctx.host);
        return Err(Flow::Error(PluginError::external("AssertionError", format!("Assertion error: {message}"))));
    }
    Ok(Value::NULL)
}

/// `getattr(item, name)` on an element of a list argument, or `attrgetter(name)(item)` with
/// `dotted`, which follows dotted names (`other.name`) where `getattr` looks for an
/// attribute named `other.name`.
fn getattr_of(item: &Value, name: &str, dotted: bool, host: &mut dyn PluginHost, path: &str) -> Result<Value, Flow> {
    match item {
        Value::Instance(id) => {
            if !dotted {
                return read_attribute(*id, name, host, false, path);
            }
            let mut value = Value::Instance(*id);
            for part in name.split('.') {
                value = match value {
                    Value::Instance(id) => read_attribute(id, part, host, false, path)?,
                    other => {
                        return Err(Flow::Error(PluginError::external(
                            "AttributeError",
                            format!("'{}' object has no attribute '{part}'", pyfmt::plugin_type_name(&other)),
                        )));
                    }
                };
            }
            Ok(value)
        }
        Value::Unknown => Err(Flow::Unknown),
        other => Err(Flow::Error(PluginError::external(
            "AttributeError",
            format!("'{}' object has no attribute '{name}'", pyfmt::plugin_type_name(other)),
        ))),
    }
}

fn select(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("objects")?;
    let name = ctx.str_arg("attr")?.to_string();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(getattr_of(&element(item)?, &name, false, ctx.host, &format!("objects[{i}].{name}"))?);
    }
    Ok(list(out))
}

/// `obj[index]` on a value as a plugin receives it.
fn subscript(obj: &Value, index: &Value) -> Result<Value, Flow> {
    match obj {
        Value::List(items) => {
            let i = py_index(index, items.len(), "list")?;
            element(&items[i])
        }
        Value::Str(s) => {
            let chars: Vec<char> = s.chars().collect();
            let i = py_index(index, chars.len(), "string")?;
            Ok(Value::str(&chars[i].to_string()))
        }
        Value::Dict(entries) => {
            let found = match index {
                Value::Str(k) => entries.get(k),
                // `DictProxy.__getitem__` raises a `RuntimeException` about the proxy, whose
                // constructor asks the proxy for its location: the proxy looks that up as an
                // attribute of the dict.
                _ => return Err(no_get_attribute("dict")),
            };
            match found {
                Some(v) => element(v),
                None => Err(Flow::Error(PluginError::external("KeyError", pyfmt::dsl_str_plain(&key_repr(index))))),
            }
        }
        Value::Unknown => Err(Flow::Unknown),
        other => Err(type_error(format!("'{}' object is not subscriptable", pyfmt::plugin_type_name(other)))),
    }
}

/// The `AttributeError` a proxied list or dict raises when the reference's runtime treats it
/// as an instance (`'dict' object has no attribute 'get_attribute'`).
fn no_get_attribute(class: &str) -> Flow {
    Flow::Error(PluginError::external("AttributeError", format!("'{class}' object has no attribute 'get_attribute'")))
}

/// How a missing key shows in a `KeyError` (`repr` of the key).
fn key_repr(key: &Value) -> Value {
    match key {
        Value::Str(s) => Value::str(&str_repr(s)),
        other => other.clone(),
    }
}

/// A Python sequence index (negative from the end); `IndexError` when out of range.
fn py_index(index: &Value, len: usize, what: &str) -> Result<usize, Flow> {
    let Some(i) = validate::to_bigint(index) else {
        return Err(type_error(format!(
            "{what} indices must be integers or slices, not {}",
            pyfmt::plugin_type_name(index)
        )));
    };
    let out_of_range = || Flow::Error(PluginError::external("IndexError", format!("{what} index out of range")));
    let Some(i) = i.to_i64() else {
        return Err(Flow::Error(PluginError::external("IndexError", "cannot fit 'int' into an index-sized integer")));
    };
    let resolved = if i < 0 { i + len as i64 } else { i };
    if resolved < 0 || resolved >= len as i64 {
        return Err(out_of_range());
    }
    Ok(resolved as usize)
}

fn item(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("objects")?;
    let index = ctx.arg("index").clone();
    let mut out = Vec::with_capacity(items.len());
    for obj in items.iter() {
        out.push(subscript(&element(obj)?, &index)?);
    }
    Ok(list(out))
}

/// Python's `a < b` on values as plugins see them.
fn py_lt(a: &Value, b: &Value) -> Result<bool, Flow> {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => Ok(x < y),
        _ if a.is_number() && b.is_number() => Ok(a.py_compare(b).is_ok_and(|o| o.is_lt())),
        (Value::List(x), Value::List(y)) => {
            for (p, q) in x.iter().zip(y.iter()) {
                if !p.py_eq(q) {
                    return py_lt(p, q);
                }
            }
            Ok(x.len() < y.len())
        }
        _ => Err(type_error(format!(
            "'<' not supported between instances of '{}' and '{}'",
            pyfmt::plugin_type_name(a),
            pyfmt::plugin_type_name(b)
        ))),
    }
}

fn key_sort(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("items")?;
    let key = match ctx.arg("key") {
        Value::Str(s) => s.to_string(),
        _ => return Err(type_error("attribute name must be a string")),
    };
    let mut keyed = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item = element(item)?;
        let k = getattr_of(&item, &key, true, ctx.host, &format!("items[{i}].{key}"))?;
        keyed.push((k, item));
    }
    let mut error = None;
    keyed.sort_by(|(a, _), (b, _)| {
        if error.is_some() {
            return std::cmp::Ordering::Equal;
        }
        match (py_lt(a, b), py_lt(b, a)) {
            (Ok(true), _) => std::cmp::Ordering::Less,
            (Ok(false), Ok(true)) => std::cmp::Ordering::Greater,
            (Ok(false), Ok(false)) => std::cmp::Ordering::Equal,
            (Err(e), _) | (_, Err(e)) => {
                error = Some(e);
                std::cmp::Ordering::Equal
            }
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    Ok(list(keyed.into_iter().map(|(_, v)| v).collect()))
}

fn timestamp(_ctx: &mut Ctx) -> NativeResult {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Ok(Value::Int(now as i64))
}

fn capitalize(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::str(&titlecase::capitalize(ctx.str_arg("string")?)))
}

fn upper(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::str(&ctx.str_arg("string")?.to_uppercase()))
}

fn lower(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::str(&ctx.str_arg("string")?.to_lowercase()))
}

fn limit(ctx: &mut Ctx) -> NativeResult {
    let s = ctx.str_arg("string")?;
    let n = ctx.int_arg("length")?;
    let count = s.chars().count() as i64;
    let end = match n.to_i64() {
        Some(n) if n >= 0 => n.min(count),
        Some(n) => (count + n).max(0),
        None if n.is_negative() => 0,
        None => count,
    };
    // A slice of the whole string is the string itself, as in CPython.
    if end == count {
        return Ok(ctx.arg("string").clone());
    }
    Ok(Value::str(&s.chars().take(end as usize).collect::<String>()))
}

fn sequence(ctx: &mut Ctx) -> NativeResult {
    let i = ctx.int_arg("i")?;
    let start = ctx.int_arg("start")?;
    let end = &i + &start;
    let count = (&end - &start).to_i64().unwrap_or(i64::MAX);
    if count > 100_000_000 {
        return Err(Flow::Error(PluginError::external("MemoryError", "")));
    }
    let mut out = Vec::with_capacity(count.max(0) as usize);
    let mut current = start;
    while current < end {
        out.push(Value::int(current.clone()));
        current += 1;
    }
    Ok(list(out))
}

fn dict_keys(ctx: &mut Ctx) -> NativeResult {
    match ctx.arg("dct") {
        Value::Dict(entries) => Ok(list(entries.iter().map(|(k, _)| Value::Str(k.clone())).collect())),
        other => Err(Flow::Error(PluginError::external(
            "AttributeError",
            format!("'{}' object has no attribute 'keys'", pyfmt::plugin_type_name(other)),
        ))),
    }
}

fn inlineif(ctx: &mut Ctx) -> NativeResult {
    Ok(if ctx.arg("conditional").truthy() { ctx.arg("a").clone() } else { ctx.arg("b").clone() })
}

fn at(ctx: &mut Ctx) -> NativeResult {
    match ctx.arg("objects") {
        Value::List(items) => {
            let i = py_index(ctx.arg("index"), items.len(), "list")?;
            element(&items[i])
        }
        other => subscript(&other.clone(), &ctx.arg("index").clone()),
    }
}

/// `getattr(obj, attr)`, references allowed. On a value that is no instance, Python finds
/// the methods of its class (`std::attr("abc", "upper")` returns `str.upper`), which weft has
/// no value for: that is an `AttributeError` here (a known divergence).
fn attr(ctx: &mut Ctx) -> NativeResult {
    let name = ctx.str_arg("attr")?.to_string();
    match ctx.arg("obj").clone() {
        Value::Instance(id) => read_attribute(id, &name, ctx.host, true, &format!("obj.{name}")),
        other => python_getattr(&other, &name, ctx.host, &format!("obj.{name}")),
    }
}

fn isset(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Bool(!matches!(ctx.arg("value"), Value::Null(_))))
}

/// `str((value._get_instance(), str(id(...)), class))`: weft's ids stand for the memory
/// addresses, which no model can rely on.
fn objid(ctx: &mut Ctx) -> NativeResult {
    match ctx.arg("value") {
        Value::Instance(id) => {
            let repr = format!("{} {id:02x}", ctx.host.instance_type(*id));
            Ok(Value::str(&format!("({repr}, '{id}', <class 'inmanta.execute.runtime.Instance'>)")))
        }
        // Lists and dicts are proxies too: `_get_instance` is the wrapped Python object.
        value @ (Value::List(_) | Value::Dict(_)) => {
            let class = if matches!(value, Value::List(_)) { "list" } else { "dict" };
            // The middle part is Python's `id()`, a memory address: weft has none to show.
            let repr = pyfmt::dsl_repr(value, ctx.host);
            Ok(Value::str(&format!("({repr}, '0', <class '{class}'>)")))
        }
        other => Err(Flow::Error(PluginError::external(
            "AttributeError",
            format!("'{}' object has no attribute '_get_instance'", pyfmt::plugin_type_name(other)),
        ))),
    }
}

fn count(ctx: &mut Ctx) -> NativeResult {
    match ctx.arg("item_list") {
        Value::List(items) => Ok(Value::Int(items.len() as i64)),
        Value::Dict(entries) => Ok(Value::Int(entries.len() as i64)),
        Value::Str(s) => Ok(Value::Int(s.chars().count() as i64)),
        other => Err(type_error(format!("object of type '{}' has no len()", pyfmt::plugin_type_name(other)))),
    }
}

fn list_len(ctx: &mut Ctx) -> NativeResult {
    if let Value::List(items) = ctx.arg("item_list")
        && items.iter().any(|i| matches!(i, Value::Unknown))
    {
        return Ok(Value::Unknown);
    }
    count(ctx)
}

/// A hashable view of a value, for `set` membership (1, 1.0 and True are the same key).
#[derive(PartialEq, Eq, Hash)]
enum HashKey {
    Null,
    Int(BigInt),
    Float(u64),
    Str(Arc<str>),
    Instance(u32),
}

fn hash_key(value: &Value) -> Result<HashKey, Flow> {
    Ok(match value {
        Value::Null(_) => HashKey::Null,
        Value::Bool(_) | Value::Int(_) | Value::BigInt(_) => {
            HashKey::Int(validate::to_bigint(value).unwrap_or_default())
        }
        Value::Float(f) => match num_traits::FromPrimitive::from_f64(*f) {
            Some(i) if f.fract() == 0.0 => HashKey::Int(i),
            _ => HashKey::Float(if *f == 0.0 { 0 } else { f.to_bits() }),
        },
        Value::Str(s) => HashKey::Str(s.clone()),
        Value::Instance(id) => HashKey::Instance(*id),
        Value::Unknown => return Err(Flow::Unknown),
        other => {
            let name = match other {
                Value::List(_) => "list",
                Value::Dict(_) => "dict",
                _ => pyfmt::plugin_type_name(other),
            };
            return Err(type_error(format!("unhashable type: '{name}'")));
        }
    })
}

fn unique(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("item_list")?;
    let mut seen = std::collections::HashSet::new();
    for item in items.iter() {
        if !seen.insert(hash_key(item)?) {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn flatten(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("item_list")?;
    let mut out = Vec::new();
    for item in items.iter() {
        match element(item)? {
            Value::List(inner) => {
                for v in inner.iter() {
                    out.push(element(v)?);
                }
            }
            Value::Str(s) => out.extend(s.chars().map(|c| Value::str(&c.to_string()))),
            Value::Dict(entries) => out.extend(entries.iter().map(|(k, _)| Value::Str(k.clone()))),
            other => {
                return Err(type_error(format!("'{}' object is not iterable", pyfmt::plugin_type_name(&other))));
            }
        }
    }
    Ok(list(out))
}

fn split(ctx: &mut Ctx) -> NativeResult {
    let s = ctx.str_arg("string_list")?;
    let delim = ctx.str_arg("delim")?;
    if delim.is_empty() {
        return Err(value_error("empty separator"));
    }
    // Without the separator, CPython's list holds the string itself.
    if !s.contains(delim) {
        return Ok(list(vec![ctx.arg("string_list").clone()]));
    }
    Ok(list(s.split(delim).map(Value::str).collect()))
}

fn length(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Int(ctx.str_arg("value")?.chars().count() as i64))
}

fn filter(ctx: &mut Ctx) -> NativeResult {
    let items = ctx.list_arg("values")?;
    let not_item = ctx.arg("not_item").clone();
    let mut out = Vec::new();
    for item in items.iter() {
        let item = element(item)?;
        if !item.py_eq(&not_item) {
            out.push(item);
        }
    }
    Ok(list(out))
}

fn dict_get(ctx: &mut Ctx) -> NativeResult {
    let dict = ctx.arg("dct").clone();
    subscript(&dict, &ctx.arg("key").clone())
}

fn contains(ctx: &mut Ctx) -> NativeResult {
    match (ctx.arg("dct"), ctx.arg("key")) {
        // `key in dct` on the proxy reads the value (`Mapping.__contains__` is `self[key]`),
        // so an Unknown value makes the result Unknown.
        (Value::Dict(entries), Value::Str(k)) => match entries.get(k) {
            Some(Value::Unknown) => Err(Flow::Unknown),
            found => Ok(Value::Bool(found.is_some())),
        },
        (Value::Dict(_), _) => Ok(Value::Bool(false)),
        (other, _) => Err(type_error(format!("argument of type '{}' is not iterable", pyfmt::plugin_type_name(other)))),
    }
}

fn getattribute(ctx: &mut Ctx) -> NativeResult {
    // The annotation allows only strings, but the plugin allows Unknowns too.
    let name = match ctx.arg("attribute_name") {
        Value::Str(name) => name.to_string(),
        other => {
            let class = pyfmt::plugin_type_name(other);
            return Err(type_error(format!("attribute name must be string, not '{class}'")));
        }
    };
    let default = ctx.arg("default_value").clone();
    let Value::Instance(id) = ctx.arg("entity").clone() else {
        // An Unknown (or any non-instance) has no such attribute: AttributeError, the default.
        return Ok(default);
    };
    match read_attribute(id, &name, ctx.host, true, &format!("entity.{name}")) {
        Ok(value) => Ok(value),
        Err(Flow::Error(PluginError::External { class, .. })) if class == "AttributeError" => Ok(default),
        Err(e) => Err(e),
    }
}

fn invert(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Bool(!ctx.arg("value").truthy()))
}

fn is_unknown(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Bool(matches!(ctx.arg("value"), Value::Unknown)))
}

fn is_instance(ctx: &mut Ctx) -> NativeResult {
    let cls = ctx.str_arg("cls")?.to_string();
    if ctx.host.type_exists(&cls) == Some(false) {
        // `ctx.get_type` raises `TypeNotFoundException(name, ...)` with a plain string where
        // it expects a located name: the exception's constructor fails first.
        return Err(Flow::Error(PluginError::external(
            "AttributeError",
            "'str' object has no attribute 'get_location'",
        )));
    }
    match ctx.arg("obj") {
        Value::Instance(id) => Ok(Value::Bool(ctx.host.is_instance_of(*id, &cls))),
        other => Err(Flow::Error(PluginError::external(
            "AttributeError",
            format!("'{}' object has no attribute '_get_instance'", pyfmt::plugin_type_name(other)),
        ))),
    }
}

fn familyof(ctx: &mut Ctx) -> NativeResult {
    let family = ctx.str_arg("family")?.to_string();
    let Value::Instance(member) = ctx.arg("member").clone() else {
        return Err(Flow::Error(PluginError::external("AttributeError", "object has no attribute 'name'")));
    };
    let name_of = |id: u32, host: &mut dyn PluginHost| read_attribute(id, "name", host, false, "member.name");
    if name_of(member, ctx.host)?.py_eq(&Value::str(&family)) {
        return Ok(Value::Bool(true));
    }
    let mut parent = member;
    loop {
        let next = match ctx.host.attribute(parent, "family") {
            Ok(Value::Null(_)) => break,
            Ok(Value::Unknown) => return Err(Flow::Unknown),
            Ok(Value::Instance(next)) => next,
            Ok(_) => break,
            Err(PluginError::Wrapped { kind: ErrorKind::OptionalValueException, .. }) => break,
            Err(e) => return Err(e.into()),
        };
        if name_of(parent, ctx.host)?.py_eq(&Value::str(&family)) {
            return Ok(Value::Bool(true));
        }
        parent = next;
    }
    Ok(Value::Bool(false))
}

// ---------------------------------------------------------------------------------------
// Environment and orchestrator.

/// Python's `int(text)`.
fn python_int(text: &str) -> Result<Value, Flow> {
    let t = text.trim();
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let valid = !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && !body.starts_with('_')
        && !body.ends_with('_')
        && !body.contains("__");
    let parsed =
        valid.then(|| BigInt::parse_bytes(t.replace('_', "").trim_start_matches('+').as_bytes(), 10)).flatten();
    parsed
        .map(Value::int)
        .ok_or_else(|| value_error(format!("invalid literal for int() with base 10: {}", str_repr(text))))
}

fn get_env(ctx: &mut Ctx) -> NativeResult {
    let name = ctx.str_arg("name")?;
    match ctx.host.env_var(name) {
        Some(v) => Ok(Value::str(&v)),
        None => match ctx.arg("default_value") {
            Value::Null(_) => Ok(Value::Unknown),
            v => Ok(v.clone()),
        },
    }
}

fn get_env_int(ctx: &mut Ctx) -> NativeResult {
    let name = ctx.str_arg("name")?;
    match ctx.host.env_var(name) {
        Some(v) => python_int(&v),
        None => match ctx.arg("default_value") {
            Value::Null(_) => Ok(Value::Unknown),
            Value::Str(s) => python_int(s),
            v if v.is_integral() => Ok(Value::int(validate::to_bigint(v).unwrap_or_default())),
            Value::Float(f) if f.is_finite() => {
                Ok(num_traits::FromPrimitive::from_f64(f.trunc()).map(Value::int).unwrap_or(Value::Int(0)))
            }
            other => Err(type_error(format!(
                "int() argument must be a string, a bytes-like object or a real number, not '{}'",
                pyfmt::plugin_type_name(other)
            ))),
        },
    }
}

/// The environment id from the compiler's configuration (`config.environment`, which the
/// reference also reads from `INMANTA_CONFIG_ENVIRONMENT`).
fn configured_environment(host: &dyn PluginHost) -> Option<String> {
    host.env_var("INMANTA_CONFIG_ENVIRONMENT").filter(|e| !e.is_empty())
}

const NO_ENVIRONMENT: &str = "The environment of this model should be configured in config>environment";

fn environment(ctx: &mut Ctx) -> NativeResult {
    configured_environment(ctx.host).map(|e| Value::str(&e)).ok_or_else(|| exception(NO_ENVIRONMENT))
}

/// weft compiles without an orchestrator: the name is not known.
fn environment_name(ctx: &mut Ctx) -> NativeResult {
    environment(ctx)?;
    Ok(Value::Unknown)
}

fn environment_server(ctx: &mut Ctx) -> NativeResult {
    let host = ctx.host.env_var("INMANTA_COMPILER_REST_TRANSPORT_HOST").unwrap_or_else(|| "localhost".into());
    Ok(Value::str(&host))
}

fn server_ca(ctx: &mut Ctx) -> NativeResult {
    let Some(path) = ctx.host.env_var("INMANTA_COMPILER_REST_TRANSPORT_SSL_CA_CERT_FILE").filter(|p| !p.is_empty())
    else {
        return Ok(Value::str(""));
    };
    read_text(Path::new(&path)).map(|s| Value::str(&s)).map_err(|_| exception(format!("{path} isn't a valid file")))
}

fn server_ssl(ctx: &mut Ctx) -> NativeResult {
    let ssl = ctx.host.env_var("INMANTA_COMPILER_REST_TRANSPORT_SSL");
    Ok(Value::Bool(ssl.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))))
}

/// Without an orchestrator there is no token to request (the reference returns an empty
/// string when authentication is off).
fn server_token(ctx: &mut Ctx) -> NativeResult {
    match ctx.host.env_var("INMANTA_COMPILER_REST_TRANSPORT_TOKEN").filter(|t| !t.is_empty()) {
        None => Ok(Value::str("")),
        Some(_) => Err(exception("Unable to get a valid token")),
    }
}

fn server_port(ctx: &mut Ctx) -> NativeResult {
    match ctx.host.env_var("INMANTA_COMPILER_REST_TRANSPORT_PORT") {
        Some(p) => python_int(&p),
        None => Ok(Value::Int(8888)),
    }
}

/// Facts come from the orchestrator. Without one, weft never knows a fact: the default when
/// one is given, else Unknown (what the reference returns when the server is not reachable);
/// without a configured environment the reference fails first.
///
/// With facts given ([`crate::Options::facts`]), they answer as the orchestrator would: the
/// fact of the resource's id (computed as the export computes it), else the default, else
/// Unknown. No environment is required then, because the facts stand in for the orchestrator
/// that the environment would name.
fn getfact(ctx: &mut Ctx) -> NativeResult {
    // The resource id comes first (`to_id`), so a value that is no resource fails even
    // without an orchestrator. A resource type whose id weft cannot compute only matters
    // when there are facts to look the id up in.
    let resource = ctx.arg("resource").clone();
    let id = facts::resource_id_if_computable(&resource, ctx.host)?;
    let Some(facts) = ctx.host.facts().cloned() else {
        if configured_environment(ctx.host).is_none() {
            return Err(exception(NO_ENVIRONMENT));
        }
        return Ok(default_or_unknown(ctx.arg("default_value")));
    };
    let id = match id {
        Some(id) => id,
        None => facts::resource_id(&resource, ctx.host)?,
    };
    match facts.get(&id, ctx.str_arg("fact_name")?) {
        Some(value) => Ok(value.clone()),
        None => Ok(default_or_unknown(ctx.arg("default_value"))),
    }
}

/// `getfact`'s answer for a fact nobody knows: the default unless it is `None`.
fn default_or_unknown(default: &Value) -> Value {
    match default {
        Value::Null(_) => Value::Unknown,
        v => v.clone(),
    }
}

// ---------------------------------------------------------------------------------------
// Files of modules.

/// `_extend_path`: a path that starts with `./` is in the module of the calling statement.
pub(crate) fn extend_path(path: &str, host: &dyn PluginHost) -> Result<String, Flow> {
    extend_path_from(path, host.caller_namespace().as_deref(), host.modules())
}

/// [`extend_path`] for a call from `namespace` (`None`: a call without one).
fn extend_path_from(path: &str, namespace: Option<&str>, modules: &Modules) -> Result<String, Flow> {
    let Some(rest) = path.strip_prefix("./") else { return Ok(path.to_string()) };
    let Some(namespace) = namespace else {
        return Err(exception(format!("Unable to determine current module for path {path}")));
    };
    let module = namespace.split("::").next().unwrap_or_default();
    if module == "std" || modules.names().any(|m| m == module) {
        Ok(format!("{module}/{rest}"))
    } else {
        Err(exception(format!("Unable to determine current module for path {path}, called from {namespace}")))
    }
}

/// `determine_path`: `mod/rest` in a module's `kind` directory (`files`, `templates`).
pub(crate) fn module_path<'m>(path: &str, kind: &str, modules: &'m Modules) -> Result<ModulePath<'m>, Flow> {
    let (module, rest) = path.split_once('/').unwrap_or((path, ""));
    modules
        .locate(module, kind, rest)
        .ok_or_else(|| exception(format!("Module {module} does not exist for path {path}")))
}

fn source(ctx: &mut Ctx) -> NativeResult {
    let path = ctx.str_arg("path")?.to_string();
    let namespace = ctx.host.caller_namespace();
    let modules = ctx.host.modules().clone();
    Ok(Value::str(&file_content(&modules, namespace.as_deref(), "files", &path)?))
}

/// std's `get_file_content(ctx, module_dir, path)`: the text of the file `path` (`mod/rest`,
/// or `./rest` in the module of `namespace`, the calling statement's) in the module's
/// `module_dir` directory (`files`, `templates`). `std::source` reads so, and so do Python
/// plugins that call the function of std's package.
pub(crate) fn file_content(
    modules: &Modules,
    namespace: Option<&str>,
    module_dir: &str,
    path: &str,
) -> Result<String, Flow> {
    let path = extend_path_from(path, namespace, modules)?;
    let file = module_path(&path, module_dir, modules)?;
    if !file.is_file() {
        return Err(exception(format!("{path} isn't a valid file ({})", file.display())));
    }
    match file.read_text() {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Flow::Error(PluginError::external(
            "UnicodeDecodeError",
            format!("'utf-8' codec can't decode {}", file.display()),
        ))),
        Err(e) => Err(Flow::Error(PluginError::external("OSError", e.to_string()))),
    }
}

/// The marker string fs handlers recognise, with the file's absolute path (for an embedded
/// module, see [`crate::modules`]).
fn file(ctx: &mut Ctx) -> NativeResult {
    let path = extend_path(ctx.str_arg("path")?, ctx.host)?;
    let modules = ctx.host.modules().clone();
    let file = module_path(&path, "files", &modules)?;
    if !file.is_file() {
        return Err(exception(format!("{} isn't a valid file", file.display())));
    }
    Ok(Value::str(&format!("imp-module-source:file://{}", file.absolute())))
}

/// The names of the regular files in the directory, sorted (Python's `os.listdir` order is
/// the file system's, which is not reproducible).
fn list_files(ctx: &mut Ctx) -> NativeResult {
    let path = extend_path(ctx.str_arg("path")?, ctx.host)?;
    let modules = ctx.host.modules().clone();
    let dir = module_path(&path, "files", &modules)?;
    let names = dir.list_files().map_err(|e| {
        let (class, errno) = match e.kind() {
            std::io::ErrorKind::NotFound => ("FileNotFoundError", "[Errno 2] No such file or directory"),
            std::io::ErrorKind::NotADirectory => ("NotADirectoryError", "[Errno 20] Not a directory"),
            std::io::ErrorKind::PermissionDenied => ("PermissionError", "[Errno 13] Permission denied"),
            _ => ("OSError", "[Errno 5] Input/output error"),
        };
        Flow::Error(PluginError::external(class, format!("{errno}: {}", str_repr(&dir.display()))))
    })?;
    Ok(list(names.iter().map(|n| Value::str(n)).collect()))
}

// ---------------------------------------------------------------------------------------
// Types, strings, serialization.

fn validate_type(ctx: &mut Ctx) -> NativeResult {
    let fq = ctx.str_arg("fq_type_name")?.to_string();
    let params = match ctx.arg("validation_parameters") {
        Value::Null(_) => None,
        v => Some(v.clone()),
    };
    validate::validate_type(&fq, ctx.arg("value"), params.as_ref()).map(Value::Bool)
}

fn is_base64_encoded(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Bool(validate::is_base64(ctx.str_arg("s")?)))
}

fn json_loads(ctx: &mut Ctx) -> NativeResult {
    json::loads(ctx.str_arg("s")?).map_err(Flow::Error)
}

fn json_dumps(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::str(&json::dumps(ctx.arg("obj"), ctx.host)?))
}

fn format_plugin(ctx: &mut Ctx) -> NativeResult {
    let template = ctx.str_arg("__string")?.to_string();
    let args = std::mem::take(&mut ctx.args.varargs);
    let kwargs = std::mem::take(&mut ctx.args.varkwargs);
    for v in args.iter().chain(kwargs.iter().map(|(_, v)| v)) {
        if matches!(v, Value::Unknown) {
            return Err(Flow::Unknown);
        }
    }
    format::str_format_value(&template, &args, &kwargs, ctx.host)
}

fn unique_file(ctx: &mut Ctx) -> NativeResult {
    let digest = md5_hex(ctx.str_arg("seed")?.as_bytes());
    Ok(Value::str(&format!("{}{digest}{}", ctx.str_arg("prefix")?, ctx.str_arg("suffix")?)))
}

/// The hex MD5 digest (RFC 1321).
fn md5_hex(data: &[u8]) -> String {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14,
        20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6,
        10, 15, 21,
    ];
    let k: Vec<u32> = (0..64).map(|i| ((i as f64 + 1.0).sin().abs() * 4294967296.0) as u32).collect();
    let mut state: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut message = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bit_len.to_le_bytes());
    for chunk in message.chunks(64) {
        let m: Vec<u32> = chunk.chunks(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        let [mut a, mut b, mut c, mut d] = state;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
    state.iter().flat_map(|w| w.to_le_bytes()).map(|b| format!("{b:02x}")).collect()
}

fn hostname(ctx: &mut Ctx) -> NativeResult {
    let fqdn = ctx.str_arg("fqdn")?;
    // `fqdn.split(".")[0]`: the string itself when it has no dot, as in CPython.
    if !fqdn.contains('.') {
        return Ok(ctx.arg("fqdn").clone());
    }
    Ok(Value::str(fqdn.split('.').next().unwrap_or("")))
}

// ---------------------------------------------------------------------------------------
// Network addresses.

fn interface_arg(ctx: &Ctx, name: &str) -> Result<(net::Addr, u32), Flow> {
    let text = ctx.str_arg(name)?;
    net::parse_with_prefix(text, true, true)
        .ok_or_else(|| value_error(format!("{} does not appear to be an IPv4 or IPv6 interface", str_repr(text))))
}

fn prefixlength_to_netmask(ctx: &mut Ctx) -> NativeResult {
    let prefix = ctx.int_arg("prefixlen")?;
    match prefix.to_u32().filter(|p| *p <= 32) {
        Some(p) => Ok(Value::str(&net::Addr::V4(0).with_value(net::Addr::V4(0).netmask(p)).to_string())),
        None => Err(value_error(format!("'255.255.255.255/{prefix}' does not appear to be an IPv4 or IPv6 interface"))),
    }
}

fn prefixlen(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::Int(interface_arg(ctx, "addr")?.1 as i64))
}

fn network_address(ctx: &mut Ctx) -> NativeResult {
    let (addr, prefix) = interface_arg(ctx, "addr")?;
    Ok(Value::str(&addr.with_value(addr.value() & addr.netmask(prefix)).to_string()))
}

fn netmask(ctx: &mut Ctx) -> NativeResult {
    let (addr, prefix) = interface_arg(ctx, "addr")?;
    Ok(Value::str(&addr.with_value(addr.netmask(prefix)).to_string()))
}

fn ipindex(ctx: &mut Ctx) -> NativeResult {
    let text = ctx.str_arg("addr")?;
    let Some((addr, prefix)) = net::parse_network(text, true, true) else {
        return Err(value_error(format!("{} does not appear to be an IPv4 or IPv6 network", str_repr(text))));
    };
    let position = ctx.int_arg("position")?;
    let size = BigInt::from(1u8) << (addr.bits() - prefix);
    let index = if position.is_negative() { &size + &position } else { position };
    if index.is_negative() || index >= size {
        return Err(Flow::Error(PluginError::external("IndexError", "address out of range")));
    }
    let value = (BigInt::from(addr.value()) + index).to_u128().unwrap_or(0);
    let address = addr.with_value(value).to_string();
    Ok(Value::str(&if ctx.arg("keep_prefix").truthy() { format!("{address}/{prefix}") } else { address }))
}

fn add_to_ip(ctx: &mut Ctx) -> NativeResult {
    let text = ctx.str_arg("addr")?;
    let Some(addr) = net::parse_addr(text, true, true) else {
        return Err(value_error(format!("{} does not appear to be an IPv4 or IPv6 address", str_repr(text))));
    };
    let n = ctx.int_arg("n")?;
    let sum = BigInt::from(addr.value()) + n;
    let max = (BigInt::from(1u8) << addr.bits()) - 1;
    if sum.is_negative() || sum > max {
        let version = if addr.bits() == 32 { "IPv4" } else { "IPv6" };
        let bound = if sum.is_negative() { "< 0".to_string() } else { format!(">= 2**{}", addr.bits()) };
        return Err(Flow::Error(PluginError::external(
            "AddressValueError",
            format!("{sum} ({bound}) is not permitted as an {version} address"),
        )));
    }
    let value = sum.to_u128().unwrap_or(0);
    let result = match addr {
        net::Addr::V6(_, scope) => net::Addr::V6(value, scope),
        v4 => v4.with_value(value),
    };
    Ok(Value::str(&result.to_string()))
}

fn ip_address_from_interface(ctx: &mut Ctx) -> NativeResult {
    Ok(Value::str(&interface_arg(ctx, "ip_interface")?.0.to_string()))
}

// ---------------------------------------------------------------------------------------
// References.

fn reference(class: &str, args: Vec<(String, Value)>) -> Value {
    Value::Reference(Arc::new(Reference { class: class.to_string(), module: "inmanta_plugins.std".to_string(), args }))
}

fn create_int_reference(ctx: &mut Ctx) -> NativeResult {
    Ok(reference("IntReference", vec![("value".into(), ctx.arg("value").clone())]))
}

fn create_environment_reference(ctx: &mut Ctx) -> NativeResult {
    Ok(reference("EnvironmentReference", vec![("name".into(), ctx.arg("name").clone())]))
}

/// A `FactReference` to a fact of the resource in the configured environment. The reference
/// writes `str(None)` when no environment is configured, and mocked facts only in its test
/// harness: weft's facts stand in for the orchestrator, which resolves the reference at
/// deploy time.
fn create_fact_reference(ctx: &mut Ctx) -> NativeResult {
    let resource = ctx.arg("resource").clone();
    let id = facts::resource_id(&resource, ctx.host)?;
    let environment = configured_environment(ctx.host).unwrap_or_else(|| "None".to_string());
    Ok(reference(
        "FactReference",
        vec![
            ("environment".into(), Value::str(&environment)),
            ("resource_id".into(), Value::str(&id)),
            ("fact_name".into(), ctx.arg("fact_name").clone()),
            ("mocked_facts".into(), Value::NULL),
        ],
    ))
}

// ---------------------------------------------------------------------------------------
// `type`.

/// `getattr(value, name)` on a value as a plugin receives it: an instance's attribute, and
/// Python's `AttributeError` for anything else (lists and dicts are proxies, which look the
/// name up as an attribute of the wrapped object).
fn python_getattr(value: &Value, name: &str, host: &mut dyn PluginHost, path: &str) -> Result<Value, Flow> {
    let class = match value {
        Value::Instance(id) => return read_attribute(*id, name, host, false, path),
        Value::Unknown => return Err(Flow::Unknown),
        Value::List(_) => return Err(no_get_attribute("list")),
        Value::Dict(_) => return Err(no_get_attribute("dict")),
        other => pyfmt::plugin_type_name(other),
    };
    Err(Flow::Error(PluginError::external("AttributeError", format!("'{class}' object has no attribute '{name}'"))))
}

/// `obj.value.type().__definition__`: no value a model holds can be called, so this ends in
/// an error, or in Unknown when an attribute on the way is Unknown.
fn type_plugin(ctx: &mut Ctx) -> NativeResult {
    let obj = ctx.arg("obj").clone();
    let value = python_getattr(&obj, "value", ctx.host, "obj.value")?;
    let method = python_getattr(&value, "type", ctx.host, "obj.value.type")?;
    Err(type_error(format!("'{}' object is not callable", pyfmt::plugin_type_name(&method))))
}

// ---------------------------------------------------------------------------------------
// Passwords.

/// The password file of std's data directory, as `Context.get_data_dir` names it.
fn password_file(host: &dyn PluginHost) -> std::path::PathBuf {
    host.data_dir().join("std").join("passwordfile.txt")
}

/// `get_passwords`: `id=password` lines, both sides stripped; lines of two characters or
/// fewer are skipped, a longer line without `=` is Python's `ValueError`. A missing file has
/// no passwords.
fn read_passwords(file: &Path) -> Result<Vec<(String, String)>, Flow> {
    let text = match read_text(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(Flow::Error(PluginError::external(
                "UnicodeDecodeError",
                format!("'utf-8' codec can't decode {}", file.display()),
            )));
        }
        Err(e) => return Err(Flow::Error(PluginError::external("OSError", format!("{}: {e}", file.display())))),
    };
    let mut records: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.chars().count() <= 2 {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(value_error("substring not found"));
        };
        let (key, value) = (key.trim().to_string(), value.trim().to_string());
        match records.iter_mut().find(|(k, _)| *k == key) {
            Some(record) => record.1 = value,
            None => records.push((key, value)),
        }
    }
    Ok(records)
}

/// The password id, which must not contain `=`.
fn password_id(ctx: &Ctx) -> Result<String, Flow> {
    let id = ctx.str_arg("pw_id")?;
    if id.contains('=') {
        return Err(exception("The password id cannot contain ="));
    }
    Ok(id.to_string())
}

fn password(ctx: &mut Ctx) -> NativeResult {
    let id = password_id(ctx)?;
    let file = password_file(ctx.host);
    match read_passwords(&file)?.into_iter().find(|(k, _)| *k == id) {
        Some((_, password)) => Ok(Value::str(&password)),
        None => Err(exception(format!("Password {id} does not exist in file {}", file.display()))),
    }
}

/// The stored password, or a new one of `length` random letters and digits (from the
/// operating system's random source, as Python's `SystemRandom`), stored for next time.
fn generate_password(ctx: &mut Ctx) -> NativeResult {
    let id = password_id(ctx)?;
    let length = ctx.int_arg("length")?;
    let file = password_file(ctx.host);
    let mut records = read_passwords(&file)?;
    if let Some((_, password)) = records.iter().find(|(k, _)| *k == id) {
        return Ok(Value::str(password));
    }
    let length = length.to_usize().unwrap_or(if length.is_negative() { 0 } else { usize::MAX });
    let password = random_alphanumeric(length)?;
    records.push((id, password.clone()));
    let text: String = records.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    write_passwords(&file, &text)
        .map_err(|e| Flow::Error(PluginError::external("OSError", format!("{}: {e}", file.display()))))?;
    Ok(Value::str(&password))
}

/// Writes the password file, creating its directory; through a temporary file renamed over
/// it, so an interrupted write never leaves a truncated file. The reference writes the file in
/// place, so its mode and a symbolic link to it stay as the operator made them, and so do they
/// here: the file a link points to is the one replaced, and the new content gets the old
/// file's mode (a store made readable by its owner only stays so). A new file gets the
/// process's default mode, as the reference's `open` gives it.
fn write_passwords(file: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let target = match std::fs::canonicalize(file) {
        Ok(target) => target,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => file.to_path_buf(),
        Err(e) => return Err(e),
    };
    std::fs::create_dir_all(target.parent().unwrap_or(Path::new(".")))?;
    let mode = std::fs::metadata(&target).ok().map(|m| m.permissions().mode() & 0o7777);
    crate::apply::atomic::write_file(
        &target,
        text.as_bytes(),
        crate::apply::atomic::FileAttributes { mode, ..Default::default() },
    )
}

/// `length` characters drawn uniformly from letters and digits, with bytes of
/// `/dev/urandom` (rejection sampling keeps the draw uniform).
fn random_alphanumeric(length: usize) -> Result<String, Flow> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // The largest multiple of the alphabet's size that fits in a byte.
    const LIMIT: u8 = (256 / ALPHABET.len() * ALPHABET.len()) as u8;
    if length > 1 << 20 {
        return Err(Flow::Error(PluginError::external("MemoryError", "")));
    }
    let random_error = |e: std::io::Error| {
        Flow::Error(PluginError::external("NotImplementedError", format!("no random source: /dev/urandom: {e}")))
    };
    let mut source = std::fs::File::open("/dev/urandom").map_err(random_error)?;
    let mut out = String::with_capacity(length);
    let mut buffer = [0u8; 64];
    while out.len() < length {
        std::io::Read::read_exact(&mut source, &mut buffer).map_err(random_error)?;
        for byte in buffer.iter().filter(|b| **b < LIMIT) {
            if out.len() == length {
                break;
            }
            out.push(char::from(ALPHABET[usize::from(*byte) % ALPHABET.len()]));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_known_digests() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"The quick brown fox jumps over the lazy dog"), "9e107d9d372bb6826bd81d3542a419d6");
        assert_eq!(md5_hex(&[b'a'; 100]), "36a92cc94a9e0fa21f625f8bfb007adf");
    }

    #[test]
    fn python_int_parses_like_python() {
        assert_eq!(python_int(" 42 ").ok().map(|v| v.py_repr()), Some("42".into()));
        assert_eq!(python_int("-1_000").ok().map(|v| v.py_repr()), Some("-1000".into()));
        assert!(python_int("4.2").is_err());
        assert!(python_int("1__0").is_err());
    }
}

#[cfg(test)]
mod module_native_tests {
    use super::*;

    #[test]
    fn quoting_is_pythons() {
        // Expected values from CPython 3.12's subprocess.list2cmdline and shlex.quote.
        assert_eq!(list2cmdline(&["sh", "-c", "echo hi"]), r#"sh -c "echo hi""#);
        assert_eq!(list2cmdline(&["sh", "-c", r#"a "b" c\"#]), r#"sh -c "a \"b\" c\\""#);
        assert_eq!(list2cmdline(&["sh", "-c", ""]), r#"sh -c """#);
        assert_eq!(shlex_quote("plain-word_1.2/x"), "plain-word_1.2/x");
        assert_eq!(shlex_quote("it's"), r#"'it'"'"'s'"#);
        assert_eq!(shlex_quote(""), "''");
    }
}
