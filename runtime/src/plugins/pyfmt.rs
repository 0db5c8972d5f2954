//! How values print inside plugins, as Python prints the reference's objects.
//!
//! Two domains matter:
//!
//! * the DSL domain (the values themselves): `repr` of a list shows `null` for null, instances
//!   as the host displays them (`dsl_repr`, `dsl_str`); this is what messages about arguments
//!   and return values show;
//! * the plugin domain (what a Python plugin receives): lists and dicts are proxies whose
//!   `str()` is `@` followed by the DSL repr, null is `None` (`plugin_str`, `plugin_repr`);
//!   this is what `std::print` and `std::format` write.

use weft_ir::value::{Value, float_repr, str_repr};

use super::PluginHost;

/// `repr()` of a DSL value (`null` for null).
pub(crate) fn dsl_repr(value: &Value, host: &dyn PluginHost) -> String {
    value.repr_with("null", &|i| host.instance_display(i))
}

/// `str()` of a DSL value: strings as they are, `null` for null.
pub(crate) fn dsl_str(value: &Value, host: &dyn PluginHost) -> String {
    match value {
        Value::Str(s) => s.to_string(),
        other => dsl_repr(other, host),
    }
}

/// `str()` of the value as a plugin receives it (`print(x)` in a plugin).
pub(crate) fn plugin_str(value: &Value, host: &dyn PluginHost) -> String {
    match value {
        Value::Str(s) => s.to_string(),
        // std's `FactReference` is the only reference class with its own `__str__`.
        Value::Reference(r) if r.module == "inmanta_plugins.std" && r.class == "FactReference" => {
            let arg = |name: &str| {
                r.args.iter().find(|(n, _)| n == name).map(|(_, v)| plugin_str(v, host)).unwrap_or_default()
            };
            format!("FactReference[resource_id={},fact_name={}]", arg("resource_id"), arg("fact_name"))
        }
        other => plugin_repr(other, host),
    }
}

/// `repr()` of the value as a plugin receives it.
pub(crate) fn plugin_repr(value: &Value, host: &dyn PluginHost) -> String {
    match value {
        Value::Null(_) => "None".into(),
        Value::Str(s) => str_repr(s),
        Value::Float(f) => float_repr(*f),
        Value::List(_) | Value::Dict(_) => format!("@{}", dsl_repr(value, host)),
        Value::Instance(i) => host.instance_display(*i),
        other => dsl_repr(other, host),
    }
}

/// The Python type name of the value as a plugin receives it, for messages such as
/// `'int' object is not iterable`.
pub(crate) fn plugin_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null(_) => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) | Value::BigInt(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::List(_) => "SequenceProxy",
        Value::Dict(_) => "DictProxy",
        Value::Instance(_) => "DynamicProxy",
        Value::Unknown => "Unknown",
        Value::Reference(r) => match r.class.as_str() {
            "EnvironmentReference" => "EnvironmentReference",
            "IntReference" => "IntReference",
            _ => "Reference",
        },
    }
}

/// `str()` of a plain value without instances (`None` for null).
pub(crate) fn dsl_str_plain(value: &Value) -> String {
    match value {
        Value::Str(s) => s.to_string(),
        other => other.py_repr(),
    }
}
