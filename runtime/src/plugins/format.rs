//! Python's `str.format` for `std::format`: replacement fields with automatic or manual
//! numbering, keyword fields, attribute and index access, conversions, and the format
//! specification mini-language for strings, ints and floats.

use weft_ir::format_spec::{FormatError, format_str, format_value};
use weft_ir::value::{Value, str_repr};

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

/// [`str_format`] as a value: the object CPython returns ([`Value::formatted`]), which is
/// the field's own string when the template is that one field and formatting changed nothing.
pub(crate) fn str_format_value(
    template: &str,
    args: &[Value],
    kwargs: &[(String, Value)],
    host: &mut dyn PluginHost,
) -> Result<Value, Flow> {
    let text = str_format(template, args, kwargs, host)?;
    let sole = match weft_ir::format_spec::sole_field(template) {
        // The template formatted, so its field parses and resolves.
        Some(field) => match split_field(field) {
            Ok((name, _, _)) => Formatter { args, kwargs, auto: Some(0), manual: false }.resolve(&name, host).ok(),
            Err(_) => None,
        },
        None => None,
    };
    Ok(Value::formatted(text, sole.as_ref()))
}

/// A replacement field's name, conversion and format spec; brackets in the name may hold
/// any character.
fn split_field(field: &str) -> Result<(String, Option<char>, String), Flow> {
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
    Ok((name, conversion, spec))
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
        let (name, conversion, spec) = split_field(field)?;
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
        (Value::Dict(entries), _) => match entries.get(key).filter(|_| index.is_none()) {
            Some(v) => v.clone(),
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

fn format_obj(obj: &Obj, spec: &str, host: &mut dyn PluginHost) -> Result<String, Flow> {
    let value = match obj {
        Obj::Text(text) => return format_str(text, spec).map_err(format_error),
        Obj::Value(value) => value,
    };
    match format_value(value, spec) {
        Some(result) => result.map_err(format_error),
        None if spec.is_empty() => Ok(pyfmt::plugin_str(value, host)),
        None => Err(type_error(format!(
            "unsupported format string passed to {}.__format__",
            pyfmt::plugin_type_name(value)
        ))),
    }
}

fn format_error(e: FormatError) -> Flow {
    Flow::Error(PluginError::external(e.class, e.message))
}
