//! Python's `str.format` for f-strings: named fields, conversions and format specs.

use weft_ir::diagnostic::ErrorKind;
use weft_ir::format_spec;
use weft_ir::value::Value;

use super::{EvalError, rt};

/// An f-string's value: its text, as the object CPython's `Formatter` returns
/// ([`Value::formatted`]).
pub fn format_value(
    template: &str,
    kwargs: &[(String, Value)],
    render: &dyn Fn(&Value) -> String,
) -> Result<Value, EvalError> {
    let text = format(template, kwargs, render)?;
    // A conversion needs no case of its own: `!s` of a string is the string, and its `!r`
    // has quotes, so never the same text; a bool's or a null's repr is its interned str.
    let sole = format_spec::sole_field(template).and_then(|field| {
        let (name, _, _) = split_field(field);
        kwargs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    });
    Ok(Value::formatted(text, sole))
}

/// A field's name, conversion and format spec.
fn split_field(field: &str) -> (&str, Option<&str>, Option<&str>) {
    let (name_conv, spec) = match split_top(field, ':') {
        Some((a, b)) => (a, Some(b)),
        None => (field, None),
    };
    match name_conv.rsplit_once('!') {
        Some((n, c)) => (n, Some(c), spec),
        None => (name_conv, None, spec),
    }
}

pub fn format(
    template: &str,
    kwargs: &[(String, Value)],
    render: &dyn Fn(&Value) -> String,
) -> Result<String, EvalError> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            if chars.get(i + 1) == Some(&'{') {
                out.push('{');
                i += 2;
                continue;
            }
            // Find the matching close brace, allowing nested fields in the spec.
            let mut depth = 1;
            let mut j = i + 1;
            while j < chars.len() && depth > 0 {
                match chars[j] {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            if depth != 0 {
                return Err(rt("Invalid f-string: Single '{' encountered in format string"));
            }
            let field: String = chars[i + 1..j - 1].iter().collect();
            out.push_str(&field_value(&field, kwargs, render)?);
            i = j;
        } else if c == '}' {
            if chars.get(i + 1) == Some(&'}') {
                out.push('}');
                i += 2;
                continue;
            }
            return Err(rt("Invalid f-string: Single '}' encountered in format string"));
        } else {
            out.push(c);
            i += 1;
        }
    }
    Ok(out)
}

fn field_value(
    field: &str,
    kwargs: &[(String, Value)],
    render: &dyn Fn(&Value) -> String,
) -> Result<String, EvalError> {
    let (name, conversion, spec) = split_field(field);
    if name.is_empty() {
        return Err(rt(
            "f-strings do not support positional substitutions via '{}', use variable or attribute keys instead",
        ));
    }
    let value = kwargs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| rt(format!("Invalid key in f-string: ''{name}''")))?;
    let spec = match spec {
        Some(s) => format(s, kwargs, render)?,
        None => String::new(),
    };
    // A conversion, or a spec without a type or of a decimal one, writes the value in decimal,
    // which CPython refuses for an int of too many digits (`x` and `b` do not). Its
    // `ValueError` becomes an invalid f-string, as a bad spec's does.
    let decimal = conversion.is_some()
        || matches!(spec.chars().last().filter(|c| c.is_ascii_alphabetic() || *c == '%'), None | Some('d' | 'n'));
    if decimal && weft_ir::value::holds_int_too_long_for_text(&value) {
        return Err(rt(format!("Invalid f-string: {}", weft_ir::value::INT_TO_TEXT_LIMIT_MESSAGE)));
    }
    let text_value = match conversion {
        Some("r") => Value::str(&value.repr_with_null("null")),
        Some("s") => Value::str(&render(&value)),
        Some(other) => return Err(rt(format!("Invalid f-string: Unknown conversion specifier {other}"))),
        None => value,
    };
    apply_spec(&text_value, &spec, render)
}

fn split_top(s: &str, sep: char) -> Option<(&str, &str)> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            c if c == sep && depth == 0 => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

/// The format spec mini-language is Python's, shared with `std::format`. The reference
/// turns the `ValueError` of a bad spec into an "Invalid f-string" error; any other Python
/// exception (the `TypeError` of a spec for a value with no format of its own, the
/// `OverflowError` of a float too large) escapes raw.
fn apply_spec(v: &Value, spec: &str, render: &dyn Fn(&Value) -> String) -> Result<String, EvalError> {
    match format_spec::format_value(v, spec) {
        Some(Ok(text)) => Ok(text),
        Some(Err(e)) if e.class == "OverflowError" => Err(EvalError::new(ErrorKind::OverflowError, e.message)),
        Some(Err(e)) => Err(rt(format!("Invalid f-string: {}", e.message))),
        None if spec.is_empty() => Ok(render(v)),
        None => Err(EvalError::new(
            ErrorKind::TypeError,
            format!("unsupported format string passed to {}.__format__", v.type_name()),
        )),
    }
}
