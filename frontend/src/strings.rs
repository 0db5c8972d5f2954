//! String literal decoding, `{{ }}` interpolation and f-string field parsing, reproducing the
//! reference compiler exactly.
//!
//! The reference decodes `"..."`, `"""..."""` and `f"..."` literals with Python's
//! `unicode_escape` codec applied to the UTF-8 bytes of the source text. That codec reads every
//! byte that is not part of an escape as Latin-1, so non-ASCII text is mangled (`"é"` becomes
//! `"Ã©"`) while `\u00e9` escapes work. Weft reproduces this, mangling included, because
//! models (and their expected outputs) depend on it.

use std::borrow::Cow;

/// The result of decoding a string literal body.
#[derive(Debug, PartialEq)]
pub struct Decoded<'s> {
    pub value: Cow<'s, str>,
    /// An escape such as `\d` was kept verbatim (a warning in the reference).
    pub invalid_escape: bool,
    /// A lone surrogate (`\ud800`) was replaced by U+FFFD: Rust strings cannot hold one.
    pub lone_surrogate: bool,
}

/// A decoding failure; the reference raises `UnicodeDecodeError` here.
#[derive(Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the backslash in the raw text.
    pub offset: usize,
    pub message: &'static str,
}

/// Decodes like Python's `bytes(raw, "utf-8").decode("unicode_escape")`.
pub fn decode_unicode_escape(raw: &str) -> Result<Decoded<'_>, DecodeError> {
    let bytes = raw.as_bytes();
    if raw.is_ascii() && !bytes.contains(&b'\\') {
        return Ok(Decoded { value: Cow::Borrowed(raw), invalid_escape: false, lone_surrogate: false });
    }
    let mut out = String::with_capacity(raw.len() + 8);
    let mut invalid_escape = false;
    let mut lone_surrogate = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'\\' {
            // Latin-1: every byte is the code point of the same value.
            out.push(char::from(b));
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let Some(&c) = bytes.get(i) else {
            return Err(DecodeError { offset: start, message: "\\ at end of string" });
        };
        i += 1;
        match c {
            b'\n' => {}
            b'\\' => out.push('\\'),
            b'\'' => out.push('\''),
            b'"' => out.push('"'),
            b'a' => out.push('\u{7}'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'v' => out.push('\u{b}'),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                let mut digits = 1;
                while digits < 3 && matches!(bytes.get(i), Some(b'0'..=b'7')) {
                    value = value * 8 + u32::from(bytes[i] - b'0');
                    i += 1;
                    digits += 1;
                }
                out.push(char::from_u32(value).expect("at most 0o777"));
            }
            b'x' | b'u' | b'U' => {
                let (count, message) = match c {
                    b'x' => (2, "truncated \\xXX escape"),
                    b'u' => (4, "truncated \\uXXXX escape"),
                    _ => (8, "truncated \\UXXXXXXXX escape"),
                };
                let digits = bytes.get(i..i + count).filter(|d| d.iter().all(u8::is_ascii_hexdigit));
                let Some(digits) = digits else {
                    return Err(DecodeError { offset: start, message });
                };
                let value = u32::from_str_radix(std::str::from_utf8(digits).expect("hex digits"), 16)
                    .expect("at most 8 hex digits");
                i += count;
                if value > 0x10ffff {
                    return Err(DecodeError { offset: start, message: "illegal Unicode character" });
                }
                match char::from_u32(value) {
                    Some(ch) => out.push(ch),
                    None => {
                        lone_surrogate = true;
                        out.push('\u{fffd}');
                    }
                }
            }
            b'N' => {
                let close = bytes[i..].iter().position(|&b| b == b'}');
                let name = match (bytes.get(i), close) {
                    (Some(b'{'), Some(close)) if close > 1 => &raw[i + 1..i + close],
                    _ => return Err(DecodeError { offset: start, message: "malformed \\N character escape" }),
                };
                match unicode_names2::character(name) {
                    Some(ch) => out.push(ch),
                    None => return Err(DecodeError { offset: start, message: "unknown Unicode character name" }),
                }
                i += close.expect("checked above") + 1;
            }
            _ => {
                // Python keeps an unknown escape as is; the character after the backslash is
                // then an ordinary (Latin-1) byte.
                invalid_escape = true;
                out.push('\\');
                i -= 1;
            }
        }
    }
    Ok(Decoded { value: Cow::Owned(out), invalid_escape, lone_surrogate })
}

/// Python's `str.isspace()`, which is what `\s` matches in a `str` regex.
pub fn is_python_space(c: char) -> bool {
    matches!(c, '\u{1c}'..='\u{1f}') || c.is_whitespace()
}

/// One `{{ name.path }}` occurrence: the byte range of the whole match and of the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterpolationMatch {
    pub start: usize,
    pub end: usize,
    pub name_start: usize,
    pub name_end: usize,
}

/// Finds `{{\s*([.A-Za-z0-9_-]+)\s*}}` matches left to right, as Python's `finditer` does.
pub fn find_interpolations(text: &str) -> Vec<InterpolationMatch> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    // A plain byte scan: most literals have no brace at all, and a substring searcher costs
    // more to set up than this loop costs to run.
    while let Some(rel) = bytes[from..].windows(2).position(|w| w == b"{{") {
        let start = from + rel;
        match match_interpolation_at(text, start) {
            Some(m) => {
                from = m.end;
                found.push(m);
            }
            None => from = start + 1,
        }
    }
    found
}

fn match_interpolation_at(text: &str, start: usize) -> Option<InterpolationMatch> {
    let skip_space = |mut i: usize| {
        while let Some(c) = text[i..].chars().next() {
            if !is_python_space(c) {
                break;
            }
            i += c.len_utf8();
        }
        i
    };
    let name_start = skip_space(start + 2);
    let bytes = text.as_bytes();
    let mut name_end = name_start;
    while name_end < bytes.len()
        && (bytes[name_end].is_ascii_alphanumeric() || matches!(bytes[name_end], b'.' | b'_' | b'-'))
    {
        name_end += 1;
    }
    if name_end == name_start {
        return None;
    }
    let close = skip_space(name_end);
    text[close..].starts_with("}}").then_some(InterpolationMatch { start, end: close + 2, name_start, name_end })
}

/// One item of Python's `string.Formatter().parse(text)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatChunk<'s> {
    pub literal: Cow<'s, str>,
    /// `None` when the chunk is only literal text.
    pub field: Option<FormatField<'s>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatField<'s> {
    pub name: &'s str,
    pub conversion: Option<char>,
    pub spec: &'s str,
}

/// Parses a format string as CPython 3.12's `MarkupIterator` does (the machinery behind
/// `string.Formatter.parse` and `str.format`), with the same error messages.
pub fn parse_format_string(text: &str) -> Result<Vec<FormatChunk<'_>>, String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte_at = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
    let mut chunks = Vec::new();
    let mut pos = 0;
    while pos < chars.len() {
        let start = pos;
        let mut c = '\0';
        let mut markup_follows = false;
        while pos < chars.len() {
            c = chars[pos].1;
            pos += 1;
            if c == '{' || c == '}' {
                markup_follows = true;
                break;
            }
        }
        let at_end = pos >= chars.len();
        let mut literal_end = pos;
        if markup_follows && c == '}' && (at_end || chars[pos].1 != '}') {
            return Err("Single '}' encountered in format string".into());
        }
        if markup_follows && at_end && c == '{' {
            return Err("Single '{' encountered in format string".into());
        }
        if markup_follows && !at_end {
            if chars[pos].1 == c {
                // An escaped `{{` or `}}`: the literal keeps one brace.
                pos += 1;
                markup_follows = false;
            } else {
                literal_end -= 1;
            }
        }
        let literal = Cow::Borrowed(&text[byte_at(start)..byte_at(literal_end)]);
        if !markup_follows {
            chunks.push(FormatChunk { literal, field: None });
            continue;
        }
        let field = parse_field(&chars, &mut pos, &byte_at, text)?;
        chunks.push(FormatChunk { literal, field: Some(field) });
    }
    Ok(chunks)
}

/// Parses one replacement field whose opening brace was just consumed, leaving `pos` after its
/// closing brace.
fn parse_field<'s>(
    chars: &[(usize, char)],
    pos: &mut usize,
    byte_at: &dyn Fn(usize) -> usize,
    text: &'s str,
) -> Result<FormatField<'s>, String> {
    let name_start = *pos;
    let mut c = '\0';
    // The field name ends at `}`, `:` or `!`; brackets hide those characters.
    while *pos < chars.len() {
        c = chars[*pos].1;
        *pos += 1;
        match c {
            '{' => return Err("unexpected '{' in field name".into()),
            '[' => {
                while *pos < chars.len() && chars[*pos].1 != ']' {
                    *pos += 1;
                }
                continue;
            }
            '}' | ':' | '!' => break,
            _ => continue,
        }
    }
    let name_end = if matches!(c, '}' | ':' | '!') { *pos - 1 } else { *pos };
    let name = &text[byte_at(name_start)..byte_at(name_end)];
    if c != '!' && c != ':' {
        if c != '}' || name_end == *pos {
            return Err("expected '}' before end of string".into());
        }
        return Ok(FormatField { name, conversion: None, spec: "" });
    }
    let mut conversion = None;
    if c == '!' {
        if *pos >= chars.len() {
            return Err("end of string while looking for conversion specifier".into());
        }
        conversion = Some(chars[*pos].1);
        *pos += 1;
        if *pos < chars.len() {
            let next = chars[*pos].1;
            *pos += 1;
            if next == '}' {
                return Ok(FormatField { name, conversion, spec: "" });
            }
            if next != ':' {
                return Err("expected ':' after conversion specifier".into());
            }
        }
    }
    let spec_start = *pos;
    let mut depth = 1;
    while *pos < chars.len() {
        let c = chars[*pos].1;
        *pos += 1;
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let spec = &text[byte_at(spec_start)..byte_at(*pos - 1)];
                    return Ok(FormatField { name, conversion, spec });
                }
            }
            _ => {}
        }
    }
    Err("unmatched '{' in format spec".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> String {
        decode_unicode_escape(s).unwrap().value.into_owned()
    }

    #[test]
    fn unicode_escape_matches_python() {
        assert_eq!(dec("plain"), "plain");
        assert_eq!(dec(r"a\tb\n\\\'\x41\101\u00e9\U0001F600"), "a\tb\n\\'AAé😀");
        assert_eq!(dec("é"), "Ã©");
        assert_eq!(dec(r"\777"), "ǿ");
        assert_eq!(dec("a\\\nb"), "ab");
        assert_eq!(dec(r"\N{BULLET}"), "•");
        let d = decode_unicode_escape(r"a\db").unwrap();
        assert_eq!(d.value, r"a\db");
        assert!(d.invalid_escape);
        assert!(decode_unicode_escape(r"\x4g").is_err());
        assert!(decode_unicode_escape(r"\U00110000").is_err());
        assert!(decode_unicode_escape(r"\N{no such name}").is_err());
    }

    #[test]
    fn interpolations_are_found_like_finditer() {
        let t = "a {{x}} b {{ y.z }} {{{w}} {{ }} {{a b}}";
        let names: Vec<&str> = find_interpolations(t).iter().map(|m| &t[m.name_start..m.name_end]).collect();
        assert_eq!(names, vec!["x", "y.z", "w"]);
    }

    /// A chunk as (literal, field name, conversion, spec).
    type Chunk = (String, Option<String>, Option<char>, String);

    fn fields(s: &str) -> Result<Vec<Chunk>, String> {
        parse_format_string(s).map(|chunks| {
            chunks
                .into_iter()
                .map(|c| {
                    let (n, conv, spec) = match c.field {
                        Some(f) => (Some(f.name.to_string()), f.conversion, f.spec.to_string()),
                        None => (None, None, String::new()),
                    };
                    (c.literal.into_owned(), n, conv, spec)
                })
                .collect()
        })
    }

    #[test]
    fn format_strings_parse_like_cpython() {
        assert_eq!(
            fields("{{x}} is {x}").unwrap(),
            vec![
                ("{".into(), None, None, "".into()),
                ("x}".into(), None, None, "".into()),
                (" is ".into(), Some("x".into()), None, "".into()),
            ]
        );
        assert_eq!(fields("{x:{w}.{p}f}").unwrap(), vec![("".into(), Some("x".into()), None, "{w}.{p}f".into())]);
        assert_eq!(fields("a{x!r}b").unwrap()[0], ("a".into(), Some("x".into()), Some('r'), "".into()));
        assert_eq!(fields("a}b").unwrap_err(), "Single '}' encountered in format string");
        assert_eq!(fields("{x").unwrap_err(), "expected '}' before end of string");
        assert_eq!(fields("{x!rr}").unwrap_err(), "expected ':' after conversion specifier");
        assert_eq!(fields("{x!}").unwrap_err(), "unmatched '{' in format spec");
        assert_eq!(fields("{x:{y}").unwrap_err(), "unmatched '{' in format spec");
        assert_eq!(fields("{a[}]}").unwrap()[0].1.as_deref(), Some("a[}]"));
        assert_eq!(fields("{a[}").unwrap_err(), "expected '}' before end of string");
        assert_eq!(fields("{x!:}").unwrap()[0].2, Some(':'));
        assert_eq!(fields("{ {x} }").unwrap_err(), "unexpected '{' in field name");
        assert_eq!(fields("{x:{{}}}").unwrap()[0].3, "{{}}");
    }
}
