//! Facts as input of an evaluation: what `std::getfact` answers when no orchestrator does.
//!
//! In the reference, facts are values the orchestrator learned from deployed resources (an IP
//! address a cloud provider assigned, say); the compiler asks the server for them by resource
//! id and fact name. weft runs without an orchestrator, so the facts can be given as a JSON file
//! instead:
//!
//! ```json
//! {"std::testing::NullResource[agent1,name=a]": {"ip": "10.0.0.5", "ports": [80, 443]}}
//! ```
//!
//! Resource ids are written without version, as the reference's `to_id` gives them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_ir::ErrorKind;
use weft_ir::value::Value;

use super::{Flow, PluginError, PluginHost, json, pyfmt};
use crate::export::{self, Attributes, IdFailure, Read};
use crate::graph::ResourceId;

/// Facts by resource id (the text of a [`ResourceId`] without version), then by fact name.
/// Cloning is cheap: the facts are shared.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    by_resource: Arc<HashMap<String, HashMap<String, Value>>>,
}

/// The longest facts file weft reads: far more than any inventory's facts, and a bound for a
/// path that never ends.
const MAX_FACTS_LEN: u64 = 256 << 20;

/// Why a facts file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// The message includes the cause, so the cause is not also a `source`: a caller that
    /// prints the chain would show it twice.
    #[error("cannot read the facts file {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// Not JSON; `message` is serde_json's, without its position.
    #[error("line {line}, column {column}: {message}")]
    Syntax { line: usize, column: usize, message: String },
    #[error("expected an object of resource ids, found {found}")]
    NotAnObject { found: &'static str },
    #[error("the facts of {id} must be an object of fact names, found {found}")]
    FactsNotAnObject { id: String, found: &'static str },
    #[error("{id:?} is not a resource id without version (type[agent,attribute=value])")]
    BadId { id: String },
    /// Any of the above in a file.
    #[error("{}: {error}", path.display())]
    InFile { path: PathBuf, error: Box<FactsError> },
}

impl Facts {
    /// Reads a facts file (see [`Facts::from_json`]); errors name the file.
    pub fn load(path: &Path) -> Result<Facts, FactsError> {
        let read_error = |error| FactsError::Read { path: path.to_path_buf(), error };
        let bytes = weft_ir::fs::read_named(path, MAX_FACTS_LEN).map_err(read_error)?;
        let text = weft_ir::fs::utf8(bytes).map_err(read_error)?;
        Facts::from_json(&text).map_err(|e| FactsError::InFile { path: path.to_path_buf(), error: Box::new(e) })
    }

    /// Parses `{"<resource id>": {"<fact name>": <value>, ...}, ...}`.
    ///
    /// serde_json checks the syntax, so a malformed file is reported at its line and column.
    /// The values are then read as Python's `json` reads them (arbitrary-precision ints, a
    /// repeated key keeps its last value), because facts are values of the Python world.
    pub fn from_json(text: &str) -> Result<Facts, FactsError> {
        // Into a value rather than ignored: serde_json's messages are more precise then
        // (`trailing comma` where ignoring reports `key must be a string`).
        if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
            let (line, column) = (e.line(), e.column());
            let full = e.to_string();
            let suffix = format!(" at line {line} column {column}");
            let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
            return Err(FactsError::Syntax { line, column, message });
        }
        let value = json::loads(text).map_err(|e| FactsError::Syntax { line: 1, column: 1, message: e.message() })?;
        let Value::Dict(resources) = value else {
            return Err(FactsError::NotAnObject { found: json_kind(&value) });
        };
        let mut by_resource = HashMap::new();
        for (id, facts) in resources.iter() {
            match ResourceId::parse(id) {
                Some(parsed) if parsed.to_string() == **id => {}
                _ => return Err(FactsError::BadId { id: id.to_string() }),
            }
            let Value::Dict(facts) = facts else {
                return Err(FactsError::FactsNotAnObject { id: id.to_string(), found: json_kind(facts) });
            };
            let facts = facts.iter().map(|(name, value)| (name.to_string(), value.clone())).collect();
            by_resource.insert(id.to_string(), facts);
        }
        Ok(Facts { by_resource: Arc::new(by_resource) })
    }

    /// The fact `name` of the resource with id `resource` (without version).
    pub fn get(&self, resource: &str, name: &str) -> Option<&Value> {
        self.by_resource.get(resource)?.get(name)
    }

    /// How many resources have facts.
    pub fn len(&self) -> usize {
        self.by_resource.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_resource.is_empty()
    }
}

/// JSON's name for the kind of a parsed value, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Dict(_) => "an object",
        Value::List(_) => "an array",
        Value::Str(_) => "a string",
        Value::Null(_) => "null",
        Value::Bool(_) => "a boolean",
        _ => "a number",
    }
}

/// The resource id of `getfact`'s argument, as the reference's `inmanta.resources.to_id`
/// computes it: the first registered type among the instance's type and its parents, then
/// that type's agent path and id attribute, read through the host (an attribute without a
/// value yet makes the call wait, like any attribute a plugin reads).
pub(crate) fn resource_id(value: &Value, host: &mut dyn PluginHost) -> Result<String, Flow> {
    let instance = match value {
        Value::Instance(instance) => *instance,
        // `to_id` calls `entity._type()`: plain values have no such method; lists and dicts
        // are proxies, whose `_type` asks the wrapped value for `type`.
        Value::List(_) => return Err(attribute_error("list", "type")),
        Value::Dict(_) => return Err(attribute_error("dict", "type")),
        other => return Err(attribute_error(pyfmt::plugin_type_name(other), "_type")),
    };
    let modules = host.modules().clone();
    let registrations = modules.registrations();
    let own = host.instance_type(instance);
    let registration = registrations
        .iter()
        .find(|r| r.name == own)
        .or_else(|| registrations.iter().find(|r| host.is_instance_of(instance, &r.name)));
    let Some(registration) = registration else {
        // Sic: the reference's message.
        return Err(Flow::Error(PluginError::exception("Facts can only be retreived from resources.")));
    };
    let Some(ty) = export::native(&registration.name) else {
        return Err(Flow::Error(PluginError::exception(format!(
            "weft cannot compute the resource id of {}: resource type {} is registered by the Python code of module \
             {}, and weft has no native implementation of its export",
            host.instance_display(instance),
            registration.name,
            registration.module
        ))));
    };
    match export::resource_id(ty, instance, &mut HostAttributes(host)) {
        Ok(id) => Ok(id.to_string()),
        Err(IdFailure::Unknown) => Err(Flow::Unknown),
        Err(IdFailure::Wait(e)) => Err(Flow::Error(e)),
        // Inside a plugin the reference raises these as Python exceptions: `Exception` for a
        // broken agent path, `ResourceException` for references; the proxies raise the
        // compiler's own for a missing attribute or an optional one without a value.
        Err(IdFailure::Error(kind, message)) => Err(Flow::Error(match kind {
            ErrorKind::ResourceException => PluginError::external("ResourceException", message),
            ErrorKind::NotFoundException | ErrorKind::OptionalValueException => PluginError::Wrapped { kind, message },
            _ => PluginError::exception(message),
        })),
    }
}

/// [`resource_id`], or `None` where that fails only because weft cannot compute the id of the
/// resource's type (a type registered by a module's Python code without a native export):
/// for callers that need the id only sometimes but must fail first where the reference does.
pub(crate) fn resource_id_if_computable(value: &Value, host: &mut dyn PluginHost) -> Result<Option<String>, Flow> {
    if let Value::Instance(instance) = value {
        let modules = host.modules().clone();
        let registrations = modules.registrations();
        let own = host.instance_type(*instance);
        let registration = registrations
            .iter()
            .find(|r| r.name == own)
            .or_else(|| registrations.iter().find(|r| host.is_instance_of(*instance, &r.name)));
        if registration.is_some_and(|r| export::native(&r.name).is_none()) {
            return Ok(None);
        }
    }
    resource_id(value, host).map(Some)
}

fn attribute_error(class: &str, attribute: &str) -> Flow {
    Flow::Error(PluginError::external("AttributeError", format!("'{class}' object has no attribute '{attribute}'")))
}

/// Attributes as a plugin reads them.
struct HostAttributes<'h>(&'h mut dyn PluginHost);

impl Attributes for HostAttributes<'_> {
    type Wait = PluginError;

    fn read(&mut self, instance: u32, name: &str) -> Result<Read, PluginError> {
        match self.0.attribute(instance, name) {
            Ok(value) => Ok(Read::Value(value)),
            Err(PluginError::Wrapped { kind: ErrorKind::NotFoundException, .. }) => Ok(Read::Missing),
            Err(PluginError::Wrapped { kind: ErrorKind::OptionalValueException, .. }) => Ok(Read::NoValue),
            Err(e) => Err(e),
        }
    }

    fn display(&self, value: &Value) -> String {
        pyfmt::dsl_str(value, &*self.0)
    }

    fn entity_name(&self, instance: u32) -> String {
        self.0.instance_type(instance)
    }
}
