//! References and mutators: filling a resource's secret values in at deploy time.
//!
//! An exported resource never holds a reference's value: the field is `null`, `references`
//! describes how to obtain the value (`{"type", "args", "id"}`), and a `core::Replace` mutator
//! says where to put it (`{"args": [resource, value (a reference id), destination]}`). Here, in
//! the worker that deploys the resource, the references are resolved and the mutators run on a
//! private copy of the fields, which only the handler sees.
//!
//! Everything a reference resolved to is secret: [`Resolved`] remembers which top-level fields
//! received such a value (the report shows `<secret>` for them) and the values' texts (so
//! messages can be scrubbed of them). Error messages here name references by id and
//! environment variables by name, never by value.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use super::EnvironmentReader;

/// References may take other references as arguments; this bounds the nesting, so a malformed
/// (cyclic) graph fails instead of recursing without end.
const MAX_DEPTH: usize = 32;

/// A resource's fields after its mutators ran.
#[derive(Debug)]
pub(super) struct Resolved<'g> {
    /// The fields to hand to the handler: borrowed from the graph when the resource has no
    /// mutators, otherwise a private copy with the resolved values in place.
    pub fields: Cow<'g, Map<String, Json>>,
    /// The top-level fields a reference's value was written into (sorted, no duplicates).
    pub secret_fields: Vec<String>,
    /// The text of every resolved value, to scrub from messages.
    pub secret_texts: Vec<String>,
}

impl Resolved<'_> {
    /// Whether `field` holds (part of) a resolved reference value.
    pub fn is_secret(&self, field: &str) -> bool {
        self.secret_fields.binary_search_by(|f| f.as_str().cmp(field)).is_ok()
    }
}

/// Why the references or mutators of a resource could not be applied.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReferenceError {
    #[error("Environment variable {0} is not set")]
    EnvironmentNotSet(String),
    #[error("the environment variable named by another reference (in reference {0}) is not set")]
    IndirectEnvironmentNotSet(String),
    #[error("unknown reference type {kind} (reference {id})")]
    UnknownType { kind: String, id: String },
    #[error("unknown mutator type {0}")]
    UnknownMutator(String),
    #[error("reference {0} is used but not listed in the resource's `references`")]
    Missing(String),
    #[error("references nest more than {MAX_DEPTH} deep at reference {0} (a reference cycle?)")]
    TooDeep(String),
    #[error("reference {id}: argument `{argument}` {problem}")]
    BadArgument { id: String, argument: String, problem: &'static str },
    #[error("reference {0}: std::IntReference can not convert its value to an int")]
    NotAnInt(String),
    /// A `std::FactReference` asks the orchestrator for the fact when it is resolved; only
    /// its mocked facts (the reference's test harness) are available without one.
    #[error("reference {id}: std::FactReference `{fact}` of {resource} is not available without an orchestrator")]
    FactWithoutOrchestrator { id: String, resource: String, fact: String },
    /// `LookupError` of `FactReference.resolve`: the fact is not among the mocked facts.
    #[error("reference {id}: Didn't find fact `{fact}` for resource `{resource}`")]
    FactNotFound { id: String, resource: String, fact: String },
    #[error("malformed `{field}`: {problem}")]
    Malformed { field: &'static str, problem: String },
    #[error("mutator destination `{destination}`: {problem}")]
    BadDestination { destination: String, problem: String },
}

/// Resolves the references of a resource and runs its mutators.
pub(super) fn resolve<'g>(
    fields: &'g Map<String, Json>,
    environment: &EnvironmentReader,
) -> Result<Resolved<'g>, ReferenceError> {
    let mutators = match fields.get("mutators") {
        None | Some(Json::Null) => return Ok(unchanged(fields)),
        Some(Json::Array(list)) if list.is_empty() => return Ok(unchanged(fields)),
        Some(Json::Array(list)) => list,
        Some(_) => return Err(malformed("mutators", "not a list".to_string())),
    };
    let mut resolver = Resolver::new(fields, environment)?;
    let mut copy = fields.clone();
    let mut secret_fields = Vec::new();
    for mutator in mutators {
        let kind = mutator.get("type").and_then(Json::as_str).unwrap_or_default();
        if kind != "core::Replace" {
            return Err(ReferenceError::UnknownMutator(kind.to_string()));
        }
        let args = arguments_of(mutator, "mutators")?;
        let mut value = None;
        let mut destination = None;
        for argument in args {
            match argument.get("name").and_then(Json::as_str) {
                Some("value") => value = Some(resolver.argument_value(argument, "core::Replace", 0)?.0),
                Some("destination") => destination = argument.get("value").and_then(Json::as_str),
                // The `resource` argument names the resource itself: the copy being mutated.
                _ => {}
            }
        }
        let (Some(value), Some(destination)) = (value, destination) else {
            return Err(malformed("mutators", "core::Replace needs a `value` and a `destination`".to_string()));
        };
        let path = DestinationPath::parse(destination)?;
        path.assign(&mut copy, value)?;
        secret_fields.push(path.field);
    }
    secret_fields.sort_unstable();
    secret_fields.dedup();
    Ok(Resolved { fields: Cow::Owned(copy), secret_fields, secret_texts: resolver.secret_texts })
}

fn unchanged(fields: &Map<String, Json>) -> Resolved<'_> {
    Resolved { fields: Cow::Borrowed(fields), secret_fields: Vec::new(), secret_texts: Vec::new() }
}

fn malformed(field: &'static str, problem: String) -> ReferenceError {
    ReferenceError::Malformed { field, problem }
}

fn arguments_of<'a>(item: &'a Json, field: &'static str) -> Result<&'a [Json], ReferenceError> {
    match item.get("args") {
        Some(Json::Array(args)) => Ok(args),
        None | Some(Json::Null) => Ok(&[]),
        Some(_) => Err(malformed(field, "`args` is not a list".to_string())),
    }
}

/// Resolves references by id, each at most once per resource.
struct Resolver<'g> {
    by_id: HashMap<&'g str, &'g Json>,
    resolved: HashMap<&'g str, Json>,
    environment: &'g EnvironmentReader,
    secret_texts: Vec<String>,
}

impl<'g> Resolver<'g> {
    fn new(fields: &'g Map<String, Json>, environment: &'g EnvironmentReader) -> Result<Self, ReferenceError> {
        let mut by_id = HashMap::new();
        match fields.get("references") {
            None | Some(Json::Null) => {}
            Some(Json::Array(list)) => {
                for reference in list {
                    let Some(id) = reference.get("id").and_then(Json::as_str) else {
                        return Err(malformed("references", "a reference has no `id` string".to_string()));
                    };
                    by_id.insert(id, reference);
                }
            }
            Some(_) => return Err(malformed("references", "not a list".to_string())),
        }
        Ok(Resolver { by_id, resolved: HashMap::new(), environment, secret_texts: Vec::new() })
    }

    /// The value of one argument, and whether it came from a reference (then it is secret).
    fn argument_value(
        &mut self,
        argument: &'g Json,
        owner: &str,
        depth: usize,
    ) -> Result<(Json, bool), ReferenceError> {
        let name = argument.get("name").and_then(Json::as_str).unwrap_or_default();
        let bad = |problem| ReferenceError::BadArgument { id: owner.to_string(), argument: name.to_string(), problem };
        match argument.get("type").and_then(Json::as_str) {
            Some("literal") | Some("json") => Ok((argument.get("value").cloned().unwrap_or(Json::Null), false)),
            Some("reference") => {
                let id = argument.get("id").and_then(Json::as_str).ok_or_else(|| bad("has no reference `id`"))?;
                Ok((self.reference(id, depth + 1)?, true))
            }
            Some("mjson") => {
                // A JSON value with references at some paths inside it.
                let mut value = argument.get("value").cloned().unwrap_or(Json::Null);
                let Some(Json::Object(inner)) = argument.get("references") else {
                    return Ok((value, false));
                };
                for (path, inner_argument) in inner {
                    let (inner_value, _) = self.argument_value(inner_argument, owner, depth)?;
                    let path = DestinationPath::parse(path.strip_prefix('$').unwrap_or(path))?;
                    path.assign_in_value(&mut value, inner_value)?;
                }
                Ok((value, !inner.is_empty()))
            }
            _ => Err(bad("has an unsupported argument type")),
        }
    }

    /// Resolves the reference `id`.
    fn reference(&mut self, id: &'g str, depth: usize) -> Result<Json, ReferenceError> {
        if let Some(value) = self.resolved.get(id) {
            return Ok(value.clone());
        }
        if depth > MAX_DEPTH {
            return Err(ReferenceError::TooDeep(id.to_string()));
        }
        let reference = *self.by_id.get(id).ok_or_else(|| ReferenceError::Missing(id.to_string()))?;
        let kind = reference.get("type").and_then(Json::as_str).unwrap_or_default();
        let mut arguments = HashMap::new();
        for argument in arguments_of(reference, "references")? {
            let name = argument.get("name").and_then(Json::as_str).unwrap_or_default();
            arguments.insert(name, self.argument_value(argument, id, depth)?);
        }
        let missing = |argument: &str| ReferenceError::BadArgument {
            id: id.to_string(),
            argument: argument.to_string(),
            problem: "is missing",
        };
        let value = match kind {
            "std::Environment" => {
                let (name, name_is_secret) = arguments.get("name").ok_or_else(|| missing("name"))?;
                let Json::String(name) = name else {
                    return Err(ReferenceError::BadArgument {
                        id: id.to_string(),
                        argument: "name".to_string(),
                        problem: "is not a string",
                    });
                };
                match (self.environment)(name) {
                    Some(value) => Json::String(value),
                    // A variable name that itself came from a reference is secret too.
                    None if *name_is_secret => return Err(ReferenceError::IndirectEnvironmentNotSet(id.to_string())),
                    None => return Err(ReferenceError::EnvironmentNotSet(name.clone())),
                }
            }
            "std::IntReference" => {
                let (value, _) = arguments.get("value").ok_or_else(|| missing("value"))?;
                python_int(value).map(Json::from).ok_or_else(|| ReferenceError::NotAnInt(id.to_string()))?
            }
            "std::FactReference" => {
                let text = |name: &str| match arguments.get(name) {
                    Some((Json::String(text), _)) => Ok(text.clone()),
                    Some(_) => Err(ReferenceError::BadArgument {
                        id: id.to_string(),
                        argument: name.to_string(),
                        problem: "is not a string",
                    }),
                    None => Err(missing(name)),
                };
                let (resource, fact) = (text("resource_id")?, text("fact_name")?);
                match arguments.get("mocked_facts") {
                    Some((Json::Object(mocked), _)) => match mocked.get(&resource).and_then(|facts| facts.get(&fact)) {
                        Some(value) => value.clone(),
                        None => return Err(ReferenceError::FactNotFound { id: id.to_string(), resource, fact }),
                    },
                    _ => {
                        return Err(ReferenceError::FactWithoutOrchestrator { id: id.to_string(), resource, fact });
                    }
                }
            }
            _ => return Err(ReferenceError::UnknownType { kind: kind.to_string(), id: id.to_string() }),
        };
        self.secret_texts.push(match &value {
            Json::String(text) => text.clone(),
            other => other.to_string(),
        });
        self.resolved.insert(id, value.clone());
        Ok(value)
    }
}

/// Python's `int(value)` for the JSON values a reference can produce: ints, floats (truncated),
/// booleans, and strings of decimal digits with optional sign, surrounding whitespace and
/// single underscores between digits.
fn python_int(value: &Json) -> Option<i64> {
    match value {
        Json::Bool(b) => Some(i64::from(*b)),
        Json::Number(n) => n.as_i64().or_else(|| {
            let float = n.as_f64()?;
            (float.is_finite() && float.abs() < 9.2e18).then(|| float.trunc() as i64)
        }),
        Json::String(text) => {
            let text = text.trim();
            let (negative, digits) = match text.as_bytes().first() {
                Some(b'-') => (true, &text[1..]),
                Some(b'+') => (false, &text[1..]),
                _ => (false, text),
            };
            let well_formed = !digits.is_empty()
                && !digits.starts_with('_')
                && !digits.ends_with('_')
                && !digits.contains("__")
                && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_');
            if !well_formed {
                return None;
            }
            let magnitude: i64 = digits.replace('_', "").parse().ok()?;
            Some(if negative { -magnitude } else { magnitude })
        }
        _ => None,
    }
}

/// One step of a destination path below the top-level field.
#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A mutator destination: a field name followed by `[n]` list indexes and `.key` / `.'key'`
/// dict keys, the subset of the reference's JSONPath destinations its exporter writes.
#[derive(Debug, PartialEq)]
struct DestinationPath {
    field: String,
    steps: Vec<Step>,
}

impl DestinationPath {
    fn parse(text: &str) -> Result<DestinationPath, ReferenceError> {
        let bad = |problem: &str| ReferenceError::BadDestination {
            destination: text.to_string(),
            problem: problem.to_string(),
        };
        let mut rest = text.strip_prefix('.').unwrap_or(text);
        let (field, after) = take_key(rest).ok_or_else(|| bad("does not start with a field name"))?;
        rest = after;
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(after_dot) = rest.strip_prefix('.') {
                let (key, after) = take_key(after_dot).ok_or_else(|| bad("expected a key after `.`"))?;
                steps.push(Step::Key(key));
                rest = after;
            } else if let Some(after_bracket) = rest.strip_prefix('[') {
                let close = after_bracket.find(']').ok_or_else(|| bad("unclosed `[`"))?;
                let inside = after_bracket[..close].trim();
                if let Ok(index) = inside.parse::<usize>() {
                    steps.push(Step::Index(index));
                } else if let Some((key, "")) = take_quoted(inside) {
                    steps.push(Step::Key(key));
                } else {
                    return Err(bad("only list indexes and quoted keys are supported between brackets"));
                }
                rest = &after_bracket[close + 1..];
            } else {
                return Err(bad("expected `.` or `[`"));
            }
        }
        Ok(DestinationPath { field, steps })
    }

    /// Writes `value` at this path into the fields.
    fn assign(&self, fields: &mut Map<String, Json>, value: Json) -> Result<(), ReferenceError> {
        let slot = fields.entry(self.field.clone()).or_insert(Json::Null);
        self.assign_steps(slot, value)
    }

    /// Writes `value` at this path inside a JSON value (for `mjson` arguments), the field name
    /// being the first key.
    fn assign_in_value(&self, target: &mut Json, value: Json) -> Result<(), ReferenceError> {
        let Json::Object(map) = target else {
            return Err(self.problem("the value is not a dict"));
        };
        self.assign(map, value)
    }

    fn assign_steps(&self, mut slot: &mut Json, value: Json) -> Result<(), ReferenceError> {
        for step in &self.steps {
            slot = match (step, slot) {
                (Step::Key(key), Json::Object(map)) => map.entry(key.clone()).or_insert(Json::Null),
                (Step::Index(index), Json::Array(list)) => {
                    let length = list.len();
                    list.get_mut(*index)
                        .ok_or_else(|| self.problem(&format!("index {index} is out of range ({length} items)")))?
                }
                (Step::Key(key), _) => {
                    return Err(self.problem(&format!("`{key}` is looked up in a value that is not a dict")));
                }
                (Step::Index(index), _) => {
                    return Err(self.problem(&format!("[{index}] indexes a value that is not a list")));
                }
            };
        }
        *slot = value;
        Ok(())
    }

    fn problem(&self, problem: &str) -> ReferenceError {
        let mut text = self.field.clone();
        for step in &self.steps {
            match step {
                Step::Key(key) => text.push_str(&format!(".'{key}'")),
                Step::Index(index) => text.push_str(&format!("[{index}]")),
            }
        }
        ReferenceError::BadDestination { destination: text, problem: problem.to_string() }
    }
}

/// A key at the start of `text`: quoted with `'` or `"`, or a bare run of characters up to the
/// next `.` or `[`. Returns the key and the rest.
fn take_key(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = take_quoted(text) {
        return Some(quoted);
    }
    let end = text.find(['.', '[']).unwrap_or(text.len());
    (end > 0).then(|| (text[..end].to_string(), &text[end..]))
}

/// A `'…'` or `"…"` string at the start of `text` (backslash escapes the next character).
fn take_quoted(text: &str) -> Option<(String, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut key = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => key.push(chars.next()?.1),
            c if c == quote => return Some((key, &text[at + 1..])),
            c => key.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn environment() -> EnvironmentReader {
        Arc::new(|name: &str| match name {
            "PASS" => Some("hunter2-secret".to_string()),
            "PORT" => Some(" 8_080 ".to_string()),
            "NAME_OF_PASS" => Some("PASS".to_string()),
            "NAME_OF_UNSET" => Some("UNSET_hunter3".to_string()),
            _ => None,
        })
    }

    fn env_reference(id: &str, variable: &str) -> Json {
        json!({"type": "std::Environment", "id": id, "args": [{"type": "literal", "name": "name", "value": variable}]})
    }

    fn replace(id: &str, destination: &str) -> Json {
        json!({"type": "core::Replace", "args": [
            {"type": "resource", "name": "resource", "id": "x"},
            {"type": "reference", "name": "value", "id": id},
            {"type": "literal", "name": "destination", "value": destination}]})
    }

    fn fields(value: Json) -> Map<String, Json> {
        let Json::Object(map) = value else { panic!("test fields must be an object") };
        map
    }

    /// Resolves `input` and compares the resulting fields (or the error message) with `expected`.
    fn check(input: Json, expected: Result<Json, &str>) {
        let input = fields(input);
        let result = resolve(&input, &environment());
        match (result, expected) {
            (Ok(resolved), Ok(expected)) => assert_eq!(Json::Object(resolved.fields.into_owned()), expected),
            (Err(error), Err(message)) => assert_eq!(error.to_string(), message),
            (Ok(resolved), Err(message)) => panic!("expected the error {message:?}, got {:?}", resolved.fields),
            (Err(error), Ok(_)) => panic!("unexpected error: {error}"),
        }
    }

    #[test]
    fn mutators_write_resolved_values() {
        let cases = [
            (
                json!({"value": null, "references": [env_reference("r1", "PASS")], "mutators": [replace("r1", "value")]}),
                Ok(
                    json!({"value": "hunter2-secret", "references": [env_reference("r1", "PASS")], "mutators": [replace("r1", "value")]}),
                ),
            ),
            (
                json!({"environment": {"PASS": null, "A": "b"}, "references": [env_reference("r1", "PASS")],
                       "mutators": [replace("r1", "environment.'PASS'")]}),
                Ok(
                    json!({"environment": {"PASS": "hunter2-secret", "A": "b"}, "references": [env_reference("r1", "PASS")],
                          "mutators": [replace("r1", "environment.'PASS'")]}),
                ),
            ),
            (
                json!({"returns": [0, null], "references": [
                        env_reference("r1", "PORT"),
                        {"type": "std::IntReference", "id": "r2", "args": [{"type": "reference", "name": "value", "id": "r1"}]}],
                       "mutators": [replace("r2", "returns[1]")]}),
                Ok(json!({"returns": [0, 8080], "references": [
                        env_reference("r1", "PORT"),
                        {"type": "std::IntReference", "id": "r2", "args": [{"type": "reference", "name": "value", "id": "r1"}]}],
                       "mutators": [replace("r2", "returns[1]")]})),
            ),
            (
                json!({"value": null, "references": [env_reference("r1", "NAME_OF_PASS"),
                        {"type": "std::Environment", "id": "r2", "args": [{"type": "reference", "name": "name", "id": "r1"}]}],
                       "mutators": [replace("r2", "value")]}),
                Ok(json!({"value": "hunter2-secret", "references": [env_reference("r1", "NAME_OF_PASS"),
                        {"type": "std::Environment", "id": "r2", "args": [{"type": "reference", "name": "name", "id": "r1"}]}],
                       "mutators": [replace("r2", "value")]})),
            ),
            // A fact reference with mocked facts (the reference's test harness) resolves from them.
            (
                json!({"value": null, "references": [fact_reference("r1", json!({"R[a,name=x]": {"ip": "10.0.0.1"}}))],
                       "mutators": [replace("r1", "value")]}),
                Ok(
                    json!({"value": "10.0.0.1", "references": [fact_reference("r1", json!({"R[a,name=x]": {"ip": "10.0.0.1"}}))],
                          "mutators": [replace("r1", "value")]}),
                ),
            ),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }

    /// A `std::FactReference` as `std::create_fact_reference` exports it.
    fn fact_reference(id: &str, mocked_facts: Json) -> Json {
        json!({"type": "std::FactReference", "id": id, "args": [
            {"type": "literal", "name": "environment", "value": "None"},
            {"type": "literal", "name": "resource_id", "value": "R[a,name=x]"},
            {"type": "literal", "name": "fact_name", "value": "ip"},
            {"type": "literal", "name": "mocked_facts", "value": mocked_facts}]})
    }

    #[test]
    fn resolution_errors_never_contain_values() {
        let cases = [
            (
                json!({"references": [fact_reference("r1", Json::Null)], "mutators": [replace("r1", "value")]}),
                "reference r1: std::FactReference `ip` of R[a,name=x] is not available without an orchestrator",
            ),
            (
                json!({"references": [fact_reference("r1", json!({}))], "mutators": [replace("r1", "value")]}),
                "reference r1: Didn't find fact `ip` for resource `R[a,name=x]`",
            ),
            (
                json!({"references": [env_reference("r1", "MISSING")], "mutators": [replace("r1", "value")]}),
                "Environment variable MISSING is not set",
            ),
            (
                json!({"references": [{"type": "acme::Vault", "id": "r1", "args": []}], "mutators": [replace("r1", "value")]}),
                "unknown reference type acme::Vault (reference r1)",
            ),
            (
                json!({"references": [], "mutators": [replace("r9", "value")]}),
                "reference r9 is used but not listed in the resource's `references`",
            ),
            (
                json!({"references": [env_reference("r1", "PASS"),
                    {"type": "std::IntReference", "id": "r2", "args": [{"type": "reference", "name": "value", "id": "r1"}]}],
                    "mutators": [replace("r2", "value")]}),
                "reference r2: std::IntReference can not convert its value to an int",
            ),
            // The variable's name comes from a reference, so it is secret and not shown.
            (
                json!({"references": [env_reference("r1", "NAME_OF_UNSET"),
                    {"type": "std::Environment", "id": "r2", "args": [{"type": "reference", "name": "name", "id": "r1"}]}],
                    "mutators": [replace("r2", "value")]}),
                "the environment variable named by another reference (in reference r2) is not set",
            ),
            (
                json!({"references": [{"type": "std::Environment", "id": "r1", "args": [{"type": "reference", "name": "name", "id": "r1"}]}],
                    "mutators": [replace("r1", "value")]}),
                "references nest more than 32 deep at reference r1 (a reference cycle?)",
            ),
            (
                json!({"value": 1, "references": [env_reference("r1", "PASS")], "mutators": [replace("r1", "value.'x'")]}),
                "mutator destination `value.'x'`: `x` is looked up in a value that is not a dict",
            ),
        ];
        for (input, message) in cases {
            check(input, Err(message));
        }
    }

    #[test]
    fn secret_fields_and_texts_are_recorded() {
        let input = fields(json!({"value": null, "name": "n", "references": [env_reference("r1", "PASS")],
                                  "mutators": [replace("r1", "value")]}));
        let resolved = resolve(&input, &environment()).unwrap();
        assert!(resolved.is_secret("value"));
        assert!(!resolved.is_secret("name"));
        assert_eq!(resolved.secret_texts, vec!["hunter2-secret".to_string()]);
        let plain = fields(json!({"value": 1, "mutators": []}));
        assert!(matches!(resolve(&plain, &environment()).unwrap().fields, Cow::Borrowed(_)));
    }

    #[test]
    fn destinations_parse() {
        let parsed = DestinationPath::parse("a.b.'c.d'[2][\"e\"]").unwrap();
        assert_eq!(parsed.field, "a");
        assert_eq!(
            parsed.steps,
            vec![Step::Key("b".into()), Step::Key("c.d".into()), Step::Index(2), Step::Key("e".into())]
        );
        assert!(DestinationPath::parse("a[*]").is_err());
        assert!(DestinationPath::parse("").is_err());
    }

    #[test]
    fn python_int_conversions() {
        for (value, expected) in [
            (json!(7), Some(7)),
            (json!(7.9), Some(7)),
            (json!(true), Some(1)),
            (json!(" -1_000 "), Some(-1000)),
            (json!("1__0"), None),
            (json!("x"), None),
            (json!(null), None),
        ] {
            assert_eq!(python_int(&value), expected, "{value}");
        }
    }
}
