//! The Python bridge: plugins that weft has no native implementation for (a module's own
//! Python plugins) run in a `python3` subprocess.
//!
//! The subprocess imports the module's plugin package with a minimal stand-in for
//! `inmanta.plugins` (the `@plugin` decorator, `Context`, `PluginException`), calls the
//! function with the arguments as JSON, and prints the result as JSON. Instances of
//! `std::Dataclass` entities are passed as their Python dataclass, built from the instance's
//! attributes, as the reference does. A call costs a process start, so it suits the occasional
//! user plugin; hot plugins belong in the native std.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value as Json, json};
use weft_ir::value::Value;

/// Runs in the subprocess. Reads one request on stdin, writes one response on stdout.
const DRIVER: &str = r#"
import dataclasses, importlib, json, sys, types, typing

inmanta = types.ModuleType("inmanta")
plugins = types.ModuleType("inmanta.plugins")

def plugin(function=None, **options):
    if callable(function):
        return function
    return lambda f: f

class Context:
    pass

class PluginException(Exception):
    def __init__(self, message=""):
        super().__init__(message)
        self.message = message

plugins.plugin = plugin
plugins.Context = Context
plugins.PluginException = PluginException
inmanta.plugins = plugins
sys.modules["inmanta"] = inmanta
sys.modules["inmanta.plugins"] = plugins

request = json.load(sys.stdin)
sys.path.insert(0, request["path"])

def decode(v):
    if isinstance(v, dict) and "__weft_dataclass__" in v:
        module = importlib.import_module(v["__weft_module__"])
        cls = getattr(module, v["__weft_dataclass__"])
        return cls(**{k: decode(x) for k, x in v["fields"].items()})
    if isinstance(v, dict):
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v

def encode(v):
    if dataclasses.is_dataclass(v):
        raise TypeError("returning a dataclass is not supported by weft's Python bridge")
    if isinstance(v, dict):
        return {str(k): encode(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [encode(x) for x in v]
    return v

try:
    module = importlib.import_module(request["module"])
    function = getattr(module, request["function"])
    result = function(*[decode(a) for a in request["args"]], **{k: decode(v) for k, v in request["kwargs"].items()})
    print(json.dumps({"ok": encode(result)}))
except PluginException as e:
    print(json.dumps({"plugin_error": e.message}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"#;

/// How a bridged call failed.
#[derive(Debug)]
pub enum BridgeError {
    /// The plugin raised a Python exception (class, message).
    Python(String, String),
    /// The plugin raised `PluginException`.
    Plugin(String),
    /// The bridge itself could not run the plugin.
    Unavailable(String),
}

/// A value for the bridge: how the evaluator hands over instances of dataclass entities.
pub enum BridgeValue {
    Plain(Value),
    Dataclass { module: String, class: String, fields: Vec<(String, BridgeValue)> },
}

/// Calls `function` of the Python module `module` (`inmanta_plugins.mod.sub`), whose
/// package root for `mod` is `module_root`.
pub fn call(
    module_root: &Path,
    module: &str,
    function: &str,
    args: Vec<BridgeValue>,
    kwargs: Vec<(String, BridgeValue)>,
) -> Result<Value, BridgeError> {
    let top = module.split('.').nth(1).unwrap_or_default();
    let sandbox = package_root(module_root, top).map_err(|e| BridgeError::Unavailable(e.to_string()))?;
    let request = json!({
        "path": sandbox.to_string_lossy(),
        "module": module,
        "function": function,
        "args": args.iter().map(to_json).collect::<Vec<_>>(),
        "kwargs": kwargs.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<serde_json::Map<_, _>>(),
    });
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BridgeError::Unavailable(format!("cannot run python3: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(request.to_string().as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| BridgeError::Unavailable(e.to_string()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let response: Json = serde_json::from_str(text.trim()).map_err(|_| {
        BridgeError::Unavailable(format!("python3 failed: {}", String::from_utf8_lossy(&output.stderr).trim()))
    })?;
    if let Some(v) = response.get("ok") {
        return Ok(from_json(v));
    }
    if let Some(m) = response.get("plugin_error") {
        return Err(BridgeError::Plugin(m.as_str().unwrap_or_default().to_string()));
    }
    Err(BridgeError::Python(
        response.get("error").and_then(Json::as_str).unwrap_or("Exception").to_string(),
        response.get("message").and_then(Json::as_str).unwrap_or_default().to_string(),
    ))
}

/// A directory where `inmanta_plugins.<top>` imports the module's plugin package: v1 modules
/// keep it in `plugins/`, v2 modules are the package directory itself.
fn package_root(module_root: &Path, top: &str) -> std::io::Result<PathBuf> {
    let package = if module_root.join("plugins").join("__init__.py").is_file() {
        module_root.join("plugins")
    } else {
        module_root.to_path_buf()
    };
    let dir = std::env::temp_dir().join(format!("weft-python-{}-{top}", std::process::id()));
    let ns = dir.join("inmanta_plugins");
    std::fs::create_dir_all(&ns)?;
    std::fs::write(ns.join("__init__.py"), "")?;
    let link = ns.join(top);
    if !link.exists() {
        #[cfg(unix)]
        std::os::unix::fs::symlink(std::fs::canonicalize(&package)?, &link)?;
        #[cfg(not(unix))]
        return Err(std::io::Error::other("the Python bridge needs symbolic links"));
    }
    Ok(dir)
}

fn to_json(v: &BridgeValue) -> Json {
    match v {
        BridgeValue::Plain(v) => plain_to_json(v),
        BridgeValue::Dataclass { module, class, fields } => json!({
            "__weft_dataclass__": class,
            "__weft_module__": module,
            "fields": fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<serde_json::Map<_, _>>(),
        }),
    }
}

fn plain_to_json(v: &Value) -> Json {
    match v {
        Value::Null | Value::Unknown | Value::Instance(_) | Value::Reference(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => json!(i),
        Value::BigInt(i) => serde_json::from_str(&i.to_string()).unwrap_or(Json::Null),
        Value::Float(f) => json!(f),
        Value::Str(s) => Json::String(s.to_string()),
        Value::List(items) => Json::Array(items.iter().map(plain_to_json).collect()),
        Value::Dict(entries) => Json::Object(entries.iter().map(|(k, v)| (k.to_string(), plain_to_json(v))).collect()),
    }
}

fn from_json(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => Value::str(s),
        Json::Array(items) => Value::List(Arc::from(items.iter().map(from_json).collect::<Vec<_>>())),
        Json::Object(map) => {
            Value::Dict(Arc::from(map.iter().map(|(k, v)| (Arc::from(k.as_str()), from_json(v))).collect::<Vec<_>>()))
        }
    }
}
