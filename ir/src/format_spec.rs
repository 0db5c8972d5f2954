//! Python's format specification mini-language (`format(value, spec)`) for strings, ints and
//! floats: what f-strings and `std::format` both apply to a replacement field's value.

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

use crate::value::{Value, float_repr};

/// A Python exception raised by formatting: its class (`ValueError`, `OverflowError`) and
/// message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    pub class: &'static str,
    pub message: String,
}

impl FormatError {
    fn value(message: impl Into<String>) -> Self {
        FormatError { class: "ValueError", message: message.into() }
    }
}

/// `format(value, spec)` for the values with a format of their own (strings, bools, ints and
/// floats); `None` for other values, which only an empty spec can format (as their `str()`).
pub fn format_value(value: &Value, spec: &str) -> Option<Result<String, FormatError>> {
    Some(match value {
        Value::Str(s) => format_str(s, spec),
        Value::Bool(b) if spec.is_empty() => Ok(if *b { "True" } else { "False" }.into()),
        Value::Bool(b) => format_int(&BigInt::from(*b as i64), spec),
        Value::Int(i) => format_int(&BigInt::from(*i), spec),
        Value::BigInt(i) => format_int(i, spec),
        Value::Float(f) => format_float(*f, spec),
        _ => return None,
    })
}

/// A parsed format specification.
#[derive(Default)]
struct Spec {
    fill: Option<char>,
    align: Option<char>,
    sign: Option<char>,
    alternate: bool,
    zero: bool,
    width: usize,
    grouping: Option<char>,
    precision: Option<usize>,
    kind: Option<char>,
}

fn parse_spec(spec: &str) -> Result<Spec, FormatError> {
    let chars: Vec<char> = spec.chars().collect();
    let mut s = Spec::default();
    let mut i = 0;
    let is_align = |c: char| matches!(c, '<' | '>' | '=' | '^');
    if chars.len() >= 2 && is_align(chars[1]) {
        s.fill = Some(chars[0]);
        s.align = Some(chars[1]);
        i = 2;
    } else if !chars.is_empty() && is_align(chars[0]) {
        s.align = Some(chars[0]);
        i = 1;
    }
    if let Some(&c) = chars.get(i)
        && matches!(c, '+' | '-' | ' ')
    {
        s.sign = Some(c);
        i += 1;
    }
    if chars.get(i) == Some(&'z') {
        i += 1;
    }
    if chars.get(i) == Some(&'#') {
        s.alternate = true;
        i += 1;
    }
    if chars.get(i) == Some(&'0') {
        s.zero = true;
        i += 1;
    }
    let start = i;
    while chars.get(i).is_some_and(|c| c.is_ascii_digit()) {
        i += 1;
    }
    if i > start {
        let digits: String = chars[start..i].iter().collect();
        s.width = digits.parse().map_err(|_| FormatError::value("Too many decimal digits in format string"))?;
    }
    if let Some(&c) = chars.get(i)
        && matches!(c, ',' | '_')
    {
        s.grouping = Some(c);
        i += 1;
    }
    if chars.get(i) == Some(&'.') {
        i += 1;
        let start = i;
        while chars.get(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
        if i == start {
            return Err(FormatError::value("Format specifier missing precision"));
        }
        let digits: String = chars[start..i].iter().collect();
        s.precision = Some(digits.parse().map_err(|_| FormatError::value("Too many decimal digits in format string"))?);
    }
    if i < chars.len() {
        if i + 1 < chars.len() {
            return Err(FormatError::value("Invalid format specifier"));
        }
        s.kind = Some(chars[i]);
    }
    Ok(s)
}

fn pad(body: &str, prefix: &str, s: &Spec, default_align: char) -> String {
    let len = body.chars().count() + prefix.chars().count();
    let (fill, align) = match (s.fill, s.align) {
        (fill, Some(align)) => (fill.unwrap_or(if s.zero { '0' } else { ' ' }), align),
        (_, None) if s.zero => ('0', if default_align == '<' { '<' } else { '=' }),
        _ => (' ', default_align),
    };
    if len >= s.width {
        return format!("{prefix}{body}");
    }
    let n = s.width - len;
    let fill_str = |k: usize| fill.to_string().repeat(k);
    match align {
        '<' => format!("{prefix}{body}{}", fill_str(n)),
        '^' => format!("{}{prefix}{body}{}", fill_str(n / 2), fill_str(n - n / 2)),
        '=' => format!("{prefix}{}{body}", fill_str(n)),
        _ => format!("{}{prefix}{body}", fill_str(n)),
    }
}

pub fn format_str(text: &str, spec: &str) -> Result<String, FormatError> {
    let s = parse_spec(spec)?;
    if s.sign.is_some() {
        return Err(FormatError::value("Sign not allowed in string format specifier"));
    }
    if s.alternate {
        return Err(FormatError::value("Alternate form (#) not allowed in string format specifier"));
    }
    if s.align == Some('=') {
        return Err(FormatError::value("'=' alignment not allowed in string format specifier"));
    }
    if s.grouping.is_some() {
        return Err(FormatError::value("Cannot specify ',' with 's'."));
    }
    match s.kind {
        None | Some('s') => {}
        Some(k) => return Err(FormatError::value(format!("Unknown format code '{k}' for object of type 'str'"))),
    }
    let body: String = match s.precision {
        Some(p) => text.chars().take(p).collect(),
        None => text.to_string(),
    };
    Ok(pad(&body, "", &s, '<'))
}

/// Inserts a separator every `every` digits from the right, as Python does, widening the
/// digits with zeros to at least `min_width` characters, separators included: Python's zero
/// padding of a grouped number is grouped too (`format(42, '07_')` is `000_042`), and a
/// separator never comes first (`format(0, '04_')` is `0_000`).
fn group(digits: &str, sep: char, every: usize, min_width: usize) -> String {
    let digits: Vec<char> = digits.chars().collect();
    let (mut remaining, mut min_width) = (digits.len(), min_width as isize);
    let mut groups: Vec<String> = Vec::new();
    loop {
        let wanted = (remaining as isize).max(min_width).max(1) as usize;
        let length = every.min(wanted);
        let taken = remaining.min(length);
        let mut group = "0".repeat(length - taken);
        group.extend(&digits[remaining - taken..remaining]);
        groups.push(group);
        remaining -= taken;
        min_width -= every as isize;
        if remaining == 0 && min_width <= 0 {
            break;
        }
        min_width -= 1;
    }
    groups.reverse();
    groups.join(&sep.to_string())
}

/// The width the grouped digits must fill: Python pads a grouped number with grouped zeros when
/// the padding goes between the sign and the digits as zeros (the `0` flag, or fill `0` with
/// `=` alignment); `others` is the length of everything else (sign, prefix, fraction).
fn zero_padded_width(s: &Spec, others: usize) -> usize {
    let zeros_after_sign = match (s.fill, s.align) {
        (fill, Some('=')) => fill.unwrap_or(if s.zero { '0' } else { ' ' }) == '0',
        (_, None) => s.zero,
        _ => false,
    };
    if zeros_after_sign { s.width.saturating_sub(others) } else { 0 }
}

fn sign_prefix(negative: bool, s: &Spec) -> &'static str {
    match (negative, s.sign) {
        (true, _) => "-",
        (false, Some('+')) => "+",
        (false, Some(' ')) => " ",
        _ => "",
    }
}

pub fn format_int(i: &BigInt, spec: &str) -> Result<String, FormatError> {
    let s = parse_spec(spec)?;
    let kind = s.kind.unwrap_or('d');
    if matches!(kind, 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | '%') {
        // Python converts the int to a float first, which refuses one out of a float's range.
        let float = i.to_f64().filter(|f| f.is_finite()).ok_or_else(|| FormatError {
            class: "OverflowError",
            message: "int too large to convert to float".into(),
        })?;
        return format_float(float, spec);
    }
    if s.precision.is_some() {
        return Err(FormatError::value("Precision not allowed in integer format specifier"));
    }
    let magnitude = i.abs();
    let (digits, radix_prefix) = match kind {
        'd' | 'n' => (magnitude.to_str_radix(10), ""),
        'b' => (magnitude.to_str_radix(2), "0b"),
        'o' => (magnitude.to_str_radix(8), "0o"),
        'x' => (magnitude.to_str_radix(16), "0x"),
        'X' => (magnitude.to_str_radix(16).to_uppercase(), "0X"),
        'c' => {
            let c = i.to_u32().and_then(char::from_u32).ok_or_else(|| FormatError {
                class: "OverflowError",
                message: "%c arg not in range(0x110000)".into(),
            })?;
            // A character from an int is still a number: right-aligned by default.
            return Ok(pad(&c.to_string(), "", &s, '>'));
        }
        other => return Err(FormatError::value(format!("Unknown format code '{other}' for object of type 'int'"))),
    };
    let mut prefix = sign_prefix(i.is_negative() && !i.is_zero(), &s).to_string();
    if s.alternate {
        prefix.push_str(radix_prefix);
    }
    let digits = match s.grouping {
        Some(sep) => {
            let every = if matches!(kind, 'd' | 'n') { 3 } else { 4 };
            group(&digits, sep, every, zero_padded_width(&s, prefix.chars().count()))
        }
        None => digits,
    };
    Ok(pad(&digits, &prefix, &s, '>'))
}

/// Splits `d.ddde[+-]x` from Rust's `{:e}` into mantissa and exponent.
fn rust_exp(x: f64, precision: usize) -> (String, i32) {
    let s = format!("{:.*e}", precision, x);
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    (m.to_string(), e.parse().unwrap_or(0))
}

fn exp_notation(x: f64, precision: usize, alternate: bool, upper: bool) -> String {
    let (mut m, e) = rust_exp(x, precision);
    if alternate && !m.contains('.') {
        m.push('.');
    }
    let e_char = if upper { 'E' } else { 'e' };
    format!("{m}{e_char}{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// `'g'` formatting, and the `''` type with a precision (`repr_style`: at least one digit
/// after the point in fixed notation, which also moves the switch to exponent notation one
/// digit earlier, as CPython's `Py_DTSF_ADD_DOT_0`).
fn general(x: f64, precision: usize, alternate: bool, upper: bool, repr_style: bool) -> String {
    let p = precision.max(1);
    let (_, exp) = rust_exp(x, p - 1);
    let decpt = if x == 0.0 { 1 } else { exp as i64 + 1 };
    let limit = if repr_style { p as i64 - 1 } else { p as i64 };
    let mut body = if decpt > -4 && decpt <= limit {
        let decimals = (p as i64 - decpt).max(0) as usize;
        let mut f = format!("{:.*}", decimals, x);
        if !alternate && f.contains('.') {
            f = f.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        if repr_style && !f.contains('.') {
            f.push_str(".0");
        } else if alternate && !f.contains('.') {
            f.push('.');
        }
        f
    } else {
        let (mut m, e) = rust_exp(x, p - 1);
        if !alternate && m.contains('.') {
            m = m.trim_end_matches('0').trim_end_matches('.').to_string();
        } else if alternate && !m.contains('.') {
            m.push('.');
        }
        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    };
    if upper {
        body = body.to_uppercase();
    }
    body
}

pub fn format_float(x: f64, spec: &str) -> Result<String, FormatError> {
    let s = parse_spec(spec)?;
    let negative = x.is_sign_negative() && !x.is_nan();
    let a = x.abs();
    let upper = matches!(s.kind, Some('E' | 'F' | 'G'));
    if let Some(other) = s.kind.filter(|k| !matches!(k, 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'n' | '%')) {
        return Err(FormatError::value(format!("Unknown format code '{other}' for object of type 'float'")));
    }
    let mut body = if !a.is_finite() {
        let t = if a.is_nan() { "nan" } else { "inf" };
        let t = if upper { t.to_uppercase() } else { t.to_string() };
        if s.kind == Some('%') { format!("{t}%") } else { t }
    } else {
        match s.kind {
            None => match s.precision {
                None => float_repr(a),
                Some(p) => general(a, p, s.alternate, false, true),
            },
            Some('e' | 'E') => exp_notation(a, s.precision.unwrap_or(6), s.alternate, upper),
            Some('f' | 'F') => {
                let mut f = format!("{:.*}", s.precision.unwrap_or(6), a);
                if s.alternate && !f.contains('.') {
                    f.push('.');
                }
                f
            }
            Some('g' | 'G' | 'n') => general(a, s.precision.unwrap_or(6), s.alternate, upper, false),
            Some('%') => {
                let mut f = format!("{:.*}", s.precision.unwrap_or(6), a * 100.0);
                if s.alternate && !f.contains('.') {
                    f.push('.');
                }
                f + "%"
            }
            Some(other) => {
                return Err(FormatError::value(format!("Unknown format code '{other}' for object of type 'float'")));
            }
        }
    };
    if let Some(sep) = s.grouping
        && a.is_finite()
    {
        let end = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
        let others = sign_prefix(negative, &s).len() + body[end..].chars().count();
        body = format!("{}{}", group(&body[..end], sep, 3, zero_padded_width(&s, others)), &body[end..]);
    }
    Ok(pad(&body, sign_prefix(negative, &s), &s, '>'))
}

/// The field between the braces when a template is one field and nothing else (`{a.b}`,
/// `{x:>4}`), with no literal text around it.
pub fn sole_field(template: &str) -> Option<&str> {
    let inner = template.strip_prefix('{')?.strip_suffix('}')?;
    if inner.starts_with('{') {
        return None;
    }
    // The brace that closes the first one must be the last: `{a}{b}` and `{a}}}` are not one
    // field.
    let mut depth = 1;
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    (depth == 1).then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_specs_follow_python() {
        let cases: &[(&str, Value, &str)] = &[
            ("", Value::Float(1.0), "1.0"),
            // Zero padding of a grouped number is grouped too; a separator never comes first.
            ("=+07_d", Value::Int(42), "+00_042"),
            ("06_", Value::Float(0.5), "0_000.5"),
            ("08_", Value::Int(0), "0_000_000"),
            ("0=#7_x", Value::Int(0), "0x0_0000"),
            ("015,", Value::Int(1234567), "000,001,234,567"),
            ("012,.1f", Value::Float(-1234.5), "-0,001,234.5"),
            ("#012_b", Value::Int(255), "0b0_1111_1111"),
            ("*=10,", Value::Int(1234), "*****1,234"),
            ("#.0%", Value::Int(42), "4200.%"),
            ("3c", Value::Int(42), "  *"),
            ("04c", Value::Int(42), "000*"),
            (".2f", Value::Float(1.23456), "1.23"),
            (">8.3f", Value::Float(-1.23456), "  -1.235"),
            ("08.3f", Value::Float(-1.23456), "-001.235"),
            (".3", Value::Float(2.0), "2.0"),
            (".2", Value::Float(1234.5), "1.2e+03"),
            ("g", Value::Float(0.0001), "0.0001"),
            ("g", Value::Float(0.00001), "1e-05"),
            ("e", Value::Float(12345.678), "1.234568e+04"),
            (".1%", Value::Float(0.25), "25.0%"),
            (",", Value::Int(1234567), "1,234,567"),
            ("_x", Value::Int(0xabcdef), "ab_cdef"),
            ("#x", Value::Int(255), "0xff"),
            ("+d", Value::Int(5), "+5"),
            ("05d", Value::Int(-42), "-0042"),
            ("^7", Value::str("ab"), "  ab   "),
            ("*<5", Value::str("ab"), "ab***"),
            (".1s", Value::str("ab"), "a"),
            ("05", Value::str("ab"), "ab000"),
            ("", Value::Bool(true), "True"),
            ("d", Value::Bool(true), "1"),
            (",.2f", Value::Float(1234567.891), "1,234,567.89"),
        ];
        for (spec, value, expected) in cases {
            let got = format_value(value, spec).expect("a formattable value");
            assert_eq!(got.ok().as_deref(), Some(*expected), "format({value:?}, {spec:?})");
        }
    }

    /// The Python exception each bad case raises: its class and message.
    #[test]
    fn format_errors_are_pythons() {
        let huge = Value::BigInt(num_bigint::BigInt::from(10).pow(400).into());
        let cases: &[(&str, Value, &str, &str)] = &[
            ("f", huge.clone(), "OverflowError", "int too large to convert to float"),
            ("e", huge, "OverflowError", "int too large to convert to float"),
            ("c", Value::Int(-1), "OverflowError", "%c arg not in range(0x110000)"),
            ("d", Value::Float(1.5), "ValueError", "Unknown format code 'd' for object of type 'float'"),
            (".2d", Value::Int(1), "ValueError", "Precision not allowed in integer format specifier"),
        ];
        for (spec, value, class, message) in cases {
            let got = format_value(value, spec).expect("a formattable value");
            let expected = FormatError { class, message: message.to_string() };
            assert_eq!(got.err(), Some(expected), "format({value:?}, {spec:?})");
        }
    }

    #[test]
    fn a_sole_field_is_the_whole_template() {
        for (template, sole) in [
            ("{a.b}", Some("a.b")),
            ("{x:>4}", Some("x:>4")),
            ("{x:{w}}", Some("x:{w}")),
            ("{}", Some("")),
            ("{a}{b}", None),
            ("{a}x", None),
            ("x{a}", None),
            ("{{a}}", None),
            ("{a}}}", None),
            ("{a", None),
            ("", None),
        ] {
            assert_eq!(sole_field(template), sole, "{template:?}");
        }
    }
}
