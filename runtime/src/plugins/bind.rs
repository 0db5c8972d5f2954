//! Matching call arguments with a plugin's parameters, as the reference's
//! `Plugin.check_args` does (its checks, their order and its messages), then as Python binds
//! them for the call (defaults from their source text).

use std::sync::Arc;

use num_bigint::BigInt;
use weft_ir::plugin::{ParamKind, PluginParam, PluginSignature};
use weft_ir::value::Value;

use super::types::{Check, Ty};
use smallvec::SmallVec;

use super::{PluginError, PluginHost, Prepared, pyfmt};

/// Arguments bound to parameters, as the Python function receives them.
#[derive(Debug, Default)]
pub(crate) struct Bound {
    /// Every named (not variadic) parameter with its value: given or the default. A parameter
    /// without a value (only possible when called without checks) is absent. The names are
    /// shared with the plugin's `Prepared`, so that binding allocates no string.
    pub values: Vec<(Arc<str>, Value)>,
    /// Extra positional arguments (`*args`).
    pub varargs: Vec<Value>,
    /// Extra keyword arguments (`**kwargs`), in call order.
    pub varkwargs: Vec<(String, Value)>,
    /// Some top-level argument is Unknown.
    pub has_unknown: bool,
}

impl Bound {
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }
}

fn is_positional(p: &PluginParam) -> bool {
    matches!(p.kind, ParamKind::PositionalOrKeyword | ParamKind::PositionalOnly)
}

/// What a plugin's parameters allow of a call with positional arguments only, worked out
/// once per plugin: most calls (`std::validate_type`, `std::hostname`) pass every argument by
/// position, fill all or a prefix of the positional parameters and leave the rest to their
/// defaults. Such a call cannot fail any of `check_args`'s counting checks, so it needs only
/// the validation of each argument and the binding, in the same order as the general path.
#[derive(Debug)]
pub(crate) struct PositionalShape {
    /// The positional parameters, in order: indices into the signature's parameters.
    params: SmallVec<[u16; 8]>,
    /// The fewest positional arguments that leave no positional parameter without a value:
    /// one past the last positional parameter without a default.
    required: usize,
    /// Every keyword-only parameter has a default (a call without keywords misses none).
    keywords_defaulted: bool,
}

impl PositionalShape {
    pub(crate) fn new(params: &[PluginParam]) -> PositionalShape {
        let positional: SmallVec<[u16; 8]> =
            (0..params.len()).filter(|&i| is_positional(&params[i])).map(|i| i as u16).collect();
        let required = positional.iter().rposition(|&i| params[i as usize].default.is_none()).map_or(0, |n| n + 1);
        // A signature of more parameters than `u16` holds never takes the fast path.
        let keywords_defaulted = params.len() <= usize::from(u16::MAX)
            && params.iter().filter(|p| p.kind == ParamKind::KeywordOnly).all(|p| p.default.is_some());
        PositionalShape { params: positional, required, keywords_defaulted }
    }

    /// Whether a call with `args` positional arguments and `keywords` keyword arguments binds
    /// through [`bind_positional`].
    fn fits(&self, args: usize, keywords: usize) -> bool {
        keywords == 0 && self.keywords_defaulted && (self.required..=self.params.len()).contains(&args)
    }
}

/// [`check_args`] for a call that [`PositionalShape::fits`]: validates each argument in order,
/// then binds them.
fn bind_positional(
    params: &[PluginParam],
    prepared: &Prepared,
    args: Vec<Value>,
    host: &mut dyn PluginHost,
) -> Result<Bound, PluginError> {
    let qualified = prepared.qualified_name();
    let shape = &prepared.positional;
    let mut has_unknown = false;
    for (&param, value) in shape.params.iter().zip(&args) {
        let param = usize::from(param);
        has_unknown |= take_argument(qualified, &params[param], &prepared.param_types[param], value, host)?;
    }
    let mut bound = bind_prepared(params, prepared, args, Vec::new());
    bound.has_unknown = has_unknown;
    Ok(bound)
}

/// [`bind_with`] the names and parsed defaults of a prepared plugin.
fn bind_prepared(params: &[PluginParam], prepared: &Prepared, args: Vec<Value>, kwargs: Vec<(String, Value)>) -> Bound {
    bind_with(params, |i| prepared.param_names[i].clone(), |i| prepared.defaults[i].clone(), args, kwargs)
}

/// `check_args`: counts, missing arguments, unknown and repeated keywords, and the validation
/// of every argument that is not Unknown; then binds them.
pub(crate) fn check_args(
    signature: &PluginSignature,
    prepared: &Prepared,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
    host: &mut dyn PluginHost,
) -> Result<Bound, PluginError> {
    if prepared.positional.fits(args.len(), kwargs.len()) {
        return bind_positional(&signature.params, prepared, args, host);
    }
    check_args_in_general(signature, prepared, args, kwargs, host)
}

/// [`check_args`] for any call: the reference's checks one by one.
pub(crate) fn check_args_in_general(
    signature: &PluginSignature,
    prepared: &Prepared,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
    host: &mut dyn PluginHost,
) -> Result<Bound, PluginError> {
    let params = &signature.params;
    let qualified = prepared.qualified_name();
    // Indices into `params`: the positional parameters, then the keyword-only ones.
    let mut named: SmallVec<[usize; 8]> = (0..params.len()).filter(|&i| is_positional(&params[i])).collect();
    let positional = named.len();
    named.extend((0..params.len()).filter(|&i| params[i].kind == ParamKind::KeywordOnly));
    let var_args = params.iter().position(|p| p.kind == ParamKind::VarPositional);
    let var_kwargs = params.iter().position(|p| p.kind == ParamKind::VarKeyword);

    if var_args.is_none() && args.len() > positional {
        return Err(PluginError::Runtime(format!(
            "{qualified}() takes {positional} positional arguments but {} were given",
            args.len()
        )));
    }
    let given = |name: &str| kwargs.iter().any(|(k, _)| k == name);
    let missing: SmallVec<[&str; 4]> = named[..positional]
        .iter()
        .enumerate()
        .map(|(n, &i)| (n, &params[i]))
        .filter(|(n, p)| *n >= args.len() && !given(&p.name) && p.default.is_none())
        .map(|(_, p)| p.name.as_str())
        .collect();
    report_missing(qualified, &missing, "positional")?;
    let missing: SmallVec<[&str; 4]> = named[positional..]
        .iter()
        .map(|&i| &params[i])
        .filter(|p| !given(&p.name) && p.default.is_none())
        .map(|p| p.name.as_str())
        .collect();
    report_missing(qualified, &missing, "keyword-only")?;

    let mut has_unknown = false;
    for (position, value) in args.iter().enumerate() {
        let Some(param) = named[..positional].get(position).copied().or(var_args) else { continue };
        has_unknown |= take_argument(qualified, &params[param], &prepared.param_types[param], value, host)?;
    }
    for (name, value) in &kwargs {
        let position = named.iter().position(|&i| params[i].name == *name);
        let Some(param) = position.map(|n| named[n]).or(var_kwargs) else {
            return Err(PluginError::Runtime(format!("{qualified}() got an unexpected keyword argument: '{name}'")));
        };
        if position.is_some_and(|n| n < positional && n < args.len()) {
            return Err(PluginError::Runtime(format!("{qualified}() got multiple values for argument '{name}'")));
        }
        has_unknown |= take_argument(qualified, &params[param], &prepared.param_types[param], value, host)?;
    }

    let mut bound = bind_prepared(params, prepared, args, kwargs);
    bound.has_unknown = has_unknown;
    Ok(bound)
}

/// The reference's `report_missing_arguments`.
fn report_missing(qualified: &str, missing: &[&str], sort: &str) -> Result<(), PluginError> {
    match missing {
        [] => Ok(()),
        [one] => Err(PluginError::Runtime(format!("{qualified}() missing 1 required {sort} argument: '{one}'"))),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(|n| format!("'{n}'")).collect();
            Err(PluginError::Runtime(format!(
                "{qualified}() missing {} required {sort} arguments: {} and '{last}'",
                missing.len(),
                rest.join(", ")
            )))
        }
    }
}

/// An argument as `check_args` takes it: an Unknown is not validated, and makes the call's
/// result Unknown unless the plugin allows them (true is returned for it); any other value is
/// validated against its parameter's annotation.
fn take_argument(
    qualified: &str,
    param: &PluginParam,
    ty: &Ty,
    value: &Value,
    host: &mut dyn PluginHost,
) -> Result<bool, PluginError> {
    if matches!(value, Value::Unknown) {
        return Ok(true);
    }
    validate_argument(qualified, param, ty, value, host)?;
    Ok(false)
}

/// `convert_and_validate` for one argument, against its resolved annotation.
fn validate_argument(
    qualified: &str,
    param: &PluginParam,
    ty: &Ty,
    value: &Value,
    host: &mut dyn PluginHost,
) -> Result<(), PluginError> {
    let check = ty.validate(value, host)?;
    let is_reference = matches!(value, Value::Reference(_));
    let reference_message = || {
        format!(
            "Value {} for argument {} of plugin {qualified} {} a reference. To allow references, use `| Reference[...]` \
             in your type annotation.",
            pyfmt::dsl_repr(value, host),
            param.name,
            if is_reference { "is" } else { "contains" }
        )
    };
    match check {
        Check::Ok => Ok(()),
        Check::Reference => {
            Err(PluginError::Reference { message: reference_message(), cause: ty.refusal(value, host)? })
        }
        Check::Mismatch if is_reference && !ty.supports_references() => {
            Err(PluginError::Reference { message: reference_message(), cause: ty.refusal(value, host)? })
        }
        Check::Mismatch => Err(PluginError::Type {
            message: format!(
                "Value {} for argument {} of plugin {qualified} has incompatible type. Expected type: {}",
                pyfmt::dsl_repr(value, host),
                param.name,
                ty.type_string()
            ),
            cause: ty.refusal(value, host)?,
        }),
    }
}

/// Binds arguments as Python does once they are known to fit: positional ones in order (the
/// rest to `*args`), keywords by name (the rest to `**kwargs`), defaults for the others.
pub(crate) fn bind(params: &[PluginParam], args: Vec<Value>, kwargs: Vec<(String, Value)>) -> Bound {
    bind_with(
        params,
        |i| Arc::from(params[i].name.as_str()),
        |i| params[i].default.as_deref().map(parse_default),
        args,
        kwargs,
    )
}

/// [`bind`], with the name of parameter `i` given by `name(i)` and its default by
/// `default(i)`.
fn bind_with(
    params: &[PluginParam],
    name: impl Fn(usize) -> Arc<str>,
    default: impl Fn(usize) -> Option<Value>,
    args: Vec<Value>,
    kwargs: Vec<(String, Value)>,
) -> Bound {
    let mut bound = Bound::default();
    let mut args = args.into_iter();
    if kwargs.is_empty() {
        // Most calls pass positional arguments only: each named parameter takes the next one,
        // or its default, in one pass.
        bound.values.reserve_exact(params.len());
        for (i, param) in params.iter().enumerate() {
            let given = match param.kind {
                ParamKind::PositionalOrKeyword | ParamKind::PositionalOnly => args.next(),
                ParamKind::KeywordOnly => None,
                ParamKind::VarPositional | ParamKind::VarKeyword => continue,
            };
            if let Some(value) = given.or_else(|| default(i)) {
                bound.values.push((name(i), value));
            }
        }
        bound.varargs = args.collect();
        return bound;
    }
    // Each named parameter, with the value given for it.
    let mut slots: SmallVec<[(usize, Option<Value>); 8]> = SmallVec::new();
    for (i, param) in params.iter().enumerate() {
        match param.kind {
            ParamKind::PositionalOrKeyword | ParamKind::PositionalOnly => slots.push((i, args.next())),
            ParamKind::KeywordOnly => slots.push((i, None)),
            ParamKind::VarPositional | ParamKind::VarKeyword => {}
        }
    }
    bound.varargs = args.collect();
    for (name, value) in kwargs {
        match slots.iter_mut().find(|(i, _)| params[*i].name == name) {
            Some(slot) => slot.1 = Some(value),
            None => bound.varkwargs.push((name, value)),
        }
    }
    bound.values.reserve_exact(slots.len());
    for (i, value) in slots {
        if let Some(value) = value.or_else(|| default(i)) {
            bound.values.push((name(i), value));
        }
    }
    bound
}

/// The value of a parameter default from its Python source text: literals (`None`, `True`,
/// numbers, strings) and lists, tuples and dicts of literals. Anything else (a name, a call)
/// cannot be evaluated without Python and becomes `None`.
pub(crate) fn parse_default(text: &str) -> Value {
    let mut parser = LiteralParser { s: text.as_bytes(), text, i: 0 };
    match parser.value() {
        Some(v) if parser.at_end() => v,
        _ => Value::NULL,
    }
}

struct LiteralParser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl LiteralParser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] as char).is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn at_end(&mut self) -> bool {
        self.ws();
        self.i >= self.s.len()
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        let c = *self.s.get(self.i)?;
        match c {
            b'[' | b'(' => {
                self.i += 1;
                let close = if c == b'[' { b']' } else { b')' };
                let mut items = Vec::new();
                while !self.eat(close) {
                    items.push(self.value()?);
                    if !self.eat(b',') {
                        if !self.eat(close) {
                            return None;
                        }
                        break;
                    }
                }
                Some(Value::List(Arc::from(items)))
            }
            b'{' => {
                self.i += 1;
                let mut entries: Vec<(Arc<str>, Value)> = Vec::new();
                while !self.eat(b'}') {
                    let Value::Str(key) = self.value()? else { return None };
                    if !self.eat(b':') {
                        return None;
                    }
                    let value = self.value()?;
                    // `Dict::new` keeps a repeated key's first place and its later value.
                    entries.push((key, value));
                    if !self.eat(b',') {
                        if !self.eat(b'}') {
                            return None;
                        }
                        break;
                    }
                }
                Some(Value::Dict(entries.into()))
            }
            b'"' | b'\'' => self.string(),
            b'r' | b'R' | b'u' | b'U' if matches!(self.s.get(self.i + 1), Some(b'"' | b'\'')) => {
                let raw = matches!(c, b'r' | b'R');
                self.i += 1;
                if raw { self.raw_string() } else { self.string() }
            }
            b'-' | b'+' => {
                self.i += 1;
                let v = self.value()?;
                if c == b'+' {
                    return v.is_number().then_some(v);
                }
                weft_ir::value::arith(weft_ir::value::ArithOp::Sub, &Value::Int(0), &v).ok()
            }
            b'0'..=b'9' | b'.' => self.number(),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
                    self.i += 1;
                }
                match &self.text[start..self.i] {
                    "None" => Some(Value::NULL),
                    "True" => Some(Value::Bool(true)),
                    "False" => Some(Value::Bool(false)),
                    _ => None,
                }
            }
        }
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric()
                || self.s[self.i] == b'.'
                || self.s[self.i] == b'_'
                || ((self.s[self.i] == b'-' || self.s[self.i] == b'+')
                    && matches!(self.s[self.i - 1], b'e' | b'E')
                    && !self.text[start..self.i].starts_with("0x")))
        {
            self.i += 1;
        }
        let text: String = self.text[start..self.i].chars().filter(|c| *c != '_').collect();
        let lower = text.to_ascii_lowercase();
        let radix = [("0x", 16), ("0o", 8), ("0b", 2)].into_iter().find(|(p, _)| lower.starts_with(p));
        if let Some((prefix, radix)) = radix {
            return BigInt::parse_bytes(&lower.as_bytes()[prefix.len()..], radix).map(Value::int);
        }
        if lower.contains(['.', 'e']) {
            return lower.parse::<f64>().ok().map(Value::Float);
        }
        BigInt::parse_bytes(lower.as_bytes(), 10).map(Value::int)
    }

    fn raw_string(&mut self) -> Option<Value> {
        let quote = self.s[self.i];
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != quote {
            if self.s[self.i] == b'\\' {
                self.i += 1;
            }
            self.i += 1;
        }
        let s = self.text.get(start..self.i)?;
        self.i += 1;
        Some(Value::str(s))
    }

    fn string(&mut self) -> Option<Value> {
        let quote = self.s[self.i] as char;
        self.i += 1;
        let rest = &self.text[self.i..];
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((offset, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.i += offset + 1;
                    return Some(Value::str(&out));
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        '\\' | '\'' | '"' => out.push(e),
                        'x' | 'u' | 'U' => {
                            let len = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex: String = (0..len).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        '\n' => {}
                        other => {
                            out.push('\\');
                            out.push(other);
                        }
                    }
                }
                c => out.push(c),
            }
        }
        None
    }
}
