//! Resource types that weft has no native mapping for: their Python classes, registered by a
//! module's code (`@resource`), map the fields through the Python bridge.
//!
//! The reference builds a resource with `Resource.create_from_model`: the id from the agent
//! path and the id attribute (`object_to_id`), then every field of the class's `fields` with
//! `map_field`, which calls the class's `get_<field>` method, or its `map` entry, or reads the
//! instance's attribute. Here the class is asked once per type which of its fields the
//! module's code maps ([`python::describe_resource`]); those fields (and the id attribute, when
//! the class maps it) are run in the evaluation's Python server for each instance, before the
//! export maps its resources in parallel. The other fields (attributes, and the getters of
//! inmanta's own base classes, which weft has natively) are mapped as those of native types
//! are, and so are the agent, `requires` and the checks of the export.
//!
//! The getters run one instance at a time, in export order, with the instance as a proxy
//! whose attribute reads ask the evaluated model, as in the reference.

use std::collections::{HashMap, HashSet};

use weft_ir::diagnostic::codes;
use weft_ir::value::Value;
use weft_ir::{Diagnostic, ErrorKind};

use super::types::{self, Getter, Registration, ResourceType};
use super::{Exporter, IdFailure, Model, ModelAttributes, Read, error_at, mapping_order, registrations, resource_id};
use crate::modules::Modules;
use crate::python::{self, BridgeError, BridgeValue, ExportedFields, FieldOutcome};
use crate::{RuntimeHost, holds_instances};

/// What the Python bridge gave for the export, made before the resources are mapped.
#[derive(Default)]
pub(crate) struct Bridged {
    /// By registered entity type: the type as its Python class describes it, or why it can
    /// not be exported (reported when the export reaches it, so that errors come in export
    /// order).
    pub types: HashMap<String, Result<ResourceType, Diagnostic>>,
    /// By instance: what the getters of its Python-mapped fields gave, or why the bridge could
    /// not run them.
    pub instances: HashMap<u32, Result<ExportedFields, Diagnostic>>,
}

/// Runs the Python-mapped fields of every resource of a registered type that weft has no
/// native mapping for, in `host`'s Python server.
pub(crate) fn map(model: &Model, host: &mut RuntimeHost, modules: &Modules) -> Bridged {
    let mut bridged = Bridged::default();
    let program = model.program();
    // The instances whose plain attributes the server was sent (see `proxy`).
    let mut sent = HashSet::new();
    for registration in registrations(modules, |name| program.entity_by_name(name).is_some()) {
        if types::native(&registration.name).is_some() || bridged.types.contains_key(&registration.name) {
            continue;
        }
        let Some(entity) = program.entity_by_name(&registration.name) else { continue };
        let instances = model.instances_of(entity);
        let Some(&first) = instances.first() else { continue };
        let python_modules = python_modules(&registration);
        let (bridge, ..) = host.bridge(None);
        let described = python::describe_resource(bridge, &registration.name, &python_modules, &mut |request| {
            answer(model, modules, &mut sent, request)
        });
        let ty = match described {
            Ok(class) => resource_type(&registration.name, class),
            Err(e) => {
                let error = unsupported(&registration, modules, bridge_reason(e), model, first);
                bridged.types.insert(registration.name.clone(), Err(error));
                continue;
            }
        };
        let fields: Vec<&str> =
            mapping_order(&ty).filter(|(_, getter)| *getter == Getter::Python).map(|(name, _)| name.as_str()).collect();
        let id_field = (ty.id_getter == Getter::Python).then_some(ty.id_attribute.as_str());
        if !fields.is_empty() || id_field.is_some() {
            for instance in instances {
                // The reference works out the agent, and the id attribute when the class does
                // not map it, before any getter runs: an instance whose id is unknown or
                // fails never reaches them (the export then leaves it out or reports it).
                let ready = match id_field {
                    Some(_) => super::id::agent(&ty, instance, &mut ModelAttributes(model)).is_ok(),
                    None => resource_id(&ty, instance, &mut ModelAttributes(model)).is_ok(),
                };
                if !ready {
                    continue;
                }
                let proxy = proxy(model, &mut sent, instance);
                let (bridge, ..) = host.bridge(None);
                let exported = python::export_fields(bridge, &ty.name, &proxy, id_field, &fields, &mut |request| {
                    answer(model, modules, &mut sent, request)
                });
                let exported = exported.map_err(|e| {
                    let (kind, message) = failure(&ty.name, id_field.unwrap_or("fields"), e);
                    error_at(kind, message, model.location_of(instance))
                });
                bridged.instances.insert(instance, exported);
            }
        }
        bridged.types.insert(registration.name.clone(), Ok(ty));
    }
    bridged
}

/// The evaluated model's answer to what the Python code asks during the export: every value
/// is final, so the answers are read without the machine's evaluation.
fn answer(model: &Model, modules: &Modules, sent: &mut HashSet<u32>, request: python::Request<'_>) -> python::Reply {
    let program = model.program();
    match request {
        python::Request::Attribute { instance, name } => {
            python::Reply::Attribute(attribute(model, sent, instance, name))
        }
        python::Request::EntityOf { instance } => {
            python::Reply::Entity(if (instance as usize) < model.instance_count() {
                Ok(serde_json::Value::String(program.entity(model.entity_of(instance)).name.clone()))
            } else {
                Err(format!("no instance {instance} in this evaluation"))
            })
        }
        python::Request::Entity { name } => python::Reply::Entity(crate::entity_named(program, name)),
        python::Request::ModuleFile { module_dir, path } => python::Reply::ModuleFile(
            crate::plugins::module_file_content(modules, None, module_dir, path).map_err(crate::refusal),
        ),
        python::Request::StdCall { function, .. } => python::Reply::StdCall(Err(python::Refusal::Exception {
            class: "NotImplementedError".to_string(),
            message: format!("inmanta_plugins.std.{function} is not available to the export in weft's Python bridge"),
        })),
    }
}

/// An attribute of an instance proxy, read from the evaluated model.
fn attribute(model: &Model, sent: &mut HashSet<u32>, instance: u32, name: &str) -> python::AttributeReply {
    if instance as usize >= model.instance_count() {
        return python::AttributeReply::Error {
            kind: "RuntimeException".to_string(),
            message: format!("no instance {instance} in this evaluation"),
        };
    }
    match model.read(instance, name) {
        Read::Value(Value::Unknown) => python::AttributeReply::Unknown,
        Read::Value(value) => python::AttributeReply::Value(bridge_value(model, sent, value)),
        Read::Missing => python::AttributeReply::NotFound(format!(
            "could not find attribute with name: {name} in type {}",
            model.program().entity(model.entity_of(instance)).name
        )),
        Read::NoValue => python::AttributeReply::Error {
            kind: "OptionalValueException".to_string(),
            message: format!(
                "Optional variable accessed that has no value (attribute `{name}` of `{}`)",
                model.display(&Value::Instance(instance))
            ),
        },
    }
}

/// A value for the bridge: instances become proxies, in lists and dicts too.
fn bridge_value(model: &Model, sent: &mut HashSet<u32>, value: Value) -> BridgeValue {
    match value {
        Value::Instance(id) => proxy(model, sent, id),
        Value::List(items) if items.iter().any(holds_instances) => {
            BridgeValue::List(items.iter().map(|item| bridge_value(model, sent, item.clone())).collect())
        }
        Value::Dict(entries) if entries.iter().any(|(_, v)| holds_instances(v)) => BridgeValue::Dict(
            entries.iter().map(|(k, v)| (k.to_string(), bridge_value(model, sent, v.clone()))).collect(),
        ),
        other => BridgeValue::Plain(other),
    }
}

/// The proxy of an instance, with its plain attributes' values sent along where they hold no
/// instance, unknown or reference: a getter reads most of them (the files module's reads
/// about ten per resource), and each would be a question to the evaluator and its answer.
/// They are sent the first time only (`sent`): the server keeps them for the instance's
/// later proxies (a host's, for each of its files).
fn proxy(model: &Model, sent: &mut HashSet<u32>, instance: u32) -> BridgeValue {
    let display = model.machine.instance_display(instance);
    if !sent.insert(instance) {
        return BridgeValue::Instance { id: instance, display, known: Vec::new() };
    }
    let known = model
        .plain_attributes(instance)
        .into_iter()
        .filter_map(|name| match model.read(instance, &name) {
            Read::Value(value)
                if !value.any_nested(&|v| matches!(v, Value::Instance(_) | Value::Unknown | Value::Reference(_))) =>
            {
                Some((name, value))
            }
            _ => None,
        })
        .collect();
    BridgeValue::Instance { id: instance, display, known }
}

/// Runs the dependency managers that the modules' Python code registered
/// (`@dependency_manager`) over the exported resources, as the reference does after it made
/// them, and takes the `requires` they leave. Only when the export mapped a type through
/// Python: the fs module's manager, the only other kind weft knows, is native
/// (`super::fs::dir_before_file`) and is not run again.
pub(crate) fn dependency_managers(exporter: &mut Exporter<'_>) -> Result<(), Diagnostic> {
    if !exporter.bridged.types.values().any(|ty| ty.is_ok()) {
        return Ok(());
    }
    let Some(host) = exporter.host.as_deref_mut() else { return Ok(()) };
    let (model, modules) = (exporter.model, exporter.modules);
    let resources: Vec<serde_json::Value> = exporter
        .graph
        .resources
        .iter()
        .zip(&exporter.instance_of)
        .map(|(resource, &instance)| {
            let id = &resource.id;
            serde_json::json!({
                "id": [id.entity_type, id.agent, id.attribute, id.value],
                "instance": instance,
                "display": model.machine.instance_display(instance),
                "fields": resource.fields.to_map(),
                "requires": resource.requires,
            })
        })
        .collect();
    let (bridge, ..) = host.bridge(None);
    let mut sent = HashSet::new();
    let managed = python::dependency_managers(bridge, &resources, NATIVE_DEPENDENCY_MANAGERS, &mut |request| {
        answer(model, modules, &mut sent, request)
    });
    let requires = match managed {
        Ok(Some(requires)) => requires,
        Ok(None) => return Ok(()),
        Err(python::ManagerFailure { manager, error: e }) => {
            // The reference lets a manager's exception through as it is: its class is the
            // export's error kind where weft has one.
            let (kind, message) = match e {
                BridgeError::Python(class, message) | BridgeError::Plugin(class, message) => (
                    ErrorKind::from_name(&class).unwrap_or(ErrorKind::ExternalException),
                    format!("{class}: {message}"),
                ),
                BridgeError::Compiler(kind, message) => {
                    (ErrorKind::from_name(&kind).unwrap_or(ErrorKind::RuntimeException), message)
                }
                other => (ErrorKind::ExternalException, bridge_reason(other)),
            };
            let manager =
                manager.map_or_else(|| "a dependency manager".to_string(), |m| format!("dependency manager {m}"));
            return Err(Diagnostic::error(kind, codes::EXPORT_ERROR, format!("{manager} failed: {message}")));
        }
    };
    let by_id: HashMap<String, usize> =
        exporter.graph.resources.iter().enumerate().map(|(index, resource)| (resource.id.text(), index)).collect();
    for (index, ids) in requires.into_iter().enumerate().take(exporter.graph.resources.len()) {
        let mut indices = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(&required) = by_id.get(&id) else {
                // The reference's lookup of the id among the resources raises `KeyError`.
                return Err(Diagnostic::error(
                    ErrorKind::KeyError,
                    codes::EXPORT_ERROR,
                    format!(
                        "a dependency manager made {} require {id}, which is not a resource of this export",
                        exporter.graph.resources[index].id
                    ),
                ));
            };
            indices.push(required);
        }
        exporter.graph.resources[index].requires = indices;
    }
    Ok(())
}

/// The Python packages whose dependency managers weft runs natively.
const NATIVE_DEPENDENCY_MANAGERS: &[&str] = &["inmanta_plugins.fs"];

/// The resource type a Python class describes.
fn resource_type(name: &str, class: python::ResourceClass) -> ResourceType {
    let getter = |kind: &str| match kind {
        "attr" => Getter::Attr,
        "send_event" => Getter::SendEvent,
        "receive_events" => Getter::ReceiveEvents,
        "report_only" => Getter::ReportOnly,
        "references" => Getter::References,
        "mutators" => Getter::Mutators,
        "managed" => Getter::Managed,
        _ => Getter::Python,
    };
    ResourceType {
        name: name.to_string(),
        agent: class.agent,
        id_attribute: class.id_attribute,
        // Only the class's own getters run in Python; an attribute, or a getter of
        // inmanta's bases, is read as an attribute, as `object_to_id` reads it then.
        id_getter: if getter(&class.id_kind) == Getter::Python { Getter::Python } else { Getter::Attr },
        fields: class.fields.into_iter().map(|(field, kind)| (field, getter(&kind))).collect(),
    }
}

/// The Python modules to import for a registration: the module's plugin package, then the
/// module of the file that registers the type (`plugins/sub/x.py` of a v1 module, `sub/x.py`
/// of a v2 package, is `inmanta_plugins.<module>.sub.x`).
fn python_modules(registration: &Registration) -> Vec<String> {
    let package = format!("inmanta_plugins.{}", registration.module);
    let source = registration.source.strip_prefix("plugins/").unwrap_or(&registration.source);
    let mut parts: Vec<&str> = source.strip_suffix(".py").unwrap_or(source).split('/').collect();
    if parts.last() == Some(&"__init__") {
        parts.pop();
    }
    let module = std::iter::once(package.as_str()).chain(parts).collect::<Vec<_>>().join(".");
    if module == package { vec![package] } else { vec![package, module] }
}

/// Why the bridge could not run a class, for the message of the type's error.
fn bridge_reason(e: BridgeError) -> String {
    match e {
        BridgeError::Python(class, message) | BridgeError::Plugin(class, message) => format!("{class}: {message}"),
        BridgeError::Compiler(kind, message) => format!("{kind}: {message}"),
        BridgeError::Runtime(message) | BridgeError::Unavailable(message) | BridgeError::Unencodable(message) => {
            message
        }
        BridgeError::Unset(cell) => format!("an attribute without a value (cell {cell})"),
    }
}

/// A registered type whose Python class the bridge could not describe.
fn unsupported(
    registration: &Registration,
    modules: &Modules,
    reason: String,
    model: &Model,
    first: u32,
) -> Diagnostic {
    let diagnostic = Diagnostic::error(
        ErrorKind::CompilerException,
        codes::EXPORT_UNSUPPORTED,
        format!(
            "resource type {} is registered by the Python code of module {} ({}), which could not be run for \
             the export: {reason}",
            registration.name,
            registration.module,
            modules.source_display(registration)
        ),
    )
    .with_help(format!(
        "weft exports these resource types without Python: {}; the others need python3 and the module's Python \
         code on this host",
        types::native_names().join(", ")
    ));
    match model.location_of(first) {
        Some(l) => diagnostic.at(l, "an instance of it is created here"),
        None => diagnostic,
    }
}

/// A getter's failure as the reference's `map_field` reports it: a `PluginException` as an
/// `ExplicitPluginException` and any other Python exception as an `ExternalException`, both
/// "Failed to get attribute"; the compiler's own errors as they are.
pub(crate) fn failure(entity: &str, field: &str, e: BridgeError) -> (ErrorKind, String) {
    let failed = |cause: String| format!("Failed to get attribute '{field}' for export on '{entity}': {cause}");
    match e {
        BridgeError::Plugin(class, message) => {
            (ErrorKind::ExplicitPluginException, failed(format!("{class}: {message}")))
        }
        BridgeError::Python(class, message) => (ErrorKind::ExternalException, failed(format!("{class}: {message}"))),
        BridgeError::Unencodable(text) => {
            (ErrorKind::ExternalException, failed(format!("TypeError: {text} is not JSON serializable")))
        }
        BridgeError::Compiler(kind, message) => {
            (ErrorKind::from_name(&kind).unwrap_or(ErrorKind::RuntimeException), message)
        }
        BridgeError::Runtime(message) => (ErrorKind::RuntimeException, message),
        BridgeError::Unset(cell) => {
            (ErrorKind::UnsetException, failed(format!("an attribute without a value (cell {cell})")))
        }
        BridgeError::Unavailable(message) => (ErrorKind::ExternalException, failed(message)),
    }
}

/// The id of an instance whose class maps the id attribute: the agent as for every type, the
/// value as the getter gave it (`str()` of it).
pub(crate) fn mapped_id(
    model: &Model,
    ty: &ResourceType,
    instance: u32,
    outcome: &FieldOutcome,
) -> Result<crate::graph::ResourceId, IdFailure<std::convert::Infallible>> {
    let agent = super::id::agent(ty, instance, &mut ModelAttributes(model))?;
    let value = match outcome {
        FieldOutcome::Value(Value::Str(text)) => text.to_string(),
        FieldOutcome::Value(other) => model.display(other),
        FieldOutcome::Unknown | FieldOutcome::Ignore => return Err(IdFailure::Unknown),
        FieldOutcome::Failed(e) => {
            let (kind, message) = failure(&ty.name, &ty.id_attribute, e.clone());
            return Err(IdFailure::Error(kind, message));
        }
    };
    Ok(crate::graph::ResourceId { entity_type: ty.name.clone(), agent, attribute: ty.id_attribute.clone(), value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_files_name_their_python_modules() {
        let module = |source: &str| {
            python_modules(&Registration { name: "m::T".into(), module: "m".into(), source: source.into() })
        };
        assert_eq!(module("plugins/__init__.py"), ["inmanta_plugins.m"]);
        assert_eq!(module("plugins/sub/x.py"), ["inmanta_plugins.m", "inmanta_plugins.m.sub.x"]);
        assert_eq!(module("text.py"), ["inmanta_plugins.m", "inmanta_plugins.m.text"]);
        assert_eq!(module("sub/__init__.py"), ["inmanta_plugins.m", "inmanta_plugins.m.sub"]);
    }
}
