//! Temporary stand-in used while the plugin module is rewritten.
use std::path::PathBuf;
use weft_ir::ErrorKind;
use weft_ir::plugin::PluginSignature;
use weft_ir::value::Value;
#[derive(Clone, Debug)]
pub enum PluginError { Unset(u32), External { class: String, message: String }, Explicit(String), Wrapped { kind: ErrorKind, message: String }, Type(String), Reference(String), Runtime(String) }
pub trait PluginHost {
    fn print(&mut self, text: &str);
    fn env_var(&self, name: &str) -> Option<String>;
    fn lookup(&mut self, name: &str) -> Result<Value, PluginError>;
    fn attribute(&mut self, instance: u32, name: &str) -> Result<Value, PluginError>;
    fn instance_type(&self, instance: u32) -> String;
    fn is_instance_of(&self, instance: u32, entity: &str) -> bool;
    fn instance_display(&self, instance: u32) -> String;
    fn module_dir(&self, module: &str) -> Option<PathBuf>;
}
pub fn call(signature: &PluginSignature, args: Vec<Value>, _kwargs: Vec<(String, Value)>, host: &mut dyn PluginHost) -> Result<Value, PluginError> {
    if args.iter().any(|a| matches!(a, Value::Unknown)) && !signature.allow_unknown { return Ok(Value::Unknown); }
    match signature.name.as_str() {
        "print" => {
            let v = &args[0];
            let text = match v { Value::Str(s) => s.to_string(), Value::List(_) | Value::Dict(_) => format!("@{}", v.repr_with("null", &|i| host.instance_display(i))), Value::Instance(i) => host.instance_display(*i), other => other.py_repr() };
            host.print(&text); Ok(Value::Null)
        }
        "validate_type" => Ok(Value::Bool(true)),
        "upper" => match &args[0] { Value::Str(s) => Ok(Value::str(&s.to_uppercase())), _ => Ok(Value::Null) },
        "hostname" => match &args[0] { Value::Str(s) => Ok(Value::str(s.split('.').next().unwrap_or(""))), _ => Ok(Value::Null) },
        "json_dumps" => Ok(Value::str(&args[0].py_repr())),
        "sequence" => match &args[0] { Value::Int(n) => Ok(Value::List(std::sync::Arc::from((0..*n).map(Value::Int).collect::<Vec<_>>()))), _ => Ok(Value::Null) },
        "len" | "count" => match &args[0] { Value::List(l) => Ok(Value::Int(l.len() as i64)), Value::Str(s) => Ok(Value::Int(s.chars().count() as i64)), _ => Ok(Value::Int(0)) },
        _ => Err(PluginError::External { class: "NotImplementedError".into(), message: "stub".into() }),
    }
}
