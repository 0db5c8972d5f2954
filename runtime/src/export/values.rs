//! Field values: from the model's values to the export's JSON, with references moved out.

use std::sync::Arc;

use md5::{Digest, Md5};
use serde_json::{Map, Value as Json};
use weft_ir::value::{Reference, Value, float_repr};
use weft_ir::{ErrorKind, Symbol};

use super::types::{Getter, ResourceType};
use super::{Model, Read, ReadRef, Stop, error_at};
use crate::graph::{write_json, write_json_str};
use crate::plugins::json::write_string;

/// Maps field `name` of a resource instance with its getter, then converts it to JSON text,
/// appended to `out`, with the references moved into `collector`. False when the value is or
/// holds an Unknown (the field is then `"<<undefined>>"`, and what was appended is to be
/// dropped). `symbol` is `name`'s (`Model::symbol`), found once per type rather than for every
/// resource. (The id attribute is read by [`super::id`].)
pub(crate) fn map_field(
    model: &Model,
    ty: &ResourceType,
    (name, getter): (&str, Getter),
    symbol: Option<Symbol>,
    instance: u32,
    collector: &mut ReferenceCollector,
    out: &mut Vec<u8>,
) -> Result<bool, Stop> {
    // Only errors need the instance's place, so it is looked up for an error alone rather
    // than for every field of every resource.
    let location = || model.location_of(instance);
    let failed = |cause: String| {
        Stop::Error(error_at(
            ErrorKind::ExternalException,
            format!("Failed to get attribute '{name}' for export on '{}': {cause}", ty.name),
            location(),
        ))
    };
    let display = |v: &Value| model.display(v);
    let value = match getter {
        // Most fields: written from where the model keeps the value, without a copy.
        Getter::Attr => {
            return model.read_symbol_with(instance, symbol, |read| match read {
                ReadRef::Value(value) => {
                    collector.collect_text(&display, value, FieldPath::Field(name), out).map_err(failed)
                }
                ReadRef::Items(items) => {
                    collector.collect_list_text(&display, items, FieldPath::Field(name), out).map_err(failed)
                }
                ReadRef::Missing => Err(Stop::Error(error_at(
                    ErrorKind::NotFoundException,
                    format!(
                        "could not find attribute with name: {name} in type {}",
                        model.program().entity(model.entity_of(instance)).name
                    ),
                    location(),
                ))),
                ReadRef::NoValue => Err(Stop::Error(error_at(
                    ErrorKind::OptionalValueException,
                    format!(
                        "Optional variable accessed that has no value (attribute `{name}` of `{}`)",
                        model.display(&Value::Instance(instance))
                    ),
                    location(),
                ))),
            });
        }
        Getter::SendEvent | Getter::ReportOnly | Getter::ReceiveEvents => match model.read_symbol(instance, symbol) {
            Read::Value(value) => value,
            _ => Value::Bool(getter == Getter::ReceiveEvents),
        },
        Getter::Managed => match model.read_symbol(instance, symbol) {
            Read::Value(Value::Bool(false)) => return Err(Stop::Ignore),
            Read::Value(value) => value,
            _ => return Err(failed(format!("'{}' object has no attribute 'managed'", ty.name))),
        },
        Getter::IgnoreResource => return Err(Stop::Ignore),
        Getter::FileContent => match model.read(instance, "content") {
            Read::Value(value @ Value::Reference(_)) => value,
            _ => Value::NULL,
        },
        Getter::Permissions => match model.read(instance, "mode") {
            Read::Value(Value::Null(_)) => Value::NULL,
            Read::Value(Value::Unknown) => Value::Unknown,
            Read::Value(value @ (Value::Int(_) | Value::BigInt(_))) => value,
            Read::Value(Value::Float(f)) if f.is_finite() => Value::Int(f.trunc() as i64),
            Read::Value(other) => {
                return Err(failed(format!(
                    "int() argument must be a string or a number, not '{}'",
                    python_class(&other)
                )));
            }
            _ => return Err(failed("'mode' is not an attribute of this entity".to_string())),
        },
        Getter::Via => super::fs::via_context(model, instance).map_err(failed)?,
        // Made by the export itself, where it maps the resource.
        Getter::FileHash | Getter::References | Getter::Mutators | Getter::Python => Value::NULL,
    };
    let converted = collector.collect_text(&display, &value, FieldPath::Field(name), out);
    converted.map_err(failed)
}

/// Where a value sits in a field (`value[0].'key'`), for the messages and mutators that name
/// it: made into text only when one does, not for every element of every list.
#[derive(Clone, Copy)]
pub(crate) enum FieldPath<'a> {
    Field(&'a str),
    Index(&'a FieldPath<'a>, usize),
    Key(&'a FieldPath<'a>, &'a str),
}

impl FieldPath<'_> {
    fn render(&self) -> String {
        match self {
            FieldPath::Field(name) => name.to_string(),
            FieldPath::Index(path, i) => format!("{}[{i}]", path.render()),
            FieldPath::Key(path, key) => format!("{}.'{}'", path.render(), key.replace('\'', "\\'")),
        }
    }
}

/// Collects the references of one resource: the references themselves (each once, by id)
/// and a `core::Replace` mutator for every place a field holds one.
pub(crate) struct ReferenceCollector {
    resource_id: String,
    references: Vec<(String, Json)>,
    mutators: Vec<Json>,
}

impl ReferenceCollector {
    pub(crate) fn new(resource_id: String) -> Self {
        ReferenceCollector { resource_id, references: Vec::new(), mutators: Vec::new() }
    }

    /// The `references` and `mutators` fields.
    pub(crate) fn finish(self) -> (Vec<Json>, Vec<Json>) {
        (self.references.into_iter().map(|(_, model)| model).collect(), self.mutators)
    }

    /// [`Self::collect_text`] of a list given by its elements.
    pub(crate) fn collect_list_text(
        &mut self,
        display: &dyn Fn(&Value) -> String,
        items: &[Value],
        path: FieldPath<'_>,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !self.collect_text(display, item, FieldPath::Index(&path, i), out)? {
                return Ok(false);
            }
        }
        out.push(b']');
        Ok(true)
    }

    /// Converts a value at `path` (`value`, `value[0]`, `value.'key'`) to JSON text, as
    /// `serde_json` writes it, appended to `out`, replacing references by `null`: false for a
    /// value that is or holds an Unknown. An error is the reason, in the reference's words;
    /// `display` is Python's `str()` of a value, for those. Written straight from the model's
    /// values: building JSON values first cost an allocation per string, list and dict, freed
    /// again at once.
    pub(crate) fn collect_text(
        &mut self,
        display: &dyn Fn(&Value) -> String,
        value: &Value,
        path: FieldPath<'_>,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        match value {
            Value::Null(_) => out.extend_from_slice(b"null"),
            Value::Bool(true) => out.extend_from_slice(b"true"),
            Value::Bool(false) => out.extend_from_slice(b"false"),
            Value::Int(i) => write_json(out, i),
            Value::BigInt(i) => {
                return Err(format!("the integer {i} at path {} is too large for weft's JSON export", path.render()));
            }
            Value::Float(f) if f.is_finite() => write_json(out, f),
            Value::Float(f) => {
                return Err(format!("the float {} at path {} is not valid JSON", float_repr(*f), path.render()));
            }
            Value::Str(s) => write_json_str(out, s),
            Value::List(items) => return self.collect_list_text(display, items, path, out),
            Value::Dict(entries) => {
                // Converted in the dict's order, so that its first Unknown or error is the one
                // met; written in key order, as `serde_json`'s map writes keys, a later value
                // of a key replacing an earlier one.
                let mut converted = Vec::new();
                let mut pieces: Vec<(&str, usize, usize)> = Vec::with_capacity(entries.len());
                for (key, item) in entries.iter() {
                    let start = converted.len();
                    if !self.collect_text(display, item, FieldPath::Key(&path, key), &mut converted)? {
                        return Ok(false);
                    }
                    pieces.push((key, start, converted.len()));
                }
                pieces.sort_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                let mut first = true;
                for (n, &(key, start, end)) in pieces.iter().enumerate() {
                    if pieces.get(n + 1).is_some_and(|next| next.0 == key) {
                        continue;
                    }
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    write_json_str(out, key);
                    out.push(b':');
                    out.extend_from_slice(&converted[start..end]);
                }
                out.push(b'}');
            }
            Value::Unknown => return Ok(false),
            Value::Instance(_) => {
                return Err(format!(
                    "{} in resource is not JSON serializable at path {}",
                    display(value),
                    path.render()
                ));
            }
            Value::Reference(reference) => {
                self.replace(reference, path.render())?;
                out.extend_from_slice(b"null");
            }
        }
        Ok(true)
    }

    /// Records a reference found at `path` and the `core::Replace` mutator that puts its
    /// value there on the host.
    fn replace(&mut self, reference: &Arc<Reference>, path: String) -> Result<(), String> {
        let id = self.add_reference(reference)?;
        self.mutators.push(serde_json::json!({
            "type": "core::Replace",
            "args": [
                {"type": "resource", "name": "resource", "id": self.resource_id},
                {"type": "reference", "name": "value", "id": id},
                {"type": "literal", "name": "destination", "value": path},
            ],
        }));
        Ok(())
    }

    /// Records a reference and, after it, the references among its arguments; returns its id.
    fn add_reference(&mut self, reference: &Arc<Reference>) -> Result<String, String> {
        let (id, serialized) = serialize_reference(reference, 0)?;
        if !self.references.iter().any(|(known, _)| *known == id) {
            self.references.push((id.clone(), serialized));
        }
        for (_, argument) in &reference.args {
            self.add_nested(argument)?;
        }
        Ok(id)
    }

    fn add_nested(&mut self, value: &Value) -> Result<(), String> {
        match value {
            Value::Reference(r) => {
                self.add_reference(r)?;
            }
            Value::List(items) => items.iter().try_for_each(|v| self.add_nested(v))?,
            Value::Dict(entries) => entries.iter().try_for_each(|(_, v)| self.add_nested(v))?,
            _ => {}
        }
        Ok(())
    }
}

/// The registered type of a reference class (`@reference("std::Environment")`), from the
/// reference types of the builtin plugin registry.
fn reference_type(reference: &Reference) -> Result<&'static str, String> {
    match crate::plugins::PluginRegistry::builtin().reference_type(&reference.module, &reference.class) {
        Some(registered) => Ok(registered.name),
        None => {
            Err(format!("the reference class {}.{} is not known to weft's export", reference.module, reference.class))
        }
    }
}

/// The Python module of std's reference types.
const STD_REFERENCES: &str = "inmanta_plugins.std";

/// The reference's `ReferenceModel`: `{"type", "args", "id"}`, with the id computed as the
/// reference computes it (a name-based uuid3 of the md5 of its sorted JSON).
fn serialize_reference(reference: &Reference, depth: usize) -> Result<(String, Json), String> {
    if depth > 64 {
        return Err("references nested more than 64 deep".to_string());
    }
    let ty = reference_type(reference)?;
    let mut args = Vec::with_capacity(reference.args.len());
    for (name, value) in &reference.args {
        let argument = match value {
            Value::Null(_) | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) => {
                serde_json::json!({"type": "literal", "name": name, "value": plain_json(value)?})
            }
            Value::Reference(inner) => {
                let (id, _) = serialize_reference(inner, depth + 1)?;
                serde_json::json!({"type": "reference", "name": name, "id": id})
            }
            // The reference serializes only lists and dicts built in Python; one from the model
            // reaches a plugin as a proxy, which it refuses. std's reference plugins build no
            // container of their own, so a container in one of their references is the model's.
            Value::List(_) | Value::Dict(_) if reference.module == STD_REFERENCES => {
                return Err(format!(
                    "TypeError: Unable to serialize argument `{name}` of `<{}.{} object>` with value {}",
                    reference.module,
                    reference.class,
                    value.repr_with_null("None")
                ));
            }
            Value::List(_) | Value::Dict(_) => {
                let mut replacements = Vec::new();
                let cleaned = mutated_json(value, "$".to_string(), &mut replacements, depth)?;
                if replacements.is_empty() {
                    serde_json::json!({"type": "json", "name": name, "value": cleaned})
                } else {
                    let references: Map<String, Json> = replacements
                        .into_iter()
                        .map(|(path, id)| {
                            let argument = serde_json::json!({"type": "reference", "name": path, "id": id});
                            (path, argument)
                        })
                        .collect();
                    serde_json::json!({"type": "mjson", "name": name, "value": cleaned, "references": references})
                }
            }
            other => return Err(format!("Unable to serialize argument `{name}` of a reference with value {other:?}")),
        };
        args.push(argument);
    }
    let hashed = python_dumps_sorted(&serde_json::json!({"type": ty, "args": args}));
    let id = uuid3_oid(&Md5::digest(hashed.as_bytes()));
    Ok((id.clone(), serde_json::json!({"type": ty, "args": args, "id": id})))
}

/// A JSON argument of a reference with the references inside it replaced by `null`, and
/// their paths.
fn mutated_json(value: &Value, path: String, out: &mut Vec<(String, String)>, depth: usize) -> Result<Json, String> {
    Ok(match value {
        Value::List(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| mutated_json(v, format!("{path}[{i}]"), out, depth))
                .collect::<Result<_, _>>()?,
        ),
        Value::Dict(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let escaped = k.replace('\'', "\\'");
                    Ok((k.to_string(), mutated_json(v, format!("{path}.'{escaped}'"), out, depth)?))
                })
                .collect::<Result<_, String>>()?,
        ),
        Value::Reference(inner) => {
            out.push((path, serialize_reference(inner, depth + 1)?.0));
            Json::Null
        }
        other => plain_json(other)?,
    })
}

fn plain_json(value: &Value) -> Result<Json, String> {
    Ok(match value {
        Value::Null(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(Json::Number).ok_or("a float that is not JSON")?,
        Value::Str(s) => Json::String(s.to_string()),
        other => return Err(format!("{other:?} is not a JSON value")),
    })
}

/// `uuid.uuid3(uuid.NAMESPACE_OID, name)` for a bytes name.
fn uuid3_oid(name: &[u8]) -> String {
    const NAMESPACE_OID: [u8; 16] =
        [0x6b, 0xa7, 0xb8, 0x12, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8];
    let mut hasher = Md5::new();
    hasher.update(NAMESPACE_OID);
    hasher.update(name);
    let mut bytes: [u8; 16] = hasher.finalize().into();
    bytes[6] = (bytes[6] & 0x0f) | 0x30;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// Python's `json.dumps(value, sort_keys=True)`: `", "` and `": "` separators, ASCII only.
pub(crate) fn python_dumps_sorted(value: &Json) -> String {
    let mut out = String::new();
    dump(value, &mut out);
    out
}

fn dump(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => out.push_str(&float_repr(f)),
            None => out.push_str(&n.to_string()),
        },
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(key, out);
                out.push_str(": ");
                dump(&map[key], out);
            }
            out.push('}');
        }
    }
}

/// Python's `str()` of a field value, for the id.
pub(crate) fn python_str(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => python_repr(other),
    }
}

fn python_repr(value: &Json) -> String {
    match value {
        Json::Null => "None".to_string(),
        Json::Bool(true) => "True".to_string(),
        Json::Bool(false) => "False".to_string(),
        Json::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => float_repr(f),
            None => n.to_string(),
        },
        Json::String(s) => weft_ir::value::str_repr(s),
        Json::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Json::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", weft_ir::value::str_repr(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The Python class name of a value, as `type(x)` shows it.
pub(crate) fn python_class(value: &Value) -> &'static str {
    match value {
        Value::Null(_) => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) | Value::BigInt(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::List(_) => "list",
        Value::Dict(_) => "dict",
        Value::Instance(_) => "inmanta.execute.proxy.DynamicProxy",
        Value::Unknown => "inmanta.execute.util.Unknown",
        Value::Reference(_) => "inmanta.references.Reference",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_ids_match_the_reference_compiler() {
        // Recorded from inmanta-core 18.0.1: std::create_environment_reference("SECRET_X").
        let reference = Reference {
            class: "EnvironmentReference".to_string(),
            module: "inmanta_plugins.std".to_string(),
            args: vec![("name".to_string(), Value::str("SECRET_X"))],
        };
        let (id, _) = serialize_reference(&reference, 0).unwrap();
        assert_eq!(id, "b0be4a7a-9adc-3f7c-9f18-5513aff204da");
    }

    #[test]
    fn dumps_like_python() {
        let value = serde_json::json!({"b": [1, 2.5, "é\n"], "a": null});
        assert_eq!(python_dumps_sorted(&value), r#"{"a": null, "b": [1, 2.5, "\u00e9\n"]}"#);
    }

    /// The JSON text of a field's value: as `serde_json` writes the JSON value (keys in order,
    /// its numbers and escapes), references moved out with the place they were at, and the
    /// first Unknown or error met in the value's own order. The expectations are those of the
    /// conversion through JSON values that this one replaced.
    #[test]
    fn field_text_is_the_serialized_json() {
        let dict =
            |entries: Vec<(&str, Value)>| Value::Dict(entries.into_iter().map(|(k, v)| (Arc::from(k), v)).collect());
        let list = |items: Vec<Value>| Value::List(items.into());
        let reference = Value::Reference(Arc::new(Reference {
            class: "EnvironmentReference".to_string(),
            module: "inmanta_plugins.std".to_string(),
            args: vec![("name".to_string(), Value::str("SECRET_X"))],
        }));
        let id = "b0be4a7a-9adc-3f7c-9f18-5513aff204da";
        let replace = |path: &str| {
            serde_json::json!({"type": "core::Replace", "args": [
                {"type": "resource", "name": "resource", "id": "r"},
                {"type": "reference", "name": "value", "id": id},
                {"type": "literal", "name": "destination", "value": path},
            ]})
        };
        let environment = serde_json::json!({
            "type": "std::Environment",
            "args": [{"type": "literal", "name": "name", "value": "SECRET_X"}],
            "id": id,
        });
        let unknown = Ok(None);
        // A value; its text (`None` for an Unknown) or error; its references and mutators.
        type Case<'a> = (Value, Result<Option<&'a str>, &'a str>, Vec<Json>, Vec<Json>);
        let cases: Vec<Case> = vec![
            (Value::NULL, Ok(Some("null")), vec![], vec![]),
            (Value::Bool(true), Ok(Some("true")), vec![], vec![]),
            (Value::Int(-42), Ok(Some("-42")), vec![], vec![]),
            (Value::Float(2.5), Ok(Some("2.5")), vec![], vec![]),
            (Value::Float(1e300), Ok(Some("1e+300")), vec![], vec![]),
            (Value::Float(-0.0), Ok(Some("-0.0")), vec![], vec![]),
            (
                Value::str("quote \" backslash \\ newline \n tab \t \u{1} é 😀"),
                Ok(Some(r#""quote \" backslash \\ newline \n tab \t \u0001 é 😀""#)),
                vec![],
                vec![],
            ),
            (list(vec![Value::Int(1), list(vec![]), dict(vec![])]), Ok(Some("[1,[],{}]")), vec![], vec![]),
            (
                dict(vec![
                    ("b", Value::Int(1)),
                    ("a", list(vec![Value::str("x")])),
                    ("é", Value::NULL),
                    ("B", Value::Bool(false)),
                ]),
                Ok(Some(r#"{"B":false,"a":["x"],"b":1,"é":null}"#)),
                vec![],
                vec![],
            ),
            (
                dict(vec![("k", reference.clone()), ("l", list(vec![Value::Int(1), reference.clone()]))]),
                Ok(Some(r#"{"k":null,"l":[1,null]}"#)),
                vec![environment],
                vec![replace("f.'k'"), replace("f.'l'[1]")],
            ),
            (
                list(vec![Value::Int(1), Value::Unknown, Value::BigInt(Arc::new(num_bigint::BigInt::from(1u8) << 70))]),
                unknown,
                vec![],
                vec![],
            ),
            (dict(vec![("z", Value::Unknown), ("a", Value::Float(f64::NAN))]), unknown, vec![], vec![]),
            (
                dict(vec![("a", Value::Float(f64::INFINITY)), ("z", Value::Unknown)]),
                Err("the float inf at path f.'a' is not valid JSON"),
                vec![],
                vec![],
            ),
            (
                list(vec![Value::Instance(0)]),
                Err("Instance(0) in resource is not JSON serializable at path f[0]"),
                vec![],
                vec![],
            ),
        ];
        let display = |v: &Value| format!("{v:?}");
        for (value, expected, references, mutators) in cases {
            let mut collector = ReferenceCollector::new("r".into());
            let mut text = Vec::new();
            let got = collector.collect_text(&display, &value, FieldPath::Field("f"), &mut text);
            let got =
                got.as_ref().map(|&known| known.then(|| std::str::from_utf8(&text).unwrap())).map_err(String::as_str);
            assert_eq!(got, expected, "{value:?}");
            assert_eq!(collector.finish(), (references, mutators), "{value:?}");
        }
    }
}
