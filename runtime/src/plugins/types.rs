//! Plugin annotations as the reference resolves them: DSL type strings (`"string[]"`) and
//! Python type expressions (`Sequence[object | Reference]`) both become a DSL type
//! (`inmanta.ast.type`), which validates values and prints itself in messages
//! (`type_string_internal`: `(Reference[any] | any)[]`).

use weft_ir::value::Value;

use weft_ir::ErrorKind;

use super::{Cause, Flow, PluginError, PluginHost, pyfmt, validate};

/// A DSL type as the reference builds it for plugin annotations.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ty {
    /// `any`, `expression`, `object`, `typing.Any`: everything but references.
    Any,
    /// Only `null` (`None` in Python annotations).
    Null,
    Str,
    Int,
    /// Only floats (an int is not a float in the reference's check).
    Float,
    Number,
    Bool,
    /// `"list"`, `list`, `Sequence`: a list, elements unchecked.
    List,
    /// `T[]`, `list[T]`, `Sequence[T]`.
    TypedList(Box<Ty>),
    /// `"dict"`, `dict[str, T]`, `Mapping[str, T]` (`TypedDict`; a bare dict is `dict[str, any]`).
    Dict(Box<Ty>),
    /// `T?`, `T | None`, `Optional[T]`.
    Nullable(Box<Ty>),
    /// `Reference[T]`.
    Ref(Box<Ty>),
    /// `T | Reference[T]` (the reference compacts such unions to `OrReferenceType`).
    OrRef(Box<Ty>),
    Union(Vec<Ty>),
    /// An entity or a typedef, fully qualified.
    Named(String),
}

/// The outcome of validating a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    Ok,
    /// The value does not have the type (`RuntimeException`/`TypingException`).
    Mismatch,
    /// The value is or contains a reference where none is allowed (`UnexpectedReference`).
    Reference,
}

impl Ty {
    /// Resolves a DSL type string from a plugin annotation (`inmanta.ast.type.resolve_type`
    /// after `PLUGIN_TYPES`).
    pub(crate) fn from_dsl(text: &str, namespace: &str) -> Ty {
        let text = text.trim();
        match text {
            "any" | "expression" => return Ty::Any,
            "null" => return Ty::Null,
            "list" => return Ty::List,
            "dict" => return Ty::Dict(Box::new(Ty::Any)),
            _ => {}
        }
        let (text, nullable) = match text.strip_suffix('?') {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let (text, list) = match text.strip_suffix("[]") {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let mut ty = match text {
            "string" => Ty::Str,
            "int" => Ty::Int,
            "float" => Ty::Float,
            "number" => Ty::Number,
            "bool" => Ty::Bool,
            "list" => Ty::List,
            "dict" => Ty::Dict(Box::new(Ty::Any)),
            "any" | "expression" => Ty::Any,
            name if name.contains("::") => Ty::Named(name.to_string()),
            name => Ty::Named(format!("{namespace}::{name}")),
        };
        if list {
            ty = Ty::TypedList(Box::new(ty));
        }
        if nullable {
            ty = Ty::Nullable(Box::new(ty));
        }
        ty
    }

    /// Resolves a Python type expression (`inmanta.plugins.to_dsl_type`). Types the reference
    /// does not know become `any`, as it does (with a warning).
    pub(crate) fn from_python(text: &str, namespace: &str) -> Ty {
        match PyParser::new(text).parse() {
            Some(expr) => to_dsl(&expr, namespace),
            None => Ty::Any,
        }
    }

    /// The reference's `type_string_internal()`, used in messages.
    pub(crate) fn type_string(&self) -> String {
        fn wrap(s: String, suffix: &str) -> String {
            if s.contains(' ') { format!("({s}){suffix}") } else { format!("{s}{suffix}") }
        }
        match self {
            Ty::Any => "any".into(),
            Ty::Null => "null".into(),
            Ty::Str => "string".into(),
            Ty::Int => "int".into(),
            Ty::Float => "float".into(),
            Ty::Number => "number".into(),
            Ty::Bool => "bool".into(),
            Ty::List => "list".into(),
            Ty::TypedList(e) => wrap(e.type_string(), "[]"),
            Ty::Dict(e) => format!("dict[string, {}]", e.type_string()),
            Ty::Nullable(e) => wrap(e.type_string(), "?"),
            Ty::Ref(e) => format!("Reference[{}]", e.type_string()),
            Ty::OrRef(e) => {
                let e = e.type_string();
                format!("Reference[{e}] | {e}")
            }
            Ty::Union(types) => {
                format!("Union[{}]", types.iter().map(Ty::type_string).collect::<Vec<_>>().join(","))
            }
            Ty::Named(name) => name.clone(),
        }
    }

    /// Whether the type accepts a reference at the top level (`supports_references`).
    pub(crate) fn supports_references(&self) -> bool {
        match self {
            Ty::Ref(_) | Ty::OrRef(_) => true,
            Ty::Nullable(e) => e.supports_references(),
            Ty::Union(types) => types.iter().any(Ty::supports_references),
            _ => false,
        }
    }

    /// Whether [`Ty::validate`] passes every value, with no question to the host:
    /// `object | Reference` (a reference passes `Reference[object]`, anything else `object`).
    pub(crate) fn accepts_everything(&self) -> bool {
        matches!(self, Ty::OrRef(inner) if **inner == Ty::Any)
    }

    /// Validates a value as `Type.validate` does. Unknowns pass every check but `null`'s and
    /// references'.
    pub(crate) fn validate(&self, value: &Value, host: &mut dyn PluginHost) -> Result<Check, PluginError> {
        let ok = |b: bool| if b { Check::Ok } else { Check::Mismatch };
        Ok(match self {
            Ty::Any => {
                if matches!(value, Value::Reference(_)) {
                    Check::Reference
                } else {
                    Check::Ok
                }
            }
            Ty::Null => ok(matches!(value, Value::Null(_))),
            Ty::Str | Ty::Int | Ty::Float | Ty::Number | Ty::Bool => match value {
                Value::Reference(_) => Check::Reference,
                Value::Unknown => Check::Ok,
                v => ok(match self {
                    Ty::Str => matches!(v, Value::Str(_)),
                    Ty::Int => v.is_integral(),
                    Ty::Float => matches!(v, Value::Float(_)),
                    Ty::Number => v.is_number(),
                    _ => matches!(v, Value::Bool(_)),
                }),
            },
            Ty::List => ok(matches!(value, Value::List(_) | Value::Unknown)),
            Ty::TypedList(element) => match value {
                Value::Unknown => Check::Ok,
                // Every element passes `object | Reference`: a plugin taking a list of them
                // (`std::len`, `std::count`, `std::at`) is not charged a walk of the list per
                // call, which made calling it once per element quadratic.
                Value::List(_) if element.accepts_everything() => Check::Ok,
                Value::List(items) => {
                    for item in items.iter() {
                        let check = element.validate(item, host)?;
                        if check != Check::Ok {
                            return Ok(check);
                        }
                    }
                    Check::Ok
                }
                _ => Check::Mismatch,
            },
            Ty::Dict(element) => match value {
                Value::Unknown => Check::Ok,
                Value::Dict(_) if element.accepts_everything() => Check::Ok,
                Value::Dict(entries) => {
                    for (_, item) in entries.iter() {
                        let check = element.validate(item, host)?;
                        if check != Check::Ok {
                            return Ok(check);
                        }
                    }
                    Check::Ok
                }
                _ => Check::Mismatch,
            },
            Ty::Nullable(element) => match value {
                Value::Null(_) => Check::Ok,
                v => element.validate(v, host)?,
            },
            Ty::Ref(element) => match value {
                Value::Reference(r) => ok(subtype(&reference_type(&r.class), element)),
                _ => Check::Mismatch,
            },
            Ty::OrRef(element) => match value {
                Value::Reference(r) => ok(subtype(&reference_type(&r.class), element)),
                v => element.validate(v, host)?,
            },
            Ty::Union(types) => {
                for ty in types {
                    if ty.validate(value, host)? == Check::Ok {
                        return Ok(Check::Ok);
                    }
                }
                Check::Mismatch
            }
            Ty::Named(name) => match value {
                Value::Unknown => Check::Ok,
                Value::Instance(id) => ok(host.is_instance_of(*id, name)),
                v => match validate::std_typedef(name, v) {
                    Some(Ok(valid)) => {
                        if matches!(v, Value::Reference(_)) {
                            Check::Reference
                        } else {
                            ok(valid)
                        }
                    }
                    Some(Err(Flow::Error(e))) => return Err(e),
                    Some(Err(Flow::Unknown)) => Check::Ok,
                    None => {
                        if matches!(v, Value::Reference(_)) {
                            Check::Mismatch
                        } else {
                            ok(host.check_typedef(name, v)?)
                        }
                    }
                },
            },
        })
    }
}

/// What the reference says when a Python `object` annotation (the DSL's `any`) meets a
/// reference.
const OBJECT_REFERENCE: &str = "References are not allowed for values of type `object`. While the `object` Python \
     type is technically compatible with any value, references are considered special DSL values and are therefore \
     guarded so that they don't accidentally show up where they are not expected. To work with references, \
     explicitly declare support with a `object | Reference` annotation.";

impl Ty {
    /// Why [`Ty::validate`] refused `value`, which it did: the error the reference's type
    /// raises, which it chains under the plugin type error (`inmanta.ast.type`'s `validate`
    /// methods: a typed list or dict refuses its first element that its element type refuses,
    /// with that type's error). `None` for the refusals whose words were not checked against
    /// the reference (a reference of the wrong type). The value itself is not validated again
    /// (that may evaluate a typedef's constraint); the elements of a typed list or dict are.
    pub(crate) fn refusal(&self, value: &Value, host: &mut dyn PluginHost) -> Result<Option<Cause>, PluginError> {
        let cause = |kind, message: String| Ok(Some(Cause { kind, message }));
        let shown = |host: &dyn PluginHost| pyfmt::dsl_str(value, host);
        match (self, value) {
            (Ty::Any, Value::Reference(_)) => cause(ErrorKind::UnexpectedReference, OBJECT_REFERENCE.to_string()),
            (Ty::Str | Ty::Int | Ty::Float | Ty::Number | Ty::Bool, Value::Reference(_)) => cause(
                ErrorKind::UnexpectedReference,
                format!(
                    "References are not allowed for values of type `{}`. To work with references, explicitly declare \
                     support with a `... | Reference[...]` annotation.",
                    self.type_string()
                ),
            ),
            (Ty::Str | Ty::Int | Ty::Float | Ty::Number | Ty::Bool, _) => cause(
                ErrorKind::RuntimeException,
                format!("Invalid value '{}', expected {}", shown(host), self.type_string()),
            ),
            (Ty::List, _) => {
                cause(ErrorKind::TypingException, format!("Invalid value '{}', expected list", shown(host)))
            }
            // The reference's typed list of a union names no type.
            (Ty::TypedList(element), v) if !matches!(v, Value::List(_)) => match **element {
                Ty::OrRef(_) | Ty::Union(_) => {
                    cause(ErrorKind::TypingException, format!("Invalid value '{}', expected None", shown(host)))
                }
                _ => cause(
                    ErrorKind::TypingException,
                    format!("Invalid value '{}', expected {}", shown(host), self.type_string()),
                ),
            },
            (Ty::TypedList(element), Value::List(items)) => {
                for item in items.iter() {
                    if element.validate(item, host)? != Check::Ok {
                        return element.refusal(item, host);
                    }
                }
                Ok(None)
            }
            (Ty::Dict(_), v) if !matches!(v, Value::Dict(_)) => {
                cause(ErrorKind::RuntimeException, format!("Invalid value '{}', expected dict", shown(host)))
            }
            (Ty::Dict(element), Value::Dict(entries)) if **element == Ty::Any => {
                match entries.iter().any(|(_, v)| matches!(v, Value::Reference(_))) {
                    true => cause(ErrorKind::UnexpectedReference, OBJECT_REFERENCE.to_string()),
                    false => Ok(None),
                }
            }
            (Ty::Dict(element), Value::Dict(entries)) => {
                for (_, item) in entries.iter() {
                    if element.validate(item, host)? != Check::Ok {
                        return element.refusal(item, host);
                    }
                }
                Ok(None)
            }
            (Ty::Null, _) => {
                cause(ErrorKind::RuntimeException, format!("Invalid value '{}', expected null", shown(host)))
            }
            (Ty::Union(_), v) if !matches!(v, Value::Reference(_)) => cause(
                ErrorKind::TypingException,
                format!("Invalid value '{}', expected {}", shown(host), self.type_string()),
            ),
            (Ty::Nullable(inner), _) => inner.refusal(value, host),
            (Ty::OrRef(inner), v) if !matches!(v, Value::Reference(_)) => inner.refusal(value, host),
            (Ty::Named(name), _) => {
                if let Some(refusal) = host.typedef_refusal(name, value) {
                    return Ok(refusal);
                }
                // std's typedefs are checked natively; a host that does not know them can not
                // say why a value fails one, and must not take it for an entity.
                if validate::std_typedef(name, value).is_some() {
                    return Ok(None);
                }
                match value {
                    Value::Instance(i) => cause(
                        ErrorKind::RuntimeException,
                        format!("Invalid class type for {}, should be {name}", host.instance_display(*i)),
                    ),
                    Value::Reference(_) => Ok(None),
                    _ => cause(
                        ErrorKind::RuntimeException,
                        format!("Invalid type for value '{}', should be type {name}", shown(host)),
                    ),
                }
            }
            _ => Ok(None),
        }
    }
}

/// The DSL type a reference resolves to (`Reference[T]`'s `T`), by its Python class, as the
/// builtin registry's reference types declare it.
pub(crate) fn reference_type(class: &str) -> Ty {
    match super::PluginRegistry::builtin().reference_type_by_class(class) {
        Some(reference) => Ty::from_dsl(reference.resolves_to, ""),
        None => Ty::Any,
    }
}

/// `a.issubtype(b)` for the element types of references.
fn subtype(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (_, Ty::Any) => true,
        _ if a == b => true,
        (Ty::Int | Ty::Float, Ty::Number) => true,
        (_, Ty::Nullable(inner)) => subtype(a, inner),
        (_, Ty::Union(types)) => types.iter().any(|t| subtype(a, t)),
        (_, Ty::OrRef(inner)) => subtype(a, inner),
        _ => false,
    }
}

/// A parsed Python type expression.
#[derive(Clone, Debug, PartialEq)]
enum PyExpr {
    Name(String),
    Subscript(String, Vec<PyExpr>),
    Or(Vec<PyExpr>),
    Str(String),
    Other,
}

/// A tiny parser for the Python type expressions used in annotations: dotted names,
/// subscripts, `|`, parentheses and string literals.
struct PyParser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl<'a> PyParser<'a> {
    fn new(text: &'a str) -> Self {
        PyParser { chars: text.chars().peekable() }
    }

    fn parse(&mut self) -> Option<PyExpr> {
        let expr = self.union()?;
        self.skip_ws();
        if self.chars.peek().is_some() {
            return None;
        }
        Some(expr)
    }

    fn skip_ws(&mut self) {
        while self.chars.peek().is_some_and(|c| c.is_whitespace()) {
            self.chars.next();
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.chars.peek() == Some(&c) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    fn union(&mut self) -> Option<PyExpr> {
        let mut items = vec![self.term()?];
        while self.eat('|') {
            items.push(self.term()?);
        }
        Some(if items.len() == 1 { items.pop()? } else { PyExpr::Or(items) })
    }

    fn term(&mut self) -> Option<PyExpr> {
        self.skip_ws();
        let c = *self.chars.peek()?;
        let atom = if c == '(' {
            self.chars.next();
            let inner = self.union()?;
            if !self.eat(')') {
                return None;
            }
            inner
        } else if c == '"' || c == '\'' {
            self.chars.next();
            let mut s = String::new();
            loop {
                match self.chars.next()? {
                    q if q == c => break,
                    '\\' => s.push(self.chars.next()?),
                    other => s.push(other),
                }
            }
            PyExpr::Str(s)
        } else if c.is_alphabetic() || c == '_' {
            let mut name = String::new();
            while let Some(&c) = self.chars.peek() {
                if c.is_alphanumeric() || c == '_' || c == '.' {
                    name.push(c);
                    self.chars.next();
                } else {
                    break;
                }
            }
            if name.split('.').all(|part| !part.is_empty()) { PyExpr::Name(name) } else { PyExpr::Other }
        } else if c.is_ascii_digit() || c == '-' {
            while self.chars.peek().is_some_and(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.') {
                self.chars.next();
            }
            PyExpr::Other
        } else {
            return None;
        };
        if self.eat('[') {
            let PyExpr::Name(name) = atom else { return None };
            let mut args = Vec::new();
            if !self.eat(']') {
                loop {
                    args.push(self.union()?);
                    if self.eat(',') {
                        if self.eat(']') {
                            break;
                        }
                        continue;
                    }
                    if self.eat(']') {
                        break;
                    }
                    return None;
                }
            }
            return Some(PyExpr::Subscript(name, args));
        }
        Some(atom)
    }
}

/// The last component of a dotted name (`typing.Sequence` is `Sequence`).
fn base_name(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn is_none(expr: &PyExpr) -> bool {
    matches!(expr, PyExpr::Name(n) if n == "None" || base_name(n) == "NoneType")
}

fn to_dsl(expr: &PyExpr, namespace: &str) -> Ty {
    match expr {
        PyExpr::Or(items) => union_to_dsl(items, namespace),
        PyExpr::Name(name) => name_to_dsl(name),
        PyExpr::Subscript(name, args) => match base_name(name) {
            "Optional" => {
                let mut items = args.clone();
                items.push(PyExpr::Name("None".into()));
                union_to_dsl(&items, namespace)
            }
            "Union" => union_to_dsl(args, namespace),
            "Annotated" => {
                for meta in args.iter().skip(1).rev() {
                    if let PyExpr::Subscript(meta_name, meta_args) = meta
                        && base_name(meta_name) == "ModelType"
                        && let [PyExpr::Str(model_type)] = meta_args.as_slice()
                    {
                        return Ty::from_dsl(model_type, namespace);
                    }
                }
                args.first().map(|a| to_dsl(a, namespace)).unwrap_or(Ty::Any)
            }
            "dict" | "Dict" | "Mapping" | "MutableMapping" => match args.as_slice() {
                [_, value] => Ty::Dict(Box::new(to_dsl(value, namespace))),
                _ => Ty::Dict(Box::new(Ty::Any)),
            },
            "list" | "List" | "Sequence" | "MutableSequence" => match args.first() {
                Some(element) => Ty::TypedList(Box::new(to_dsl(element, namespace))),
                None => Ty::List,
            },
            "Reference" => match args.first() {
                Some(element) => Ty::Ref(Box::new(to_dsl(element, namespace))),
                None => Ty::Ref(Box::new(Ty::Any)),
            },
            "TypeAliasType" => Ty::Any,
            _ => Ty::Any,
        },
        // A string inside a Python annotation is a forward reference the reference does not
        // resolve: it becomes `any`.
        PyExpr::Str(_) | PyExpr::Other => Ty::Any,
    }
}

fn name_to_dsl(name: &str) -> Ty {
    if name == "numbers.Number" || name == "Number" {
        return Ty::Number;
    }
    match base_name(name) {
        "None" | "NoneType" => Ty::Null,
        "str" => Ty::Str,
        "int" => Ty::Int,
        "float" => Ty::Float,
        "bool" => Ty::Bool,
        "dict" | "Dict" | "Mapping" => Ty::Dict(Box::new(Ty::Any)),
        "list" | "List" | "Sequence" => Ty::List,
        "Reference" => Ty::Ref(Box::new(Ty::Any)),
        class => match super::PluginRegistry::builtin().reference_type_by_class(class) {
            // A reference class of a registered module, as an annotation: `Reference[T]`.
            Some(reference) => Ty::Ref(Box::new(Ty::from_dsl(reference.resolves_to, ""))),
            None => Ty::Any,
        },
    }
}

/// `to_dsl_type` on a union: `None` members make it nullable, the rest goes through
/// `create_union`.
fn union_to_dsl(items: &[PyExpr], namespace: &str) -> Ty {
    if items.iter().any(is_none) {
        let others: Vec<&PyExpr> = items.iter().filter(|e| !is_none(e)).collect();
        return match others.as_slice() {
            [] => Ty::Null,
            [one] => Ty::Nullable(Box::new(to_dsl(one, namespace))),
            _ => {
                let mut types: Vec<Ty> = others.iter().map(|e| to_dsl(e, namespace)).collect();
                types.push(Ty::Null);
                create_union(types)
            }
        };
    }
    create_union(items.iter().map(|e| to_dsl(e, namespace)).collect())
}

/// `inmanta.ast.type.create_union`: flattens, makes nullable the outer type, and compacts
/// `Reference[T] | T` to `OrRef(T)`.
pub(crate) fn create_union(types: Vec<Ty>) -> Ty {
    let mut worklist: std::collections::VecDeque<Ty> = types.into();
    // (element type, has base, has reference), in insertion order.
    let mut sorted: Vec<(Ty, bool, bool)> = Vec::new();
    let mut seen: Vec<Ty> = Vec::new();
    let mut nullable = false;
    let slot = |sorted: &mut Vec<(Ty, bool, bool)>, ty: Ty| -> usize {
        match sorted.iter().position(|(t, _, _)| *t == ty) {
            Some(i) => i,
            None => {
                sorted.push((ty, false, false));
                sorted.len() - 1
            }
        }
    };
    while let Some(current) = worklist.pop_front() {
        if seen.contains(&current) {
            continue;
        }
        seen.push(current.clone());
        match current {
            Ty::Union(inner) => worklist.extend(inner),
            Ty::Nullable(inner) => {
                nullable = true;
                worklist.push_back(*inner);
            }
            Ty::Null => nullable = true,
            Ty::Ref(inner) => {
                let i = slot(&mut sorted, *inner);
                sorted[i].2 = true;
            }
            other => {
                let i = slot(&mut sorted, other);
                sorted[i].1 = true;
            }
        }
    }
    let mut bases: Vec<Ty> = sorted
        .into_iter()
        .map(|(ty, base, reference)| match (base, reference) {
            (true, true) => Ty::OrRef(Box::new(ty)),
            (false, true) => Ty::Ref(Box::new(ty)),
            _ => ty,
        })
        .collect();
    let base = if bases.len() == 1 { bases.pop().unwrap_or(Ty::Any) } else { Ty::Union(bases) };
    if nullable { Ty::Nullable(Box::new(base)) } else { base }
}
