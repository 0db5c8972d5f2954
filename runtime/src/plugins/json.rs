//! JSON as Python's `json` module reads and writes it: `NaN` and `Infinity` accepted,
//! arbitrary-precision ints, dict order kept (a repeated key keeps its first position and its
//! last value), and `json.dumps`'s default output (`", "` and `": "` separators, non-ASCII
//! escaped).

use std::fmt::Write as _;
use std::sync::Arc;

use num_bigint::BigInt;
use weft_ir::value::{Value, float_repr};

use super::{Flow, PluginError, PluginHost, pyfmt};

/// `json.loads`; errors are `JSONDecodeError` with Python's message.
pub(crate) fn loads(text: &str) -> Result<Value, PluginError> {
    let mut p = Parser { text, pos: 0, depth: 0 };
    p.ws();
    let value = p.value()?;
    p.ws();
    if p.pos < text.len() {
        return Err(p.error("Extra data", p.pos));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: u32,
}

impl Parser<'_> {
    fn error(&self, message: &str, pos: usize) -> PluginError {
        let before = &self.text[..pos];
        let line = before.matches('\n').count() + 1;
        let column = match before.rfind('\n') {
            Some(nl) => before[nl + 1..].chars().count() + 1,
            None => before.chars().count() + 1,
        };
        let char_pos = before.chars().count();
        PluginError::external("JSONDecodeError", format!("{message}: line {line} column {column} (char {char_pos})"))
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> Result<Value, PluginError> {
        let rest = &self.text[self.pos..];
        let Some(c) = self.peek() else { return Err(self.error("Expecting value", self.pos)) };
        match c {
            b'"' => {
                let start = self.pos;
                self.pos += 1;
                self.string(start).map(|s| Value::str(&s))
            }
            b'{' => self.object(),
            b'[' => self.array(),
            _ if rest.starts_with("null") => {
                self.pos += 4;
                Ok(Value::NULL)
            }
            _ if rest.starts_with("true") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            _ if rest.starts_with("false") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            _ if rest.starts_with("NaN") => {
                self.pos += 3;
                Ok(Value::Float(f64::NAN))
            }
            _ if rest.starts_with("Infinity") => {
                self.pos += 8;
                Ok(Value::Float(f64::INFINITY))
            }
            _ if rest.starts_with("-Infinity") => {
                self.pos += 9;
                Ok(Value::Float(f64::NEG_INFINITY))
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(self.error("Expecting value", self.pos)),
        }
    }

    fn number(&mut self) -> Result<Value, PluginError> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let mut i = start;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return Err(self.error("Expecting value", start)),
        }
        let mut float = false;
        if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            float = true;
            i += 1;
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(bytes.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if bytes.get(j).is_some_and(u8::is_ascii_digit) {
                float = true;
                while bytes.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
                i = j;
            }
        }
        self.pos = i;
        let text = &self.text[start..i];
        if float {
            Ok(Value::Float(text.parse().unwrap_or(f64::NAN)))
        } else {
            Ok(BigInt::parse_bytes(text.as_bytes(), 10).map(Value::int).unwrap_or(Value::Int(0)))
        }
    }

    /// A string whose opening quote is at `start`; `self.pos` is just after it.
    fn string(&mut self, start: usize) -> Result<String, PluginError> {
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                return Err(self.error("Unterminated string starting at", start));
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\\' => {
                    let escape_at = self.pos;
                    self.pos += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.error("Unterminated string starting at", start));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let first = self.hex4(escape_at)?;
                            let code = if (0xd800..0xdc00).contains(&first) && self.text[self.pos..].starts_with("\\u")
                            {
                                let save = self.pos;
                                self.pos += 2;
                                let second = self.hex4(save)?;
                                if (0xdc00..0xe000).contains(&second) {
                                    0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                                } else {
                                    self.pos = save;
                                    first
                                }
                            } else {
                                first
                            };
                            // A lone surrogate cannot be held in a Rust string.
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        _ => return Err(self.error("Invalid \\escape", escape_at)),
                    }
                }
                c if (c as u32) < 0x20 => return Err(self.error("Invalid control character at", self.pos)),
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    fn hex4(&mut self, escape_at: usize) -> Result<u32, PluginError> {
        let digits = self.text.get(self.pos..self.pos + 4).filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
        match digits {
            Some(d) => {
                self.pos += 4;
                Ok(u32::from_str_radix(d, 16).unwrap_or(0xfffd))
            }
            None => Err(self.error("Invalid \\uXXXX escape", escape_at)),
        }
    }

    fn enter(&mut self) -> Result<(), PluginError> {
        self.depth += 1;
        if self.depth > 900 {
            return Err(PluginError::external(
                "RecursionError",
                "maximum recursion depth exceeded while decoding a JSON document",
            ));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, PluginError> {
        self.enter()?;
        self.pos += 1;
        let mut entries: Vec<(Arc<str>, Value)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Dict(entries.into()));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("Expecting property name enclosed in double quotes", self.pos));
            }
            let start = self.pos;
            self.pos += 1;
            let key: Arc<str> = Arc::from(self.string(start)?);
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.error("Expecting ':' delimiter", self.pos));
            }
            self.pos += 1;
            self.ws();
            let value = self.value()?;
            // A repeated key keeps its first place and takes the later value, as Python's
            // `json` does; `Dict::new` sees to that.
            entries.push((key, value));
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.error("Expecting property name enclosed in double quotes", self.pos));
                    }
                }
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(Value::Dict(entries.into()));
                }
                _ => return Err(self.error("Expecting ',' delimiter", self.pos)),
            }
        }
    }

    fn array(&mut self) -> Result<Value, PluginError> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::List(Arc::from(items)));
        }
        loop {
            self.ws();
            items.push(self.value()?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(Value::List(Arc::from(items)));
                }
                _ => return Err(self.error("Expecting ',' delimiter", self.pos)),
            }
        }
    }
}

/// `json.dumps(obj, default=util.internal_json_encoder)` of a value as a plugin receives it.
/// Unknowns inside make the call's result Unknown (reading them through the proxy raises
/// `UnknownException` in the reference); instances and references are not serializable.
pub(crate) fn dumps(value: &Value, host: &dyn PluginHost) -> Result<String, Flow> {
    let mut out = String::new();
    write_value(value, host, &mut out, 0)?;
    Ok(out)
}

fn write_value(value: &Value, host: &dyn PluginHost, out: &mut String, depth: u32) -> Result<(), Flow> {
    if depth > 900 {
        return Err(Flow::Error(PluginError::external("RecursionError", "maximum recursion depth exceeded")));
    }
    match value {
        Value::Null(_) => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::BigInt(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => out.push_str(&if f.is_nan() {
            "NaN".to_string()
        } else if f.is_infinite() {
            if *f > 0.0 { "Infinity".to_string() } else { "-Infinity".to_string() }
        } else {
            float_repr(*f)
        }),
        Value::Str(s) => write_string(s, out),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(item, host, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Dict(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(k, out);
                out.push_str(": ");
                write_value(v, host, out, depth + 1)?;
            }
            out.push('}');
        }
        Value::Unknown => return Err(Flow::Unknown),
        other => {
            return Err(Flow::Error(PluginError::external(
                "TypeError",
                format!("{} is not JSON serializable", pyfmt::plugin_repr(other, host)),
            )));
        }
    }
    Ok(())
}

/// A JSON string with `ensure_ascii`.
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
