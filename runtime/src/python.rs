//! The Python bridge: plugins that weft has no native implementation for (a module's own
//! Python plugins) run in a `python3` subprocess.
//!
//! The subprocess imports the module's plugin package with a minimal stand-in for
//! `inmanta.plugins` (the `@plugin` decorator, `Context`, `PluginException`), calls the
//! function with the arguments as JSON, and prints the result as JSON. Instances of
//! `std::Dataclass` entities are passed as their Python dataclass, built from the instance's
//! attributes, as the reference does. A call costs a process start, so it suits the occasional
//! user plugin; hot plugins belong in the native std.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
/// package `inmanta_plugins.mod` is the directory `package` (see
/// [`crate::modules::Modules::python_dir`]).
///
/// Messages of the plugin and of Python name the package's files by their import path
/// (`inmanta_plugins/mod/__init__.py`), not by where they are on this host: the directory
/// differs between processes, and between a module on disk and one materialized from an
/// artifact, and the outcome must not.
pub fn call(
    sandboxes: &Sandboxes,
    package: &Path,
    module: &str,
    function: &str,
    args: Vec<BridgeValue>,
    kwargs: Vec<(String, BridgeValue)>,
) -> Result<Value, BridgeError> {
    let top = module.split('.').nth(1).unwrap_or_default();
    let sandbox = sandboxes.get(package, top).map_err(|e| BridgeError::Unavailable(e.to_string()))?;
    let scrub = Scrub::new(&sandbox, package, top);
    let request = json!({
        "path": sandbox.to_string_lossy(),
        "module": module,
        "function": function,
        "args": args.iter().map(to_json).collect::<Vec<_>>(),
        "kwargs": kwargs.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<serde_json::Map<_, _>>(),
    });
    // `-B`: no `__pycache__` written into the module's sources or a materialized package.
    let mut child = Command::new("python3")
        .arg("-B")
        .arg("-c")
        .arg(DRIVER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            BridgeError::Unavailable(format!(
                "cannot run python3: {e} (plugins implemented in Python need python3 on this host)"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(request.to_string().as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| BridgeError::Unavailable(e.to_string()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let response: Json = serde_json::from_str(text.trim()).map_err(|_| {
        BridgeError::Unavailable(format!(
            "python3 failed: {}",
            scrub.apply(String::from_utf8_lossy(&output.stderr).trim())
        ))
    })?;
    if let Some(v) = response.get("ok") {
        return Ok(from_json(v));
    }
    if let Some(m) = response.get("plugin_error") {
        return Err(BridgeError::Plugin(scrub.apply(m.as_str().unwrap_or_default())));
    }
    Err(BridgeError::Python(
        response.get("error").and_then(Json::as_str).unwrap_or("Exception").to_string(),
        scrub.apply(response.get("message").and_then(Json::as_str).unwrap_or_default()),
    ))
}

/// The host paths a message may contain, each with what it is replaced by.
struct Scrub {
    replacements: Vec<(String, String)>,
}

impl Scrub {
    fn new(sandbox: &Path, package: &Path, top: &str) -> Scrub {
        let mut replacements = Vec::new();
        let import_path = format!("inmanta_plugins/{top}");
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
        add(package, "", &import_path);
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
/// canonical package directory they import. Each is removed when the set is dropped, so a
/// host that evaluates again and again does not collect directories in its temporary
/// directory.
#[derive(Debug, Default)]
pub struct Sandboxes(Mutex<BTreeMap<(PathBuf, String), Sandbox>>);

/// A sandbox directory, removed when dropped. It holds a symbolic link to the package, which
/// the removal deletes without following.
#[derive(Debug)]
struct Sandbox {
    dir: PathBuf,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sandboxes {
    /// A directory where `inmanta_plugins.<top>` imports the package `package` (a link to
    /// it), made once per package, private to this user. Two modules with the same name in
    /// different places (two projects compiled by one process, a module on disk and the same
    /// module materialized from an artifact) get different sandboxes.
    fn get(&self, package: &Path, top: &str) -> std::io::Result<PathBuf> {
        let package = std::fs::canonicalize(package)?;
        let mut sandboxes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (package, top.to_string());
        if let Some(sandbox) = sandboxes.get(&key) {
            return Ok(sandbox.dir.clone());
        }
        let sandbox =
            Sandbox { dir: private_dir(&format!("weft-python-{}-{}", std::process::id(), file_name_part(top)))? };
        let ns = sandbox.dir.join("inmanta_plugins");
        std::fs::create_dir(&ns)?;
        std::fs::write(ns.join("__init__.py"), "")?;
        symlink(&key.0, &ns.join(top))?;
        let dir = sandbox.dir.clone();
        sandboxes.insert(key, sandbox);
        Ok(dir)
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
        Value::Dict(entries) => Json::Object(entries.iter().map(|(k, v)| (k.to_string(), plain_to_json(v))).collect()),
    }
}

fn from_json(v: &Json) -> Value {
    match v {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => Value::str(s),
        Json::Array(items) => Value::List(Arc::from(items.iter().map(from_json).collect::<Vec<_>>())),
        Json::Object(map) => Value::Dict(map.iter().map(|(k, v)| (Arc::from(k.as_str()), from_json(v))).collect()),
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
        let sandbox = sandboxes.get(&package, "m").unwrap();
        assert_eq!(sandboxes.get(&package, "m").unwrap(), sandbox, "one sandbox per package");
        let scrub = Scrub::new(&sandbox, &package, "m");
        let message = format!(
            "bad input in {}/inmanta_plugins/m/sub.py and {}/data.txt",
            sandbox.display(),
            std::fs::canonicalize(&package).unwrap().display()
        );
        assert_eq!(scrub.apply(&message), "bad input in inmanta_plugins/m/sub.py and inmanta_plugins/m/data.txt");
        // Another package of the same name gets its own sandbox.
        let other = scratch.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let other_sandbox = sandboxes.get(&other, "m").unwrap();
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
                &modules.python_dir("m").unwrap(),
                "inmanta_plugins.m",
                function,
                args,
                Vec::new(),
            )
        };
        let where_message = |modules: &Modules| match run(modules, "where", Vec::new()) {
            Err(BridgeError::Python(class, message)) => format!("{class}: {message}"),
            other => panic!("{other:?}"),
        };
        let from_disk = where_message(&on_disk);
        assert_eq!(from_disk, "ValueError: inmanta_plugins/m/__init__.py");
        std::fs::remove_dir_all(&root).unwrap();
        assert!(matches!(run(&embedded, "f", vec![BridgeValue::Plain(Value::Int(21))]), Ok(Value::Int(42))));
        assert_eq!(where_message(&embedded), from_disk);
    }
}
