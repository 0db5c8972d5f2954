//! The native plugin API: how a module provides plugins implemented in Rust, and the
//! registry the evaluator finds them in.
//!
//! A module that weft implements natively describes its plugins with [`NativePlugin`]s and
//! the reference types they create with [`ReferenceType`]s, and hands both out through the
//! [`NativeModule`] trait. A [`PluginRegistry`] collects modules and answers, for a plugin's
//! qualified name (`std::print`), its implementation: one hash lookup per call.
//!
//! The registry weft evaluates with is [`PluginRegistry::builtin`]: std and the natives of
//! other public modules. A host can evaluate with another one (see
//! [`super::PluginHost::registry`]), for example the builtin registry extended with a module
//! of its own:
//!
//! ```
//! use weft_ir::value::Value;
//! use weft_runtime::plugins::{Call, NativeModule, NativePlugin, NativeResult, PluginRegistry};
//!
//! /// `mymod::double(n: "int") -> "int"`, declared in mymod's Python code.
//! fn double(call: &mut Call) -> NativeResult {
//!     let n = call.int_arg("n")?;
//!     Ok(Value::int(n * 2))
//! }
//!
//! struct MyMod;
//!
//! impl NativeModule for MyMod {
//!     fn name(&self) -> &'static str {
//!         "mymod"
//!     }
//!
//!     fn plugins(&self) -> Vec<NativePlugin> {
//!         vec![NativePlugin::new("double", "n", double).returns("\"int\"")]
//!     }
//! }
//!
//! let mut registry = PluginRegistry::builtin().clone();
//! registry.register(&MyMod).unwrap();
//! assert!(registry.plugin("mymod::double").is_some());
//! assert!(registry.plugin("std::print").is_some());
//! ```
//!
//! The signature the evaluator binds and checks arguments with is always the one the
//! module's Python code declares (read by the frontend); a native plugin only gives the
//! implementation, plus the Python parameter list and return annotation that the reference
//! uses when a template calls the plugin as a filter (`{{ x | mymod.double }}`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use num_bigint::BigInt;
use weft_ir::plugin::{ParamKind, PluginParam, TypeAnnotation};
use weft_ir::value::Value;

use super::bind::Bound;
use super::{Flow, PluginError, PluginHost, pyfmt, validate};

/// What a plugin's implementation returns: its value, or how it ended without one.
pub type NativeResult = Result<Value, Flow>;

/// One call of a native plugin: the host of the evaluation and the arguments, bound to the
/// plugin's parameters as Python binds them (defaults filled in) and already checked against
/// their annotations.
pub struct Call<'a> {
    pub(crate) host: &'a mut dyn PluginHost,
    pub(crate) args: Bound,
}

static NULL: Value = Value::NULL;

impl<'a> Call<'a> {
    /// The evaluation calling the plugin.
    pub fn host(&mut self) -> &mut dyn PluginHost {
        &mut *self.host
    }

    /// A named parameter's value (`null` when it has none, which only a call without
    /// checks, as a template filter, can leave).
    pub fn arg(&self, name: &str) -> &Value {
        self.args.get(name).unwrap_or(&NULL)
    }

    /// The extra positional arguments (`*args`).
    pub fn varargs(&self) -> &[Value] {
        &self.args.varargs
    }

    /// The extra keyword arguments (`**kwargs`), in call order.
    pub fn varkwargs(&self) -> &[(String, Value)] {
        &self.args.varkwargs
    }

    /// A parameter that must be a string; otherwise a Python `TypeError`.
    pub fn str_arg(&self, name: &str) -> Result<&str, Flow> {
        match self.arg(name) {
            Value::Str(s) => Ok(s),
            other => Err(Flow::Error(PluginError::external(
                "TypeError",
                format!("expected str for '{name}', got {}", pyfmt::plugin_type_name(other)),
            ))),
        }
    }

    /// A parameter that must be an int (or a bool, as in Python); otherwise a `TypeError`.
    pub fn int_arg(&self, name: &str) -> Result<BigInt, Flow> {
        validate::to_bigint(self.arg(name)).ok_or_else(|| {
            Flow::Error(PluginError::external(
                "TypeError",
                format!("'{}' object cannot be interpreted as an integer", pyfmt::plugin_type_name(self.arg(name))),
            ))
        })
    }

    /// A parameter that must be a list; otherwise a `TypeError`.
    pub fn list_arg(&self, name: &str) -> Result<Arc<[Value]>, Flow> {
        match self.arg(name) {
            Value::List(items) => Ok(items.clone()),
            other => Err(Flow::Error(PluginError::external(
                "TypeError",
                format!("expected a list, got {}", pyfmt::plugin_type_name(other)),
            ))),
        }
    }
}

/// A plugin implemented in Rust.
#[derive(Clone, Copy)]
pub struct NativePlugin {
    /// The plugin's name inside its module, as `@plugin` registers it (`print`, or
    /// `sub::name` for a plugin of a submodule).
    pub name: &'static str,
    /// The Python function's name, which Python's own messages use (`printf` for `print`).
    pub py_name: &'static str,
    /// The parameters as the Python function declares them, without the `Context` and
    /// without annotations (`i, start=0`, `__string, *args, **kwargs`). Used when a template
    /// calls the plugin as a filter, which binds arguments as Python does.
    pub params: &'static str,
    /// The return annotation: a DSL type in double quotes (`"string"`) or a Python type
    /// (`list[str]`); `None` when the function has none.
    pub returns: Option<&'static str>,
    /// Whether the plugin is called with Unknown arguments (`@plugin(allow_unknown=True)`).
    pub allow_unknown: bool,
    /// Whether the result is a function of the arguments alone and the call has no effect
    /// (it reads neither the model nor the host, and prints, writes or remembers nothing).
    /// A typedef constraint that calls only such plugins is memoized by value, as a regex
    /// is: std's `ipv4_address` and its kin check every value with `validate_type`.
    pub pure: bool,
    /// The implementation.
    pub run: fn(&mut Call) -> NativeResult,
}

impl NativePlugin {
    /// A plugin whose Python function has the plugin's name, without return annotation.
    pub const fn new(name: &'static str, params: &'static str, run: fn(&mut Call) -> NativeResult) -> Self {
        NativePlugin { name, py_name: name, params, returns: None, allow_unknown: false, pure: false, run }
    }

    /// With a return annotation (`"\"string\""`, `"list[str]"`).
    pub const fn returns(mut self, annotation: &'static str) -> Self {
        self.returns = Some(annotation);
        self
    }

    /// With another Python function name (`printf` for std's `print`).
    pub const fn py_name(mut self, py_name: &'static str) -> Self {
        self.py_name = py_name;
        self
    }

    /// Called with Unknown arguments too.
    pub const fn allow_unknown(mut self) -> Self {
        self.allow_unknown = true;
        self
    }

    /// A pure function of its arguments (see [`NativePlugin::pure`]).
    pub const fn pure(mut self) -> Self {
        self.pure = true;
        self
    }

    /// The parameters, parsed from [`NativePlugin::params`].
    pub(crate) fn parameters(&self) -> Vec<PluginParam> {
        self.params
            .split(", ")
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (kind, p) = if let Some(rest) = p.strip_prefix("**") {
                    (ParamKind::VarKeyword, rest)
                } else if let Some(rest) = p.strip_prefix('*') {
                    (ParamKind::VarPositional, rest)
                } else {
                    (ParamKind::PositionalOrKeyword, p)
                };
                let (name, default) = match p.split_once('=') {
                    Some((n, d)) => (n, Some(d.to_string())),
                    None => (p, None),
                };
                PluginParam { name: name.to_string(), kind, annotation: None, default }
            })
            .collect()
    }

    pub(crate) fn return_annotation(&self) -> Option<TypeAnnotation> {
        self.returns.map(|r| match r.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(dsl) => TypeAnnotation::Dsl(dsl.to_string()),
            None => TypeAnnotation::Python(r.to_string()),
        })
    }
}

impl std::fmt::Debug for NativePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativePlugin").field("name", &self.name).field("params", &self.params).finish_non_exhaustive()
    }
}

/// A reference class a module defines (`@reference("std::Environment") class
/// EnvironmentReference(Reference[str])`): what the export writes for its values and what
/// plugin annotations that name the class accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReferenceType {
    /// The name it is registered under, which the export writes as the reference's `type`.
    pub name: &'static str,
    /// The Python module that defines the class (`inmanta_plugins.std`), as a reference
    /// value names it ([`weft_ir::value::Reference::module`]).
    pub module: &'static str,
    /// The Python class (`EnvironmentReference`).
    pub class: &'static str,
    /// The DSL type the reference resolves to, the `T` of `Reference[T]` (`string`).
    pub resolves_to: &'static str,
}

/// A module that provides plugins implemented in Rust.
pub trait NativeModule {
    /// The module's name, the first part of its plugins' qualified names (`std`).
    fn name(&self) -> &'static str;

    /// The plugins it implements. Each must also be declared by the module's Python code,
    /// whose signature the evaluator checks calls against.
    fn plugins(&self) -> Vec<NativePlugin>;

    /// The reference classes its plugins create.
    fn reference_types(&self) -> Vec<ReferenceType> {
        Vec::new()
    }
}

/// Why a module could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("the plugin {0} is registered twice")]
    DuplicatePlugin(String),
    #[error("the reference type {0} is registered twice")]
    DuplicateReferenceType(String),
}

/// Native plugins by qualified name, and reference types, of the registered modules.
#[derive(Clone, Debug, Default)]
pub struct PluginRegistry {
    plugins: HashMap<Box<str>, NativePlugin>,
    references: Vec<ReferenceType>,
}

impl PluginRegistry {
    /// An empty registry.
    pub fn new() -> PluginRegistry {
        PluginRegistry::default()
    }

    /// The modules weft implements natively: std, and the plugins of other public modules
    /// that weft provides (see `std_plugins::builtin_modules`). Built once per process.
    pub fn builtin() -> &'static PluginRegistry {
        static BUILTIN: OnceLock<PluginRegistry> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            let mut registry = PluginRegistry::new();
            for module in super::std_plugins::builtin_modules() {
                // The builtin modules are weft's own code; a duplicate is a bug that the
                // tests catch (`builtin_registry_has_no_duplicates`), so it is skipped here
                // rather than reported to a user who cannot fix it.
                let _ = registry.register(module.as_ref());
            }
            registry
        })
    }

    /// Adds a module's plugins and reference types. A name that is already registered is
    /// an error, and then nothing of the module is added.
    pub fn register(&mut self, module: &dyn NativeModule) -> Result<(), RegistryError> {
        let prefix = module.name();
        let plugins = module.plugins();
        let references = module.reference_types();
        let mut names = Vec::with_capacity(plugins.len());
        for plugin in &plugins {
            let qualified: Box<str> = format!("{prefix}::{}", plugin.name).into();
            if self.plugins.contains_key(&qualified) || names.contains(&qualified) {
                return Err(RegistryError::DuplicatePlugin(qualified.into()));
            }
            names.push(qualified);
        }
        for (i, reference) in references.iter().enumerate() {
            let taken = |r: &ReferenceType| {
                r.name == reference.name || (r.module, r.class) == (reference.module, reference.class)
            };
            if self.references.iter().any(taken) || references[..i].iter().any(taken) {
                return Err(RegistryError::DuplicateReferenceType(reference.name.to_string()));
            }
        }
        self.plugins.extend(names.into_iter().zip(plugins));
        self.references.extend(references);
        Ok(())
    }

    /// The native implementation of the plugin with this qualified name (`std::print`).
    pub fn plugin(&self, qualified: &str) -> Option<&NativePlugin> {
        self.plugins.get(qualified)
    }

    /// Every registered plugin with its qualified name, in no particular order.
    pub fn plugins(&self) -> impl Iterator<Item = (&str, &NativePlugin)> {
        self.plugins.iter().map(|(name, plugin)| (&**name, plugin))
    }

    /// The reference type defined by a Python class (`inmanta_plugins.std`,
    /// `EnvironmentReference`).
    pub fn reference_type(&self, module: &str, class: &str) -> Option<&ReferenceType> {
        self.references.iter().find(|r| r.module == module && r.class == class)
    }

    /// The reference type of a class named in an annotation, where only the class name is
    /// known (`EnvironmentReference`): the first registered with that name.
    pub fn reference_type_by_class(&self, class: &str) -> Option<&ReferenceType> {
        self.references.iter().find(|r| r.class == class)
    }
}
