//! The inputs of a compiled model: what it may read from the host that evaluates it.
//!
//! An artifact is evaluated again and again, each time with the host's own inputs, so those
//! inputs are read at run time and never baked in. This module describes them, for
//! `weft inspect` and for hosts that want to know what to provide:
//!
//! * *parameters*: top-level variables of `main.cf` declared in `project.yml`
//!   (`weft: parameters:`), whose default a host may replace (`--set name=value`, parsed by
//!   [`parse_parameter_value`]);
//! * *environment variables* read during evaluation: `std::get_env` and `std::get_env_int`
//!   name them, and the std helpers that describe the orchestrator (`std::environment`,
//!   `std::server_port`, ...) read fixed `INMANTA_*` variables;
//! * *facts*, read by `std::getfact`;
//! * environment variables read at *apply* time, by references that
//!   `std::create_environment_reference` creates.
//!
//! Discovery scans the instruction table, so a call counts wherever it is written, even in a
//! branch that never runs: the list says what a model *may* read. A name that is not a
//! constant in the source is computed at run time and cannot be listed; such call sites are
//! recorded as *dynamic*. Plugins of other modules run through the Python bridge and may read
//! anything; they are not listed.

use std::fmt::Write as _;
use std::sync::Arc;

use num_bigint::BigInt;
use serde::{Deserialize, Serialize};

use crate::program::{Callee, ExprKind, Program};
use crate::span::Location;
use crate::value::{Dict, Value, float_repr};

/// Everything a model may read from its host. Each list is sorted by name, then by location.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// Declared parameters, sorted by name.
    pub parameters: Vec<ParameterInput>,
    /// Environment variables read during evaluation, by constant name.
    pub env_vars: Vec<EnvInput>,
    /// Whether some call reads an environment variable whose name is computed at run time.
    pub dynamic_env: bool,
    /// Those calls.
    pub dynamic_env_sites: Vec<Site>,
    /// Facts read through `std::getfact`, by constant fact name.
    pub facts: Vec<FactInput>,
    /// `std::getfact` calls whose fact name is computed at run time.
    pub dynamic_fact_sites: Vec<Site>,
    /// Environment variables read on the host at apply time, through references.
    pub apply_env_vars: Vec<EnvInput>,
    /// References to environment variables whose name is computed at run time.
    pub dynamic_apply_env_sites: Vec<Site>,
}

/// A declared parameter, as a host sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParameterInput {
    pub name: String,
    pub description: Option<String>,
    /// What `--set` accepts, from the default's type: `string`, `int`, `float`, `bool`,
    /// `list` or `dict` (JSON), or `json` when the default is `null` (any JSON value).
    pub type_name: String,
    /// The default, written as in the model (`3`, `"eu-west"`, `["a", "b"]`, `null`).
    pub default: String,
    /// The assignment in `main.cf`: `./main.cf:3`.
    pub location: String,
}

/// Where an input is read: the plugin and the call site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The qualified plugin name: `std::get_env`.
    pub plugin: String,
    /// `./main.cf:12`
    pub location: String,
}

/// An environment variable and every place that reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvInput {
    pub name: String,
    pub sites: Vec<Site>,
}

/// A fact name and every place that reads it. Facts belong to a resource, which is a run-time
/// value: the name is what the model asks for, for whichever resource it passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactInput {
    pub name: String,
    pub sites: Vec<Site>,
}

/// How a std plugin reads the host.
enum Reads {
    /// An environment variable named by an argument (position, keyword).
    EnvNamedBy(usize, &'static str),
    /// Fixed environment variables.
    Env(&'static [&'static str]),
    /// A fact named by an argument (position, keyword).
    FactNamedBy(usize, &'static str),
    /// An environment variable read at apply time, named by an argument (position, keyword).
    ApplyEnvNamedBy(usize, &'static str),
}

/// The std plugins that read the host, by name.
///
/// This mirrors the native implementations in `runtime/src/plugins/std_plugins.rs` (this crate
/// cannot depend on the runtime): keep both in step when a plugin starts or stops reading the
/// process environment. The fixed variables are those through which the reference reads its
/// configuration (`config.environment`, the compiler's REST transport settings). `getfact`
/// answers from the facts a host gives (`--facts`); only without them does it insist, as the
/// reference does, on `INMANTA_CONFIG_ENVIRONMENT`, which is therefore not listed for it.
const STD_READERS: &[(&str, Reads)] = &[
    ("get_env", Reads::EnvNamedBy(0, "name")),
    ("get_env_int", Reads::EnvNamedBy(0, "name")),
    ("getfact", Reads::FactNamedBy(1, "fact_name")),
    ("environment", Reads::Env(&["INMANTA_CONFIG_ENVIRONMENT"])),
    ("environment_name", Reads::Env(&["INMANTA_CONFIG_ENVIRONMENT"])),
    ("environment_server", Reads::Env(&["INMANTA_COMPILER_REST_TRANSPORT_HOST"])),
    ("server_ca", Reads::Env(&["INMANTA_COMPILER_REST_TRANSPORT_SSL_CA_CERT_FILE"])),
    ("server_ssl", Reads::Env(&["INMANTA_COMPILER_REST_TRANSPORT_SSL"])),
    ("server_token", Reads::Env(&["INMANTA_COMPILER_REST_TRANSPORT_TOKEN"])),
    ("server_port", Reads::Env(&["INMANTA_COMPILER_REST_TRANSPORT_PORT"])),
    ("create_environment_reference", Reads::ApplyEnvNamedBy(0, "name")),
];

/// One read found in the program, before grouping: name (`None` when dynamic), where, which
/// plugin.
type Found = (Option<String>, Location, String);

/// Finds the inputs of a program.
pub fn inputs(program: &Program) -> Inputs {
    let mut env: Vec<Found> = Vec::new();
    let mut facts: Vec<Found> = Vec::new();
    let mut apply_env: Vec<Found> = Vec::new();
    for expr in &program.exprs {
        let ExprKind::Call { callee: Callee::Plugin(id), args, kwargs, .. } = &expr.kind else { continue };
        let Some(signature) = program.plugins.get(id.index()) else { continue };
        if signature.namespace != "std" {
            continue;
        }
        let Some((_, reads)) = STD_READERS.iter().find(|(name, _)| *name == signature.name) else { continue };
        let plugin = signature.qualified_name();
        // The name argument, when it is a constant string.
        let named = |position: usize, keyword: &str| -> Option<String> {
            let arg = args
                .get(position)
                .copied()
                .or_else(|| kwargs.iter().find(|(k, _)| program.name(*k) == keyword).map(|(_, v)| *v))?;
            match &program.expr(arg).kind {
                ExprKind::Const(Value::Str(s)) => Some(s.to_string()),
                _ => None,
            }
        };
        match reads {
            Reads::EnvNamedBy(position, keyword) => env.push((named(*position, keyword), expr.location, plugin)),
            Reads::Env(names) => {
                env.extend(names.iter().map(|n| (Some(n.to_string()), expr.location, plugin.clone())));
            }
            Reads::FactNamedBy(position, keyword) => facts.push((named(*position, keyword), expr.location, plugin)),
            Reads::ApplyEnvNamedBy(position, keyword) => {
                apply_env.push((named(*position, keyword), expr.location, plugin))
            }
        }
    }
    let (env_vars, dynamic_env_sites) = group(program, env);
    let (facts, dynamic_fact_sites) = group(program, facts);
    let (apply_env_vars, dynamic_apply_env_sites) = group(program, apply_env);
    let mut parameters: Vec<ParameterInput> = program
        .parameters
        .iter()
        .map(|p| {
            let default = p.default_value(program).cloned().unwrap_or(Value::NULL);
            ParameterInput {
                name: p.name.clone(),
                description: p.description.clone(),
                type_name: parameter_type(&default).to_string(),
                default: model_text(&default),
                location: program.location_text(p.location),
            }
        })
        .collect();
    parameters.sort_by(|a, b| a.name.cmp(&b.name));
    Inputs {
        parameters,
        env_vars: env_vars.into_iter().map(|(name, sites)| EnvInput { name, sites }).collect(),
        dynamic_env: !dynamic_env_sites.is_empty(),
        dynamic_env_sites,
        facts: facts.into_iter().map(|(name, sites)| FactInput { name, sites }).collect(),
        dynamic_fact_sites,
        apply_env_vars: apply_env_vars.into_iter().map(|(name, sites)| EnvInput { name, sites }).collect(),
        dynamic_apply_env_sites,
    }
}

/// Sorts reads by name, then by position in the sources (file, then offset: not the text of
/// the location, where line 10 would sort before line 9), and groups the named ones by name.
fn group(program: &Program, mut found: Vec<Found>) -> (Vec<(String, Vec<Site>)>, Vec<Site>) {
    found.sort_by(|a, b| (&a.0, a.1.file, a.1.span, &a.2).cmp(&(&b.0, b.1.file, b.1.span, &b.2)));
    found.dedup();
    let mut named: Vec<(String, Vec<Site>)> = Vec::new();
    let mut dynamic = Vec::new();
    for (name, location, plugin) in found {
        let site = Site { plugin, location: program.location_text(location) };
        match name {
            None => dynamic.push(site),
            Some(name) => match named.last_mut() {
                Some((last, sites)) if *last == name => sites.push(site),
                _ => named.push((name, vec![site])),
            },
        }
    }
    (named, dynamic)
}

impl Inputs {
    /// Whether the model reads nothing from its host.
    pub fn is_empty(&self) -> bool {
        self.parameters.is_empty()
            && self.env_vars.is_empty()
            && self.dynamic_env_sites.is_empty()
            && self.facts.is_empty()
            && self.dynamic_fact_sites.is_empty()
            && self.apply_env_vars.is_empty()
            && self.dynamic_apply_env_sites.is_empty()
    }

    /// A readable listing, one input per line, for `weft inspect`:
    ///
    /// ```text
    /// parameters (--set name=value):
    ///   replicas: int = 3  (./main.cf:2)  how many replicas to run
    /// environment variables:
    ///   HOME  (std::get_env at ./main.cf:4)
    ///   <computed name>  (std::get_env at ./main.cf:6)
    /// facts (--facts FILE):
    ///   ip  (std::getfact at ./main.cf:8)
    /// ```
    ///
    /// Empty sections are left out; a model that reads nothing gives `no inputs`.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if self.is_empty() {
            out.push_str("no inputs\n");
            return out;
        }
        if !self.parameters.is_empty() {
            out.push_str("parameters (--set name=value):\n");
            for p in &self.parameters {
                let _ = write!(out, "  {}: {} = {}  ({})", p.name, p.type_name, p.default, p.location);
                if let Some(d) = &p.description {
                    let _ = write!(out, "  {d}");
                }
                out.push('\n');
            }
        }
        let section = |out: &mut String, title: &str, named: &[(&str, &[Site])], dynamic: &[Site]| {
            if named.is_empty() && dynamic.is_empty() {
                return;
            }
            let _ = writeln!(out, "{title}:");
            for (name, sites) in named {
                let _ = writeln!(out, "  {name}  ({})", sites_text(sites));
            }
            if !dynamic.is_empty() {
                let _ = writeln!(out, "  <computed name>  ({})", sites_text(dynamic));
            }
        };
        let env: Vec<(&str, &[Site])> = self.env_vars.iter().map(|e| (e.name.as_str(), e.sites.as_slice())).collect();
        section(&mut out, "environment variables", &env, &self.dynamic_env_sites);
        let facts: Vec<(&str, &[Site])> = self.facts.iter().map(|f| (f.name.as_str(), f.sites.as_slice())).collect();
        section(&mut out, "facts (--facts FILE)", &facts, &self.dynamic_fact_sites);
        let apply: Vec<(&str, &[Site])> =
            self.apply_env_vars.iter().map(|e| (e.name.as_str(), e.sites.as_slice())).collect();
        section(
            &mut out,
            "environment variables read at apply time (references)",
            &apply,
            &self.dynamic_apply_env_sites,
        );
        out
    }
}

/// `std::get_env at ./main.cf:4, ./main.cf:9; std::get_env_int at ./main.cf:5`: sites grouped
/// by plugin, in the order they come.
fn sites_text(sites: &[Site]) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for site in sites {
        match groups.iter_mut().find(|(plugin, _)| *plugin == site.plugin) {
            Some((_, locations)) => locations.push(&site.location),
            None => groups.push((&site.plugin, vec![&site.location])),
        }
    }
    groups
        .iter()
        .map(|(plugin, locations)| format!("{plugin} at {}", locations.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a parameter with this default accepts (see [`ParameterInput::type_name`]).
pub fn parameter_type(default: &Value) -> &'static str {
    match default {
        Value::Str(_) => "string",
        Value::Int(_) | Value::BigInt(_) => "int",
        Value::Float(_) => "float",
        Value::Bool(_) => "bool",
        Value::List(_) => "list",
        Value::Dict(_) => "dict",
        _ => "json",
    }
}

/// A constant written as in the model: double-quoted strings, `true`, `null`, lists and dicts
/// in literal syntax.
pub fn model_text(value: &Value) -> String {
    let mut out = String::new();
    write_model_text(&mut out, value);
    out
}

fn write_model_text(out: &mut String, value: &Value) {
    match value {
        Value::Null(_) => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::BigInt(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => out.push_str(&float_repr(*f)),
        Value::Str(s) => write_quoted(out, s),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_model_text(out, item);
            }
            out.push(']');
        }
        Value::Dict(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_quoted(out, k);
                out.push_str(": ");
                write_model_text(out, v);
            }
            out.push('}');
        }
        // Not constants; shown as Python shows them.
        other => out.push_str(&other.py_repr()),
    }
}

/// A double-quoted string with JSON's escapes, which the language reads back the same way.
fn write_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses the text a host gives for a parameter (`--set name=text`) as a value of the type of
/// its default:
///
/// * a string default takes the text as it is;
/// * an int default takes Python's `int()` syntax in base 10: optional surrounding whitespace,
///   an optional sign, digits with single underscores between them (`1_000`); any size;
/// * a float default takes Python's `float()` syntax for finite numbers (`1`, `-2.5`, `1e3`,
///   `1_000.5`); `nan` and `inf` are refused, because the language has no such literal and the
///   export cannot represent them;
/// * a bool default takes `true` or `false` (also `True` and `False`);
/// * a list default takes a JSON array and a dict default a JSON object; a `null` default takes
///   any JSON value (so a string must be quoted: `'"text"'`). JSON numbers without a fraction
///   or exponent become ints (any size), others floats; an object keeps its key order, and a
///   repeated key keeps its first position and its last value, as Python's `json` does.
///
/// The error is one line that names the parameter, its type and default, and the text:
/// `parameter replicas is an int (default 3): "abc" is not an int`.
pub fn parse_parameter_value(name: &str, default: &Value, text: &str) -> Result<Value, String> {
    let kind = match default {
        Value::Str(_) => return Ok(Value::str(text)),
        Value::Int(_) | Value::BigInt(_) => "an int",
        Value::Float(_) => "a float",
        Value::Bool(_) => "a bool",
        Value::List(_) => "a list",
        Value::Dict(_) => "a dict",
        _ => "any JSON value",
    };
    let fail = |why: String| {
        let is = if matches!(default, Value::Null(_)) { "takes".to_string() } else { "is".to_string() };
        format!("parameter {name} {is} {kind} (default {}): {} {why}", model_text(default), quote_text(text))
    };
    match default {
        Value::Int(_) | Value::BigInt(_) => python_int(text).ok_or_else(|| fail("is not an int".into())),
        Value::Float(_) => python_float(text).ok_or_else(|| fail("is not a finite float".into())),
        Value::Bool(_) => match text {
            "true" | "True" => Ok(Value::Bool(true)),
            "false" | "False" => Ok(Value::Bool(false)),
            _ => Err(fail("is not a bool (true or false)".into())),
        },
        Value::List(_) => match parse_json(text) {
            Ok(v @ Value::List(_)) => Ok(v),
            Ok(_) => Err(fail("is not a JSON array".into())),
            Err(e) => Err(fail(format!("is not JSON: {e}"))),
        },
        Value::Dict(_) => match parse_json(text) {
            Ok(v @ Value::Dict(_)) => Ok(v),
            Ok(_) => Err(fail("is not a JSON object".into())),
            Err(e) => Err(fail(format!("is not JSON: {e}"))),
        },
        _ => parse_json(text).map_err(|e| fail(format!("is not JSON: {e}"))),
    }
}

/// The text as it appears in an error: double-quoted and escaped, so whitespace and an empty
/// text are visible and the message stays on one line.
fn quote_text(text: &str) -> String {
    let mut out = String::new();
    write_quoted(&mut out, text);
    out
}

/// Python's `int(text)` in base 10.
fn python_int(text: &str) -> Option<Value> {
    let t = text.trim();
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if !valid_digits(body) {
        return None;
    }
    let digits = body.replace('_', "");
    let magnitude = BigInt::parse_bytes(digits.as_bytes(), 10)?;
    Some(Value::int(if negative { -magnitude } else { magnitude }))
}

/// ASCII digits with single underscores between them, as Python's numeric literals allow.
fn valid_digits(body: &str) -> bool {
    !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && !body.starts_with('_')
        && !body.ends_with('_')
        && !body.contains("__")
}

/// Python's `float(text)`, finite values only.
fn python_float(text: &str) -> Option<Value> {
    let t = text.trim();
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    // Rust's parser accepts what Python's does for finite decimal numbers, except underscores,
    // which Python allows between digits only; it also reads `inf` and `nan`, refused below.
    if !unsigned.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let mut plain = String::with_capacity(t.len());
    let bytes = t.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let between_digits =
                i > 0 && bytes[i - 1].is_ascii_digit() && bytes.get(i + 1).is_some_and(|n| n.is_ascii_digit());
            if !between_digits {
                return None;
            }
        } else {
            plain.push(b as char);
        }
    }
    let f: f64 = plain.parse().ok()?;
    f.is_finite().then_some(Value::Float(f))
}

/// Nesting deeper than this is refused: this crate parses recursively, on whatever stack the
/// caller has, and a parameter value has no reason to be deep.
const JSON_MAX_DEPTH: usize = 128;

/// Parses a JSON document (RFC 8259) into a value. This crate has no JSON library and needs
/// only this: parameters are small and parsed once per evaluation.
pub fn parse_json(text: &str) -> Result<Value, String> {
    let mut parser = Json { text, pos: 0 };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos < text.len() {
        return Err(parser.error("unexpected text after the value"));
    }
    Ok(value)
}

struct Json<'t> {
    text: &'t str,
    pos: usize,
}

impl Json<'_> {
    fn error(&self, what: &str) -> String {
        format!("{what} at character {}", self.text[..self.pos].chars().count() + 1)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.text[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > JSON_MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.peek() {
            None => Err(self.error("expected a value")),
            Some(b'n') if self.eat("null") => Ok(Value::NULL),
            Some(b't') if self.eat("true") => Ok(Value::Bool(true)),
            Some(b'f') if self.eat("false") => Ok(Value::Bool(false)),
            Some(b'"') => Ok(Value::Str(Arc::from(self.string()?))),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.eat("]") {
                    return Ok(Value::List(Arc::from(items)));
                }
                loop {
                    self.skip_ws();
                    items.push(self.value(depth + 1)?);
                    self.skip_ws();
                    if self.eat("]") {
                        return Ok(Value::List(Arc::from(items)));
                    }
                    if !self.eat(",") {
                        return Err(self.error("expected `,` or `]`"));
                    }
                }
            }
            Some(b'{') => {
                self.pos += 1;
                let mut entries: Vec<(Arc<str>, Value)> = Vec::new();
                self.skip_ws();
                if self.eat("}") {
                    return Ok(Value::Dict(Dict::new(entries)));
                }
                loop {
                    self.skip_ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.error("expected a string key"));
                    }
                    let key: Arc<str> = Arc::from(self.string()?);
                    self.skip_ws();
                    if !self.eat(":") {
                        return Err(self.error("expected `:`"));
                    }
                    self.skip_ws();
                    let value = self.value(depth + 1)?;
                    // A repeated key keeps its first place and takes the later value, as
                    // Python's `json` does; `Dict::new` sees to that.
                    entries.push((key, value));
                    self.skip_ws();
                    if self.eat("}") {
                        return Ok(Value::Dict(Dict::new(entries)));
                    }
                    if !self.eat(",") {
                        return Err(self.error("expected `,` or `}`"));
                    }
                }
            }
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.peek().is_some_and(|b| b.is_ascii_digit()) {
                p.pos += 1;
            }
            p.pos > from
        };
        self.eat("-");
        if self.eat("0") {
            if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                return Err(self.error("a number cannot start with 0"));
            }
        } else if !digits(self) {
            return Err(self.error("expected digits"));
        }
        let mut integral = true;
        if self.eat(".") {
            integral = false;
            if !digits(self) {
                return Err(self.error("expected digits after `.`"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integral = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !digits(self) {
                return Err(self.error("expected digits in the exponent"));
            }
        }
        let text = &self.text[start..self.pos];
        if integral {
            BigInt::parse_bytes(text.as_bytes(), 10).map(Value::int).ok_or_else(|| self.error("invalid number"))
        } else {
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Value::Float(f)),
                _ => Err(self.error("number out of range")),
            }
        }
    }

    /// A string; the cursor is on its opening quote.
    fn string(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else { return Err(self.error("unterminated string")) };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\\' => {
                    self.pos += 1;
                    let escape = self.peek().ok_or_else(|| self.error("unterminated string"))?;
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => {
                            self.pos -= 1;
                            return Err(self.error("invalid escape"));
                        }
                    }
                }
                c if (c as u32) < 0x20 => return Err(self.error("control character in string")),
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// The code point of `\uXXXX` (the cursor is after the `u`), joining a surrogate pair. A
    /// lone surrogate cannot be a Rust string; it is refused.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let high = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&high) {
            if !self.eat("\\u") {
                return Err(self.error("lone surrogate in \\u escape"));
            }
            let low = self.hex4()?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(self.error("lone surrogate in \\u escape"));
            }
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(|| self.error("lone surrogate in \\u escape"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.text.get(self.pos..self.pos + 4).ok_or_else(|| self.error("expected 4 hex digits"))?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error("expected 4 hex digits"));
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).map_err(|_| self.error("expected 4 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::from(items))
    }

    fn dict(entries: Vec<(&str, Value)>) -> Value {
        Value::Dict(entries.into_iter().map(|(k, v)| (Arc::from(k), v)).collect())
    }

    /// (default, text, expected value written as in the model, or the expected error). Not
    /// formatted, so that each case stays on one line and the table reads as a table.
    #[test]
    #[rustfmt::skip]
    fn parameter_values_parse_by_the_type_of_the_default() {
        let big = "123456789012345678901234567890";
        let cases: Vec<(Value, &str, Result<&str, &str>)> = vec![
            // Strings: the text as it is, whitespace and all.
            (Value::str("eu"), "us-east", Ok("\"us-east\"")),
            (Value::str("eu"), " 3 ", Ok("\" 3 \"")),
            (Value::str("eu"), "", Ok("\"\"")),
            // Ints: Python's int().
            (int(3), "5", Ok("5")),
            (int(3), " -12 ", Ok("-12")),
            (int(3), "+7", Ok("7")),
            (int(3), "1_000", Ok("1000")),
            (int(3), big, Ok(big)),
            (int(3), "abc", Err(r#"parameter p is an int (default 3): "abc" is not an int"#)),
            (int(3), "1.5", Err(r#"parameter p is an int (default 3): "1.5" is not an int"#)),
            (int(3), "1__0", Err(r#"parameter p is an int (default 3): "1__0" is not an int"#)),
            (int(3), "_1", Err(r#"parameter p is an int (default 3): "_1" is not an int"#)),
            (int(3), "", Err(r#"parameter p is an int (default 3): "" is not an int"#)),
            (int(3), "0x10", Err(r#"parameter p is an int (default 3): "0x10" is not an int"#)),
            // Floats: Python's float(), finite only.
            (Value::Float(0.5), "2", Ok("2.0")),
            (Value::Float(0.5), "-2.25", Ok("-2.25")),
            (Value::Float(0.5), "1e3", Ok("1000.0")),
            (Value::Float(0.5), ".5", Ok("0.5")),
            (Value::Float(0.5), "1_000.5", Ok("1000.5")),
            (Value::Float(0.5), "nan", Err(r#"parameter p is a float (default 0.5): "nan" is not a finite float"#)),
            (Value::Float(0.5), "inf", Err(r#"parameter p is a float (default 0.5): "inf" is not a finite float"#)),
            (Value::Float(0.5), "1e999", Err(r#"parameter p is a float (default 0.5): "1e999" is not a finite float"#)),
            (Value::Float(0.5), "x", Err(r#"parameter p is a float (default 0.5): "x" is not a finite float"#)),
            // Bools.
            (Value::Bool(false), "true", Ok("true")),
            (Value::Bool(false), "True", Ok("true")),
            (Value::Bool(true), "false", Ok("false")),
            (Value::Bool(true), "False", Ok("false")),
            (Value::Bool(true), "yes", Err(r#"parameter p is a bool (default true): "yes" is not a bool (true or false)"#)),
            (Value::Bool(true), "1", Err(r#"parameter p is a bool (default true): "1" is not a bool (true or false)"#)),
            // Lists and dicts: JSON of the same shape.
            (list(vec![Value::str("a")]), r#"["x", 1, 2.5, true, null]"#, Ok(r#"["x", 1, 2.5, true, null]"#)),
            (list(vec![]), "[]", Ok("[]")),
            (list(vec![]), "{}", Err(r#"parameter p is a list (default []): "{}" is not a JSON array"#)),
            (list(vec![]), "a,b", Err(r#"parameter p is a list (default []): "a,b" is not JSON: expected a value at character 1"#)),
            (dict(vec![("a", int(1))]), r#"{"b": {"c": [1]}, "a": 2}"#, Ok(r#"{"b": {"c": [1]}, "a": 2}"#)),
            (dict(vec![]), r#"{"a": 1, "b": 2, "a": 3}"#, Ok(r#"{"a": 3, "b": 2}"#)),
            (dict(vec![]), "[1]", Err(r#"parameter p is a dict (default {}): "[1]" is not a JSON object"#)),
            (dict(vec![]), r#"{"a": }"#, Err(r#"parameter p is a dict (default {}): "{\"a\": }" is not JSON: expected a value at character 7"#)),
            // A null default: any JSON value.
            (Value::NULL, r#""text""#, Ok(r#""text""#)),
            (Value::NULL, "12", Ok("12")),
            (Value::NULL, "1.0", Ok("1.0")),
            (Value::NULL, "null", Ok("null")),
            (Value::NULL, r#"{"k": "v\u00e9\ud83d\ude00\n"}"#, Ok("{\"k\": \"v\u{e9}\u{1f600}\\n\"}")),
            (Value::NULL, "text", Err(r#"parameter p takes any JSON value (default null): "text" is not JSON: expected a value at character 1"#)),
            (Value::NULL, "01", Err(r#"parameter p takes any JSON value (default null): "01" is not JSON: a number cannot start with 0 at character 2"#)),
            (Value::NULL, "[1,]", Err(r#"parameter p takes any JSON value (default null): "[1,]" is not JSON: expected a value at character 4"#)),
            (Value::NULL, r#""\ud800""#, Err(r#"parameter p takes any JSON value (default null): "\"\\ud800\"" is not JSON: lone surrogate in \u escape at character 8"#)),
            (Value::NULL, "1 2", Err(r#"parameter p takes any JSON value (default null): "1 2" is not JSON: unexpected text after the value at character 3"#)),
        ];
        for (default, text, expected) in cases {
            let got = parse_parameter_value("p", &default, text).map(|v| model_text(&v));
            let expected = expected.map(str::to_string).map_err(str::to_string);
            assert_eq!(got, expected, "default {} text {text:?}", model_text(&default));
        }
    }

    #[test]
    fn big_json_ints_stay_exact_and_deep_json_is_refused() {
        let big = "-123456789012345678901234567890";
        assert_eq!(parse_json(big).map(|v| model_text(&v)), Ok(big.to_string()));
        assert!(matches!(parse_json("9007199254740993"), Ok(Value::Int(9007199254740993))));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_json(&deep).unwrap_err().starts_with("nested too deeply"));
    }

    #[test]
    fn parameter_types_come_from_the_default() {
        assert_eq!(parameter_type(&Value::str("x")), "string");
        assert_eq!(parameter_type(&int(1)), "int");
        assert_eq!(parameter_type(&Value::Float(1.0)), "float");
        assert_eq!(parameter_type(&Value::Bool(true)), "bool");
        assert_eq!(parameter_type(&list(vec![])), "list");
        assert_eq!(parameter_type(&dict(vec![])), "dict");
        assert_eq!(parameter_type(&Value::NULL), "json");
    }

    #[test]
    fn model_text_escapes_strings() {
        assert_eq!(model_text(&Value::str("a\"b\\c\n\u{1}")), r#""a\"b\\c\n\u0001""#);
    }
}
