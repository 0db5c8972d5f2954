//! Python's `str.format` for `std::format`: replacement fields with automatic or manual
//! numbering, keyword fields, attribute and index access, conversions, and the format
//! specification mini-language for strings, ints and floats.

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};
use weft_ir::value::{Value, float_repr, str_repr};

use super::std_plugins::{read_attribute, value_error};
use super::{Flow, PluginError, PluginHost, pyfmt};

fn type_error(message: impl Into<String>) -> Flow {
    Flow::Error(PluginError::external("TypeError", message))
}

/// What a replacement field formats: a value, or the text a conversion (`!r`) produced.
enum Obj {
    Value(Value),
    Text(String),
}

struct Formatter<'a> {
    args: &'a [Value],
    kwargs: &'a [(String, Value)],
    /// `Some(next)` with automatic numbering, `None` once manual numbering is used.
    auto: Option<usize>,
    manual: bool,
}

/// `template.format(*args, **kwargs)`.
pub(crate) fn str_format(
    template: &str,
    args: &[Value],
    kwargs: &[(String, Value)],
    host: &mut dyn PluginHost,
) -> Result<String, Flow> {
    let mut f = Formatter { args, kwargs, auto: Some(0), manual: false };
    f.format(template, host, 2)
}

impl Formatter<'_> {
    fn format(&mut self, template: &str, host: &mut dyn PluginHost, depth: u32) -> Result<String, Flow> {
        if depth == 0 {
            return Err(value_error("Max string recursion exceeded"));
        }
        let chars: Vec<char> = template.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '}' {
                if chars.get(i + 1) == Some(&'}') {
                    out.push('}');
                    i += 2;
                    continue;
                }
                return Err(value_error("Single '}' encountered in format string"));
            }
            if c != '{' {
                out.push(c);
                i += 1;
                continue;
            }
            if chars.get(i + 1) == Some(&'{') {
                out.push('{');
                i += 2;
                continue;
            }
            // Find the matching close brace, counting nested ones.
            let start = i + 1;
            let mut level = 1;
            let mut j = start;
            while j < chars.len() {
                match chars[j] {
                    '{' => level += 1,
                    '}' => {
                        level -= 1;
                        if level == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if j >= chars.len() {
                return Err(value_error(if start >= chars.len() {
                    "Single '{' encountered in format string"
                } else {
                    "expected '}' before end of string"
                }));
            }
            let field: String = chars[start..j].iter().collect();
            out.push_str(&self.field(&field, host, depth)?);
            i = j + 1;
        }
        Ok(out)
    }

    fn field(&mut self, field: &str, host: &mut dyn PluginHost, depth: u32) -> Result<String, Flow> {
        // Split into field name, conversion and spec, skipping over brackets in the name.
        let chars: Vec<char> = field.chars().collect();
        let mut k = 0;
        while k < chars.len() {
            match chars[k] {
                '[' => {
                    while k < chars.len() && chars[k] != ']' {
                        k += 1;
                    }
                }
                '{' => return Err(value_error("unexpected '{' in field name")),
                ':' | '!' => break,
                _ => {}
            }
            k += 1;
        }
        let name: String = chars[..k.min(chars.len())].iter().collect();
        let mut conversion = None;
        let mut spec = String::new();
        if k < chars.len() {
            if chars[k] == '!' {
                let Some(&conv) = chars.get(k + 1) else {
                    return Err(value_error("end of string while looking for conversion specifier"));
                };
                conversion = Some(conv);
                match chars.get(k + 2) {
                    None => {}
                    Some(':') => spec = chars[k + 3..].iter().collect(),
                    Some(_) => return Err(value_error("expected ':' after conversion specifier")),
                }
            } else {
                spec = chars[k + 1..].iter().collect();
            }
        }
        let mut obj = Obj::Value(self.resolve(&name, host)?);
        if let Some(conv) = conversion {
            let Obj::Value(value) = &obj else { unreachable!("conversions apply to values") };
            obj = Obj::Text(match conv {
                's' => pyfmt::plugin_str(value, host),
                'r' => pyfmt::plugin_repr(value, host),
                'a' => ascii(&pyfmt::plugin_repr(value, host)),
                other => return Err(value_error(format!("Unknown conversion specifier {other}"))),
            });
        }
        let spec = if spec.contains('{') { self.format(&spec, host, depth - 1)? } else { spec };
        format_obj(&obj, &spec, host)
    }

    fn resolve(&mut self, name: &str, host: &mut dyn PluginHost) -> Result<Value, Flow> {
        let first_end = name.find(['.', '[']).unwrap_or(name.len());
        let (first, mut rest) = name.split_at(first_end);
        let mut value = if first.is_empty() {
            if self.manual {
                return Err(value_error("cannot switch from manual field specification to automatic field numbering"));
            }
            let index = self.auto.unwrap_or(0);
            self.auto = Some(index + 1);
            self.positional(index)?
        } else if first.bytes().all(|b| b.is_ascii_digit()) {
            if self.auto.is_some_and(|n| n > 0) {
                return Err(value_error("cannot switch from automatic field numbering to manual field specification"));
            }
            self.manual = true;
            let index: usize = first.parse().map_err(|_| value_error("Too many decimal digits in format string"))?;
            self.positional(index)?
        } else {
            match self.kwargs.iter().find(|(k, _)| k == first) {
                Some((_, v)) => v.clone(),
                None => return Err(Flow::Error(PluginError::external("KeyError", str_repr(first)))),
            }
        };
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let attr = &after[..end];
                if attr.is_empty() {
                    return Err(value_error("Empty attribute in format string"));
                }
                value = getattr(&value, attr, host)?;
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let Some(end) = after.find(']') else {
                    return Err(value_error("Missing ']' in format string"));
                };
                let key = &after[..end];
                if key.is_empty() {
                    return Err(value_error("Empty attribute in format string"));
                }
                value = getitem(&value, key)?;
                rest = &after[end + 1..];
                if !rest.is_empty() && !rest.starts_with(['.', '[']) {
                    return Err(value_error("Only '.' or '[' may follow ']' in format field specifier"));
                }
            } else {
                return Err(value_error("Only '.' or '[' may follow ']' in format field specifier"));
            }
        }
        Ok(value)
    }

    fn positional(&self, index: usize) -> Result<Value, Flow> {
        match self.args.get(index) {
            Some(v) => Ok(v.clone()),
            None => Err(Flow::Error(PluginError::external(
                "IndexError",
                format!("Replacement index {index} out of range for positional args tuple"),
            ))),
        }
    }
}

fn getattr(value: &Value, attr: &str, host: &mut dyn PluginHost) -> Result<Value, Flow> {
    match value {
        Value::Instance(id) => read_attribute(*id, attr, host, false, attr),
        other => Err(Flow::Error(PluginError::external(
            "AttributeError",
            format!("'{}' object has no attribute '{attr}'", pyfmt::plugin_type_name(other)),
        ))),
    }
}

fn getitem(value: &Value, key: &str) -> Result<Value, Flow> {
    let index = key.bytes().all(|b| b.is_ascii_digit()).then(|| key.parse::<usize>().ok()).flatten();
    let element = match (value, index) {
        (Value::List(items), Some(i)) => {
            items.get(i).cloned().ok_or_else(|| PluginError::external("IndexError", "list index out of range"))?
        }
        (Value::List(_), None) => return Err(type_error("list indices must be integers or slices, not str")),
        (Value::Str(s), Some(i)) => match s.chars().nth(i) {
            Some(c) => Value::str(&c.to_string()),
            None => return Err(Flow::Error(PluginError::external("IndexError", "string index out of range"))),
        },
        (Value::Str(_), None) => return Err(type_error("string indices must be integers, not 'str'")),
        (Value::Dict(entries), _) => match entries.iter().find(|(k, _)| index.is_none() && **k == *key) {
            Some((_, v)) => v.clone(),
            None => {
                let shown = if index.is_some() { key.to_string() } else { str_repr(key) };
                return Err(Flow::Error(PluginError::external("KeyError", shown)));
            }
        },
        (other, _) => {
            return Err(type_error(format!("'{}' object is not subscriptable", pyfmt::plugin_type_name(other))));
        }
    };
    match element {
        Value::Unknown => Err(Flow::Unknown),
        v => Ok(v),
    }
}

/// Python's `ascii()` of a repr: non-ASCII characters escaped.
fn ascii(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let code = c as u32;
        if code < 0x80 {
            out.push(c);
        } else if code <= 0xff {
            out.push_str(&format!("\\x{code:02x}"));
        } else if code <= 0xffff {
            out.push_str(&format!("\\u{code:04x}"));
        } else {
            out.push_str(&format!("\\U{code:08x}"));
        }
    }
    out
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

fn parse_spec(spec: &str) -> Result<Spec, Flow> {
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
        s.width = digits.parse().map_err(|_| value_error("Too many decimal digits in format string"))?;
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
            return Err(value_error("Format specifier missing precision"));
        }
        let digits: String = chars[start..i].iter().collect();
        s.precision = Some(digits.parse().map_err(|_| value_error("Too many decimal digits in format string"))?);
    }
    if i < chars.len() {
        if i + 1 < chars.len() {
            return Err(value_error("Invalid format specifier"));
        }
        s.kind = Some(chars[i]);
    }
    Ok(s)
}

fn format_obj(obj: &Obj, spec: &str, host: &mut dyn PluginHost) -> Result<String, Flow> {
    let value = match obj {
        Obj::Text(text) => return format_str(text, spec),
        Obj::Value(value) => value,
    };
    match value {
        Value::Str(s) => format_str(s, spec),
        Value::Bool(b) if spec.is_empty() => Ok(if *b { "True" } else { "False" }.into()),
        Value::Bool(b) => format_int(&BigInt::from(*b as i64), spec),
        Value::Int(i) => format_int(&BigInt::from(*i), spec),
        Value::BigInt(i) => format_int(i, spec),
        Value::Float(f) => format_float(*f, spec),
        other if spec.is_empty() => Ok(pyfmt::plugin_str(other, host)),
        other => Err(type_error(format!(
            "unsupported format string passed to {}.__format__",
            pyfmt::plugin_type_name(other)
        ))),
    }
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

fn format_str(text: &str, spec: &str) -> Result<String, Flow> {
    let s = parse_spec(spec)?;
    if s.sign.is_some() {
        return Err(value_error("Sign not allowed in string format specifier"));
    }
    if s.alternate {
        return Err(value_error("Alternate form (#) not allowed in string format specifier"));
    }
    if s.align == Some('=') {
        return Err(value_error("'=' alignment not allowed in string format specifier"));
    }
    if s.grouping.is_some() {
        return Err(value_error("Cannot specify ',' with 's'."));
    }
    match s.kind {
        None | Some('s') => {}
        Some(k) => return Err(value_error(format!("Unknown format code '{k}' for object of type 'str'"))),
    }
    let body: String = match s.precision {
        Some(p) => text.chars().take(p).collect(),
        None => text.to_string(),
    };
    Ok(pad(&body, "", &s, '<'))
}

/// Inserts a separator every `every` digits from the right.
fn group(digits: &str, sep: char, every: usize) -> String {
    let chars: Vec<char> = digits.chars().collect();
    let mut out = String::new();
    for (i, c) in chars.iter().enumerate() {
        if i > 0 && (chars.len() - i).is_multiple_of(every) {
            out.push(sep);
        }
        out.push(*c);
    }
    out
}

fn sign_prefix(negative: bool, s: &Spec) -> &'static str {
    match (negative, s.sign) {
        (true, _) => "-",
        (false, Some('+')) => "+",
        (false, Some(' ')) => " ",
        _ => "",
    }
}

fn format_int(i: &BigInt, spec: &str) -> Result<String, Flow> {
    let s = parse_spec(spec)?;
    let kind = s.kind.unwrap_or('d');
    if matches!(kind, 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | '%') {
        return format_float(i.to_f64().unwrap_or(f64::INFINITY), spec);
    }
    if s.precision.is_some() {
        return Err(value_error("Precision not allowed in integer format specifier"));
    }
    let magnitude = i.abs();
    let (digits, radix_prefix) = match kind {
        'd' | 'n' => (magnitude.to_str_radix(10), ""),
        'b' => (magnitude.to_str_radix(2), "0b"),
        'o' => (magnitude.to_str_radix(8), "0o"),
        'x' => (magnitude.to_str_radix(16), "0x"),
        'X' => (magnitude.to_str_radix(16).to_uppercase(), "0X"),
        'c' => {
            let c = i
                .to_u32()
                .and_then(char::from_u32)
                .ok_or_else(|| Flow::Error(PluginError::external("OverflowError", "%c arg not in range(0x110000)")))?;
            return Ok(pad(&c.to_string(), "", &s, '<'));
        }
        other => return Err(value_error(format!("Unknown format code '{other}' for object of type 'int'"))),
    };
    let digits = match s.grouping {
        Some(sep) => group(&digits, sep, if matches!(kind, 'd' | 'n') { 3 } else { 4 }),
        None => digits,
    };
    let mut prefix = sign_prefix(i.is_negative() && !i.is_zero(), &s).to_string();
    if s.alternate {
        prefix.push_str(radix_prefix);
    }
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

fn format_float(x: f64, spec: &str) -> Result<String, Flow> {
    let s = parse_spec(spec)?;
    let negative = x.is_sign_negative() && !x.is_nan();
    let a = x.abs();
    let upper = matches!(s.kind, Some('E' | 'F' | 'G'));
    if let Some(other) = s.kind.filter(|k| !matches!(k, 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'n' | '%')) {
        return Err(value_error(format!("Unknown format code '{other}' for object of type 'float'")));
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
            Some('%') => format!("{:.*}%", s.precision.unwrap_or(6), a * 100.0),
            Some(other) => {
                return Err(value_error(format!("Unknown format code '{other}' for object of type 'float'")));
            }
        }
    };
    if let Some(sep) = s.grouping
        && a.is_finite()
    {
        let end = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
        body = format!("{}{}", group(&body[..end], sep, 3), &body[end..]);
    }
    Ok(pad(&body, sign_prefix(negative, &s), &s, '>'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_specs_follow_python() {
        let cases: &[(&str, Value, &str)] = &[
            ("", Value::Float(1.0), "1.0"),
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
            let got = match value {
                Value::Str(s) => format_str(s, spec),
                Value::Float(f) => format_float(*f, spec),
                Value::Int(i) => format_int(&BigInt::from(*i), spec),
                Value::Bool(b) if spec.is_empty() => Ok(if *b { "True".into() } else { "False".into() }),
                Value::Bool(b) => format_int(&BigInt::from(*b as i64), spec),
                _ => unreachable!(),
            };
            assert_eq!(got.ok().as_deref(), Some(*expected), "format({value:?}, {spec:?})");
        }
    }
}
