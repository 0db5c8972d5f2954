//! Which entity types are resources, and how their fields are mapped.
//!
//! In the reference a module's Python code registers resource types with
//! `@resource("<entity>", agent="<path>", id_attribute="<name>")` on a class whose `fields`
//! (merged with its bases') lists what is exported, each read with a `get_<field>` method when
//! the class has one. weft reads the registrations from the modules' sources (so a type is a
//! resource exactly when the reference's would be) and carries a native table of the types it
//! implements, the methods written in Rust.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::modules::Modules;

/// How one field gets its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Getter {
    /// The instance attribute of the same name.
    Attr,
    /// `Resource.get_send_event`: the attribute, `false` when the entity has none.
    SendEvent,
    /// `Resource.get_receive_events`: the attribute, `true` when the entity has none.
    ReceiveEvents,
    /// `Resource.get_report_only`: the attribute, `false` when the entity has none.
    ReportOnly,
    /// Filled by the export from the references found in the other fields.
    References,
    Mutators,
    /// `ManagedResource.get_managed`: `managed=false` drops the resource.
    Managed,
    /// `std::AgentConfig.get_autostart`: always drops the resource (nothing to configure since
    /// inmanta-core 15).
    IgnoreResource,
    /// `fs::File.get_hash`: the sha1 of the content (with prefix content), stored in the file
    /// store; `null` when the content is a reference.
    FileHash,
    /// `fs::File.get_content`: the content only when it is a reference.
    FileContent,
    /// `fs::*.get_permissions`: `int(mode)`, or `null`.
    Permissions,
    /// `mitogen::abc.Resource.get_via`: the serialized mitogen context of the resource.
    Via,
    /// A `get_<field>` method or a `map` entry of a resource class of a module's Python code,
    /// run through the Python bridge (`super::bridged`).
    Python,
}

/// A resource type as the export maps it: one of weft's native types, or one whose Python
/// class a module's code registers, described by the Python bridge.
#[derive(Debug)]
pub(crate) struct ResourceType {
    pub name: String,
    /// The attribute path to the agent name, e.g. `host.name`.
    pub agent: String,
    pub id_attribute: String,
    /// How the id attribute is read: as an attribute, or by the class's own getter
    /// ([`Getter::Python`]), which the reference's `object_to_id` calls even when the id is
    /// not one of the fields.
    pub id_getter: Getter,
    pub fields: Vec<(String, Getter)>,
}

/// A native type as written in [`NATIVE`].
struct NativeType {
    name: &'static str,
    agent: &'static str,
    id_attribute: &'static str,
    fields: &'static [(&'static str, Getter)],
}

impl NativeType {
    fn to_resource_type(&self) -> ResourceType {
        ResourceType {
            name: self.name.to_string(),
            agent: self.agent.to_string(),
            id_attribute: self.id_attribute.to_string(),
            id_getter: Getter::Attr,
            fields: self.fields.iter().map(|&(name, getter)| (name.to_string(), getter)).collect(),
        }
    }
}

use Getter::*;

/// A type's own fields, then those of `inmanta.resources.PurgeableResource` and `Resource`
/// (every native type is purgeable).
macro_rules! fields {
    ($($extra:expr),* $(,)?) => {
        &[
            $($extra,)*
            ("purged", Attr),
            ("purge_on_delete", Attr),
            ("send_event", SendEvent),
            ("receive_events", ReceiveEvents),
            ("report_only", ReportOnly),
            ("references", References),
            ("mutators", Mutators),
        ]
    };
}

const NATIVE: &[NativeType] = &[
    NativeType {
        name: "std::testing::NullResource",
        agent: "agentname",
        id_attribute: "name",
        fields: fields!(
            ("name", Attr),
            ("agentname", Attr),
            ("value", Attr),
            ("int_value", Attr),
            ("fail", Attr),
            ("managed", Managed)
        ),
    },
    NativeType {
        name: "std::AgentConfig",
        agent: "agent",
        id_attribute: "agentname",
        fields: fields!(("agentname", Attr), ("uri", Attr), ("autostart", IgnoreResource)),
    },
    NativeType {
        name: "fs::File",
        agent: "host.name",
        id_attribute: "path",
        fields: fields!(
            ("path", Attr),
            ("owner", Attr),
            ("hash", FileHash),
            ("content", FileContent),
            ("group", Attr),
            ("permissions", Permissions),
            ("via", Via)
        ),
    },
    NativeType {
        name: "fs::Directory",
        agent: "host.name",
        id_attribute: "path",
        fields: fields!(("path", Attr), ("owner", Attr), ("group", Attr), ("permissions", Permissions), ("via", Via)),
    },
    NativeType {
        name: "fs::Symlink",
        agent: "host.name",
        id_attribute: "dst",
        fields: fields!(("src", Attr), ("dst", Attr), ("via", Via)),
    },
    NativeType {
        name: "exec::Run",
        agent: "host.name",
        id_attribute: "command",
        fields: fields!(
            ("command", Attr),
            ("creates", Attr),
            ("cwd", Attr),
            ("environment", Attr),
            ("onlyif", Attr),
            ("path", Attr),
            ("reload", Attr),
            ("reload_only", Attr),
            ("returns", Attr),
            ("timeout", Attr),
            ("unless", Attr),
            ("skip_on_fail", Attr),
            ("via", Via)
        ),
    },
];

pub(crate) fn native(name: &str) -> Option<&'static ResourceType> {
    static TYPES: std::sync::LazyLock<Vec<ResourceType>> =
        std::sync::LazyLock::new(|| NATIVE.iter().map(NativeType::to_resource_type).collect());
    TYPES.iter().find(|t| t.name == name)
}

pub(crate) fn native_names() -> Vec<&'static str> {
    NATIVE.iter().map(|t| t.name).collect()
}

/// A `@resource` registration found in a module's Python code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The registered entity type (`fs::File`).
    pub name: String,
    /// The module whose Python code registers it.
    pub module: String,
    /// The Python file, relative to the module's root and separated by `/`
    /// (`plugins/__init__.py` in a v1 module, `__init__.py` in a v2 package), so it names
    /// the same file on every host; [`STD_SOURCE`] for std's own.
    pub source: String,
}

/// The source of the registrations of weft's std, which is compiled in.
pub const STD_SOURCE: &str = "<std>";

/// The resource types of weft's std (inmanta-module-std registers them in its Python code).
pub(crate) fn std_registrations() -> Vec<Registration> {
    ["std::testing::NullResource", "std::AgentConfig"]
        .into_iter()
        .map(|name| Registration { name: name.to_string(), module: "std".to_string(), source: STD_SOURCE.to_string() })
        .collect()
}

/// The registrations in a module's Python sources, in the order of the sources' paths (as
/// paths sort, component by component), each source's in text order.
pub(crate) fn scan_registrations(module: &str, dir: &Path) -> Vec<Registration> {
    let mut sources = Vec::new();
    python_sources(dir, 0, &mut sources);
    sources.sort();
    let mut out = Vec::new();
    for source in sources {
        let Ok(text) = weft_ir::fs::read_to_string(&source) else { continue };
        let relative = source.strip_prefix(dir).unwrap_or(&source);
        let relative: Vec<String> =
            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let relative = relative.join("/");
        for name in registered_in_source(&text) {
            out.push(Registration { name, module: module.to_string(), source: relative.clone() });
        }
    }
    out
}

/// The resource types registered by the modules that the model defines (`defined`), in the
/// order the export visits them: std's first (it is always loaded), then each module's in
/// module name order, each module's in the order of its sources; a type registered twice keeps
/// its first registration.
pub fn registrations(modules: &Modules, defined: impl Fn(&str) -> bool) -> Vec<Registration> {
    modules.registrations().iter().filter(|r| defined(&r.name)).cloned().collect()
}

/// The Python files of a module: its `plugins/` (v1) or its package directory (v2), without
/// the model, templates and files.
fn python_sources(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 6 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if !matches!(name.as_ref(), "model" | "templates" | "files" | "__pycache__" | "tests" | "docs")
                && !name.starts_with('.')
            {
                python_sources(&path, depth + 1, out);
            }
        } else if kind.is_file() && super::is_python_source(&path) {
            out.push(path);
        }
    }
}

/// The entity names registered by `@resource(...)` / `@inmanta.resources.resource(...)`
/// decorators in a Python source text: the first argument when it is a string, or the `name=`
/// keyword argument. The call may span lines, as formatters write it:
///
/// ```python
/// @inmanta.resources.resource(
///     name="files::TextFile",
///     id_attribute="path",
///     agent="host.name",
/// )
/// ```
pub fn registered_in_source(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_start();
        let Some(decorator) = trimmed.strip_prefix('@') else { continue };
        let Some(open) = decorator.find('(') else { continue };
        let callee = decorator[..open].trim();
        if callee != "resource" && !callee.ends_with(".resource") {
            continue;
        }
        let arguments_start = start + (line.len() - trimmed.len()) + 1 + open + 1;
        if let Some(name) = registered_name(&text[arguments_start..]) {
            names.push(name);
        }
    }
    names
}

/// The registered name in the arguments of a `resource(...)` call (the text after its `(`):
/// a string first argument, or the string of `name=`. Only plain string literals count, as the
/// reference's registrations in real modules are written.
fn registered_name(arguments: &str) -> Option<String> {
    let mut rest = arguments;
    let mut first = true;
    loop {
        rest = rest.trim_start();
        if rest.starts_with(')') || rest.is_empty() {
            return None;
        }
        // A keyword argument: `name = "..."`.
        let keyword_end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let after_keyword = rest[keyword_end..].trim_start();
        let (keyword, value) = if keyword_end > 0 && after_keyword.starts_with('=') && !after_keyword.starts_with("==")
        {
            (Some(&rest[..keyword_end]), after_keyword[1..].trim_start())
        } else {
            (None, rest)
        };
        let literal = string_literal(value);
        match (keyword, &literal) {
            (None, Some((text, _))) if first => return Some(text.clone()),
            (Some("name"), Some((text, _))) => return Some(text.clone()),
            _ => {}
        }
        // On to the next argument: past this one's literal, or past the next comma outside
        // brackets and strings.
        let after = match literal {
            Some((_, len)) => &value[len..],
            None => value,
        };
        rest = skip_argument(after)?;
        first = false;
    }
}

/// A string literal at the start of `text` (without prefixes or escapes): its text and the
/// length of the literal.
fn string_literal(text: &str) -> Option<(String, usize)> {
    let quote = text.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let end = text[1..].find(quote)?;
    let body = &text[1..1 + end];
    (!body.contains('\\') && !body.contains('\n')).then(|| (body.to_string(), end + 2))
}

/// The text after the current argument's comma; `None` at the call's closing parenthesis.
fn skip_argument(text: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') if depth == 0 => return None,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => return Some(&text[i + 1..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_resource_decorators() {
        let text = r#"
@resource("std::testing::NullResource", agent="agentname", id_attribute="name")
class Null: pass
@inmanta.resources.resource('fs::File', agent="host.name", id_attribute="path")
class File: pass
@provider("fs::File", name="x")
@reference("std::Environment")
@inmanta.resources.resource(
    name="files::TextFile",
    id_attribute="path",
    agent="host.name",
)
class TextFile: pass
@resource(agent="a", id_attribute="b", name='m::Kw')
@resource(
    "m::Positional", agent="host.name", id_attribute="path"
)
@resource(NAME, agent="a", id_attribute="b")
"#;
        assert_eq!(
            registered_in_source(text),
            vec!["std::testing::NullResource", "fs::File", "files::TextFile", "m::Kw", "m::Positional"]
        );
    }
}
