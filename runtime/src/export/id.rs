//! Resource ids: from an instance of a registered type to `type[agent,attribute=value]`, as
//! the reference's `Resource.object_to_id` computes them.
//!
//! The export computes the id of every resource from the evaluated model; `std::getfact`
//! computes the id of its argument during the evaluation, where an attribute may not have a
//! value yet. Both go through [`resource_id`], so a fact is looked up under exactly the id the
//! export gives the resource; they differ only in how attributes are read ([`Attributes`]).

use weft_ir::ErrorKind;
use weft_ir::value::Value;

use super::Read;
use super::types::ResourceType;
use super::values::{FieldPath, ReferenceCollector, python_str};
use crate::graph::ResourceId;

/// Where the attributes of an id are read.
pub(crate) trait Attributes {
    /// Why a read cannot give a value now: nothing for the evaluated model, the plugin error
    /// (an attribute without a value yet, to wait for) during the evaluation.
    type Wait;
    fn read(&mut self, instance: u32, name: &str) -> Result<Read, Self::Wait>;
    /// Python's `str()` of a value, instances as `Entity (instantiated at file:line)`.
    fn display(&self, value: &Value) -> String;
    /// The fully qualified entity name of an instance.
    fn entity_name(&self, instance: u32) -> String;
}

/// Why an instance has no id.
pub(crate) enum IdFailure<W> {
    /// The agent or the id attribute is Unknown: the export leaves the resource out, a plugin
    /// returns Unknown.
    Unknown,
    /// The reference's exception as the export reports it: its kind and message.
    Error(ErrorKind, String),
    /// A read could not be done now.
    Wait(W),
}

/// The id of an instance of the registered type `ty`: the agent first (following the type's
/// agent path), then the id attribute, whose value is written as Python's `str()`.
pub(crate) fn resource_id<A: Attributes>(
    ty: &ResourceType,
    instance: u32,
    attributes: &mut A,
) -> Result<ResourceId, IdFailure<A::Wait>> {
    let agent = agent(ty, instance, attributes)?;
    let value = id_value(ty, instance, attributes)?;
    Ok(ResourceId { entity_type: ty.name.to_string(), agent, attribute: ty.id_attribute.to_string(), value })
}

/// Follows the type's agent path (`host.name`) from the instance; the first element of a list
/// on the way is taken, as the reference does.
pub(crate) fn agent<A: Attributes>(
    ty: &ResourceType,
    instance: u32,
    attributes: &mut A,
) -> Result<String, IdFailure<A::Wait>> {
    let mut current = Value::Instance(instance);
    for (n, step) in ty.agent.split('.').enumerate() {
        if let Value::List(items) = &current {
            current = items.first().cloned().unwrap_or(Value::NULL);
        }
        let read = match &current {
            Value::Instance(i) => attributes.read(*i, step).map_err(IdFailure::Wait)?,
            Value::Unknown => return Err(IdFailure::Unknown),
            _ => Read::Missing,
        };
        current = match read {
            Read::Value(Value::Unknown) => return Err(IdFailure::Unknown),
            Read::Value(Value::Reference(_)) => {
                let path = ty.agent.split('.').take(n + 1).collect::<Vec<_>>().join(".");
                return Err(IdFailure::Error(
                    ErrorKind::ResourceException,
                    format!(
                        "Encountered reference in resource's agent attribute. Agent attribute values can not be \
                         references. Encountered at attribute '{path}' of resource instance {}",
                        attributes.display(&Value::Instance(instance))
                    ),
                ));
            }
            Read::Value(value) => value,
            Read::Missing | Read::NoValue => {
                return Err(IdFailure::Error(
                    ErrorKind::CompilerException,
                    format!(
                        "Unable to get the name of agent {} belongs to. In path {}, '{step}' does not exist",
                        attributes.display(&Value::Instance(instance)),
                        ty.agent
                    ),
                ));
            }
        };
    }
    match current {
        Value::Str(s) => Ok(s.to_string()),
        other => Err(IdFailure::Error(
            ErrorKind::ResourceException,
            format!(
                "The agent attribute should lead to a string, got {} of type <class '{}'>",
                attributes.display(&other),
                super::values::python_class(&other)
            ),
        )),
    }
}

/// The id attribute's value as `str()` writes it. Every native type's id attribute is a plain
/// attribute (no `get_` method), read as `map_field` reads one.
fn id_value<A: Attributes>(ty: &ResourceType, instance: u32, attributes: &mut A) -> Result<String, IdFailure<A::Wait>> {
    let name = ty.id_attribute.as_str();
    let value = match attributes.read(instance, name).map_err(IdFailure::Wait)? {
        Read::Value(value) => value,
        Read::Missing => {
            return Err(IdFailure::Error(
                ErrorKind::NotFoundException,
                format!("could not find attribute with name: {name} in type {}", attributes.entity_name(instance)),
            ));
        }
        Read::NoValue => {
            return Err(IdFailure::Error(
                ErrorKind::OptionalValueException,
                format!(
                    "Optional variable accessed that has no value (attribute `{name}` of `{}`)",
                    attributes.display(&Value::Instance(instance))
                ),
            ));
        }
    };
    if matches!(value, Value::Reference(_)) {
        return Err(IdFailure::Error(
            ErrorKind::ResourceException,
            format!(
                "Encountered reference in resource's id attribute. Id attribute values can not be references. \
                 Encountered at attribute '{name}' of resource instance {}",
                attributes.display(&Value::Instance(instance))
            ),
        ));
    }
    // A string is its own `str()`; any other value is converted as a field is, then shown as
    // Python shows the JSON value.
    if let Value::Str(s) = &value {
        return Ok(s.to_string());
    }
    let display = |v: &Value| attributes.display(v);
    let mut text = Vec::new();
    match ReferenceCollector::new(String::new()).collect_text(&display, &value, FieldPath::Field(name), &mut text) {
        Ok(true) => Ok(python_str(&serde_json::from_slice(&text).expect("collect_text writes JSON"))),
        Ok(false) => Err(IdFailure::Unknown),
        Err(cause) => Err(IdFailure::Error(
            ErrorKind::ExternalException,
            format!("Failed to get attribute '{name}' for export on '{}': {cause}", ty.name),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::{Getter, native, native_names};

    /// [`super::id_value`] reads the id attribute as a plain attribute; a native type whose id
    /// had a getter would need it there.
    #[test]
    fn id_attributes_are_plain_attributes() {
        for name in native_names() {
            let ty = native(name).unwrap();
            let getter = ty.fields.iter().find(|(f, _)| *f == ty.id_attribute).map_or(Getter::Attr, |(_, g)| *g);
            assert_eq!(getter, Getter::Attr, "{name}");
        }
    }
}
