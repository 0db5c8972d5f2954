//! Plugins: argument binding and checking as the reference does it, and the native
//! implementations of the std plugins.
//!
//! The evaluator calls [`call`] when a plugin call's arguments are complete. Everything the
//! plugin needs from the evaluation (printing, variables for templates, instance attributes)
//! goes through [`PluginHost`], which the evaluator implements.
//!
//! A call goes through the same steps as in the reference (`inmanta.plugins.Plugin.check_args`
//! and `inmanta.ast.statements.call.PluginFunction`):
//!
//! 1. `bind`: the arguments are matched with the parameters (count, missing, unexpected and
//!    repeated keywords, with the reference's messages) and each one that is not Unknown is
//!    validated against its annotation (`types`), which the reference resolves to a DSL type;
//! 2. a top-level Unknown argument makes the result Unknown without calling the plugin, unless
//!    the plugin allows unknowns;
//! 3. the native implementation, found in the host's [`PluginRegistry`], runs (std's are in
//!    `std_plugins`, `template`, `validate`);
//! 4. the returned value is validated against the return annotation.
//!
//! Error kinds, as the evaluator reports them (see [`PluginError`]):
//!
//! | variant | reference exception |
//! | --- | --- |
//! | `Runtime` | `RuntimeException` (bad argument count or keywords) |
//! | `Type` | `PluginTypeException` (cause `RuntimeException`/`TypingException`) |
//! | `Reference` | `PluginTypeException` with cause `UnexpectedReference` |
//! | `External` | `ExternalException` wrapping the Python exception `class` |
//! | `Explicit` | `ExplicitPluginException` |
//! | `Wrapped` | `WrappingRuntimeException` wrapping `kind` |
//! | `Unset` | not an error: suspend the call and run it again later |

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use weft_ir::ErrorKind;
use weft_ir::plugin::{PluginSignature, TypeAnnotation};
use weft_ir::value::Value;

use crate::modules::Modules;

mod bind;
mod facts;
mod format;
pub(crate) mod json;
mod net;
mod pyfmt;
mod registry;
mod std_plugins;
mod template;
mod titlecase;
mod types;
mod validate;

#[cfg(test)]
mod tests;

pub use facts::{Facts, FactsError};
pub use registry::{Call, NativeModule, NativePlugin, NativeResult, PluginRegistry, ReferenceType, RegistryError};

/// Why a plugin call did not produce a value.
#[derive(Clone, Debug)]
pub enum PluginError {
    /// The plugin read a variable or attribute that has no value yet (the host's cell id):
    /// the evaluator suspends the call and runs it again when the cell is ready.
    Unset(u32),
    /// The plugin raised a Python exception (`ExternalException` in the reference); `class` is
    /// the Python exception class (`AssertionError`, `IndexError`, `TemplateNotFound`).
    External { class: String, message: String },
    /// The plugin raised `PluginException` (`ExplicitPluginException`).
    Explicit(String),
    /// A compiler error happened inside the plugin (`WrappingRuntimeException` wrapping `kind`),
    /// such as an undefined variable in a template.
    Wrapped { kind: ErrorKind, message: String },
    /// An argument or the return value does not match its annotation (`PluginTypeException`),
    /// with the error the annotation's own check raised, which the reference chains under it
    /// (`Invalid value '1', expected string`; `None` where weft does not know its words).
    Type { message: String, cause: Option<Cause> },
    /// A reference passed for a parameter whose annotation does not allow one. The reference
    /// reports a `PluginTypeException` with the message carried here (`Value <...> for argument
    /// string of plugin std::upper is a reference. ...`), caused by an `UnexpectedReference`.
    Reference { message: String, cause: Option<Cause> },
    /// Bad arguments: count, unknown or repeated keyword (`RuntimeException`).
    Runtime(String),
}

/// The error a type's check raised for a value, which the reference chains under the plugin
/// type error that reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub kind: ErrorKind,
    pub message: String,
}

impl PluginError {
    /// The reference's exception kind for this error (the outer one; `Unset` has none and
    /// maps to `UnsetException`).
    pub fn kind(&self) -> ErrorKind {
        match self {
            PluginError::Unset(_) => ErrorKind::UnsetException,
            PluginError::External { .. } => ErrorKind::ExternalException,
            PluginError::Explicit(_) => ErrorKind::ExplicitPluginException,
            PluginError::Wrapped { .. } => ErrorKind::WrappingRuntimeException,
            PluginError::Type { .. } | PluginError::Reference { .. } => ErrorKind::PluginTypeException,
            PluginError::Runtime(_) => ErrorKind::RuntimeException,
        }
    }

    /// The message of the error itself (for `External`, `Wrapped`: the wrapped exception's).
    pub fn message(&self) -> String {
        match self {
            PluginError::Unset(cell) => format!("value of cell {cell} is not set yet"),
            PluginError::External { message, .. }
            | PluginError::Wrapped { message, .. }
            | PluginError::Explicit(message)
            | PluginError::Type { message, .. }
            | PluginError::Reference { message, .. }
            | PluginError::Runtime(message) => message.clone(),
        }
    }

    /// A Python exception of class `class` raised by the plugin.
    pub fn external(class: &str, message: impl Into<String>) -> PluginError {
        PluginError::External { class: class.to_string(), message: message.into() }
    }

    /// A Python `Exception` raised by the plugin.
    pub fn exception(message: impl Into<String>) -> PluginError {
        PluginError::external("Exception", message)
    }
}

/// What a plugin can ask of the evaluation that calls it.
pub trait PluginHost {
    /// Writes one `std::print` line (without the newline). The text may itself contain
    /// newlines when a multi-line string is printed.
    fn print(&mut self, text: &str);
    /// An environment variable of the compiling process.
    fn env_var(&self, name: &str) -> Option<String>;
    /// The value of a variable as the calling statement sees it (templates render with the
    /// caller's scope: in an implementation, the instance's attributes and `self`).
    /// `Err(PluginError::Unset)` when it has no value yet; `Err(Wrapped{NotFoundException})`
    /// when no such variable exists.
    fn lookup(&mut self, name: &str) -> Result<Value, PluginError>;
    /// An attribute of an instance; a relation with several values is a `Value::List`.
    /// Expected errors: `Unset` while it has no value yet, `Wrapped{NotFoundException}` when
    /// the entity has no such attribute, and `Wrapped{OptionalValueException}` for a `[0:1]`
    /// relation without a value (the reference raises `OptionalValueException` there, which
    /// templates render as an empty, false value and `std::familyof` treats as the end).
    fn attribute(&mut self, instance: u32, name: &str) -> Result<Value, PluginError>;
    /// The fully qualified entity name of an instance (`__config__::A`).
    fn instance_type(&self, instance: u32) -> String;
    /// Whether the instance's entity is `entity` (fully qualified) or a subtype of it.
    fn is_instance_of(&self, instance: u32, entity: &str) -> bool;
    /// `__config__::A (instantiated at ./main.cf:3)`, as the reference's `str()` of an instance.
    fn instance_display(&self, instance: u32) -> String;
    /// The loaded modules: the files of their `templates/` and `files/` directories, and the
    /// resource types they register. (A path that starts with `/` names the module `""`, which
    /// no module is; the reference resolves it in the project directory.)
    fn modules(&self) -> &Modules;
    /// The facts given for this evaluation ([`crate::Options::facts`]), which stand in for the
    /// orchestrator's; `None` when there are none. The default has none.
    fn facts(&self) -> Option<&Facts> {
        None
    }
    /// Checks a value that is not an instance against a user typedef named in a plugin
    /// annotation (fully qualified, `mymod::name`): `Ok(true)` when the value satisfies the
    /// typedef's base type and constraint. `Ok(false)` when it does not, or when no typedef has
    /// that name (then the name is an entity, which only instances satisfy).
    ///
    /// Added to the interface because validating a typedef means evaluating its constraint,
    /// which only the evaluator can do. std's typedefs are checked natively and never reach
    /// this method. The default knows no typedef.
    fn check_typedef(&mut self, name: &str, value: &Value) -> Result<bool, PluginError> {
        let _ = (name, value);
        Ok(false)
    }
    /// Why a value that fails the typedef of that fully qualified name does (its base type or
    /// its constraint), as the error the reference's check raises: for the cause of a plugin
    /// type error. `None` when no typedef has that name (it is an entity), `Some(None)` when
    /// the host can not tell; the default knows no typedef.
    fn typedef_refusal(&mut self, name: &str, value: &Value) -> Option<Option<Cause>> {
        let _ = (name, value);
        None
    }
    /// The native plugins this evaluation calls. The default is [`PluginRegistry::builtin`].
    fn registry(&self) -> &PluginRegistry {
        PluginRegistry::builtin()
    }
    /// The namespace of the statement that calls the plugin (`__config__` for `main.cf`,
    /// `mymod::sub`): a path that starts with `./` (`std::template("./motd.j2")`) is in that
    /// namespace's module. `None` when the host does not know it, and then such a path is an
    /// error. The default does not know it.
    fn caller_namespace(&self) -> Option<String> {
        None
    }
    /// Whether the model has an entity or a typedef with this fully qualified name
    /// (`std::is_instance` fails for any other name, as the reference's `ctx.get_type` does).
    /// `None` when the host cannot tell; the default cannot.
    fn type_exists(&self, name: &str) -> Option<bool> {
        let _ = name;
        None
    }
    /// The directory plugins keep data in, across compiles (the reference's
    /// `Context.get_data_dir` is `data/<module>`): std keeps passwords in
    /// `<data_dir>/std/passwordfile.txt`. The reference's is relative to the compiler's working
    /// directory, which is the project's when `inmanta compile` runs in it; so is the default,
    /// `data`.
    fn data_dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("data")
    }
}

/// How a native implementation ends without a value: an error, or an Unknown met while
/// reading a value through a proxy (the reference raises `UnknownException`, which makes the
/// call's result Unknown).
#[derive(Debug)]
pub enum Flow {
    Error(PluginError),
    Unknown,
}

impl From<PluginError> for Flow {
    fn from(e: PluginError) -> Flow {
        Flow::Error(e)
    }
}

/// Calls a plugin with evaluated arguments: binds them to the signature's parameters, checks
/// them against their annotations, applies the Unknown rule (a top-level Unknown argument gives
/// an Unknown result without calling, unless the plugin allows unknowns) and runs the native
/// implementation; then checks the returned value against the return annotation.
///
/// A plugin without a native implementation (a module's own Python plugin) fails with
/// `External { class: "NotImplementedError" }` when it would be called.
///
/// In direct execution (a typedef constraint) the reference raises a `RuntimeException`
/// ("Received unknown value during direct execution") where this returns `Ok(Value::Unknown)`;
/// the evaluator makes that distinction.
pub fn call(
    signature: &PluginSignature,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
    host: &mut dyn PluginHost,
) -> Result<Value, PluginError> {
    let prepared = Prepared::new(signature, host.registry());
    call_prepared(signature, &prepared, args, kwargs, host)
}

/// What every call of one plugin needs and no argument changes: its qualified name, its
/// implementation, its resolved annotations and its parsed defaults. An evaluation makes one
/// per plugin it calls ([`call_prepared`]); before, each call formatted the name twice, looked
/// the implementation up by it and resolved every annotation through a string-keyed map, some
/// thousands of instructions per call.
pub struct Prepared {
    qualified: String,
    /// The implementation in the registry the `Prepared` was made with.
    run: Option<fn(&mut Call) -> NativeResult>,
    /// Whether that implementation is pure ([`NativePlugin::pure`]).
    pure: bool,
    /// Each parameter's name, in the signature's order, shared by every call's bound
    /// arguments.
    param_names: Vec<Arc<str>>,
    /// The resolved annotation of each parameter, in the signature's order (`any` without one).
    param_types: Vec<Arc<types::Ty>>,
    /// The resolved return annotation (`any` without one).
    return_type: Arc<types::Ty>,
    /// Each parameter's default, parsed from its source text.
    defaults: Vec<Option<Value>>,
    /// How calls with positional arguments only can be bound without the general checks
    /// (see [`bind::PositionalShape`]).
    positional: bind::PositionalShape,
}

impl Prepared {
    pub fn new(signature: &PluginSignature, registry: &PluginRegistry) -> Prepared {
        let qualified = signature.qualified_name();
        let resolve = |annotation: Option<&TypeAnnotation>| resolve_or_any(annotation, &signature.namespace);
        let native = registry.plugin(&qualified);
        Prepared {
            run: native.map(|native| native.run),
            pure: native.is_some_and(|native| native.pure),
            param_names: signature.params.iter().map(|p| Arc::from(p.name.as_str())).collect(),
            param_types: signature.params.iter().map(|p| resolve(p.annotation.as_ref())).collect(),
            return_type: resolve(signature.returns.as_ref()),
            defaults: signature.params.iter().map(|p| p.default.as_deref().map(bind::parse_default)).collect(),
            positional: bind::PositionalShape::new(&signature.params),
            qualified,
        }
    }

    /// `namespace::name`.
    pub fn qualified_name(&self) -> &str {
        &self.qualified
    }

    /// Whether the registry has a native implementation.
    pub fn is_native(&self) -> bool {
        self.run.is_some()
    }

    /// Whether the registry has a native implementation that is a pure function of its
    /// arguments ([`NativePlugin::pure`]).
    pub fn is_pure(&self) -> bool {
        self.pure
    }
}

/// Checks a call's arguments as [`call_prepared`] does before running a plugin: their number
/// and names, and each against its annotation. For plugins that run elsewhere (a module's own
/// Python plugins, through the bridge), which the reference checks just the same.
pub fn check_arguments(
    signature: &PluginSignature,
    prepared: &Prepared,
    args: &[Value],
    kwargs: &[(String, Value)],
    host: &mut dyn PluginHost,
) -> Result<(), PluginError> {
    bind::check_args(signature, prepared, args.to_vec(), kwargs.to_vec(), host).map(|_| ())
}

/// [`call`] with what does not change between calls of the plugin made beforehand.
/// `prepared` must have been made of `signature`.
pub fn call_prepared(
    signature: &PluginSignature,
    prepared: &Prepared,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
    host: &mut dyn PluginHost,
) -> Result<Value, PluginError> {
    let qualified = prepared.qualified.as_str();
    let bound = bind::check_args(signature, prepared, args, kwargs, host)?;
    if bound.has_unknown && !signature.allow_unknown {
        return Ok(Value::Unknown);
    }
    let Some(run) = prepared.run else {
        return Err(PluginError::external(
            "NotImplementedError",
            format!("plugin {qualified} has no native implementation in weft"),
        ));
    };
    let result = match run(&mut Call { host: &mut *host, args: bound }) {
        Ok(value) => value,
        Err(Flow::Unknown) => return Ok(Value::Unknown),
        Err(Flow::Error(e)) => return Err(e),
    };
    check_return_type(&prepared.return_type, qualified, &result, host)?;
    Ok(result)
}

/// std's `get_file_content(ctx, module_dir, path)` for a Python plugin called from
/// `namespace`: the file's text, or the Python exception the plugin sees (see
/// `std_plugins::file_content`).
pub(crate) fn module_file_content(
    modules: &Modules,
    namespace: Option<&str>,
    module_dir: &str,
    path: &str,
) -> Result<String, PluginError> {
    std_plugins::file_content(modules, namespace, module_dir, path).map_err(|flow| match flow {
        Flow::Error(e) => e,
        Flow::Unknown => PluginError::exception("the value is unknown"),
    })
}

/// Whether a plugin with this qualified name (`std::print`) has a native implementation in
/// the builtin registry.
pub fn has_native(qualified_name: &str) -> bool {
    PluginRegistry::builtin().plugin(qualified_name).is_some()
}

/// Validates a returned value against the return annotation (none means `any`).
fn check_return(
    annotation: Option<&TypeAnnotation>,
    namespace: &str,
    qualified: &str,
    value: &Value,
    host: &mut dyn PluginHost,
) -> Result<(), PluginError> {
    check_return_type(&resolve_or_any(annotation, namespace), qualified, value, host)
}

/// Checks what a module's Python plugin returned against its return annotation, as the
/// reference does once the function returned. `is_tuple`: the value was a Python tuple (here
/// its list), which every annotation but `any` refuses.
pub fn check_python_return(
    prepared: &Prepared,
    value: &Value,
    is_tuple: bool,
    host: &mut dyn PluginHost,
) -> Result<(), PluginError> {
    let ty = &prepared.return_type;
    if is_tuple && !matches!(**ty, types::Ty::Any) {
        // Python's `str` of a tuple: its list's text in parentheses, `(x,)` for one element.
        let list = pyfmt::dsl_str(value, host);
        let items = list.strip_prefix('[').and_then(|l| l.strip_suffix(']')).unwrap_or(&list);
        let single = matches!(value, Value::List(items) if items.len() == 1);
        let shown = format!("({items}{})", if single { "," } else { "" });
        let cause = Cause {
            kind: ErrorKind::TypingException,
            message: format!("Invalid value '{shown}', expected {}", ty.type_string()),
        };
        return Err(return_type_error(ty, &prepared.qualified, &shown, Some(cause)));
    }
    match ty.validate(value, host)? {
        types::Check::Ok => Ok(()),
        types::Check::Mismatch | types::Check::Reference => {
            let cause = ty.refusal(value, host)?;
            Err(return_type_error(ty, &prepared.qualified, &pyfmt::dsl_str(value, host), cause))
        }
    }
}

/// The error for a module's Python plugin that returned a value the model has no value for
/// (a set, bytes, a generator), shown as `text`: the reference's type error where the
/// annotation is a type, and where it is `any` (which the reference accepts, keeping the
/// Python object) weft's own error.
pub fn unencodable_return(prepared: &Prepared, text: &str, host: &mut dyn PluginHost) -> PluginError {
    let ty = &prepared.return_type;
    if matches!(**ty, types::Ty::Any) {
        return PluginError::external(
            "TypeError",
            format!(
                "weft can not hold the value {text} that the plugin returned: only primitives, lists, dicts and instances cross the Python bridge"
            ),
        );
    }
    // What the annotation's check says of a value shown so: for a list type the reference's
    // `TypingException`, for a primitive its `RuntimeException`.
    let cause = ty.refusal(&Value::str(text), host).ok().flatten().unwrap_or_else(|| Cause {
        kind: ErrorKind::RuntimeException,
        message: format!("Invalid value '{text}', expected {}", ty.type_string()),
    });
    return_type_error(ty, &prepared.qualified, text, Some(cause))
}

/// The reference's error for a plugin's return value, shown as `shown`, that its annotation
/// `ty` refuses.
fn return_type_error(ty: &types::Ty, qualified: &str, shown: &str, cause: Option<Cause>) -> PluginError {
    PluginError::Type {
        message: format!(
            "Return value {shown} of plugin {qualified} has incompatible type. Expected type: {}",
            ty.type_string()
        ),
        cause,
    }
}

/// [`check_return`] with the annotation resolved.
fn check_return_type(
    ty: &types::Ty,
    qualified: &str,
    value: &Value,
    host: &mut dyn PluginHost,
) -> Result<(), PluginError> {
    match ty.validate(value, host)? {
        types::Check::Ok => Ok(()),
        types::Check::Mismatch | types::Check::Reference => {
            Err(return_type_error(ty, qualified, &pyfmt::dsl_str(value, host), None))
        }
    }
}

thread_local! {
    /// Resolved annotations, per thread and by namespace: the same few annotations are
    /// resolved for every call. Two levels so that a lookup borrows its keys instead of
    /// building owned ones for every argument of every call.
    static ANNOTATIONS: RefCell<HashMap<String, HashMap<TypeAnnotation, Arc<types::Ty>>>> = RefCell::new(HashMap::new());
}

/// [`resolve_annotation`], or `any` for a parameter or return without an annotation.
fn resolve_or_any(annotation: Option<&TypeAnnotation>, namespace: &str) -> Arc<types::Ty> {
    match annotation {
        Some(annotation) => resolve_annotation(annotation, namespace),
        None => Arc::new(types::Ty::Any),
    }
}

/// The DSL type an annotation resolves to, as the reference's `PluginValue.resolve_type`.
pub(crate) fn resolve_annotation(annotation: &TypeAnnotation, namespace: &str) -> Arc<types::Ty> {
    let known = ANNOTATIONS.with_borrow(|cache| cache.get(namespace).and_then(|types| types.get(annotation)).cloned());
    if let Some(ty) = known {
        return ty;
    }
    let ty = Arc::new(match annotation {
        TypeAnnotation::Dsl(text) => types::Ty::from_dsl(text, namespace),
        TypeAnnotation::Python(text) => types::Ty::from_python(text, namespace),
    });
    ANNOTATIONS.with_borrow_mut(|cache| {
        cache.entry(namespace.to_string()).or_default().insert(annotation.clone(), ty.clone())
    });
    ty
}
