//! Jinja2's builtin filters, tests and globals where minijinja's differ or are missing, so
//! that a template renders as the reference's Jinja2 3.1 renders it. Each function follows
//! the Jinja2 function of the same name (`jinja2/filters.py`, `tests.py`, `utils.py`),
//! arguments included; `docs/templates.md` lists what is still different.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, Tuple, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error as MjError, ErrorKind as MjErrorKind, State};
use weft_ir::value::float_repr;

use super::pycompat::{
    as_float, as_int, bind, center, given, py_cmp, py_err, required, splitlines, type_error, type_name, value_error,
};
use super::{DslValue, InstanceObj, Missing, MjValue, TemplateRef, note_undefined_message, py_repr, py_str};
use crate::plugins::json::write_string;

/// Makes `env` Jinja2's: removes what minijinja has and Jinja2 does not (a template using
/// them fails in the reference), replaces filters and tests whose behavior differs, and adds
/// the missing ones.
pub(super) fn configure(env: &mut Environment<'static>) {
    for name in ["split", "lines", "bool", "chain", "zip"] {
        env.remove_filter(name);
    }
    for name in ["int", "safe", "startingwith", "endingwith"] {
        env.remove_test(name);
    }
    env.remove_global("debug");

    env.add_filter("attr", attr);
    env.add_filter("center", center_filter);
    env.add_filter("default", default);
    env.add_filter("d", default);
    env.add_filter("dictsort", dictsort);
    env.add_filter("escape", escape_filter);
    env.add_filter("e", escape_filter);
    env.add_filter("filesizeformat", filesizeformat);
    env.add_filter("float", float);
    env.add_filter("forceescape", forceescape);
    env.add_filter("groupby", groupby);
    env.add_filter("indent", indent);
    env.add_filter("int", int);
    env.add_filter("items", items);
    env.add_filter("pprint", pprint);
    env.add_filter("random", random);
    env.add_filter("replace", replace);
    env.add_filter("striptags", striptags);
    env.add_filter("tojson", tojson);
    env.add_filter("truncate", truncate);
    env.add_filter("unique", unique);
    env.add_filter("urlencode", urlencode);
    env.add_filter("wordcount", wordcount);
    env.add_filter("wordwrap", wordwrap);
    env.add_filter("xmlattr", xmlattr);

    env.add_test("defined", |v: &MjValue| !is_undefined(v));
    env.add_test("undefined", |v: &MjValue| is_undefined(v));
    // A DSL dict reaches Jinja2 as a proxy that is no `Mapping`, but has a length and items.
    env.add_test("mapping", |v: &MjValue| v.kind() == ValueKind::Map && v.downcast_object_ref::<DslValue>().is_none());
    env.add_test("sequence", |v: &MjValue| matches!(v.kind(), ValueKind::String | ValueKind::Seq | ValueKind::Map));
    env.add_test("callable", |v: &MjValue| is_callable(v));

    env.add_function("range", range);
    env.add_function("cycler", cycler);
    env.add_function("joiner", joiner);
}

type FilterResult = Result<MjValue, MjError>;

/// Jinja2's undefined: minijinja's, and the lenient one a missing instance attribute gives.
pub(super) fn is_undefined(v: &MjValue) -> bool {
    v.is_undefined() || v.downcast_object_ref::<Missing>().is_some()
}

/// Fails as Jinja2's `StrictUndefined` does when a filter uses it.
fn defined(v: &MjValue) -> Result<(), MjError> {
    if v.is_undefined() { Err(MjError::from(MjErrorKind::UndefinedError)) } else { Ok(()) }
}

/// A macro, as minijinja's private macro object describes itself.
pub(super) fn macro_name(v: &MjValue) -> Option<String> {
    let described = format!("{:?}", v.as_object()?);
    described.strip_prefix("<macro ").and_then(|rest| rest.strip_suffix('>')).map(str::to_string)
}

/// Python's `callable`: functions (minijinja's describe themselves by their Rust type path),
/// macros and joiners.
fn is_callable(v: &MjValue) -> bool {
    if v.downcast_object_ref::<Joiner>().is_some() {
        return true;
    }
    let ours = v.downcast_object_ref::<InstanceObj>().is_some()
        || v.downcast_object_ref::<DslValue>().is_some()
        || v.downcast_object_ref::<Missing>().is_some()
        || v.downcast_object_ref::<TemplateRef>().is_some()
        || v.downcast_object_ref::<Cycler>().is_some();
    match v.as_object() {
        Some(obj) if !ours => {
            macro_name(v).is_some() || (obj.repr() == ObjectRepr::Plain && format!("{obj:?}").contains("::"))
        }
        _ => false,
    }
}

/// MarkupSafe's `escape` of a text.
pub(super) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// MarkupSafe's `escape` of a value: safe values are kept, others are escaped and safe.
fn escape_value(v: &MjValue) -> MjValue {
    if v.is_safe() { v.clone() } else { MjValue::from_safe_string(html_escape(&py_str(v))) }
}

/// Jinja2's attribute getter (`make_attrgetter`): dotted parts, digits as indices, each part
/// an item and else an attribute.
fn get_path(item: &MjValue, path: &MjValue) -> Result<MjValue, MjError> {
    let parts: Vec<MjValue> = match path.as_str() {
        Some(p) => p
            .split('.')
            .map(|part| part.parse::<i64>().map(MjValue::from).unwrap_or_else(|_| MjValue::from(part)))
            .collect(),
        None => vec![path.clone()],
    };
    let mut current = item.clone();
    for part in parts {
        current = match current.get_item(&part) {
            Ok(v) if !v.is_undefined() => v,
            _ => match part.as_str() {
                Some(name) => current.get_attr(name).unwrap_or(MjValue::UNDEFINED),
                None => MjValue::UNDEFINED,
            },
        };
    }
    Ok(current)
}

/// Lowers strings, as the case-insensitive filters compare them.
fn ignore_case(v: MjValue) -> MjValue {
    match v.as_str() {
        Some(s) if v.kind() == ValueKind::String => MjValue::from(s.to_lowercase()),
        _ => v,
    }
}

fn flag(arg: &Option<MjValue>) -> bool {
    arg.as_ref().is_some_and(MjValue::is_true)
}

// ---------------------------------------------------------------------------------------
// Filters.

fn attr(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("do_attr", &args.into_values(), &["name"])?;
    let name = required("do_attr", &a[0], "name")?;
    let name = py_str(name);
    // `getattr`: an instance's attributes, an object's fields (namespaces, cyclers, loops);
    // a dict's keys and a list's items are no attributes.
    let plain_object = value.as_object().is_some_and(|o| o.repr() == ObjectRepr::Plain);
    if plain_object || value.downcast_object_ref::<InstanceObj>().is_some() {
        return Ok(value.get_attr(&name).unwrap_or(MjValue::UNDEFINED));
    }
    note_undefined_message(format!("'{} object' has no attribute '{name}'", type_name(value)));
    Ok(MjValue::UNDEFINED)
}

fn center_filter(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_center", &args.into_values(), &["width"])?;
    let width = a[0].clone().unwrap_or(MjValue::from(80));
    Ok(MjValue::from(center(&py_str(value), &width)?))
}

fn default(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("do_default", &args.into_values(), &["default_value", "boolean"])?;
    if is_undefined(value) || (flag(&a[1]) && !value.is_true()) {
        return Ok(a[0].clone().unwrap_or(MjValue::from("")));
    }
    Ok(value.clone())
}

fn dictsort(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_dictsort", &args.into_values(), &["case_sensitive", "by", "reverse"])?;
    let pos = match a[1].as_ref().map(py_str).as_deref() {
        None | Some("key") => 0,
        Some("value") => 1,
        Some(_) => {
            return Err(py_err("FilterArgumentError", "You can only sort by either \"key\" or \"value\""));
        }
    };
    let mut pairs = Vec::new();
    for k in value.try_iter()? {
        let v = value.get_item(&k)?;
        pairs.push((k, v));
    }
    let case_sensitive = flag(&a[0]);
    let key = |pair: &(MjValue, MjValue)| {
        let v = if pos == 0 { pair.0.clone() } else { pair.1.clone() };
        if case_sensitive { v } else { ignore_case(v) }
    };
    let sorted = sort_by_key(pairs, key, flag(&a[2]))?;
    Ok(MjValue::from(sorted.into_iter().map(|(k, v)| MjValue::from(Tuple::from([k, v]))).collect::<Vec<_>>()))
}

/// Python's stable `sorted(items, key=key, reverse=reverse)`, with its `TypeError` when two
/// keys cannot be ordered.
fn sort_by_key<T>(items: Vec<T>, key: impl Fn(&T) -> MjValue, reverse: bool) -> Result<Vec<T>, MjError> {
    let mut keyed: Vec<(MjValue, T)> = items.into_iter().map(|item| (key(&item), item)).collect();
    let mut failure = None;
    keyed.sort_by(|x, y| match py_cmp(&x.0, &y.0) {
        Ok(order) => {
            if reverse {
                order.reverse()
            } else {
                order
            }
        }
        Err(e) => {
            failure.get_or_insert(e);
            std::cmp::Ordering::Equal
        }
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(keyed.into_iter().map(|(_, item)| item).collect()),
    }
}

fn escape_filter(value: &MjValue) -> FilterResult {
    defined(value)?;
    Ok(escape_value(value))
}

fn forceescape(value: &MjValue) -> FilterResult {
    defined(value)?;
    let text = value.as_str().map(str::to_string).unwrap_or_else(|| py_str(value));
    Ok(MjValue::from_safe_string(html_escape(&text)))
}

fn filesizeformat(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_filesizeformat", &args.into_values(), &["binary"])?;
    let binary = flag(&a[0]);
    let bytes = python_float(value)?;
    let base = if binary { 1024.0 } else { 1000.0 };
    let prefixes: [&str; 8] = if binary {
        ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"]
    } else {
        ["kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    };
    if bytes == 1.0 {
        return Ok(MjValue::from("1 Byte"));
    }
    if bytes < base {
        return Ok(MjValue::from(format!("{} Bytes", bytes.trunc() as i64)));
    }
    let mut unit = base;
    for (i, prefix) in prefixes.iter().enumerate() {
        unit = f64::powi(base, i as i32 + 2);
        if bytes < unit || i == prefixes.len() - 1 {
            return Ok(MjValue::from(format!("{:.1} {prefix}", base * bytes / unit)));
        }
    }
    Ok(MjValue::from(format!("{:.1} YB", base * bytes / unit)))
}

/// Python's `float(value)`: numbers, and strings in Python's float syntax.
fn python_float(value: &MjValue) -> Result<f64, MjError> {
    if let Some(f) = as_float(value) {
        return Ok(f);
    }
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => {
            parse_float(s).ok_or_else(|| value_error(format!("could not convert string to float: {}", py_repr(value))))
        }
        _ => Err(type_error(format!("float() argument must be a string or a real number, not '{}'", type_name(value)))),
    }
}

/// Python's float literal syntax of `float(str)`: surrounding whitespace, `_` between digits,
/// `inf`, `infinity` and `nan` in any case.
fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let (sign, body) = match t.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, t.strip_prefix('+').unwrap_or(t)),
    };
    match body.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => return Some(sign * f64::INFINITY),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if body.is_empty() || !body.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-' | '_')) {
        return None;
    }
    let chars: Vec<char> = body.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c == '_' {
            let digit = |j: Option<&char>| j.is_some_and(char::is_ascii_digit);
            if !digit(i.checked_sub(1).and_then(|j| chars.get(j))) || !digit(chars.get(i + 1)) {
                return None;
            }
        }
    }
    body.replace('_', "").parse::<f64>().ok().filter(|_| !body.starts_with(['e', 'E'])).map(|f| sign * f)
}

fn float(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("do_float", &args.into_values(), &["default"])?;
    let fallback = a[0].clone().unwrap_or(MjValue::from(0.0));
    let parsed = if let Some(f) = as_float(value) {
        Some(f)
    } else {
        value.as_str().filter(|_| value.kind() == ValueKind::String).and_then(parse_float)
    };
    Ok(parsed.map(MjValue::from).unwrap_or(fallback))
}

/// Python's `int(str, base)`: whitespace, a sign, the base's prefix, `_` between digits.
fn parse_int(s: &str, base: u32) -> Option<i128> {
    let t = s.trim();
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = body.to_ascii_lowercase();
    let (base, digits) = match (base, lower.get(..2)) {
        (16 | 0, Some("0x")) => (16, &lower[2..]),
        (8 | 0, Some("0o")) => (8, &lower[2..]),
        (2 | 0, Some("0b")) => (2, &lower[2..]),
        (0, _) => (10, lower.as_str()),
        (b, _) => (b, lower.as_str()),
    };
    // After a prefix a single `_` may come first (`0x_1f`).
    let digits = if body.len() != digits.len() { digits.strip_prefix('_').unwrap_or(digits) } else { digits };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let n = i128::from_str_radix(&digits.replace('_', ""), base).ok()?;
    Some(if negative { -n } else { n })
}

fn int(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("do_int", &args.into_values(), &["default", "base"])?;
    let fallback = a[0].clone().unwrap_or(MjValue::from(0));
    let base = match &a[1] {
        Some(b) => as_int(b)?,
        None => 10,
    };
    let parsed = match value.kind() {
        ValueKind::Bool => Some(i128::from(value.is_true())),
        ValueKind::Number if value.is_integer() => i128::try_from(value.clone()).ok(),
        ValueKind::Number => as_float(value).filter(|f| f.is_finite()).map(|f| f.trunc() as i128),
        ValueKind::String => {
            let s = value.as_str().unwrap_or("");
            u32::try_from(base)
                .ok()
                .filter(|b| *b == 0 || (2..=36).contains(b))
                .and_then(|b| parse_int(s, b))
                .or_else(|| parse_float(s).filter(|f| f.is_finite()).map(|f| f.trunc() as i128))
        }
        _ => None,
    };
    Ok(parsed.map(MjValue::from).unwrap_or(fallback))
}

/// One group of `groupby`: Jinja2's `_GroupTuple`, a named tuple `(grouper, list)`.
#[derive(Debug)]
pub(super) struct GroupTuple {
    pub(super) grouper: MjValue,
    pub(super) list: MjValue,
}

impl Object for GroupTuple {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        match (key.as_str(), key.as_i64()) {
            (Some("grouper"), _) | (_, Some(0 | -2)) => Some(self.grouper.clone()),
            (Some("list"), _) | (_, Some(1 | -1)) => Some(self.list.clone()),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(2)
    }
}

fn groupby(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_groupby", &args.into_values(), &["attribute", "default", "case_sensitive"])?;
    let attribute = required("do_groupby", &a[0], "attribute")?;
    let case_sensitive = flag(&a[2]);
    let key_of = |item: &MjValue| -> Result<MjValue, MjError> {
        let key = get_path(item, attribute)?;
        match given(&a[1]) {
            Some(fallback) if key.is_undefined() => Ok(fallback.clone()),
            _ => {
                defined(&key)?;
                Ok(key)
            }
        }
    };
    let mut keyed = Vec::new();
    for item in value.try_iter()? {
        let key = key_of(&item)?;
        keyed.push((if case_sensitive { key.clone() } else { ignore_case(key.clone()) }, key, item));
    }
    let sorted = sort_by_key(keyed, |(sort_key, _, _)| sort_key.clone(), false)?;
    let mut groups: Vec<(MjValue, MjValue, Vec<MjValue>)> = Vec::new();
    for (sort_key, key, item) in sorted {
        match groups.last_mut() {
            Some((last, _, items)) if *last == sort_key => items.push(item),
            // Without case sensitivity the grouper is the key of the group's first item, in
            // its own case.
            _ => groups.push((sort_key, key, vec![item])),
        }
    }
    Ok(MjValue::from(
        groups
            .into_iter()
            .map(|(_, grouper, items)| MjValue::from_object(GroupTuple { grouper, list: MjValue::from(items) }))
            .collect::<Vec<_>>(),
    ))
}

fn indent(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_indent", &args.into_values(), &["width", "first", "blank"])?;
    let indention = match &a[0] {
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or("").to_string(),
        Some(w) => " ".repeat(usize::try_from(as_int(w)?).unwrap_or(0)),
        None => "    ".to_string(),
    };
    // Jinja2 adds a newline first, so that `splitlines` keeps a trailing empty line.
    let text = format!("{}\n", py_str(value));
    let lines = splitlines(&text, false);
    let mut out = if flag(&a[2]) {
        lines.join(&format!("\n{indention}"))
    } else {
        let mut lines = lines.into_iter();
        let mut out = lines.next().unwrap_or_default();
        for line in lines {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&indention);
            }
            out.push_str(&line);
        }
        out
    };
    if flag(&a[1]) {
        out = format!("{indention}{out}");
    }
    Ok(MjValue::from(out))
}

fn items(value: &MjValue) -> FilterResult {
    if is_undefined(value) {
        return Ok(MjValue::from(Vec::<MjValue>::new()));
    }
    if value.kind() != ValueKind::Map || value.downcast_object_ref::<DslValue>().is_some() {
        return Err(type_error("Can only get item pairs from a mapping."));
    }
    let mut pairs = Vec::new();
    for k in value.try_iter()? {
        let v = value.get_item(&k)?;
        pairs.push(MjValue::from(Tuple::from([k, v])));
    }
    Ok(MjValue::from(pairs))
}

fn pprint(value: &MjValue) -> FilterResult {
    defined(value)?;
    let mut out = String::new();
    pformat(value, 0, 0, &mut out);
    Ok(MjValue::from(out))
}

/// `pprint.pformat(value)` (width 80, dicts sorted): a value whose repr does not fit in what
/// is left of the line is written one item per line.
fn pformat(value: &MjValue, indent: usize, allowance: usize, out: &mut String) {
    let rep = sorted_repr(value);
    let max_width = 80usize.saturating_sub(indent + allowance);
    let native = value.downcast_object_ref::<DslValue>().is_none();
    if rep.chars().count() <= max_width || !native {
        out.push_str(&rep);
        return;
    }
    if value.kind() == ValueKind::Map {
        let entries = sorted_entries(value);
        out.push('{');
        let indent = indent + 1;
        for (i, (k, v)) in entries.iter().enumerate() {
            let last = i + 1 == entries.len();
            let key = sorted_repr(k);
            out.push_str(&key);
            out.push_str(": ");
            pformat(v, indent + key.chars().count() + 2, if last { allowance + 1 } else { 1 }, out);
            if !last {
                out.push_str(",\n");
                out.push_str(&" ".repeat(indent));
            }
        }
        out.push('}');
        return;
    }
    let tuple = value.is_tuple();
    if value.kind() != ValueKind::Seq || value.downcast_object_ref::<GroupTuple>().is_some() {
        out.push_str(&rep);
        return;
    }
    let items: Vec<MjValue> = value.try_iter().map(Iterator::collect).unwrap_or_default();
    let (open, close) = match (tuple, items.len()) {
        (true, 1) => ("(", ",)"),
        (true, _) => ("(", ")"),
        _ => ("[", "]"),
    };
    out.push_str(open);
    let indent = indent + 1;
    let allowance = allowance + close.len();
    for (i, item) in items.iter().enumerate() {
        let last = i + 1 == items.len();
        if i > 0 {
            out.push_str(",\n");
            out.push_str(&" ".repeat(indent));
        }
        pformat(item, indent, if last { allowance } else { 1 }, out);
    }
    out.push_str(close);
}

/// A dict's entries in `pprint`'s order: sorted by key where the keys can be ordered.
fn sorted_entries(value: &MjValue) -> Vec<(MjValue, MjValue)> {
    let mut entries = Vec::new();
    for k in value.try_iter().into_iter().flatten() {
        let v = value.get_item(&k).unwrap_or(MjValue::UNDEFINED);
        entries.push((k, v));
    }
    if entries.windows(2).all(|w| py_cmp_quiet(&w[0].0, &w[1].0).is_some()) {
        entries.sort_by(|x, y| py_cmp_quiet(&x.0, &y.0).unwrap_or(std::cmp::Ordering::Equal));
    }
    entries
}

/// Python's ordering of two strings or two numbers, without raising.
fn py_cmp_quiet(a: &MjValue, b: &MjValue) -> Option<std::cmp::Ordering> {
    match (a.kind(), b.kind()) {
        (ValueKind::String, ValueKind::String) => Some(a.as_str().cmp(&b.as_str())),
        (ValueKind::Number, ValueKind::Number) => as_float(a)?.partial_cmp(&as_float(b)?),
        _ => None,
    }
}

/// `pprint`'s one-line repr: `repr` with dicts sorted.
fn sorted_repr(value: &MjValue) -> String {
    let native = value.downcast_object_ref::<DslValue>().is_none();
    if native && value.kind() == ValueKind::Map {
        let entries: Vec<String> =
            sorted_entries(value).iter().map(|(k, v)| format!("{}: {}", sorted_repr(k), sorted_repr(v))).collect();
        return format!("{{{}}}", entries.join(", "));
    }
    if native && value.kind() == ValueKind::Seq && value.downcast_object_ref::<GroupTuple>().is_none() {
        let items: Vec<String> = value.try_iter().into_iter().flatten().map(|v| sorted_repr(&v)).collect();
        return match (value.is_tuple(), items.len()) {
            (true, 1) => format!("({},)", items[0]),
            (true, _) => format!("({})", items.join(", ")),
            _ if value.downcast_object_ref::<RangeObj>().is_some()
                || value.downcast_object_ref::<DictView>().is_some() =>
            {
                py_repr(value)
            }
            _ => format!("[{}]", items.join(", ")),
        };
    }
    py_repr(value)
}

fn random(value: &MjValue) -> FilterResult {
    defined(value)?;
    let items: Vec<MjValue> = match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s.chars().map(MjValue::from).collect(),
        _ => value.try_iter()?.collect(),
    };
    if items.is_empty() {
        note_undefined_message("No random item, sequence was empty.".to_string());
        return Ok(MjValue::UNDEFINED);
    }
    // No seeded generator is needed: the std library's hasher keys are random per instance.
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    Ok(items[(random % items.len() as u64) as usize].clone())
}

fn replace(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_replace", &args.into_values(), &["old", "new", "count"])?;
    let old = py_str(required("do_replace", &a[0], "old")?);
    let new = py_str(required("do_replace", &a[1], "new")?);
    let count = match given(&a[2]) {
        Some(c) => as_int(c)?,
        None => -1,
    };
    let s = py_str(value);
    Ok(MjValue::from(if count < 0 { s.replace(&old, &new) } else { s.replacen(&old, &new, count as usize) }))
}

fn striptags(value: &MjValue) -> FilterResult {
    defined(value)?;
    let mut text = py_str(value);
    for (open, close) in [("<!--", "-->"), ("<", ">")] {
        while let Some(start) = text.find(open) {
            let Some(end) = text[start..].find(close) else { break };
            text.replace_range(start..start + end + close.len(), "");
        }
    }
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    Ok(MjValue::from(html_unescape(&collapsed)))
}

/// Python's `html.unescape` for numeric references and the common named ones.
fn html_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';').filter(|e| *e <= 32) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            _ => match entity.strip_prefix('#') {
                Some(num) => match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse::<u32>().ok(),
                }
                .and_then(char::from_u32),
                None => None,
            },
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn truncate(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_truncate", &args.into_values(), &["length", "killwords", "end", "leeway"])?;
    let length = match &a[0] {
        Some(l) => as_int(l)?,
        None => 255,
    };
    let end = a[2].as_ref().map(py_str).unwrap_or_else(|| "...".to_string());
    // The environment's `truncate.leeway` policy, 5 by default.
    let leeway = match given(&a[3]) {
        Some(l) => as_int(l)?,
        None => 5,
    };
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(py_err("AssertionError", format!("expected length >= {end_len}, got {length}")));
    }
    if leeway < 0 {
        return Err(py_err("AssertionError", format!("expected leeway >= 0, got {leeway}")));
    }
    let s = py_str(value);
    let chars: Vec<char> = s.chars().collect();
    if chars.len() as i64 <= length + leeway {
        return Ok(MjValue::from(s));
    }
    let head: String = chars[..(length - end_len) as usize].iter().collect();
    if flag(&a[1]) {
        return Ok(MjValue::from(format!("{head}{end}")));
    }
    let head = head.rsplit_once(' ').map(|(h, _)| h.to_string()).unwrap_or(head);
    Ok(MjValue::from(format!("{head}{end}")))
}

fn unique(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_unique", &args.into_values(), &["case_sensitive", "attribute"])?;
    let case_sensitive = flag(&a[0]);
    let mut seen: Vec<MjValue> = Vec::new();
    let mut out = Vec::new();
    for item in value.try_iter()? {
        let key = match given(&a[1]) {
            Some(path) => get_path(&item, path)?,
            None => item.clone(),
        };
        let key = if case_sensitive { key } else { ignore_case(key) };
        if !seen.contains(&key) {
            seen.push(key);
            out.push(item);
        }
    }
    Ok(MjValue::from(out))
}

/// `urllib.parse.quote` of a value's UTF-8 bytes; in a query string (`for_qs`) `/` is
/// quoted too and a space is `+`.
fn url_quote(value: &MjValue, for_qs: bool) -> String {
    let text = py_str(value);
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => out.push(b as char),
            b'/' if !for_qs => out.push('/'),
            b' ' if for_qs => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn urlencode(value: &MjValue) -> FilterResult {
    defined(value)?;
    let pairs: Vec<(MjValue, MjValue)> = match value.kind() {
        ValueKind::String | ValueKind::Number | ValueKind::Bool | ValueKind::None => {
            return Ok(MjValue::from(url_quote(value, false)));
        }
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for k in value.try_iter()? {
                let v = value.get_item(&k)?;
                pairs.push((k, v));
            }
            pairs
        }
        _ => {
            let mut pairs = Vec::new();
            for item in value.try_iter()? {
                let parts: Vec<MjValue> = item.try_iter()?.collect();
                let [k, v] = <[MjValue; 2]>::try_from(parts).map_err(|parts| {
                    value_error(format!("too many values to unpack (expected 2, got {})", parts.len()))
                })?;
                pairs.push((k, v));
            }
            pairs
        }
    };
    let parts: Vec<String> =
        pairs.iter().map(|(k, v)| format!("{}={}", url_quote(k, true), url_quote(v, true))).collect();
    Ok(MjValue::from(parts.join("&")))
}

fn wordcount(value: &MjValue) -> FilterResult {
    defined(value)?;
    let text = py_str(value);
    let mut count = 0;
    let mut in_word = false;
    for c in text.chars() {
        let word = c.is_alphanumeric() || c == '_';
        if word && !in_word {
            count += 1;
        }
        in_word = word;
    }
    Ok(MjValue::from(count))
}

/// Python's `textwrap` chunking with `break_on_hyphens` (its `wordsep_re`): whitespace runs,
/// words, and words split after a hyphen between letters.
fn wordsep_regex() -> &'static fancy_regex::Regex {
    static RE: std::sync::OnceLock<fancy_regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let ws = r"[\t\n\x0b\x0c\r ]";
        let nws = r"[^\t\n\x0b\x0c\r ]";
        let wp = r#"[\w!"'&.,?]"#;
        let lt = r"[^\d\W]";
        let pattern = format!(
            r"({ws}+|(?<={wp})-{{2,}}(?=\w)|{nws}+?(?:-(?:(?<={lt}{{2}}-)|(?<={lt}-{lt}-))(?={lt}-?{lt})|(?={ws}|\z)|(?<={wp})(?=-{{2,}}\w)))"
        );
        fancy_regex::Regex::new(&pattern).expect("textwrap's pattern is valid")
    })
}

/// The chunks `textwrap.TextWrapper._split` makes of a line.
fn wrap_chunks_of(text: &str, break_on_hyphens: bool) -> Vec<String> {
    let mut chunks = Vec::new();
    if break_on_hyphens {
        let mut last = 0;
        for m in wordsep_regex().find_iter(text).flatten() {
            if m.start() > last {
                chunks.push(text[last..m.start()].to_string());
            }
            chunks.push(m.as_str().to_string());
            last = m.end();
        }
        if last < text.len() {
            chunks.push(text[last..].to_string());
        }
    } else {
        let mut current = String::new();
        let mut in_space = None;
        for c in text.chars() {
            let space = matches!(c, '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ');
            if in_space.is_some_and(|s| s != space) {
                chunks.push(std::mem::take(&mut current));
            }
            in_space = Some(space);
            current.push(c);
        }
        if !current.is_empty() {
            chunks.push(current);
        }
    }
    chunks.retain(|c| !c.is_empty());
    chunks
}

/// `textwrap.wrap(line, width, expand_tabs=False, replace_whitespace=False, ...)`.
fn wrap_line(line: &str, width: usize, break_long_words: bool, break_on_hyphens: bool) -> Vec<String> {
    let is_blank = |c: &str| c.trim_matches(|ch: char| ch.is_whitespace()).is_empty();
    let len = |c: &str| c.chars().count();
    let mut chunks = wrap_chunks_of(line, break_on_hyphens);
    chunks.reverse();
    let mut lines: Vec<String> = Vec::new();
    while !chunks.is_empty() {
        let mut current: Vec<String> = Vec::new();
        let mut current_len = 0;
        if !lines.is_empty() && chunks.last().is_some_and(|c| is_blank(c)) {
            chunks.pop();
        }
        while let Some(chunk) = chunks.last() {
            let l = len(chunk);
            if current_len + l <= width {
                current_len += l;
                current.push(chunks.pop().unwrap_or_default());
            } else {
                break;
            }
        }
        if chunks.last().is_some_and(|c| len(c) > width) {
            // `_handle_long_word`.
            let space_left = if width < 1 { 1 } else { width - current_len };
            if break_long_words {
                let chunk: Vec<char> = chunks.last().map(|c| c.chars().collect()).unwrap_or_default();
                let mut end = space_left;
                if break_on_hyphens && chunk.len() > space_left {
                    let hyphen = chunk[..space_left.min(chunk.len())].iter().rposition(|c| *c == '-');
                    if let Some(h) = hyphen
                        && h > 0
                        && chunk[..h].iter().any(|c| *c != '-')
                    {
                        end = h + 1;
                    }
                }
                current.push(chunk[..end.min(chunk.len())].iter().collect());
                if let Some(last) = chunks.last_mut() {
                    *last = chunk[end.min(chunk.len())..].iter().collect();
                }
            } else if current.is_empty() {
                current.push(chunks.pop().unwrap_or_default());
            }
        }
        if current.last().is_some_and(|c| is_blank(c)) {
            current.pop();
        }
        if !current.is_empty() {
            lines.push(current.concat());
        }
    }
    lines
}

fn wordwrap(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_wordwrap", &args.into_values(), &["width", "break_long_words", "wrapstring", "break_on_hyphens"])?;
    let width = match &a[0] {
        Some(w) => as_int(w)?,
        None => 79,
    };
    if width <= 0 {
        return Err(value_error(format!("invalid width {width} (must be > 0)")));
    }
    let break_long_words = a[1].as_ref().is_none_or(MjValue::is_true);
    let break_on_hyphens = a[3].as_ref().is_none_or(MjValue::is_true);
    let wrapstring = match given(&a[2]) {
        Some(w) => py_str(w),
        None => "\n".to_string(),
    };
    let text = py_str(value);
    let wrapped: Vec<String> = splitlines(&text, false)
        .iter()
        .map(|line| wrap_line(line, width as usize, break_long_words, break_on_hyphens).join(&wrapstring))
        .collect();
    Ok(MjValue::from(wrapped.join(&wrapstring)))
}

fn xmlattr(state: &State, value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    defined(value)?;
    let a = bind("do_xmlattr", &args.into_values(), &["autospace"])?;
    let mut parts = Vec::new();
    for key in value.try_iter()? {
        let v = value.get_item(&key)?;
        if v.is_none() || is_undefined(&v) {
            continue;
        }
        let name = py_str(&key);
        if name.chars().any(|c| c.is_whitespace() || matches!(c, '/' | '>' | '=')) {
            return Err(value_error(format!("Invalid character in attribute name: {}", py_repr(&key))));
        }
        parts.push(format!("{}=\"{}\"", html_escape(&name), py_str(&escape_value(&v))));
    }
    let mut out = parts.join(" ");
    if a[0].as_ref().is_none_or(MjValue::is_true) && !out.is_empty() {
        out.insert(0, ' ');
    }
    Ok(if matches!(state.auto_escape(), AutoEscape::None) {
        MjValue::from(out)
    } else {
        MjValue::from_safe_string(out)
    })
}

// ---------------------------------------------------------------------------------------
// `tojson`: `json.dumps(value, sort_keys=True, indent=indent)` made safe for HTML.

fn tojson(value: &MjValue, args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("do_tojson", &args.into_values(), &["indent"])?;
    let indent = match given(&a[0]) {
        Some(i) if i.kind() == ValueKind::String => Some(i.as_str().unwrap_or("").to_string()),
        Some(i) => Some(" ".repeat(usize::try_from(as_int(i)?).unwrap_or(0))),
        None => None,
    };
    let mut out = String::new();
    write_json(value, indent.as_deref(), 0, &mut out)?;
    let safe = out.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026").replace('\'', "\\u0027");
    Ok(MjValue::from_safe_string(safe))
}

fn write_json(value: &MjValue, indent: Option<&str>, depth: usize, out: &mut String) -> Result<(), MjError> {
    if depth > 900 {
        return Err(py_err("RecursionError", "maximum recursion depth exceeded while encoding a JSON object"));
    }
    let not_serializable = || type_error(format!("Object of type {} is not JSON serializable", json_type_name(value)));
    if value.downcast_object_ref::<DslValue>().is_some_and(|d| !matches!(d.value, weft_ir::value::Value::BigInt(_)))
        || value.downcast_object_ref::<InstanceObj>().is_some()
        || is_undefined(value)
    {
        return Err(not_serializable());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    };
    let separator = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => out.push_str(&py_str(value)),
        ValueKind::Number => {
            let f = as_float(value).unwrap_or(f64::NAN);
            out.push_str(&if f.is_nan() {
                "NaN".to_string()
            } else if f.is_infinite() {
                if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            } else {
                float_repr(f)
            });
        }
        ValueKind::String => write_string(value.as_str().unwrap_or(""), out),
        ValueKind::Seq => {
            let items: Vec<MjValue> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, depth + 1);
                write_json(item, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for k in value.try_iter()? {
                let key = match k.kind() {
                    ValueKind::String => k.as_str().unwrap_or("").to_string(),
                    ValueKind::None => "null".to_string(),
                    ValueKind::Bool => if k.is_true() { "true" } else { "false" }.to_string(),
                    ValueKind::Number => py_str(&k),
                    _ => {
                        return Err(type_error(format!(
                            "keys must be str, int, float, bool or None, not {}",
                            type_name(&k)
                        )));
                    }
                };
                let v = value.get_item(&k)?;
                entries.push((key, v));
            }
            entries.sort_by(|x, y| x.0.cmp(&y.0));
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, depth + 1);
                write_string(k, out);
                out.push_str(": ");
                write_json(v, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => return Err(not_serializable()),
    }
    Ok(())
}

/// The Python class the reference's `json.dumps` names for a value it cannot serialize.
fn json_type_name(value: &MjValue) -> &'static str {
    if value.downcast_object_ref::<InstanceObj>().is_some() {
        return "JinjaDynamicProxy";
    }
    if is_undefined(value) {
        return "StrictUndefined";
    }
    type_name(value)
}

// ---------------------------------------------------------------------------------------
// Globals.

/// Python's `range`: a lazy sequence that prints as `range(start, stop[, step])`.
#[derive(Debug)]
pub(super) struct RangeObj {
    start: i64,
    stop: i64,
    step: i64,
}

impl RangeObj {
    fn len(&self) -> usize {
        let span = if self.step > 0 { self.stop - self.start } else { self.start - self.stop };
        if span <= 0 { 0 } else { ((span - 1) / self.step.abs() + 1) as usize }
    }

    pub(super) fn repr(&self) -> String {
        if self.step == 1 {
            format!("range({}, {})", self.start, self.stop)
        } else {
            format!("range({}, {}, {})", self.start, self.stop, self.step)
        }
    }
}

impl Object for RangeObj {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        let len = self.len() as i64;
        let i = key.as_i64()?;
        let i = if i < 0 { i + len } else { i };
        (0..len).contains(&i).then(|| MjValue::from(self.start + i * self.step))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.len())
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&RangeObj::repr(self))
    }
}

fn range(args: Rest<MjValue>) -> FilterResult {
    let ints = args.iter().map(as_int).collect::<Result<Vec<_>, _>>()?;
    let (start, stop, step) = match ints.as_slice() {
        [stop] => (0, *stop, 1),
        [start, stop] => (*start, *stop, 1),
        [start, stop, step] => (*start, *stop, *step),
        [] => return Err(type_error("range expected at least 1 argument, got 0")),
        more => return Err(type_error(format!("range expected at most 3 arguments, got {}", more.len()))),
    };
    if step == 0 {
        return Err(value_error("range() arg 3 must not be zero"));
    }
    Ok(MjValue::from_object(RangeObj { start, stop, step }))
}

/// A dict's `keys()`, `values()` or `items()`: a sequence that prints as `dict_keys([...])`
/// (with the `@` of a proxy when the dict is a DSL dict, as the reference prints it).
#[derive(Debug)]
pub(super) struct DictView {
    pub(super) kind: &'static str,
    pub(super) items: Vec<MjValue>,
    pub(super) dsl: bool,
}

impl DictView {
    pub(super) fn repr(&self) -> String {
        let items: Vec<String> = self.items.iter().map(py_repr).collect();
        format!("{}dict_{}([{}])", if self.dsl { "@" } else { "" }, self.kind, items.join(", "))
    }
}

impl Object for DictView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        self.items.get(usize::try_from(key.as_i64()?).ok()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.items.len())
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&DictView::repr(self))
    }
}

/// Jinja2's `cycler(*items)`: `next()`, `reset()` and `current`.
#[derive(Debug)]
pub(super) struct Cycler {
    items: Vec<MjValue>,
    position: Mutex<usize>,
}

impl Object for Cycler {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &MjValue) -> Option<MjValue> {
        match key.as_str()? {
            "current" => {
                let position = *self.position.lock().ok()?;
                self.items.get(position).cloned()
            }
            "items" => Some(MjValue::from(self.items.clone())),
            _ => None,
        }
    }

    fn call_method(self: &Arc<Self>, _state: &mut State, method: &str, args: &[MjValue]) -> Result<MjValue, MjError> {
        bind(&format!("Cycler.{method}"), args, &[])?;
        let mut position = self.position.lock().map_err(|_| MjError::from(MjErrorKind::InvalidOperation))?;
        match method {
            "next" => {
                let item = self.items[*position].clone();
                *position = (*position + 1) % self.items.len();
                Ok(item)
            }
            "reset" => {
                *position = 0;
                Ok(MjValue::from(()))
            }
            _ => Err(MjError::from(MjErrorKind::UnknownMethod)),
        }
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<jinja2.utils.Cycler object>")
    }
}

fn cycler(args: Rest<MjValue>) -> FilterResult {
    if args.is_empty() {
        return Err(py_err("RuntimeError", "at least one item has to be provided"));
    }
    Ok(MjValue::from_object(Cycler { items: args.0, position: Mutex::new(0) }))
}

/// Jinja2's `joiner(sep)`: empty on the first call, the separator on the others.
#[derive(Debug)]
pub(super) struct Joiner {
    sep: MjValue,
    used: AtomicBool,
}

impl Object for Joiner {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, _state: &mut State, args: &[MjValue]) -> Result<MjValue, MjError> {
        bind("Joiner.__call__", args, &[])?;
        Ok(if self.used.swap(true, AtomicOrdering::Relaxed) { self.sep.clone() } else { MjValue::from("") })
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<jinja2.utils.Joiner object>")
    }
}

fn joiner(args: Rest<ValueOrKwargs>) -> FilterResult {
    let a = bind("Joiner", &args.into_values(), &["sep"])?;
    Ok(MjValue::from_object(Joiner { sep: a[0].clone().unwrap_or(MjValue::from(", ")), used: AtomicBool::new(false) }))
}
