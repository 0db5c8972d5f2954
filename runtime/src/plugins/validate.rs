//! `std::validate_type` (`inmanta.validation_type.validate_type`): whether a value is valid for
//! a Python standard library or pydantic type, in pydantic's lax mode, and the checks of std's
//! own typedefs, which delegate to it.
//!
//! Supported types: `datetime.date`, `datetime.time`, `datetime.datetime`,
//! `ipaddress.IPv4Address`/`Interface`/`Network` and their IPv6 counterparts, `uuid.UUID`, and
//! from pydantic: `IPvAnyAddress`/`Interface`/`Network`, `EmailStr`, `NameEmail`, `AnyUrl`,
//! `AnyHttpUrl`, `HttpUrl`, `PositiveInt`, `NegativeInt`, `NonNegativeInt`,
//! `NonPositiveInt`, `PositiveFloat`, `NegativeFloat`, `NonNegativeFloat`,
//! `NonPositiveFloat`, `FiniteFloat`, `StrictStr`, `StrictInt`, `StrictFloat`, `StrictBool`,
//! `constr`, `conint`, `confloat` and `condecimal`. A name the Python module does not have is
//! the reference's `AttributeError` (the module's names are listed in `validate_names.txt`);
//! other names of those modules fail with `NotImplementedError`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::LazyLock;

use num_bigint::BigInt;
use num_traits::{Signed, Zero};
use weft_ir::value::{Value, float_repr};

use super::{Flow, PluginError, net};

fn external(class: &str, message: impl Into<String>) -> Flow {
    Flow::Error(PluginError::external(class, message))
}

/// The check of one of std's typedefs on a value that is not an instance: `None` when `name`
/// is not one of them.
pub(crate) fn std_typedef(name: &str, value: &Value) -> Option<Result<bool, Flow>> {
    let short = name.strip_prefix("std::")?;
    let is_str = matches!(value, Value::Str(_));
    let string_type = |fq: &str| -> Result<bool, Flow> {
        if !is_str {
            return Ok(false);
        }
        validate_type(fq, value, None)
    };
    Some(match short {
        "date" => string_type("datetime.date"),
        "time" => string_type("datetime.time"),
        "datetime" => string_type("datetime.datetime"),
        "ipv4_address" => string_type("ipaddress.IPv4Address"),
        "ipv4_interface" => string_type("ipaddress.IPv4Interface"),
        "ipv4_network" => string_type("ipaddress.IPv4Network"),
        "ipv6_address" => string_type("ipaddress.IPv6Address"),
        "ipv6_interface" => string_type("ipaddress.IPv6Interface"),
        "ipv6_network" => string_type("ipaddress.IPv6Network"),
        "uuid" => string_type("uuid.UUID"),
        "email_str" => string_type("pydantic.EmailStr"),
        "name_email" => string_type("pydantic.NameEmail"),
        "any_url" => string_type("pydantic.AnyUrl"),
        "any_http_url" => string_type("pydantic.AnyHttpUrl"),
        "http_url" => string_type("pydantic.HttpUrl"),
        "ipv_any_address" => string_type("pydantic.IPvAnyAddress"),
        "ipv_any_interface" => string_type("pydantic.IPvAnyInterface"),
        "ipv_any_network" => string_type("pydantic.IPvAnyNetwork"),
        "negative_float" | "positive_float" => {
            if !matches!(value, Value::Float(_)) {
                return Some(Ok(false));
            }
            validate_type(
                if short == "negative_float" { "pydantic.NegativeFloat" } else { "pydantic.PositiveFloat" },
                value,
                None,
            )
        }
        "negative_int" | "positive_int" => {
            if !value.is_integral() {
                return Some(Ok(false));
            }
            validate_type(
                if short == "negative_int" { "pydantic.NegativeInt" } else { "pydantic.PositiveInt" },
                value,
                None,
            )
        }
        "alfanum" => Ok(is_str && python_match("^[a-zA-Z0-9]*$", value)),
        "printable_ascii" => Ok(is_str && python_match("^[\x20-\x7e]*$", value)),
        "ascii_word" => Ok(is_str && python_match("^[\x21-\x7e]*$", value)),
        "base64" => Ok(matches!(value, Value::Str(s) if is_base64(s))),
        "non_empty_string" => Ok(is_str && python_match(r"^(.*\S.*)$", value)),
        "hoststring" => Ok(is_str && python_match(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$", value)),
        "port" => Ok(value.is_integral() && value.as_i64().is_some_and(|p| (0..65536).contains(&p))),
        _ => return None,
    })
}

fn python_match(pattern: &str, value: &Value) -> bool {
    match value {
        // std's own patterns need no backtracking, so none of them is left undecided.
        Value::Str(s) => matches!(regex_match(pattern, s, true), Some(Ok(true))),
        _ => false,
    }
}

/// Python's `base64.b64decode(s, validate=True)` succeeds: only the base64 alphabet, correct
/// padding, a length that is a multiple of four.
pub(crate) fn is_base64(s: &str) -> bool {
    let bytes = s.as_bytes();
    if !bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) {
        return false;
    }
    let data_len = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let padding = &bytes[data_len..];
    if !padding.iter().all(|&b| b == b'=') {
        return false;
    }
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    match padding.len() {
        0 => true,
        1 => data_len % 4 == 3,
        2 => data_len % 4 == 2,
        _ => false,
    }
}

thread_local! {
    static REGEXES: RefCell<HashMap<(String, bool), Option<fancy_regex::Regex>>> = RefCell::new(HashMap::new());
}

/// Translates a Python `re` pattern for fancy-regex: `$` also matches before a final newline,
/// `\Z` is the end of the string.
fn translate_python_regex(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('Z') => out.push_str(r"\z"),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // `]` right after `[` or `[^` is a literal.
                let rest = chars.as_str();
                if let Some(after) = rest.strip_prefix('^') {
                    out.push('^');
                    chars.next();
                    if after.starts_with(']') {
                        out.push_str(r"\]");
                        chars.next();
                    }
                } else if rest.starts_with(']') {
                    out.push_str(r"\]");
                    chars.next();
                }
            }
            '[' => out.push_str(r"\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '$' if !in_class => out.push_str(r"(?=\n?\z)"),
            c => out.push(c),
        }
    }
    out
}

/// `re.match(pattern, text)` (`anchored`) or `re.search`; `None` for a pattern that does not
/// compile, `Some(Err)` with the reason for one that gave up (`weft_vm::patterns::is_match`).
pub(crate) fn regex_match(pattern: &str, text: &str, anchored: bool) -> Option<Result<bool, String>> {
    let key = (pattern.to_string(), anchored);
    let compiled = REGEXES.with_borrow_mut(|cache| {
        cache
            .entry(key)
            .or_insert_with(|| {
                let translated = translate_python_regex(pattern);
                let full = if anchored { format!(r"\A(?:{translated})") } else { translated };
                weft_vm::patterns::build(&full).ok()
            })
            .clone()
    })?;
    Some(weft_vm::patterns::is_match(&compiled, text))
}

/// `validate_type(fq_type_name, value, validation_parameters)`: `Ok(false)` where the
/// reference's plugin catches the error (`ValidationError`, `ValueError`).
pub(crate) fn validate_type(fq: &str, value: &Value, params: Option<&Value>) -> Result<bool, Flow> {
    let Some((module, name)) = fq.split_once('.') else { return Ok(false) };
    if !matches!(module, "pydantic" | "datetime" | "ipaddress" | "uuid") {
        return Ok(false);
    }
    let params: Vec<(String, Value)> = match params {
        None | Some(Value::Null(_)) => Vec::new(),
        Some(Value::Dict(entries)) => entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        Some(other) => {
            return Err(external(
                "TypeError",
                format!("'{}' object is not a mapping", super::pyfmt::plugin_type_name(other)),
            ));
        }
    };
    // `getattr(module, name)` comes before the parameters are looked at.
    if !python_module_has(module, name) {
        return Err(external("AttributeError", format!("module '{module}' has no attribute '{name}'")));
    }
    let routine = matches!((module, name), ("pydantic", "constr" | "conint" | "confloat" | "condecimal"));
    if !routine && !params.is_empty() {
        // `parametrize_type` raises ValueError: the plugin returns false.
        return Ok(false);
    }
    let s = match value {
        Value::Str(s) => Some(&**s),
        _ => None,
    };
    Ok(match (module, name) {
        ("datetime", "date") => valid_date(value),
        ("datetime", "time") => valid_time(value),
        ("datetime", "datetime") => valid_datetime(value),
        ("ipaddress", "IPv4Address") => s.is_some_and(|s| net::parse_v4(s).is_some()) || int_in(value, 32),
        ("ipaddress", "IPv6Address") => s.is_some_and(|s| net::parse_v6(s).is_some()) || int_in(value, 128),
        ("ipaddress", "IPv4Interface") => s.is_some_and(|s| net::parse_with_prefix(s, true, false).is_some()),
        ("ipaddress", "IPv6Interface") => s.is_some_and(|s| net::parse_with_prefix(s, false, true).is_some()),
        ("ipaddress", "IPv4Network") => s.is_some_and(|s| net::parse_network(s, true, false).is_some()),
        ("ipaddress", "IPv6Network") => s.is_some_and(|s| net::parse_network(s, false, true).is_some()),
        ("pydantic", "IPvAnyAddress") => s.is_some_and(|s| net::parse_addr(s, true, true).is_some()),
        ("pydantic", "IPvAnyInterface") => s.is_some_and(|s| net::parse_with_prefix(s, true, true).is_some()),
        ("pydantic", "IPvAnyNetwork") => s.is_some_and(|s| net::parse_network(s, true, true).is_some()),
        ("uuid", "UUID") => s.is_some_and(valid_uuid),
        ("pydantic", "EmailStr") => s.is_some_and(valid_email_str),
        ("pydantic", "NameEmail") => s.is_some_and(valid_name_email),
        ("pydantic", "AnyUrl") => s.is_some_and(|s| valid_url(s, false, false, None)),
        ("pydantic", "AnyHttpUrl") => s.is_some_and(|s| valid_url(s, true, true, None)),
        ("pydantic", "HttpUrl") => s.is_some_and(|s| valid_url(s, true, true, Some(2083))),
        ("pydantic", "PositiveInt") => lax_int(value).is_some_and(|i| i.is_positive()),
        ("pydantic", "NegativeInt") => lax_int(value).is_some_and(|i| i.is_negative()),
        ("pydantic", "NonNegativeInt") => lax_int(value).is_some_and(|i| !i.is_negative()),
        ("pydantic", "NonPositiveInt") => lax_int(value).is_some_and(|i| !i.is_positive()),
        ("pydantic", "PositiveFloat") => lax_float(value).is_some_and(|f| f > 0.0),
        ("pydantic", "NegativeFloat") => lax_float(value).is_some_and(|f| f < 0.0),
        ("pydantic", "NonNegativeFloat") => lax_float(value).is_some_and(|f| f >= 0.0),
        ("pydantic", "NonPositiveFloat") => lax_float(value).is_some_and(|f| f <= 0.0),
        ("pydantic", "FiniteFloat") => lax_float(value).is_some_and(f64::is_finite),
        ("pydantic", "StrictStr") => s.is_some(),
        ("pydantic", "StrictInt") => matches!(value, Value::Int(_) | Value::BigInt(_)),
        ("pydantic", "StrictFloat") => matches!(value, Value::Int(_) | Value::BigInt(_) | Value::Float(_)),
        ("pydantic", "StrictBool") => matches!(value, Value::Bool(_)),
        ("pydantic", "constr") => constr(value, &params)?,
        ("pydantic", "conint") => conint(value, &params)?,
        ("pydantic", "confloat") => confloat(value, &params)?,
        ("pydantic", "condecimal") => condecimal(value, &params)?,
        _ => {
            return Err(external(
                "NotImplementedError",
                format!("validate_type: the type {fq} is not supported by weft"),
            ));
        }
    })
}

/// Whether the reference's Python module has an attribute of that name (`getattr(module, name)`
/// succeeds), from the list recorded in the reference environment.
fn python_module_has(module: &str, name: &str) -> bool {
    // Read into a set once: typedefs such as `std::ipv4_address` call `validate_type` for
    // every value they check, and a scan of the list cost more than the check itself. The
    // set hashes with foldhash (hashbrown's default): SipHash of the two names cost more
    // than parsing the address the lookup comes before.
    static NAMES: LazyLock<hashbrown::HashSet<(&'static str, &'static str)>> = LazyLock::new(|| {
        include_str!("validate_names.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .collect()
    });
    NAMES.contains(&(module, name))
}

/// An int value within `bits` bits (ipaddress accepts ints).
fn int_in(value: &Value, bits: u32) -> bool {
    match value {
        Value::Int(i) => *i >= 0 && (bits >= 64 || (*i as u128) < (1u128 << bits)),
        Value::BigInt(i) => !i.is_negative() && i.bits() <= bits as u64,
        _ => false,
    }
}

/// Checks that the parameters are among `allowed` (`TypeError` otherwise, as Python's call
/// of the `con*` function raises).
fn check_params(function: &str, params: &[(String, Value)], allowed: &[&str]) -> Result<(), Flow> {
    for (name, _) in params {
        if !allowed.contains(&name.as_str()) {
            return Err(external("TypeError", format!("{function}() got an unexpected keyword argument '{name}'")));
        }
    }
    Ok(())
}

fn param<'a>(params: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    params.iter().find(|(n, _)| n == name).map(|(_, v)| v).filter(|v| !matches!(v, Value::Null(_)))
}

fn flag(params: &[(String, Value)], name: &str) -> bool {
    param(params, name).is_some_and(Value::truthy)
}

/// pydantic's lax int: ints, bools, integral floats, and strings of those.
fn lax_int(value: &Value) -> Option<BigInt> {
    match value {
        Value::Bool(b) => Some(BigInt::from(*b as i64)),
        Value::Int(i) => Some(BigInt::from(*i)),
        Value::BigInt(i) => Some((**i).clone()),
        Value::Float(f) => (f.fract() == 0.0 && f.abs() < 9.2e18).then(|| num_traits::FromPrimitive::from_f64(*f))?,
        Value::Str(s) => {
            let t = s.trim();
            let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
            let valid_digits = |d: &str| {
                !d.is_empty()
                    && d.bytes().all(|b| b.is_ascii_digit() || b == b'_')
                    && !d.starts_with('_')
                    && !d.ends_with('_')
                    && !d.contains("__")
            };
            if valid_digits(digits) {
                let clean: String = t.chars().filter(|c| *c != '_').collect();
                return BigInt::parse_bytes(clean.trim_start_matches('+').as_bytes(), 10);
            }
            // "5.0": an integral float in text.
            let (whole, frac) = digits.split_once('.')?;
            if valid_digits(whole) && !frac.is_empty() && frac.bytes().all(|b| b == b'0') {
                let clean: String = whole.chars().filter(|c| *c != '_').collect();
                let n = BigInt::parse_bytes(clean.as_bytes(), 10)?;
                return Some(if t.starts_with('-') { -n } else { n });
            }
            None
        }
        _ => None,
    }
}

/// pydantic's lax float: numbers and numeric strings (`inf` and `nan` included).
fn lax_float(value: &Value) -> Option<f64> {
    match value {
        Value::Str(s) => {
            let t = s.trim();
            let lower = t.to_ascii_lowercase();
            let body = lower.trim_start_matches(['+', '-']);
            if matches!(body, "inf" | "infinity" | "nan") {
                return lower.parse::<f64>().ok();
            }
            let bytes = t.as_bytes();
            let underscores_ok = bytes.iter().enumerate().all(|(i, &b)| {
                b != b'_'
                    || (i > 0 && bytes[i - 1].is_ascii_digit() && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
            });
            if t.is_empty()
                || !underscores_ok
                || !t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
            {
                return None;
            }
            t.replace('_', "").parse::<f64>().ok()
        }
        other => other.as_f64(),
    }
}

/// The numeric constraints `gt`, `ge`, `lt`, `le` on a float view of the value.
fn bounds_ok(x: f64, params: &[(String, Value)]) -> bool {
    let get = |n: &str| param(params, n).and_then(Value::as_f64);
    get("gt").is_none_or(|b| x > b)
        && get("ge").is_none_or(|b| x >= b)
        && get("lt").is_none_or(|b| x < b)
        && get("le").is_none_or(|b| x <= b)
}

fn conint(value: &Value, params: &[(String, Value)]) -> Result<bool, Flow> {
    check_params("conint", params, &["strict", "gt", "ge", "lt", "le", "multiple_of"])?;
    for name in ["gt", "ge", "lt", "le", "multiple_of"] {
        if let Some(bound) = param(params, name)
            && lax_int(bound).is_none_or(|_| matches!(bound, Value::Float(f) if f.fract() != 0.0))
        {
            return Err(external(
                "SchemaError",
                format!("Error building \"int\" validator:\n  ValueError: '{name}' must be coercible to an integer"),
            ));
        }
    }
    let int = if flag(params, "strict") {
        match value {
            Value::Int(i) => Some(BigInt::from(*i)),
            Value::BigInt(i) => Some((**i).clone()),
            _ => None,
        }
    } else {
        lax_int(value)
    };
    let Some(i) = int else { return Ok(false) };
    let bound = |n: &str| param(params, n).and_then(lax_int);
    Ok(bound("gt").is_none_or(|b| i > b)
        && bound("ge").is_none_or(|b| i >= b)
        && bound("lt").is_none_or(|b| i < b)
        && bound("le").is_none_or(|b| i <= b)
        && bound("multiple_of").is_none_or(|m| m.is_zero() || (&i % &m).is_zero()))
}

fn confloat(value: &Value, params: &[(String, Value)]) -> Result<bool, Flow> {
    check_params("confloat", params, &["strict", "gt", "ge", "lt", "le", "multiple_of", "allow_inf_nan"])?;
    let x = if flag(params, "strict") {
        match value {
            Value::Int(_) | Value::BigInt(_) | Value::Float(_) => value.as_f64(),
            _ => None,
        }
    } else {
        lax_float(value)
    };
    let Some(x) = x else { return Ok(false) };
    if param(params, "allow_inf_nan").is_some_and(|v| !v.truthy()) && !x.is_finite() {
        return Ok(false);
    }
    if !bounds_ok(x, params) {
        return Ok(false);
    }
    if let Some(m) = param(params, "multiple_of").and_then(Value::as_f64)
        && m != 0.0
    {
        let rem = (x % m).abs();
        if rem > f64::EPSILON && (rem - m.abs()).abs() > f64::EPSILON {
            return Ok(false);
        }
    }
    Ok(true)
}

fn condecimal(value: &Value, params: &[(String, Value)]) -> Result<bool, Flow> {
    check_params(
        "condecimal",
        params,
        &["strict", "gt", "ge", "lt", "le", "multiple_of", "max_digits", "decimal_places", "allow_inf_nan"],
    )?;
    let text = match value {
        Value::Int(i) => i.to_string(),
        Value::BigInt(i) => i.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) if !flag(params, "strict") => s.trim().to_string(),
        _ => return Ok(false),
    };
    let Some(x) = lax_float(&Value::str(&text)) else { return Ok(false) };
    if !x.is_finite() {
        return Ok(param(params, "allow_inf_nan").is_some_and(Value::truthy));
    }
    if !bounds_ok(x, params) {
        return Ok(false);
    }
    if let Some(m) = param(params, "multiple_of").and_then(Value::as_f64)
        && m != 0.0
        && ((x / m) - (x / m).round()).abs() > 1e-9
    {
        return Ok(false);
    }
    // Digits of the normalized decimal.
    let lower = text.to_ascii_lowercase();
    let (mantissa, exponent) = match lower.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i64>().unwrap_or(0)),
        None => (lower.clone(), 0),
    };
    let mantissa = mantissa.trim_start_matches(['+', '-']);
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{frac}");
    let exp = exponent - frac.len() as i64;
    let trimmed = digits.trim_end_matches('0');
    let exp = exp + (digits.len() - trimmed.len()) as i64;
    let significant = trimmed.trim_start_matches('0');
    let decimals = (-exp).max(0);
    let total = (significant.len() as i64).max(decimals);
    if let Some(max) = param(params, "max_digits").and_then(Value::as_i64)
        && total > max
    {
        return Ok(false);
    }
    if let Some(places) = param(params, "decimal_places").and_then(Value::as_i64)
        && decimals > places
    {
        return Ok(false);
    }
    Ok(true)
}

fn constr(value: &Value, params: &[(String, Value)]) -> Result<bool, Flow> {
    let Value::Str(s) = value else {
        check_params(
            "constr",
            params,
            &["strip_whitespace", "to_upper", "to_lower", "strict", "min_length", "max_length", "pattern", "regex"],
        )?;
        return Ok(false);
    };
    check_params(
        "constr",
        params,
        &["strip_whitespace", "to_upper", "to_lower", "strict", "min_length", "max_length", "pattern", "regex"],
    )?;
    let mut text = s.to_string();
    if flag(params, "strip_whitespace") {
        text = text.trim().to_string();
    }
    if flag(params, "to_upper") {
        text = text.to_uppercase();
    } else if flag(params, "to_lower") {
        text = text.to_lowercase();
    }
    let len = text.chars().count() as i64;
    if param(params, "min_length").and_then(Value::as_i64).is_some_and(|m| len < m) {
        return Ok(false);
    }
    if param(params, "max_length").and_then(Value::as_i64).is_some_and(|m| len > m) {
        return Ok(false);
    }
    if let Some(Value::Str(pattern)) = param(params, "pattern") {
        match regex_match(pattern, &text, false) {
            Some(Ok(true)) => {}
            Some(Ok(false)) => return Ok(false),
            Some(Err(why)) => return Err(undecided_regex(pattern, &why)),
            None => return Err(external("SchemaError", format!("Invalid regex pattern: {pattern}"))),
        }
    }
    if let Some(pattern) = param(params, "regex") {
        let pattern = super::pyfmt::dsl_str_plain(pattern);
        // The reference's `Regex` annotation runs on the original (unstripped) string value
        // after pydantic's own checks; `re.match` semantics.
        match regex_match(&pattern, &text, true) {
            Some(Ok(true)) => {}
            Some(Ok(false)) => return Ok(false),
            Some(Err(why)) => return Err(undecided_regex(&pattern, &why)),
            None => return Err(external("error", format!("invalid regular expression: {pattern}"))),
        }
    }
    Ok(true)
}

/// The error of a pattern that gave up before deciding whether a value matches.
fn undecided_regex(pattern: &str, why: &str) -> Flow {
    external("RuntimeError", format!("could not decide whether the value matches {pattern}: {why}"))
}

// ---------------------------------------------------------------------------------------
// Dates and times (pydantic's speedate parser).

fn digits(s: &[u8], n: usize) -> Option<u32> {
    if s.len() < n || !s[..n].iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s[..n].iter().fold(0u32, |acc, d| acc * 10 + (d - b'0') as u32))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => 29,
        _ => 28,
    }
}

/// `YYYY-MM-DD`; returns the rest of the input.
fn parse_date(s: &[u8]) -> Option<&[u8]> {
    let year = digits(s, 4)?;
    if s.get(4) != Some(&b'-') {
        return None;
    }
    let month = digits(&s[5..], 2)?;
    if s.get(7) != Some(&b'-') {
        return None;
    }
    let day = digits(&s[8..], 2)?;
    if year == 0 || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some(&s[10..])
}

/// `HH:MM[:SS[.fraction]][Z|±HH:MM|±HHMM]`; `Some(all zero)` when valid.
fn parse_time(s: &[u8]) -> Option<bool> {
    let hour = digits(s, 2)?;
    if s.get(2) != Some(&b':') {
        return None;
    }
    let minute = digits(&s[3..], 2)?;
    let mut rest = &s[5..];
    let mut zero = hour == 0 && minute == 0;
    if rest.first() == Some(&b':') {
        let second = digits(&rest[1..], 2)?;
        zero &= second == 0;
        if second > 59 {
            return None;
        }
        rest = &rest[3..];
        if matches!(rest.first(), Some(b'.' | b',')) {
            let n = rest[1..].iter().take_while(|b| b.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            zero &= rest[1..=n].iter().all(|&b| b == b'0');
            rest = &rest[n + 1..];
        }
    }
    if hour > 23 || minute > 59 {
        return None;
    }
    match rest {
        [] | [b'Z' | b'z'] => Some(zero),
        [b'+' | b'-', tz @ ..] => {
            let h = digits(tz, 2)?;
            let m = match &tz[2..] {
                [b':', m @ ..] if m.len() == 2 => digits(m, 2)?,
                m if m.len() == 2 => digits(m, 2)?,
                _ => return None,
            };
            (h < 24 && m < 60).then_some(zero)
        }
        _ => None,
    }
}

/// A number given as a Unix timestamp (int, float or numeric string), as seconds.
fn timestamp(value: &Value) -> Option<f64> {
    let x = match value {
        Value::Int(_) | Value::BigInt(_) | Value::Float(_) => value.as_f64()?,
        Value::Str(s) => {
            let t = s.as_bytes();
            let body = t.strip_prefix(b"-").unwrap_or(t);
            if body.is_empty()
                || !body.iter().all(|b| b.is_ascii_digit() || *b == b'.')
                || body.iter().filter(|&&b| b == b'.').count() > 1
            {
                return None;
            }
            s.parse::<f64>().ok()?
        }
        _ => return None,
    };
    if !x.is_finite() {
        return None;
    }
    // Values beyond 2e10 are milliseconds.
    Some(if x.abs() > 2e10 { x / 1000.0 } else { x })
}

fn valid_date(value: &Value) -> bool {
    if let Value::Str(s) = value
        && let Some(rest) = parse_date(s.as_bytes())
    {
        return match rest {
            [] => true,
            [b'T' | b't' | b' ' | b'_', time @ ..] => parse_time(time) == Some(true),
            _ => false,
        };
    }
    timestamp(value).is_some_and(|t| t.fract() == 0.0 && (t as i64) % 86400 == 0)
}

fn valid_time(value: &Value) -> bool {
    match value {
        Value::Str(s) => parse_time(s.as_bytes()).is_some(),
        Value::Int(_) | Value::BigInt(_) | Value::Float(_) => {
            value.as_f64().is_some_and(|t| (0.0..86400.0).contains(&t))
        }
        _ => false,
    }
}

fn valid_datetime(value: &Value) -> bool {
    if let Value::Str(s) = value
        && let Some(rest) = parse_date(s.as_bytes())
    {
        return match rest {
            [] => true,
            [b'T' | b't' | b' ' | b'_', time @ ..] => parse_time(time).is_some(),
            _ => false,
        };
    }
    timestamp(value).is_some()
}

// ---------------------------------------------------------------------------------------
// UUIDs, email addresses and URLs.

fn valid_uuid(s: &str) -> bool {
    let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
    let hyphenated = |t: &str| {
        let groups: Vec<&str> = t.split('-').collect();
        groups.len() == 5 && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && hex(g))
    };
    if s.len() == 32 {
        return hex(s);
    }
    if let Some(inner) = s.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        return hyphenated(inner);
    }
    if let Some(inner) = s.strip_prefix("urn:uuid:") {
        return hyphenated(inner);
    }
    hyphenated(s)
}

/// The domain names email_validator refuses (special-use domains).
const SPECIAL_USE_DOMAINS: &[&str] = &["arpa", "invalid", "local", "localhost", "onion", "test"];

/// An address as `email_validator.validate_email` accepts it without deliverability checks.
fn valid_email(address: &str) -> bool {
    let Some((local, domain)) = address.rsplit_once('@') else { return false };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+/=?^_`{|}~-".contains(c) || !c.is_ascii();
    if local.is_empty()
        || local.starts_with('.')
        || local.ends_with('.')
        || local.contains("..")
        || !local.chars().all(|c| c == '.' || atext(c))
    {
        return false;
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 {
        return false;
    }
    for label in &labels {
        if label.is_empty()
            || label.chars().count() > 63
            || label.starts_with('-')
            || label.ends_with('-')
            || !label.chars().all(|c| c.is_alphanumeric() || c == '-')
        {
            return false;
        }
    }
    let lower = domain.to_lowercase();
    if !lower.chars().last().is_some_and(char::is_alphabetic) {
        return false;
    }
    !SPECIAL_USE_DOMAINS.iter().any(|d| lower == *d || lower.ends_with(&format!(".{d}")))
}

/// pydantic's `EmailStr`: an address, optionally as `Name <address>`.
fn valid_email_str(s: &str) -> bool {
    valid_name_email(s)
}

/// pydantic's `NameEmail` (and `EmailStr`, which parses the same form).
fn valid_name_email(s: &str) -> bool {
    static PRETTY: std::sync::OnceLock<Option<fancy_regex::Regex>> = std::sync::OnceLock::new();
    if s.chars().count() > 2048 || s.contains(['\r', '\n']) {
        return false;
    }
    // pydantic's `pretty_email_regex`: an unquoted name of words or a quoted one, then `<address>`.
    let pretty = PRETTY.get_or_init(|| {
        let name_chars = r"[\w.!#$%&'*+\-/=?^_`{|}~]";
        fancy_regex::Regex::new(&format!(
            r#"\A\s*(?:((?:{name_chars}+\s+)*{name_chars}+)|"((?:[^"]|\")+)")?\s*<(.+)>\s*\z"#
        ))
        .ok()
    });
    if let Some(Ok(Some(captures))) = pretty.as_ref().map(|re| re.captures(s))
        && let Some(address) = captures.get(3)
    {
        return valid_email(address.as_str().trim());
    }
    valid_email(s.trim())
}

const SPECIAL_SCHEMES: &[&str] = &["http", "https", "ws", "wss", "ftp", "file"];

/// Whether the WHATWG URL parser (which pydantic uses) accepts the URL, approximately:
/// `http_only` limits the schemes to http and https, `host_required` refuses an empty host.
fn valid_url(s: &str, http_only: bool, host_required: bool, max_length: Option<usize>) -> bool {
    if max_length.is_some_and(|m| s.chars().count() > m) {
        return false;
    }
    let trimmed = s.trim_matches(|c: char| c <= ' ');
    let cleaned: String = trimmed.chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect();
    let Some(colon) = cleaned.find(':') else { return false };
    let scheme = cleaned[..colon].to_ascii_lowercase();
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return false;
    }
    if http_only && scheme != "http" && scheme != "https" {
        return false;
    }
    let rest = &cleaned[colon + 1..];
    let special = SPECIAL_SCHEMES.contains(&scheme.as_str());
    let authority = if special {
        if scheme == "file" {
            match rest.strip_prefix("//").or_else(|| rest.strip_prefix("\\\\")) {
                Some(after) => Some(after),
                None => return true,
            }
        } else {
            Some(rest.trim_start_matches(['/', '\\']))
        }
    } else {
        rest.strip_prefix("//")
    };
    let Some(authority) = authority else { return !host_required };
    let end =
        authority.find(|c: char| c == '/' || c == '?' || c == '#' || (special && c == '\\')).unwrap_or(authority.len());
    let authority = &authority[..end];
    if scheme == "file" {
        // A file URL's host has no credentials and no port.
        return authority.is_empty() || valid_host(authority, true);
    }
    let host_port = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let (host, port) = if host_port.starts_with('[') {
        let Some(close) = host_port.find(']') else { return false };
        if net::parse_v6(&host_port[1..close]).is_none() || host_port[1..close].contains('%') {
            return false;
        }
        let after = &host_port[close + 1..];
        match after.strip_prefix(':') {
            Some(port) => ("[v6]", Some(port)),
            None if after.is_empty() => ("[v6]", None),
            None => return false,
        }
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if let Some(port) = port
        && !port.is_empty()
        && !(port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u32>().is_ok_and(|p| p <= 65535))
    {
        return false;
    }
    if host.is_empty() {
        return !(host_required || (special && scheme != "file"));
    }
    if host == "[v6]" {
        return true;
    }
    valid_host(host, special)
}

fn valid_host(host: &str, special: bool) -> bool {
    // Percent-decoding first, for special schemes.
    let decoded = if special {
        let bytes = host.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && i + 2 < bytes.len()
                && let Some(b) =
                    std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
            out.push(bytes[i]);
            i += 1;
        }
        match String::from_utf8(out) {
            Ok(s) => s,
            Err(_) => return false,
        }
    } else {
        host.to_string()
    };
    let forbidden = |c: char| {
        c <= ' '
            || matches!(c, '#' | '/' | ':' | '<' | '>' | '?' | '@' | '[' | '\\' | ']' | '^' | '|' | '\u{7f}')
            || (special && c == '%')
    };
    if decoded.chars().any(forbidden) {
        return false;
    }
    if !special {
        return true;
    }
    let lower = decoded.to_lowercase();
    if lower.split('.').any(|l| l.starts_with("xn--") && l.len() <= 4) {
        return false;
    }
    // A host whose last label is a number is an IPv4 address.
    let labels: Vec<&str> = lower.split('.').collect();
    let last = match labels.as_slice() {
        [.., last, ""] if labels.len() > 1 => *last,
        [.., last] => *last,
        [] => "",
    };
    let numeric = |l: &str| {
        !l.is_empty()
            && (l.bytes().all(|b| b.is_ascii_digit())
                || l.strip_prefix("0x").is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())))
    };
    if numeric(last) {
        return whatwg_ipv4(&lower);
    }
    true
}

/// The WHATWG IPv4 parser: up to four parts in decimal, octal (`0` prefix) or hex (`0x`).
fn whatwg_ipv4(host: &str) -> bool {
    let mut parts: Vec<&str> = host.split('.').collect();
    if parts.last() == Some(&"") && parts.len() > 1 {
        parts.pop();
    }
    if parts.len() > 4 {
        return false;
    }
    let mut numbers = Vec::new();
    for part in &parts {
        let n = if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            if h.is_empty() { Some(0) } else { u64::from_str_radix(h, 16).ok() }
        } else if part.len() > 1 && part.starts_with('0') {
            u64::from_str_radix(&part[1..], 8).ok()
        } else {
            part.parse::<u64>().ok()
        };
        let Some(n) = n else { return false };
        numbers.push(n);
    }
    let (last, init) = match numbers.split_last() {
        Some(split) => split,
        None => return false,
    };
    if init.iter().any(|&n| n > 255) {
        return false;
    }
    *last < 256u64.pow(5 - numbers.len() as u32)
}

/// Ints as big ints for messages.
pub(crate) fn to_bigint(value: &Value) -> Option<BigInt> {
    match value {
        Value::Bool(b) => Some(BigInt::from(*b as i64)),
        Value::Int(i) => Some(BigInt::from(*i)),
        Value::BigInt(i) => Some((**i).clone()),
        _ => None,
    }
}
