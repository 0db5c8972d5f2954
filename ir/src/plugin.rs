//! Plugin signatures: what the frontend knows about a plugin without running it.
//!
//! A module's plugins are Python functions decorated with `@plugin`. Weft never runs Python:
//! the frontend reads the signatures out of the module's Python sources (see
//! `weft_frontend::python`), so names resolve and calls can be checked, and the runtime
//! provides native implementations registered under the same qualified names.

use serde::{Deserialize, Serialize};

/// How a parameter can be passed, as in Python.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamKind {
    /// A normal parameter: positional or by keyword.
    PositionalOrKeyword,
    /// Before a `/` in the parameter list.
    PositionalOnly,
    /// After `*` or `*args`.
    KeywordOnly,
    /// `*args`
    VarPositional,
    /// `**kwargs`
    VarKeyword,
}

/// A type annotation as written in the plugin's source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TypeAnnotation {
    /// A string annotation in the DSL's type language: `"string"`, `"int[]"`, `"std::Entity"`,
    /// `"any"`, `"string?"`.
    Dsl(String),
    /// A Python type expression, as written: `str`, `list[str]`, `object | Reference`,
    /// `Sequence[object | Reference]`, `Mapping[str, object]`.
    Python(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginParam {
    pub name: String,
    pub kind: ParamKind,
    /// `None` when the parameter has no annotation.
    pub annotation: Option<TypeAnnotation>,
    /// The default value's Python source text, when there is one (`None`, `""`, `["agent"]`).
    pub default: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSignature {
    /// The name the model calls it by: the decorator's argument (`@plugin("print")`) or the
    /// function name.
    pub name: String,
    /// The namespace the plugin belongs to (`std`, `mymod::sub`), from its Python module path.
    pub namespace: String,
    /// Parameters in order, without the `Context` parameter (see `takes_context`).
    pub params: Vec<PluginParam>,
    /// `None` when the return type is not annotated, which means `any`.
    pub returns: Option<TypeAnnotation>,
    /// The plugin has a parameter annotated `Context`; the runtime passes it.
    pub takes_context: bool,
    /// Where the `Context` parameter sits among the function's Python parameters, so the
    /// runtime can insert it there; 0 for the usual leading `ctx: Context`. Only meaningful when
    /// `takes_context`. It is needed because the reference accepts the context at any position
    /// among the positional parameters, and real modules rely on it (`yaml::load(path: "string",
    /// ctx: Context)`).
    #[serde(default)]
    pub context_position: u32,
    /// `@plugin(allow_unknown=True)`: called even with Unknown arguments.
    pub allow_unknown: bool,
    /// `@plugin(emits_statements=True)`.
    pub emits_statements: bool,
    /// `@deprecated` or `@deprecated(replaced_by=...)`.
    pub deprecated: Option<Deprecation>,
    /// Where the `def` is: the Python file (relative to the module) and its 1-based line.
    pub source_file: String,
    pub source_line: u32,
}

impl PluginSignature {
    /// The fully qualified name, `namespace::name`.
    pub fn qualified_name(&self) -> String {
        format!("{}::{}", self.namespace, self.name)
    }
}

/// A plugin marked `@deprecated`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deprecation {
    /// What to use instead, when the decorator names it.
    pub replaced_by: Option<String>,
}

/// A Python dataclass found in a module's plugins: the counterpart of a `std::Dataclass`
/// entity of the same name in the matching namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonDataclass {
    pub name: String,
    pub namespace: String,
    /// `@dataclasses.dataclass(frozen=True)`.
    pub frozen: bool,
    /// Fields in order: name and annotation as written.
    pub fields: Vec<(String, String)>,
    pub source_file: String,
    pub source_line: u32,
}
