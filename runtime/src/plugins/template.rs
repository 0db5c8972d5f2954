//! `std::template`: Jinja2 templates rendered with minijinja, with the reference's
//! environment: `StrictUndefined`, no auto-escaping, every plugin as a filter named with dots
//! (`std.upper`), and variables resolved lazily in the caller's scope.
//!
//! Values reach the template the way the reference's `JinjaDynamicProxy` presents them:
//! instances are objects whose attributes are read from the host when used, DSL lists and
//! dicts are objects that print as `@[...]`/`@{...}`, null is `None`, and output is
//! Python's `str()` of each value (`True`, `None`, float repr).
//!
//! minijinja is not Jinja2: [`filters`] gives it Jinja2's filters, tests and globals where
//! they differ or are missing, and [`pycompat`] the Python methods templates call on values
//! (`docs/templates.md` is the resulting feature matrix).
//!
//! minijinja's objects and callbacks must be `'static` and `Send`, so they cannot hold the
//! host. During a render the host sits in a thread-local frame instead ([`Frame`]), and the
//! objects reach it through [`with_host`]; errors raised inside (an unset variable, an Unknown)
//! are kept in the frame and take precedence over whatever minijinja reports afterwards, as
//! the first Python exception would.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, ValueKind};
use minijinja::{AutoEscape, Environment, Error as MjError, ErrorKind as MjErrorKind, UndefinedBehavior};
use num_bigint::BigInt;
use weft_ir::ErrorKind;
use weft_ir::value::{Value, float_repr, str_repr};

use super::registry::NativePlugin;
use super::std_plugins::{self, Ctx};
use super::{Flow, NativeResult, PluginError, PluginHost, pyfmt};

mod filters;
mod pycompat;

type MjValue = minijinja::Value;

/// The state of one render on this thread.
struct Frame {
    /// The host, while nobody uses it (taken out by [`with_host`] during a use).
    host: Option<*mut (dyn PluginHost + 'static)>,
    /// The first error raised inside the render.
    pending: Option<Flow>,
    /// The message about the last variable or attribute that was looked up and not found.
    undefined: Option<String>,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static BASE: Environment<'static> = base_environment();
}

/// Keeps the host borrowed while its pointer sits in the thread-local frame.
struct RenderGuard<'h> {
    _host: PhantomData<&'h mut dyn PluginHost>,
}

impl<'h> RenderGuard<'h> {
    fn enter(host: &'h mut dyn PluginHost) -> Self {
        let ptr: *mut (dyn PluginHost + 'h) = host;
        // SAFETY: only the lifetime bound of the trait object changes (same layout). The
        // pointer is dereferenced only by `with_host` while this guard is alive, and the guard
        // holds the `&'h mut` borrow for its whole life, so the host outlives every use.
        let ptr: *mut (dyn PluginHost + 'static) = unsafe { std::mem::transmute(ptr) };
        FRAMES.with_borrow_mut(|frames| frames.push(Frame { host: Some(ptr), pending: None, undefined: None }));
        RenderGuard { _host: PhantomData }
    }

    fn pending(&self) -> Option<Flow> {
        FRAMES.with_borrow_mut(|frames| frames.last_mut().and_then(|f| f.pending.take()))
    }

    fn undefined_message(&self) -> Option<String> {
        FRAMES.with_borrow(|frames| frames.last().and_then(|f| f.undefined.clone()))
    }
}

impl Drop for RenderGuard<'_> {
    fn drop(&mut self) {
        FRAMES.with_borrow_mut(|frames| frames.pop());
    }
}

/// Runs `f` with the host of the current render. The pointer is taken out of the frame for
/// the duration, so a nested use (which would alias it) finds none and fails instead.
fn with_host<R>(f: impl FnOnce(&mut dyn PluginHost) -> R) -> Result<R, Flow> {
    let ptr = FRAMES.with_borrow_mut(|frames| frames.last_mut().and_then(|frame| frame.host.take()));
    let Some(ptr) = ptr else {
        return Err(Flow::Error(PluginError::external("RuntimeError", "template host is not available here")));
    };
    // SAFETY: the pointer comes from the `&mut dyn PluginHost` that the `RenderGuard` of the
    // current frame borrows, so it is valid. It was taken out of the frame above, so no other
    // reference to the host exists until it is put back below.
    let host = unsafe { &mut *ptr };
    let result = f(host);
    FRAMES.with_borrow_mut(|frames| {
        if let Some(frame) = frames.last_mut() {
            frame.host = Some(ptr);
        }
    });
    Ok(result)
}

/// Keeps the first error raised during the render.
fn record(flow: Flow) {
    FRAMES.with_borrow_mut(|frames| {
        if let Some(frame) = frames.last_mut()
            && frame.pending.is_none()
        {
            frame.pending = Some(flow);
        }
    });
}

fn note_undefined(name: &str) {
    note_undefined_message(format!("'{name}' is undefined"));
}

/// Keeps the message of the last undefined value, which Jinja2 reports when it is used.
fn note_undefined_message(message: String) {
    FRAMES.with_borrow_mut(|frames| {
        if let Some(frame) = frames.last_mut() {
            frame.undefined = Some(message);
        }
    });
}

/// An error that stops minijinja; the recorded one is what the call reports.
fn abort() -> MjError {
    MjError::new(MjErrorKind::InvalidOperation, "plugin error")
}

/// `std::template(path, **kwargs)`.
pub(crate) fn template_plugin(ctx: &mut Ctx) -> NativeResult {
    let path = match ctx.args.get("path") {
        Some(Value::Str(s)) => s.to_string(),
        _ => return Err(Flow::Error(PluginError::external("TypeError", "path must be a string"))),
    };
    let path = std_plugins::extend_path(&path, ctx.host)?;
    let kwargs = std::mem::take(&mut ctx.args.varkwargs);
    render(&path, kwargs, ctx.host)
}

/// Refuses the tags of Jinja2 extensions that minijinja parses but the reference's
/// environment, which loads no extension, does not: `{% do %}` (the `do` extension).
fn refuse_extension_tags(text: &str) -> Result<(), MjError> {
    let mut rest = text;
    while let Some(i) = rest.find(['{']) {
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("{#") {
            // A comment ends at its first `#}`.
            rest = after.find("#}").map_or("", |end| &after[end + 2..]);
            continue;
        }
        let Some(after) = rest.strip_prefix("{%") else {
            rest = &rest[1..];
            continue;
        };
        let tag = after.trim_start_matches(['-', '+']).trim_start();
        let name: String = tag.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        match name.as_str() {
            "do" => {
                return Err(MjError::new(
                    MjErrorKind::SyntaxError,
                    "Encountered unknown tag 'do'. Jinja2 needs the 'jinja2.ext.do' extension for it, which the reference does not load.",
                ));
            }
            // A raw block's content is text, up to its `endraw`.
            "raw" => rest = after.find("endraw").map_or("", |end| &after[end..]),
            _ => rest = after,
        }
    }
    Ok(())
}

fn template_not_found(name: &str) -> Flow {
    Flow::Error(PluginError::external("TemplateNotFound", name))
}

/// The templates of the std module compiled into weft (the frontend embeds its model).
const EMBEDDED_STD_TEMPLATES: &[(&str, &str)] =
    &[("host_uri.j2", include_str!("../../../frontend/std/templates/host_uri.j2"))];

/// Renders a template of a module (`mod/file.j2` is `templates/file.j2` in module `mod`).
/// With keyword arguments the template sees only those; without, the caller's scope.
pub(crate) fn render(path: &str, kwargs: Vec<(String, Value)>, host: &mut dyn PluginHost) -> NativeResult {
    // The loader must be `'static`; the modules are shared, so it holds its own handle.
    let modules = host.modules().clone();
    // A host that evaluates with its own registry has filters for its plugins too.
    let builtin = super::PluginRegistry::builtin();
    let extra_filters: Vec<(String, NativePlugin)> = if std::ptr::eq(host.registry(), builtin) {
        Vec::new()
    } else {
        host.registry()
            .plugins()
            .filter(|(qualified, _)| builtin.plugin(qualified).is_none())
            .map(|(qualified, native)| (qualified.to_string(), *native))
            .collect()
    };
    let guard = RenderGuard::enter(host);
    let mut env = BASE.with(Environment::clone);
    for (qualified, native) in extra_filters {
        add_filter(&mut env, &qualified, native);
    }
    env.set_loader(move |name: &str| -> Result<Option<String>, MjError> {
        let Some((module, rest)) = name.split_once('/') else { return Ok(None) };
        if rest.split('/').any(|segment| segment == "..") {
            return Ok(None);
        }
        let Some(file) = modules.locate(module, "templates", rest) else {
            // weft's own std is compiled into the binary, not read from a directory.
            return Ok((module == "std")
                .then(|| EMBEDDED_STD_TEMPLATES.iter().find(|(n, _)| *n == rest))
                .flatten()
                .map(|(_, text)| text.to_string()));
        };
        if !file.is_file() {
            return Ok(None);
        }
        match file.read_text() {
            Ok(text) => refuse_extension_tags(&text).map(|()| Some(text)),
            Err(e) => {
                record(Flow::Error(PluginError::external("OSError", format!("{}: {e}", file.display()))));
                Err(abort())
            }
        }
    });
    let root = MjValue::from_object(Root {
        // The reference's `PrefixLoader` loads a template under its name inside the module.
        template: path.split_once('/').map_or(path, |(_, name)| name).to_string(),
        kwargs: (!kwargs.is_empty()).then_some(kwargs),
        cache: Mutex::new(HashMap::new()),
    });
    let result = env.get_template(path).and_then(|template| template.render(root));
    if let Some(flow) = guard.pending() {
        return Err(flow);
    }
    match result {
        Ok(text) => Ok(Value::str(&text)),
        Err(e) => Err(map_error(&e, path, guard.undefined_message())),
    }
}

/// The reference's exception for a minijinja error.
fn map_error(e: &MjError, path: &str, undefined: Option<String>) -> Flow {
    // An error inside an included, imported or extended template comes wrapped in one naming
    // that template; Jinja2 raises the inner error itself.
    let mut e = e;
    while let Some(inner) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<MjError>()) {
        e = inner;
    }
    let detail = e.detail().map(str::to_string).unwrap_or_else(|| e.to_string());
    let error = match e.kind() {
        MjErrorKind::TemplateNotFound => return template_not_found(e.name().unwrap_or(path)),
        MjErrorKind::UndefinedError | MjErrorKind::UnknownMethod => PluginError::Wrapped {
            kind: ErrorKind::NotFoundException,
            message: match undefined {
                Some(message) if e.kind() == MjErrorKind::UndefinedError => message,
                _ => detail,
            },
        },
        // Calling an unknown name calls Jinja2's undefined, which raises as using it does.
        MjErrorKind::UnknownFunction => PluginError::Wrapped {
            kind: ErrorKind::NotFoundException,
            message: match detail.strip_suffix(" is unknown") {
                Some(name) => format!("'{name}' is undefined"),
                None => detail,
            },
        },
        MjErrorKind::SyntaxError if detail.starts_with("names starting with an underline") => {
            PluginError::external("TemplateAssertionError", detail)
        }
        MjErrorKind::SyntaxError | MjErrorKind::BadEscape | MjErrorKind::InvalidDelimiter => {
            PluginError::external("TemplateSyntaxError", detail)
        }
        MjErrorKind::UnknownFilter | MjErrorKind::UnknownTest => {
            PluginError::external("TemplateAssertionError", detail)
        }
        // Python's exceptions for what Python itself refuses: a call with the wrong
        // arguments, an operator on unsupported types, iterating what is no iterable.
        MjErrorKind::TooManyArguments | MjErrorKind::MissingArgument => PluginError::external("TypeError", detail),
        MjErrorKind::CannotUnpack => PluginError::external("ValueError", detail),
        MjErrorKind::InvalidOperation if detail.starts_with("tried to use") || detail.ends_with("is not iterable") => {
            PluginError::external("TypeError", detail)
        }
        MjErrorKind::InvalidOperation if detail.starts_with("unable to calculate") => {
            PluginError::external(arithmetic_error(&detail), detail)
        }
        _ => PluginError::external("TemplateRuntimeError", detail),
    };
    Flow::Error(error)
}

/// Python's exception for an arithmetic minijinja could not compute (`unable to calculate
/// 1 / 0`): a division by zero, or else a result out of minijinja's integer range, where
/// Python's integers would not have overflowed.
fn arithmetic_error(detail: &str) -> &'static str {
    let parts: Vec<&str> = detail.trim_start_matches("unable to calculate ").split(' ').collect();
    let zero = |s: &str| s.parse::<f64>().is_ok_and(|f| f == 0.0);
    match parts.as_slice() {
        [_, "/" | "//" | "%", rhs] if zero(rhs) => "ZeroDivisionError",
        [lhs, "**", _] if zero(lhs) => "ZeroDivisionError",
        _ => "OverflowError",
    }
}

fn base_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_debug(false);
    // Output is Python's `str()` of each value; inside `{% autoescape true %}` it is escaped
    // as MarkupSafe escapes it, unless it is already safe.
    env.set_formatter(|out, state, value| {
        let text = py_str(value);
        let text = if matches!(state.auto_escape(), AutoEscape::None) || value.is_safe() {
            text
        } else {
            filters::html_escape(&text)
        };
        out.write_str(&text).map_err(|_| MjError::new(MjErrorKind::WriteFailure, "cannot write output"))
    });
    env.set_unknown_method_callback(pycompat::python_method);
    filters::configure(&mut env);
    for (qualified, native) in super::PluginRegistry::builtin().plugins() {
        add_filter(&mut env, qualified, *native);
    }
    env
}

/// Registers a plugin as the filter `mod.name` (the reference registers every plugin of the
/// compile, with `::` replaced by `.`).
fn add_filter(env: &mut Environment<'static>, qualified: &str, native: NativePlugin) {
    let qualified = qualified.to_string();
    env.add_filter(qualified.replace("::", "."), move |args: Rest<MjValue>| filter_call(&qualified, &native, &args));
}

/// A plugin called as a filter: `{{ x | std.upper }}`.
fn filter_call(qualified: &str, native: &NativePlugin, args: &[MjValue]) -> Result<MjValue, MjError> {
    let mut values = Vec::with_capacity(args.len());
    for arg in args {
        if arg.is_kwargs() {
            record(Flow::Error(PluginError::external("TypeError", "safewrapper() got an unexpected keyword argument")));
            return Err(abort());
        }
        if arg.is_undefined() {
            return Err(MjError::new(MjErrorKind::UndefinedError, "undefined value passed to a filter"));
        }
        match from_jinja(arg) {
            Ok(v) => values.push(v),
            Err(flow) => {
                record(flow);
                return Err(abort());
            }
        }
    }
    let result = with_host(|host| native.call_python(qualified, values, host)).and_then(|r| r);
    match result.and_then(|value| to_jinja(value, &qualified.replace("::", "."))) {
        Ok(v) => Ok(v),
        Err(flow) => {
            record(flow);
            Err(abort())
        }
    }
}

// ---------------------------------------------------------------------------------------
// Values between weft and minijinja.

/// A DSL value converted for a template variable (`JinjaDynamicProxy.return_value`): a
/// reference is refused with a `PluginException`, an Unknown makes the call's result
/// Unknown.
fn to_jinja(value: Value, path: &str) -> Result<MjValue, Flow> {
    match value {
        Value::Reference(_) => {
            let repr = with_host(|h| pyfmt::plugin_repr(&value, h))?;
            Err(Flow::Error(PluginError::Explicit(format!(
                "Encountered reference in Jinja template for variable {path} (= `{repr}`)"
            ))))
        }
        other => nested_to_jinja(other, path),
    }
}

/// A value read through a proxy (an attribute, an element): a reference is an
/// `UnexpectedReference`.
fn nested_to_jinja(value: Value, path: &str) -> Result<MjValue, Flow> {
    Ok(match value {
        Value::Null(_) => MjValue::from(()),
        Value::Bool(b) => MjValue::from(b),
        Value::Int(i) => MjValue::from(i),
        Value::BigInt(ref i) => match i128::try_from(&**i) {
            Ok(v) => MjValue::from(v),
            Err(_) => MjValue::from_object(DslValue { value }),
        },
        Value::Float(f) => MjValue::from(f),
        Value::Str(s) => MjValue::from(s),
        Value::List(_) | Value::Dict(_) => MjValue::from_object(DslValue { value }),
        Value::Instance(id) => MjValue::from_object(InstanceObj { id }),
        Value::Unknown => return Err(Flow::Unknown),
        Value::Reference(_) => {
            return Err(with_host(|h| std_plugins::unexpected_reference(&value, path, h)).unwrap_or_else(|e| e));
        }
    })
}

/// A template value back in the DSL domain (filter arguments).
fn from_jinja(value: &MjValue) -> Result<Value, Flow> {
    if let Some(obj) = value.downcast_object_ref::<InstanceObj>() {
        return Ok(Value::Instance(obj.id));
    }
    if let Some(obj) = value.downcast_object_ref::<DslValue>() {
        return Ok(obj.value.clone());
    }
    if value.downcast_object_ref::<Missing>().is_some() {
        return Ok(Value::NULL);
    }
    let type_error = || {
        Flow::Error(PluginError::external("TypeError", format!("cannot pass a template {} to a plugin", value.kind())))
    };
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Value::NULL,
        ValueKind::Bool => Value::Bool(value.is_true()),
        ValueKind::Number if value.is_integer() => match i64::try_from(value.clone()) {
            Ok(i) => Value::Int(i),
            Err(_) => i128::try_from(value.clone()).map(|i| Value::int(BigInt::from(i))).map_err(|_| type_error())?,
        },
        ValueKind::Number => Value::Float(f64::try_from(value.clone()).map_err(|_| type_error())?),
        ValueKind::String => Value::str(value.as_str().unwrap_or("")),
        ValueKind::Seq | ValueKind::Iterable => {
            let items = value.try_iter().map_err(|_| type_error())?;
            Value::List(Arc::from(items.map(|v| from_jinja(&v)).collect::<Result<Vec<_>, _>>()?))
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter().map_err(|_| type_error())? {
                let item = value.get_item(&key).map_err(|_| type_error())?;
                let key: Arc<str> = match key.as_str() {
                    Some(s) => Arc::from(s),
                    None => Arc::from(py_str(&key)),
                };
                entries.push((key, from_jinja(&item)?));
            }
            Value::Dict(entries.into())
        }
        _ => return Err(type_error()),
    })
}

/// Python's `str()` of a template value.
fn py_str(value: &MjValue) -> String {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s.to_string(),
        _ => py_repr(value),
    }
}

/// Python's `repr()` of a template value.
fn py_repr(value: &MjValue) -> String {
    if let Some(obj) = value.downcast_object_ref::<InstanceObj>() {
        return obj.display();
    }
    if let Some(obj) = value.downcast_object_ref::<DslValue>() {
        return obj.display();
    }
    if value.downcast_object_ref::<Missing>().is_some() {
        return String::new();
    }
    if let Some(range) = value.downcast_object_ref::<filters::RangeObj>() {
        return range.repr();
    }
    if let Some(view) = value.downcast_object_ref::<filters::DictView>() {
        return view.repr();
    }
    if let Some(group) = value.downcast_object_ref::<filters::GroupTuple>() {
        return format!("({}, {})", py_repr(&group.grouper), py_repr(&group.list));
    }
    if value.is_tuple() {
        let items: Vec<String> = value.try_iter().map(|items| items.map(|v| py_repr(&v)).collect()).unwrap_or_default();
        return match items.as_slice() {
            [one] => format!("({one},)"),
            _ => format!("({})", items.join(", ")),
        };
    }
    if let Some(name) = filters::macro_name(value) {
        return format!("<Macro {}>", str_repr(&name));
    }
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if value.is_integer() => value.to_string(),
        ValueKind::Number => f64::try_from(value.clone()).map(float_repr).unwrap_or_else(|_| value.to_string()),
        ValueKind::String => str_repr(value.as_str().unwrap_or("")),
        ValueKind::Seq => match value.try_iter() {
            Ok(items) => format!("[{}]", items.map(|v| py_repr(&v)).collect::<Vec<_>>().join(", ")),
            Err(_) => value.to_string(),
        },
        ValueKind::Map => match value.try_iter() {
            Ok(keys) => {
                let entries: Vec<String> = keys
                    .map(|k| {
                        format!("{}: {}", py_repr(&k), value.get_item(&k).map(|v| py_repr(&v)).unwrap_or_default())
                    })
                    .collect();
                format!("{{{}}}", entries.join(", "))
            }
            Err(_) => value.to_string(),
        },
        _ => value.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Objects.

/// The template's context: each name is looked up in the caller's scope (or among the
/// keyword arguments only, when the call gives some).
#[derive(Debug)]
struct Root {
    /// The template's name, for `self`.
    template: String,
    kwargs: Option<Vec<(String, Value)>>,
    cache: Mutex<HashMap<String, Option<MjValue>>>,
}

impl Object for Root {
    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        let name = key.as_str()?;
        // Jinja2 binds `self` to the template itself, before any variable: in an
        // implementation it is never the instance.
        if name == "self" {
            return Some(MjValue::from_object(TemplateRef { name: self.template.clone() }));
        }
        if let Some(kwargs) = &self.kwargs {
            let value = kwargs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            return match value {
                Some(v) => nested_to_jinja(v, name).map_err(record).ok(),
                None => {
                    note_undefined(name);
                    None
                }
            };
        }
        if let Some(cached) = self.cache.lock().ok().and_then(|c| c.get(name).cloned()) {
            return cached;
        }
        let looked_up = match with_host(|h| h.lookup(name)) {
            Ok(result) => result,
            Err(flow) => {
                record(flow);
                return None;
            }
        };
        let converted = match looked_up {
            Ok(value) => match to_jinja(value, name) {
                Ok(v) => Some(v),
                Err(flow) => {
                    record(flow);
                    return None;
                }
            },
            Err(PluginError::Wrapped {
                kind: ErrorKind::NotFoundException | ErrorKind::OptionalValueException,
                ..
            }) => {
                note_undefined(name);
                None
            }
            Err(e) => {
                record(Flow::Error(e));
                return None;
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(name.to_string(), converted.clone());
        }
        converted
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::NonEnumerable
    }
}

/// Jinja2's `self`, a `TemplateReference`: it gives access to the template's blocks, which
/// these templates do not define, so every attribute of it is undefined.
#[derive(Debug)]
struct TemplateRef {
    name: String,
}

impl Object for TemplateRef {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        note_undefined_message(format!("'jinja2.runtime.TemplateReference object' has no attribute '{key}'"));
        None
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<TemplateReference {}>", str_repr(&self.name))
    }
}

/// An entity instance: attributes read from the host on use.
#[derive(Debug)]
struct InstanceObj {
    id: u32,
}

impl InstanceObj {
    fn display(&self) -> String {
        with_host(|h| h.instance_display(self.id)).unwrap_or_default()
    }
}

impl Object for InstanceObj {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        let name = key.as_str()?;
        let result = match with_host(|h| h.attribute(self.id, name)) {
            Ok(result) => result,
            Err(flow) => {
                record(flow);
                return None;
            }
        };
        match result {
            Ok(value) => nested_to_jinja(value, name).map_err(record).ok(),
            // `JinjaDynamicProxy` turns a missing attribute and an optional relation without
            // a value into a plain (lenient) `Undefined`.
            Err(PluginError::Wrapped {
                kind: ErrorKind::NotFoundException | ErrorKind::OptionalValueException,
                ..
            }) => Some(MjValue::from_object(Missing)),
            Err(e) => {
                record(Flow::Error(e));
                None
            }
        }
    }

    fn custom_cmp(self: &Arc<Self>, other: &minijinja::value::DynObject) -> Option<Ordering> {
        let other = other.downcast_ref::<Self>()?;
        Some(self.id.cmp(&other.id))
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// A DSL list or dict (or an int too big for minijinja), as the reference's proxies.
#[derive(Debug)]
struct DslValue {
    value: Value,
}

impl DslValue {
    fn display(&self) -> String {
        match &self.value {
            Value::List(_) | Value::Dict(_) => {
                with_host(|h| format!("@{}", pyfmt::dsl_repr(&self.value, h))).unwrap_or_default()
            }
            other => other.py_repr(),
        }
    }
}

impl Object for DslValue {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.value {
            Value::List(_) => ObjectRepr::Seq,
            Value::Dict(_) => ObjectRepr::Map,
            _ => ObjectRepr::Plain,
        }
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        let (element, path) = match &self.value {
            Value::List(items) => {
                let i = key.as_i64()?;
                let i = if i < 0 { i + items.len() as i64 } else { i };
                (items.get(usize::try_from(i).ok()?)?.clone(), format!("[{i}]"))
            }
            Value::Dict(entries) => {
                let k = key.as_str()?;
                (entries.get(k)?.clone(), format!("[{}]", str_repr(k)))
            }
            _ => return None,
        };
        nested_to_jinja(element, &path).map_err(record).ok()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match &self.value {
            Value::List(items) => Enumerator::Seq(items.len()),
            Value::Dict(entries) => Enumerator::Values(entries.iter().map(|(k, _)| MjValue::from(k.clone())).collect()),
            _ => Enumerator::NonEnumerable,
        }
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// Jinja2's plain `Undefined`: prints as nothing, is false, iterates as empty.
#[derive(Debug)]
struct Missing;

impl Object for Missing {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, _key: &MjValue) -> Option<MjValue> {
        None
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Empty
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}
