//! Python's side of template values: the methods Jinja2 exposes because it calls Python
//! objects (`s.upper()`, `d.items()`, `'{}'.format(x)`), with Python's semantics, and the
//! helpers the filters share (argument binding as Python binds a call, Python exceptions
//! raised from inside a render, Python's ordering and string predicates).
//!
//! Methods that mutate their list or dict (`append`, `update`, ...) are not here: minijinja's
//! values are immutable, so a template cannot change a list it built (see `docs/templates.md`).

use std::cmp::Ordering;

use minijinja::value::{Tuple, ValueKind};
use minijinja::{Error as MjError, ErrorKind as MjErrorKind, State};
use weft_ir::value::Value;

use super::filters::DictView;
use super::{DslValue, MjValue, abort, from_jinja, py_repr, py_str, record, with_host};
use crate::plugins::{Flow, PluginError, format};

// ---------------------------------------------------------------------------------------
// Python exceptions and argument binding.

/// Raises the Python exception `class` from inside a render. The exception is recorded as the
/// render's first error (what the reference reports); minijinja only sees an abort.
pub(super) fn py_err(class: &str, message: impl Into<String>) -> MjError {
    record(Flow::Error(PluginError::external(class, message)));
    abort()
}

pub(super) fn type_error(message: impl Into<String>) -> MjError {
    py_err("TypeError", message)
}

pub(super) fn value_error(message: impl Into<String>) -> MjError {
    py_err("ValueError", message)
}

/// The arguments of a call bound to a Python signature's parameters, by position and then by
/// keyword, as Python binds them. A parameter that was not passed is `None`.
pub(super) fn bind(func: &str, args: &[MjValue], params: &[&str]) -> Result<Vec<Option<MjValue>>, MjError> {
    let mut bound: Vec<Option<MjValue>> = vec![None; params.len()];
    let mut positional = 0;
    for arg in args {
        if arg.is_kwargs() {
            for key in arg.try_iter()? {
                let name = key.as_str().unwrap_or_default();
                let Some(i) = params.iter().position(|p| *p == name) else {
                    return Err(type_error(format!("{func}() got an unexpected keyword argument '{name}'")));
                };
                if bound[i].is_some() {
                    return Err(type_error(format!("{func}() got multiple values for argument '{name}'")));
                }
                bound[i] = Some(arg.get_item(&key)?);
            }
        } else {
            if positional == params.len() {
                let given = args.iter().filter(|a| !a.is_kwargs()).count();
                return Err(type_error(format!("{func}() takes at most {} arguments ({given} given)", params.len())));
            }
            bound[positional] = Some(arg.clone());
            positional += 1;
        }
    }
    Ok(bound)
}

/// A bound argument that was passed and is not `None` (Python's default for most optional
/// parameters).
pub(super) fn given(arg: &Option<MjValue>) -> Option<&MjValue> {
    arg.as_ref().filter(|v| !v.is_none() && !v.is_undefined())
}

/// A required argument.
pub(super) fn required<'a>(func: &str, arg: &'a Option<MjValue>, name: &str) -> Result<&'a MjValue, MjError> {
    arg.as_ref().ok_or_else(|| type_error(format!("{func}() missing required argument: '{name}'")))
}

/// Python's type name of a template value, for messages.
pub(super) fn type_name(value: &MjValue) -> &'static str {
    if value.is_tuple() {
        return "tuple";
    }
    if let Some(obj) = value.downcast_object_ref::<DslValue>() {
        return match obj.value {
            Value::List(_) => "JinjaSequenceProxy",
            Value::Dict(_) => "JinjaDictProxy",
            _ => "int",
        };
    }
    match value.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

/// An int argument (a bool is an int in Python).
pub(super) fn as_int(value: &MjValue) -> Result<i64, MjError> {
    match value.kind() {
        ValueKind::Bool => Ok(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => {
            i64::try_from(value.clone()).map_err(|_| py_err("OverflowError", "Python int too large to convert"))
        }
        _ => Err(type_error(format!("'{}' object cannot be interpreted as an integer", type_name(value)))),
    }
}

/// A str argument.
pub(super) fn as_str<'a>(func: &str, value: &'a MjValue) -> Result<&'a str, MjError> {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Ok(s),
        _ => Err(type_error(format!("{func}() argument must be str, not {}", type_name(value)))),
    }
}

/// A number as a float (ints and bools too), if it is one.
pub(super) fn as_float(value: &MjValue) -> Option<f64> {
    match value.kind() {
        ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone()).ok(),
        _ => None,
    }
}

/// Python's `<` ordering between two values, for the sorting filters: numbers with numbers,
/// strings with strings, sequences element-wise; anything else is a `TypeError`.
pub(super) fn py_cmp(a: &MjValue, b: &MjValue) -> Result<Ordering, MjError> {
    let unorderable =
        || type_error(format!("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
    match (a.kind(), b.kind()) {
        (ValueKind::Number | ValueKind::Bool, ValueKind::Number | ValueKind::Bool) => {
            if let (Ok(x), Ok(y)) = (i128::try_from(a.clone()), i128::try_from(b.clone()))
                && a.kind() != ValueKind::Bool
                && b.kind() != ValueKind::Bool
            {
                return Ok(x.cmp(&y));
            }
            let (x, y) = (as_float(a).unwrap_or(f64::NAN), as_float(b).unwrap_or(f64::NAN));
            Ok(x.partial_cmp(&y).unwrap_or(Ordering::Equal))
        }
        (ValueKind::String, ValueKind::String) => Ok(a.as_str().cmp(&b.as_str())),
        (ValueKind::Seq, ValueKind::Seq) if a.downcast_object_ref::<DslValue>().is_none() => {
            let (xs, ys): (Vec<MjValue>, Vec<MjValue>) = (a.try_iter()?.collect(), b.try_iter()?.collect());
            for (x, y) in xs.iter().zip(&ys) {
                if x != y {
                    return py_cmp(x, y);
                }
            }
            Ok(xs.len().cmp(&ys.len()))
        }
        _ => Err(unorderable()),
    }
}

/// `str.splitlines()`: Python's line boundaries, not only `\n`.
pub(super) fn splitlines(s: &str, keepends: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        ) {
            if keepends {
                line.push(c);
            }
            if c == '\r' && chars.peek() == Some(&'\n') {
                chars.next();
                if keepends {
                    line.push('\n');
                }
            }
            lines.push(std::mem::take(&mut line));
        } else {
            line.push(c);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Python's `str.isspace` characters (the `whitespace` of `str.split()`).
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

/// A character Python considers cased (it has an upper and a lower form).
fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase()
}

/// Python's slice bounds for `start` and `end` arguments (`str.find`, `str.count`).
fn bounds(len: usize, start: Option<&MjValue>, end: Option<&MjValue>) -> Result<(usize, usize), MjError> {
    let adjust = |v: Option<&MjValue>, default: usize| -> Result<usize, MjError> {
        let Some(v) = v else { return Ok(default) };
        let i = as_int(v)?;
        Ok(if i < 0 { (i + len as i64).max(0) as usize } else { (i as usize).min(len) })
    };
    Ok((adjust(start, 0)?, adjust(end, len)?))
}

/// The position of `needle` in `hay` (character indices), searching from the left or right.
fn find_chars(hay: &[char], needle: &[char], from_right: bool) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    let positions = 0..=hay.len() - needle.len();
    let matches = |i: &usize| hay[*i..*i + needle.len()] == *needle;
    if from_right { positions.rev().find(matches) } else { positions.into_iter().find(matches) }
}

/// `str.split` and `str.rsplit`.
fn split(s: &str, sep: Option<&str>, maxsplit: i64, from_right: bool) -> Result<Vec<String>, MjError> {
    let limit = if maxsplit < 0 { usize::MAX } else { maxsplit as usize };
    match sep {
        Some("") => Err(value_error("empty separator")),
        Some(sep) => {
            let parts: Vec<String> = if from_right {
                let mut parts: Vec<String> = s.rsplitn(limit.saturating_add(1), sep).map(str::to_string).collect();
                parts.reverse();
                parts
            } else {
                s.splitn(limit.saturating_add(1), sep).map(str::to_string).collect()
            };
            Ok(parts)
        }
        None => {
            // Runs of whitespace separate; leading and trailing whitespace gives no empty
            // parts, and the unsplit rest keeps its whitespace on the far side.
            let chars: Vec<char> = if from_right { s.chars().rev().collect() } else { s.chars().collect() };
            let mut parts = Vec::new();
            let mut i = 0;
            loop {
                while i < chars.len() && is_py_space(chars[i]) {
                    i += 1;
                }
                if i == chars.len() {
                    break;
                }
                if parts.len() == limit {
                    parts.push(chars[i..].iter().collect::<String>());
                    break;
                }
                let start = i;
                while i < chars.len() && !is_py_space(chars[i]) {
                    i += 1;
                }
                parts.push(chars[start..i].iter().collect::<String>());
            }
            if from_right {
                parts.reverse();
                for part in &mut parts {
                    *part = part.chars().rev().collect();
                }
            }
            Ok(parts)
        }
    }
}

/// `str.center`, `str.ljust` and `str.rjust`.
fn pad(
    func: &str,
    s: &str,
    width: &MjValue,
    fill: Option<&MjValue>,
    left_share: impl Fn(usize, usize) -> usize,
) -> Result<String, MjError> {
    let width = as_int(width)?;
    let fill = match fill {
        Some(f) => {
            let f = as_str(func, f)?;
            let mut chars = f.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => return Err(type_error("The fill character must be exactly one character long")),
            }
        }
        None => ' ',
    };
    let len = s.chars().count();
    if width <= len as i64 {
        return Ok(s.to_string());
    }
    let margin = width as usize - len;
    let left = left_share(margin, width as usize);
    let mut out: String = std::iter::repeat_n(fill, left).collect();
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, margin - left));
    Ok(out)
}

/// `str.center`'s share of the margin on the left (CPython's `pad` arithmetic).
pub(super) fn center_left(margin: usize, width: usize) -> usize {
    margin / 2 + (margin & width & 1)
}

/// `str.center(width)`.
pub(super) fn center(s: &str, width: &MjValue) -> Result<String, MjError> {
    pad("center", s, width, None, center_left)
}

/// Python's `str.title()`: a letter after a cased letter is lowered, others are raised.
pub(super) fn title(s: &str) -> String {
    let mut out = String::new();
    let mut previous_cased = false;
    for c in s.chars() {
        if previous_cased {
            out.extend(c.to_lowercase())
        } else {
            out.extend(c.to_uppercase())
        }
        previous_cased = is_cased(c);
    }
    out
}

/// `str.expandtabs(tabsize)`.
fn expandtabs(s: &str, tabsize: i64) -> String {
    let mut out = String::new();
    let mut column = 0i64;
    for c in s.chars() {
        match c {
            '\t' => {
                if tabsize > 0 {
                    let spaces = tabsize - column % tabsize;
                    out.extend(std::iter::repeat_n(' ', spaces as usize));
                    column += spaces;
                }
            }
            '\n' | '\r' => {
                out.push(c);
                column = 0;
            }
            c => {
                out.push(c);
                column += 1;
            }
        }
    }
    out
}

/// `str.startswith`/`str.endswith`: a prefix or a tuple of them, within `start:end`.
fn affix(func: &str, s: &str, args: &[Option<MjValue>], at_end: bool) -> Result<bool, MjError> {
    let chars: Vec<char> = s.chars().collect();
    let (start, end) = bounds(chars.len(), given(&args[1]), given(&args[2]))?;
    let region: String = if start <= end { chars[start..end].iter().collect() } else { String::new() };
    let test = |p: &str| if at_end { region.ends_with(p) } else { region.starts_with(p) };
    let affixes = required(func, &args[0], "prefix")?;
    if affixes.kind() == ValueKind::String {
        return Ok(test(affixes.as_str().unwrap_or("")));
    }
    if affixes.is_tuple() {
        for item in affixes.try_iter()? {
            if test(as_str(func, &item)?) {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    Err(type_error(format!("{func} first arg must be str or a tuple of str, not {}", type_name(affixes))))
}

/// `str.strip`, `lstrip` and `rstrip`.
fn strip(func: &str, s: &str, chars: Option<&MjValue>, left: bool, right: bool) -> Result<String, MjError> {
    let set: Option<Vec<char>> = match chars {
        Some(c) => Some(as_str(func, c)?.chars().collect()),
        None => None,
    };
    let strip_it = |c: char| match &set {
        Some(set) => set.contains(&c),
        None => is_py_space(c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(strip_it);
    }
    if right {
        out = out.trim_end_matches(strip_it);
    }
    Ok(out.to_string())
}

fn strings(items: Vec<String>) -> MjValue {
    MjValue::from(items.into_iter().map(MjValue::from).collect::<Vec<_>>())
}

// ---------------------------------------------------------------------------------------
// Methods.

/// The environment's unknown-method callback: Python's methods of `str`, `list`, `tuple`,
/// `dict`, `int` and `float`.
pub(super) fn python_method(
    _state: &mut State,
    value: &MjValue,
    method: &str,
    args: &[MjValue],
) -> Result<MjValue, MjError> {
    match value.kind() {
        ValueKind::String => str_method(value.as_str().unwrap_or(""), method, args),
        ValueKind::Map => dict_method(value, method, args),
        ValueKind::Seq => list_method(value, method, args),
        ValueKind::Number | ValueKind::Bool => number_method(value, method, args),
        _ => Err(MjError::from(MjErrorKind::UnknownMethod)),
    }
}

fn str_method(s: &str, method: &str, args: &[MjValue]) -> Result<MjValue, MjError> {
    let func = format!("str.{method}");
    let func = func.as_str();
    let no_args = |v: MjValue| -> Result<MjValue, MjError> {
        if args.is_empty() { Ok(v) } else { Err(type_error(format!("{func}() takes no arguments"))) }
    };
    let all = |pred: fn(char) -> bool| MjValue::from(!s.is_empty() && s.chars().all(pred));
    Ok(match method {
        "upper" => no_args(MjValue::from(s.to_uppercase()))?,
        "lower" => no_args(MjValue::from(s.to_lowercase()))?,
        // Full case folding differs from lowering for a few letters; `ß` is the common one.
        "casefold" => no_args(MjValue::from(s.to_lowercase().replace('ß', "ss")))?,
        "swapcase" => no_args(MjValue::from(
            s.chars()
                .flat_map(|c| -> Vec<char> {
                    if c.is_uppercase() { c.to_lowercase().collect() } else { c.to_uppercase().collect() }
                })
                .collect::<String>(),
        ))?,
        "capitalize" => {
            let mut chars = s.chars();
            no_args(MjValue::from(match chars.next() {
                Some(first) => first.to_uppercase().chain(chars.as_str().to_lowercase().chars()).collect(),
                None => String::new(),
            }))?
        }
        "title" => no_args(MjValue::from(title(s)))?,
        "isalnum" => no_args(all(char::is_alphanumeric))?,
        "isalpha" => no_args(all(char::is_alphabetic))?,
        "isascii" => no_args(MjValue::from(s.is_ascii()))?,
        "isdecimal" | "isdigit" => no_args(all(|c| c.is_ascii_digit() || (c.is_numeric() && !c.is_ascii())))?,
        "isnumeric" => no_args(all(char::is_numeric))?,
        "isspace" => no_args(all(is_py_space))?,
        "isprintable" => no_args(MjValue::from(s.chars().all(|c| c == ' ' || !(c.is_control() || c.is_whitespace()))))?,
        "isidentifier" => no_args(MjValue::from(
            s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && s.chars().all(|c| c.is_alphanumeric() || c == '_'),
        ))?,
        "islower" => no_args(MjValue::from(s.chars().any(is_cased) && !s.chars().any(char::is_uppercase)))?,
        "isupper" => no_args(MjValue::from(s.chars().any(is_cased) && !s.chars().any(char::is_lowercase)))?,
        "istitle" => {
            let mut previous_cased = false;
            let mut any_cased = false;
            let mut ok = true;
            for c in s.chars() {
                if c.is_uppercase() {
                    ok &= !previous_cased;
                    previous_cased = true;
                    any_cased = true;
                } else if c.is_lowercase() {
                    ok &= previous_cased;
                    previous_cased = true;
                    any_cased = true;
                } else {
                    previous_cased = false;
                }
            }
            no_args(MjValue::from(ok && any_cased))?
        }
        "strip" | "lstrip" | "rstrip" => {
            let a = bind(func, args, &["chars"])?;
            MjValue::from(strip(func, s, given(&a[0]), method != "rstrip", method != "lstrip")?)
        }
        "center" | "ljust" | "rjust" => {
            let a = bind(func, args, &["width", "fillchar"])?;
            let width = required(func, &a[0], "width")?;
            MjValue::from(match method {
                "center" => pad(func, s, width, a[1].as_ref(), center_left)?,
                "ljust" => pad(func, s, width, a[1].as_ref(), |_, _| 0)?,
                _ => pad(func, s, width, a[1].as_ref(), |margin, _| margin)?,
            })
        }
        "zfill" => {
            let a = bind(func, args, &["width"])?;
            let width = as_int(required(func, &a[0], "width")?)?;
            let len = s.chars().count() as i64;
            if width <= len {
                MjValue::from(s)
            } else {
                let zeros = "0".repeat((width - len) as usize);
                MjValue::from(match s.strip_prefix(['+', '-']) {
                    Some(rest) => format!("{}{zeros}{rest}", &s[..1]),
                    None => format!("{zeros}{s}"),
                })
            }
        }
        "expandtabs" => {
            let a = bind(func, args, &["tabsize"])?;
            let size = match &a[0] {
                Some(v) => as_int(v)?,
                None => 8,
            };
            MjValue::from(expandtabs(s, size))
        }
        "count" | "find" | "rfind" | "index" | "rindex" => {
            let a = bind(func, args, &["sub", "start", "end"])?;
            let sub: Vec<char> = as_str(func, required(func, &a[0], "sub")?)?.chars().collect();
            let chars: Vec<char> = s.chars().collect();
            let (start, end) = bounds(chars.len(), given(&a[1]), given(&a[2]))?;
            if method == "count" {
                if start > end {
                    return Ok(MjValue::from(0));
                }
                let region = &chars[start..end];
                let count = if sub.is_empty() {
                    region.len() + 1
                } else {
                    let mut count = 0;
                    let mut i = 0;
                    while i + sub.len() <= region.len() {
                        if region[i..i + sub.len()] == *sub {
                            count += 1;
                            i += sub.len();
                        } else {
                            i += 1;
                        }
                    }
                    count
                };
                return Ok(MjValue::from(count));
            }
            let found = if start > end {
                None
            } else {
                find_chars(&chars[start..end], &sub, method.starts_with('r')).map(|i| i + start)
            };
            match (found, method) {
                (Some(i), _) => MjValue::from(i),
                (None, "find" | "rfind") => MjValue::from(-1),
                (None, _) => return Err(value_error("substring not found")),
            }
        }
        "startswith" | "endswith" => {
            let a = bind(func, args, &["prefix", "start", "end"])?;
            MjValue::from(affix(method, s, &a, method == "endswith")?)
        }
        "removeprefix" => {
            let a = bind(func, args, &["prefix"])?;
            let p = as_str(func, required(func, &a[0], "prefix")?)?;
            MjValue::from(s.strip_prefix(p).unwrap_or(s))
        }
        "removesuffix" => {
            let a = bind(func, args, &["suffix"])?;
            let p = as_str(func, required(func, &a[0], "suffix")?)?;
            MjValue::from(s.strip_suffix(p).unwrap_or(s))
        }
        "replace" => {
            let a = bind(func, args, &["old", "new", "count"])?;
            let old = as_str(func, required(func, &a[0], "old")?)?;
            let new = as_str(func, required(func, &a[1], "new")?)?;
            let count = match &a[2] {
                Some(c) => as_int(c)?,
                None => -1,
            };
            MjValue::from(if count < 0 { s.replace(old, new) } else { s.replacen(old, new, count as usize) })
        }
        "split" | "rsplit" => {
            let a = bind(func, args, &["sep", "maxsplit"])?;
            let sep = match given(&a[0]) {
                Some(sep) => Some(as_str(func, sep)?),
                None => None,
            };
            let maxsplit = match &a[1] {
                Some(m) => as_int(m)?,
                None => -1,
            };
            strings(split(s, sep, maxsplit, method == "rsplit")?)
        }
        "splitlines" => {
            let a = bind(func, args, &["keepends"])?;
            strings(splitlines(s, a[0].as_ref().is_some_and(MjValue::is_true)))
        }
        "partition" | "rpartition" => {
            let a = bind(func, args, &["sep"])?;
            let sep = as_str(func, required(func, &a[0], "sep")?)?;
            if sep.is_empty() {
                return Err(value_error("empty separator"));
            }
            let parts = if method == "partition" { s.split_once(sep) } else { s.rsplit_once(sep) };
            let parts = match (parts, method) {
                (Some((a, b)), _) => [a, sep, b],
                (None, "partition") => [s, "", ""],
                (None, _) => ["", "", s],
            };
            MjValue::from(Tuple::from(parts.map(MjValue::from)))
        }
        "join" => {
            let a = bind(func, args, &["iterable"])?;
            let items = required(func, &a[0], "iterable")?;
            let mut parts = Vec::new();
            for (i, item) in items.try_iter()?.enumerate() {
                match item.as_str() {
                    Some(text) if item.kind() == ValueKind::String => parts.push(text.to_string()),
                    _ => {
                        return Err(type_error(format!(
                            "sequence item {i}: expected str instance, {} found",
                            type_name(&item)
                        )));
                    }
                }
            }
            MjValue::from(parts.join(s))
        }
        "format" => {
            let mut positional = Vec::new();
            let mut keywords = Vec::new();
            for arg in args {
                if arg.is_kwargs() {
                    for key in arg.try_iter()? {
                        keywords.push((py_str(&key), dsl(&arg.get_item(&key)?)?));
                    }
                } else {
                    positional.push(dsl(arg)?);
                }
            }
            str_format(s, &positional, &keywords)?
        }
        "format_map" => {
            let a = bind(func, args, &["mapping"])?;
            let mapping = required(func, &a[0], "mapping")?;
            let mut keywords = Vec::new();
            for key in mapping.try_iter()? {
                keywords.push((py_str(&key), dsl(&mapping.get_item(&key)?)?));
            }
            str_format(s, &[], &keywords)?
        }
        _ => return Err(MjError::from(MjErrorKind::UnknownMethod)),
    })
}

/// A template value as the DSL value `str.format` formats.
fn dsl(value: &MjValue) -> Result<Value, MjError> {
    from_jinja(value).map_err(|flow| {
        record(flow);
        abort()
    })
}

/// `str.format` through the implementation `std::format` uses.
fn str_format(template: &str, args: &[Value], kwargs: &[(String, Value)]) -> Result<MjValue, MjError> {
    match with_host(|host| format::str_format(template, args, kwargs, host)).and_then(|r| r) {
        Ok(text) => Ok(MjValue::from(text)),
        Err(flow) => {
            record(flow);
            Err(abort())
        }
    }
}

fn list_method(value: &MjValue, method: &str, args: &[MjValue]) -> Result<MjValue, MjError> {
    let kind = if value.is_tuple() { "tuple" } else { "list" };
    let func = format!("{kind}.{method}");
    let func = func.as_str();
    Ok(match method {
        "count" => {
            let a = bind(func, args, &["value"])?;
            let x = required(func, &a[0], "value")?;
            MjValue::from(value.try_iter()?.filter(|v| v == x).count())
        }
        "index" => {
            let a = bind(func, args, &["value", "start", "stop"])?;
            let x = required(func, &a[0], "value")?;
            let items: Vec<MjValue> = value.try_iter()?.collect();
            let (start, end) = bounds(items.len(), given(&a[1]), given(&a[2]))?;
            match (start..end.max(start)).find(|i| items[*i] == *x) {
                Some(i) => MjValue::from(i),
                None => return Err(value_error(format!("{} is not in {kind}", py_repr(x)))),
            }
        }
        "copy" if kind == "list" => {
            bind(func, args, &[])?;
            MjValue::from(value.try_iter()?.collect::<Vec<_>>())
        }
        "append" | "extend" | "insert" | "pop" | "remove" | "reverse" | "sort" | "clear" if kind == "list" => {
            return Err(mutation(func));
        }
        _ => return Err(MjError::from(MjErrorKind::UnknownMethod)),
    })
}

fn dict_method(value: &MjValue, method: &str, args: &[MjValue]) -> Result<MjValue, MjError> {
    let func = format!("dict.{method}");
    let func = func.as_str();
    Ok(match method {
        "items" | "keys" | "values" => {
            bind(func, args, &[])?;
            let mut items = Vec::new();
            for k in value.try_iter()? {
                items.push(match method {
                    "keys" => k,
                    "values" => value.get_item(&k)?,
                    _ => {
                        let v = value.get_item(&k)?;
                        MjValue::from(Tuple::from([k, v]))
                    }
                });
            }
            let kind = match method {
                "keys" => "keys",
                "values" => "values",
                _ => "items",
            };
            MjValue::from_object(DictView { kind, items, dsl: value.downcast_object_ref::<DslValue>().is_some() })
        }
        "get" => {
            let a = bind(func, args, &["key", "default"])?;
            let key = required(func, &a[0], "key")?;
            let found = value.get_item(key)?;
            if found.is_undefined() { a[1].clone().unwrap_or(MjValue::from(())) } else { found }
        }
        "copy" => {
            bind(func, args, &[])?;
            if value.downcast_object_ref::<DslValue>().is_some() {
                // A proxy's copy is the plain dict it stands for.
                let mut entries = Vec::new();
                for k in value.try_iter()? {
                    let v = value.get_item(&k)?;
                    entries.push((k, v));
                }
                MjValue::from_pairs(entries)
            } else {
                value.clone()
            }
        }
        "update" | "pop" | "popitem" | "setdefault" | "clear" => return Err(mutation(func)),
        _ => return Err(MjError::from(MjErrorKind::UnknownMethod)),
    })
}

fn number_method(value: &MjValue, method: &str, args: &[MjValue]) -> Result<MjValue, MjError> {
    Ok(match method {
        "is_integer" if !value.is_integer() && value.kind() == ValueKind::Number => {
            bind("float.is_integer", args, &[])?;
            MjValue::from(as_float(value).is_some_and(|f| f.fract() == 0.0))
        }
        "bit_length" if value.is_integer() || value.kind() == ValueKind::Bool => {
            bind("int.bit_length", args, &[])?;
            let i = i128::try_from(value.clone()).unwrap_or(i128::from(value.is_true()));
            MjValue::from(128 - i.unsigned_abs().leading_zeros())
        }
        _ => return Err(MjError::from(MjErrorKind::UnknownMethod)),
    })
}

/// A method that changes its list or dict in place, which minijinja's immutable values
/// cannot do: an error rather than a silently unchanged value.
fn mutation(func: &str) -> MjError {
    MjError::new(
        MjErrorKind::UnknownMethod,
        format!("{func}() changes its value in place, which weft's templates do not support"),
    )
}
