//! Values with Python semantics.
//!
//! The reference compiler evaluates models with Python objects, so equality, arithmetic,
//! comparisons and the way values print all follow Python: `1 == 1.0 == true`, `/` always
//! gives a float, ints have arbitrary precision, `%` takes the sign of the divisor, and
//! `str(0.1 + 0.2)` is `0.30000000000000004`. This module holds the plain data values
//! (everything a literal can denote) and those operations, shared by the frontend (constant
//! defaults, typedef checks) and the evaluator.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::sync::Arc;

use num_bigint::BigInt;
use num_traits::{One, Signed, ToPrimitive, Zero};
use serde::{Deserialize, Serialize};

mod dict;

pub use dict::{Dict, DictData, Entry};

/// A plain data value.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Value {
    /// `null`, the reference's `NoneValue`. Every null equals every other; which object it
    /// is ([`NullId`]) matters only to a `for` loop, which skips an element it has seen by
    /// identity.
    Null(NullId),
    Bool(bool),
    Int(i64),
    /// An integer outside the `i64` range; never holds a value that fits in `i64`.
    BigInt(Arc<BigInt>),
    Float(f64),
    /// Which allocation a string is tells which Python object it is (see
    /// [`Value::same_str_object`]); an artifact keeps that (`codec::sharing`).
    Str(
        #[serde(
            serialize_with = "crate::artifact::codec::sharing::serialize_str",
            deserialize_with = "crate::artifact::codec::sharing::deserialize_str"
        )]
        Arc<str>,
    ),
    List(Arc<[Value]>),
    /// Keys are strings and keep insertion order, as Python dicts do. Which allocation a dict
    /// is tells which Python object it is, as for strings.
    Dict(
        #[serde(
            serialize_with = "crate::artifact::codec::sharing::serialize_dict",
            deserialize_with = "crate::artifact::codec::sharing::deserialize_dict"
        )]
        Dict,
    ),
    /// An entity instance, by its index in the evaluator's instance table. Instances compare
    /// by identity.
    Instance(u32),
    /// A value that is not known at compile time (a fact, an environment variable that is not
    /// set). It propagates through operators; no two Unknowns are equal.
    Unknown,
    /// A reference to a secret or other value resolved only on the host at apply time.
    Reference(Arc<Reference>),
}

/// Which `NoneValue` object of the reference a `null` is.
///
/// The reference makes one object for each `null` written in the source (shared by every
/// evaluation of that literal) and a new one for each `None` a plugin returns, even inside a
/// list. A `for` loop skips an element whose object it has seen (`id()`), so iterating over
/// `[null, null]` runs the body twice, while a list holding one variable's `null` twice runs
/// it once. The identity travels with the value, as the object does in the reference:
/// literals are numbered by their place in the source ([`NullId::literal`]), the evaluator
/// gives a plugin's nulls fresh numbers, and [`NullId::SHARED`] is for nulls no loop can tell
/// apart (results of comparisons, defaults the evaluator fills in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NullId(pub u64);

impl NullId {
    /// The null of places where no identity can be observed.
    pub const SHARED: NullId = NullId(0);
    /// The first number of nulls made while evaluating: above every literal's.
    pub const FIRST_FRESH: u64 = 1 << 63;

    /// The null a `null` literal denotes: one per place in the source (file and byte offset),
    /// so that lowering a literal twice (a default inherited by several entities) gives the
    /// same object, as the reference's single `Literal` node does.
    pub fn literal(file: u32, offset: u32) -> NullId {
        NullId((u64::from(file) + 1) << 32 | u64::from(offset))
    }
}

/// A reference value (`std::create_environment_reference("NAME")`): the kind of reference and
/// its arguments. Two references are equal when both are, as the reference's dataclass-based
/// references are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The Python class name of the reference (`EnvironmentReference`), used in messages.
    pub class: String,
    /// The module that defines it (`inmanta_plugins.std`).
    pub module: String,
    /// The arguments, in order.
    pub args: Vec<(String, Value)>,
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.py_eq(other)
    }
}

/// Why an operation on values failed; the caller turns this into a diagnostic with the
/// reference's exception kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// A `TypingException` in the reference.
    Typing(String),
    /// Division or modulo by zero: a raw Python `ZeroDivisionError` in the reference.
    ZeroDivision(String),
    /// A float out of range (an int too large to convert, a power too large): a raw Python
    /// `OverflowError` in the reference.
    Overflow(String),
    /// A list or dict looked up as a dict's key (`[] in d`): a raw Python `TypeError` in the
    /// reference, which hashes the key.
    Unhashable(String),
}

impl Value {
    /// `null` where no identity can be observed (see [`NullId`]).
    pub const NULL: Value = Value::Null(NullId::SHARED);

    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    /// The string a format gives (an f-string, `std::format`), as the object CPython returns:
    /// when the text is one field alone, `''.join` of one piece is that piece, and the piece
    /// is the field's value itself when formatting it changed nothing (`format(s, '')`, a
    /// width the string already fills), or for a bool or a null, the one interned string
    /// their `str()` always returns. Which object a string is shows where a `for` loop skips
    /// an element it has seen (`id()`). `sole` is the value of the only field, if the
    /// template is that field and nothing else.
    pub fn formatted(text: String, sole: Option<&Value>) -> Value {
        match sole {
            Some(Value::Str(s)) if **s == *text => Value::Str(s.clone()),
            Some(Value::Bool(true)) if text == "True" => Value::Str(python_constant_str(&TRUE_TEXT, "True")),
            Some(Value::Bool(false)) if text == "False" => Value::Str(python_constant_str(&FALSE_TEXT, "False")),
            Some(Value::Null(_)) if text == "null" => Value::Str(python_constant_str(&NULL_TEXT, "null")),
            _ => Value::str(&text),
        }
    }

    /// Whether two strings are one object in CPython: the same allocation here, or equal
    /// strings of the kind CPython keeps one object for (empty, one Latin-1 character).
    pub fn same_str_object(a: &Arc<str>, b: &Arc<str>) -> bool {
        Arc::ptr_eq(a, b) || (a == b && is_shared_python_str(a))
    }

    /// The int a finite, integral float equals, exactly (`1e300` has 301 digits).
    pub fn int_of_float(f: f64) -> Value {
        Value::int(num_traits::FromPrimitive::from_f64(f).unwrap_or_default())
    }

    pub fn int(i: BigInt) -> Value {
        match i.to_i64() {
            Some(v) => Value::Int(v),
            None => Value::BigInt(Arc::new(i)),
        }
    }

    /// Whether `found` holds for this value or for any element of its lists and dicts, at any
    /// depth (the value first, then its elements in order).
    pub fn any_nested(&self, found: &impl Fn(&Value) -> bool) -> bool {
        found(self)
            || match self {
                Value::List(items) => items.iter().any(|item| item.any_nested(found)),
                Value::Dict(entries) => entries.iter().any(|(_, v)| v.any_nested(found)),
                _ => false,
            }
    }

    /// The Python type name, as used in error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null(_) => "NoneValue",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Instance(_) => "Instance",
            Value::Unknown => "Unknown",
            Value::Reference(_) => "Reference",
        }
    }

    /// Whether the value is a number in Python's sense (`numbers.Number`): bools included.
    pub fn is_number(&self) -> bool {
        matches!(self, Value::Bool(_) | Value::Int(_) | Value::BigInt(_) | Value::Float(_))
    }

    /// Whether the value is an integral number (`numbers.Integral`): bools included.
    pub fn is_integral(&self) -> bool {
        matches!(self, Value::Bool(_) | Value::Int(_) | Value::BigInt(_))
    }

    /// Python truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null(_) => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::BigInt(_) => true,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Dict(d) => !d.is_empty(),
            Value::Instance(_) | Value::Unknown | Value::Reference(_) => true,
        }
    }

    /// Python `==`.
    pub fn py_eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Null(_), Null(_)) => true,
            (Str(a), Str(b)) => a == b,
            (Instance(a), Instance(b)) => a == b,
            (Reference(a), Reference(b)) => a.class == b.class && a.args == b.args,
            (List(a), List(b)) => a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.py_eq(y)),
            (Value::Dict(a), Value::Dict(b)) => {
                a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| v.py_eq(w)))
            }
            _ if self.is_number() && other.is_number() => numeric_cmp(self, other) == Some(Ordering::Equal),
            _ => false,
        }
    }

    /// Python `<`, `>`, `<=`, `>=` on numbers; the language allows nothing else.
    pub fn py_compare(&self, other: &Value) -> Result<Ordering, ValueError> {
        if !self.is_number() || !other.is_number() {
            return Err(ValueError::Typing("Can only compare numbers.".into()));
        }
        // NaN cannot come from the language (no float parsing of "nan" in literals), but a
        // plugin may return one; every comparison with it is false, like Python.
        numeric_cmp(self, other).ok_or_else(|| ValueError::Typing("Can not compare NaN.".into()))
    }

    /// `x in container`: key membership for dicts, element equality for lists.
    pub fn py_contains(container: &Value, item: &Value) -> Result<bool, ValueError> {
        match container {
            Value::Dict(d) => match item {
                Value::Str(k) => Ok(d.contains_key(k)),
                Value::List(_) | Value::Dict(_) => {
                    let kind = if matches!(item, Value::List(_)) { "list" } else { "dict" };
                    Err(ValueError::Unhashable(format!("unhashable type: '{kind}'")))
                }
                _ => Ok(false),
            },
            Value::List(l) => Ok(l.iter().any(|x| x.py_eq(item))),
            other => {
                // The reference formats its own null, `NoneValue`, as `null`.
                Err(ValueError::Typing(format!(
                    "Operand two of 'in' can only be a list or dict ({})",
                    other.str_with_null("null")
                )))
            }
        }
    }

    /// Python `str()`.
    pub fn py_str(&self) -> String {
        self.str_with_null("None")
    }

    /// Python `str()` where null shows as `null`: the reference's own null object prints so,
    /// Python's `None` (a value a plugin or the exporter holds) as `None`.
    pub fn str_with_null(&self, null: &str) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            _ => self.repr_with_null(null),
        }
    }

    /// Python `repr()`, with `None` for null.
    pub fn py_repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out, "None");
        out
    }

    /// Python `repr()` where null shows as `null`, as the reference prints its own null
    /// object inside containers.
    pub fn repr_with_null(&self, null: &str) -> String {
        let mut out = String::new();
        self.write_repr(&mut out, null);
        out
    }

    /// `repr()` with a custom rendering of instances (which need the evaluator's tables).
    pub fn repr_with(&self, null: &str, instance: &dyn Fn(u32) -> String) -> String {
        let mut out = String::new();
        self.write_repr_with(&mut out, null, &|out, i| out.push_str(&instance(i)));
        out
    }

    /// [`Self::repr_with_null`], appended to `out`; instances are written in place as
    /// `<instance N>`, with no string of their own.
    pub fn write_repr(&self, out: &mut String, null: &str) {
        self.write_repr_with(out, null, &|out, i| {
            out.push_str("<instance ");
            push_decimal(out, u64::from(i));
            out.push('>');
        })
    }

    /// `repr()` appended to `out`, with `instance` writing an instance's rendering.
    /// Integers are written by hand rather than through `fmt`, which costs several times more.
    fn write_repr_with(&self, out: &mut String, null: &str, instance: &dyn Fn(&mut String, u32)) {
        match self {
            Value::Instance(i) => instance(out, *i),
            Value::Unknown => out.push_str("Unknown"),
            Value::Reference(r) => {
                let _ = write!(out, "<{}.{} object at <addr>>", r.module, r.class);
            }
            Value::Null(_) => out.push_str(null),
            Value::Bool(true) => out.push_str("True"),
            Value::Bool(false) => out.push_str("False"),
            Value::Int(i) => {
                if *i < 0 {
                    out.push('-');
                }
                push_decimal(out, i.unsigned_abs());
            }
            Value::BigInt(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) => out.push_str(&float_repr(*f)),
            Value::Str(s) => write_str_repr(out, s),
            Value::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_repr_with(out, null, instance);
                }
                out.push(']');
            }
            Value::Dict(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_str_repr(out, k);
                    out.push_str(": ");
                    v.write_repr_with(out, null, instance);
                }
                out.push('}');
            }
        }
    }

    /// The value as a `BigInt` if it is integral (bools count).
    fn as_bigint(&self) -> Option<BigInt> {
        match self {
            Value::Bool(b) => Some(BigInt::from(*b as i64)),
            Value::Int(i) => Some(BigInt::from(*i)),
            Value::BigInt(i) => Some((**i).clone()),
            _ => None,
        }
    }

    /// The value as an `f64` if it is a number (big ints may round, as in Python).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(*b as i64 as f64),
            Value::Int(i) => Some(*i as f64),
            Value::BigInt(i) => i.to_f64(),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Integer value as `i64` if the value is an int (or bool) that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Bool(b) => Some(*b as i64),
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// Compares two numbers exactly, as Python does (an int and a float compare by value, without
/// rounding the int).
fn numeric_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Float(x), other) => int_float_cmp(&other.as_bigint()?, *x).map(Ordering::reverse),
        (other, Value::Float(y)) => int_float_cmp(&other.as_bigint()?, *y),
        _ => Some(a.as_bigint()?.cmp(&b.as_bigint()?)),
    }
}

fn int_float_cmp(i: &BigInt, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f.is_infinite() {
        return Some(if f > 0.0 { Ordering::Less } else { Ordering::Greater });
    }
    let floor = f.floor();
    let floor_int = BigInt::from_f64_exact(floor)?;
    match i.cmp(&floor_int) {
        Ordering::Equal if f > floor => Some(Ordering::Less),
        other => Some(other),
    }
}

trait FromF64Exact: Sized {
    fn from_f64_exact(f: f64) -> Option<Self>;
}

impl FromF64Exact for BigInt {
    /// Converts an integral, finite `f64` exactly.
    fn from_f64_exact(f: f64) -> Option<BigInt> {
        num_traits::FromPrimitive::from_f64(f)
    }
}

/// Binary arithmetic operators of the language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

impl ArithOp {
    pub fn name(self) -> &'static str {
        match self {
            ArithOp::Add => "plus",
            ArithOp::Sub => "minus",
            ArithOp::Mul => "multiplication",
            ArithOp::Div => "division",
            ArithOp::Mod => "modulo",
            ArithOp::Pow => "exponentiation",
        }
    }
}

/// The strings CPython's `str()` of `True`, `False` and the reference's null return: each
/// is one interned object, whatever made it.
static TRUE_TEXT: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
static FALSE_TEXT: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
static NULL_TEXT: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();

fn python_constant_str(cell: &'static std::sync::OnceLock<Arc<str>>, text: &str) -> Arc<str> {
    cell.get_or_init(|| Arc::from(text)).clone()
}

/// Whether CPython shares one object for every string equal to `s`: the empty string and the
/// strings of one Latin-1 character.
pub fn is_shared_python_str(s: &str) -> bool {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (None, _) => true,
        (Some(c), None) => (c as u32) < 256,
        _ => false,
    }
}

/// Python arithmetic on two values.
pub fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value, ValueError> {
    arith_with(op, a, b, &Value::py_repr)
}

/// [`arith`], with `repr` rendering the operands its errors show (the evaluator names
/// instances by entity and place, which only it knows).
pub fn arith_with(op: ArithOp, a: &Value, b: &Value, repr: &dyn Fn(&Value) -> String) -> Result<Value, ValueError> {
    if op == ArithOp::Add {
        match (a, b) {
            // CPython's concatenation returns the other operand itself when one is empty.
            (Value::Str(x), Value::Str(y)) if y.is_empty() => return Ok(Value::Str(x.clone())),
            (Value::Str(x), Value::Str(y)) if x.is_empty() => return Ok(Value::Str(y.clone())),
            (Value::Str(x), Value::Str(y)) => {
                let mut s = String::with_capacity(x.len() + y.len());
                s.push_str(x);
                s.push_str(y);
                return Ok(Value::str(&s));
            }
            (Value::Str(_), other) => {
                return Err(ValueError::Typing(format!(
                    "Can only concatenate str (not '{}' ({})) to str",
                    other.type_name(),
                    repr(other)
                )));
            }
            _ => {}
        }
    }
    if !a.is_number() || !b.is_number() {
        return Err(ValueError::Typing(format!(
            "Unsupported operand type(s) for {}: '{}' ({}) and '{}' ({})",
            op.name(),
            a.type_name(),
            repr(a),
            b.type_name(),
            repr(b)
        )));
    }
    let float = matches!(a, Value::Float(_)) || matches!(b, Value::Float(_));
    if float {
        return float_arith(op, to_float(a)?, to_float(b)?, a, b);
    }
    if op == ArithOp::Div {
        return int_true_division(a, b);
    }
    let (x, y) = (a.as_bigint().unwrap_or_default(), b.as_bigint().unwrap_or_default());
    match op {
        ArithOp::Add => Ok(Value::int(x + y)),
        ArithOp::Sub => Ok(Value::int(x - y)),
        ArithOp::Mul => Ok(Value::int(x * y)),
        ArithOp::Mod => {
            if y.is_zero() {
                return Err(ValueError::ZeroDivision("integer modulo by zero".into()));
            }
            Ok(Value::int(python_int_mod(&x, &y)))
        }
        ArithOp::Pow => {
            if y.is_negative() {
                if x.is_zero() {
                    return Err(ValueError::ZeroDivision("0.0 cannot be raised to a negative power".into()));
                }
                return float_arith(ArithOp::Pow, to_float(a)?, to_float(b)?, a, b);
            }
            let exp = y.to_u32().ok_or_else(|| ValueError::Typing("exponent too large".into()))?;
            if exp > 1 << 20 && x.abs() > BigInt::one() {
                return Err(ValueError::Typing("exponent too large".into()));
            }
            Ok(Value::int(num_traits::pow::Pow::pow(x, exp)))
        }
        ArithOp::Div => unreachable!("true division is handled as float above"),
    }
}

fn float_arith(op: ArithOp, x: f64, y: f64, a: &Value, b: &Value) -> Result<Value, ValueError> {
    Ok(Value::Float(match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div => {
            if y == 0.0 {
                let what =
                    if a.is_integral() && b.is_integral() { "division by zero" } else { "float division by zero" };
                return Err(ValueError::ZeroDivision(what.into()));
            }
            x / y
        }
        ArithOp::Mod => {
            if y == 0.0 {
                return Err(ValueError::ZeroDivision("float modulo".into()));
            }
            // Python's float modulo: the sign of the divisor, also for a zero result.
            let r = x % y;
            if r == 0.0 {
                0f64.copysign(y)
            } else if (r < 0.0) != (y < 0.0) {
                r + y
            } else {
                r
            }
        }
        ArithOp::Pow => {
            if x == 0.0 && y < 0.0 {
                return Err(ValueError::ZeroDivision("0.0 cannot be raised to a negative power".into()));
            }
            let result = x.powf(y);
            // Python's float power refuses a result out of range (multiplication just gives
            // `inf`).
            if result.is_infinite() && x.is_finite() && y.is_finite() {
                return Err(ValueError::Overflow("(34, 'Numerical result out of range')".into()));
            }
            result
        }
    }))
}

/// An int (or bool, or float) as Python converts it for float arithmetic: an int too large for
/// a float is an `OverflowError`, not infinity.
fn to_float(v: &Value) -> Result<f64, ValueError> {
    match v {
        Value::BigInt(i) => i
            .to_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| ValueError::Overflow("int too large to convert to float".into())),
        other => Ok(other.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Python's `/` on two ints: the exact quotient, rounded once to the nearest float, so that
/// `10 ** 400 / 10 ** 399` is `10.0`; a quotient too large for a float is an `OverflowError`.
fn int_true_division(a: &Value, b: &Value) -> Result<Value, ValueError> {
    const EXACT: i64 = 1 << 53;
    // A big int is never zero: it only holds values outside the `i64` range.
    if b.as_i64() == Some(0) {
        return Err(ValueError::ZeroDivision("division by zero".into()));
    }
    // Both convert exactly, so the float division rounds the exact quotient once.
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && (-EXACT..=EXACT).contains(&x)
        && (-EXACT..=EXACT).contains(&y)
    {
        return Ok(Value::Float(x as f64 / y as f64));
    }
    let (x, y) = (a.as_bigint().unwrap_or_default(), b.as_bigint().unwrap_or_default());
    let negative = x.is_negative() != y.is_negative();
    let (n, d) = (x.abs(), y.abs());
    if n.is_zero() {
        return Ok(Value::Float(if negative { -0.0 } else { 0.0 }));
    }
    // Scale so that the integer quotient has 55 or 56 significant bits, keep a sticky bit for
    // a non-zero remainder, and let the conversion of that integer round to 53 bits: the
    // sticky bit makes it round as the exact quotient would.
    let shift = 55 - (n.bits() as i64 - d.bits() as i64);
    let (num, den) = if shift >= 0 { (n << shift as u64, d) } else { (n, d << (-shift) as u64) };
    let r = &num % &den;
    let mut q = num / den;
    if !r.is_zero() {
        q |= BigInt::one();
    }
    let mantissa = q.to_u64().map_or(f64::INFINITY, |q| q as f64);
    let magnitude = scale_by_power_of_two(mantissa, -shift);
    if magnitude.is_infinite() {
        return Err(ValueError::Overflow("integer division result too large for a float".into()));
    }
    Ok(Value::Float(if negative { -magnitude } else { magnitude }))
}

/// `x * 2^exp`, exact while the result is a normal float (in steps, as `2^exp` alone may not
/// be representable).
fn scale_by_power_of_two(mut x: f64, mut exp: i64) -> f64 {
    while exp > 1000 {
        x *= 2f64.powi(1000);
        exp -= 1000;
    }
    while exp < -1000 {
        x *= 2f64.powi(-1000);
        exp += 1000;
    }
    x * 2f64.powi(exp as i32)
}

/// Python's `%` on ints: the result has the sign of the divisor.
fn python_int_mod(x: &BigInt, y: &BigInt) -> BigInt {
    let r = x % y;
    if !r.is_zero() && (r.is_negative() != y.is_negative()) { r + y } else { r }
}

/// Python's `repr(float)`: the shortest string that round-trips, in exponent notation when
/// the exponent is below -4 or at least 16.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // ryu gives the shortest round-trip digits; re-layout them the way Python does.
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(f);
    let (sign, s) = match s.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", s),
    };
    let (mantissa, exp) = match s.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (s, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int_part}{frac_part}");
    // Decimal exponent of the first digit.
    let mut point = int_part.len() as i32 + exp;
    let leading_zeros = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..leading_zeros);
    point -= leading_zeros as i32;
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let decimal_exp = point - 1;
    if !(-4..16).contains(&decimal_exp) {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() { first.to_string() } else { format!("{first}.{rest}") };
        let sign_e = if decimal_exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{sign_e}{:02}", decimal_exp.abs());
    }
    let n = digits.len() as i32;
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{sign}{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        let (a, b) = digits.split_at(point as usize);
        format!("{sign}{a}.{b}")
    }
}

/// Python's `repr(str)`: single quotes unless the string contains a single quote and no
/// double quote, with Python's escapes.
pub fn str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_str_repr(&mut out, s);
    out
}

/// Appends `n` in decimal, as `write!(out, "{n}")` does.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

/// The most decimal digits CPython converts an int to or from text with
/// (`sys.int_max_str_digits`, 4,300 by default): beyond it, `str()`, `repr()`, formatting and
/// parsing raise `ValueError`, which the reference lets escape.
pub const MAX_INT_STR_DIGITS: usize = 4300;

/// CPython's message when an int is too long to become text.
pub const INT_TO_TEXT_LIMIT_MESSAGE: &str = "Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit";

/// CPython's message when a text of `digits` digits is too long to become an int.
pub fn int_from_text_limit_message(digits: usize) -> String {
    format!(
        "Exceeds the limit (4300 digits) for integer string conversion: value has {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
    )
}

/// Whether an int has more decimal digits than CPython converts to text.
pub fn int_too_long_for_text(i: &BigInt) -> bool {
    // 2^14280 < 10^4299 and 2^14288 > 10^4301: only between them are the digits counted.
    match i.bits() {
        0..=14280 => false,
        14281..=14288 => i.magnitude().to_string().len() > MAX_INT_STR_DIGITS,
        _ => true,
    }
}

/// Whether a value holds, at any depth of its lists and dicts, an int that CPython would refuse
/// to convert to text ([`int_too_long_for_text`]): what `str()` or `repr()` of the value
/// raises `ValueError` for.
pub fn holds_int_too_long_for_text(value: &Value) -> bool {
    value.any_nested(&|v| matches!(v, Value::BigInt(i) if int_too_long_for_text(i)))
}

/// [`str_repr`], appended to `out`.
pub fn write_str_repr(out: &mut String, s: &str) {
    // Most strings are printable ASCII without a quote or backslash: copied as they are.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'\\' && b != b'\'') {
        out.reserve(s.len() + 2);
        out.push('\'');
        out.push_str(s);
        out.push('\'');
        return;
    }
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.reserve(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let code = c as u32;
                let _ = if code <= 0xff {
                    write!(out, "\\x{code:02x}")
                } else if code <= 0xffff {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out.push(quote);
}

/// An approximation of Python's `str.isprintable()` per character: control characters,
/// separators other than the ASCII space, and unassigned or private-use code points are not
/// printable.
fn is_printable(c: char) -> bool {
    let code = c as u32;
    if c == ' ' {
        return true;
    }
    if code < 0x20 || (0x7f..0xa1).contains(&code) || code == 0xad {
        return false;
    }
    if c.is_whitespace() {
        return false;
    }
    // Format characters, surrogates and private use areas.
    !matches!(code, 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2064 | 0xfeff | 0xe000..=0xf8ff | 0xfff9..=0xfffb)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integers and instances in `repr` are written by hand; they read as `fmt` writes them.
    #[test]
    fn integers_repr_like_fmt() {
        for i in [0, 1, 9, 10, 99, 100, 12345, -1, -10, -987654321, i64::MAX, i64::MIN, i64::MIN + 1] {
            let mut out = String::new();
            Value::Int(i).write_repr(&mut out, "None");
            assert_eq!(out, i.to_string());
        }
        for i in [0u32, 7, 42, 1_000_000, u32::MAX] {
            let mut out = String::new();
            Value::Instance(i).write_repr(&mut out, "None");
            assert_eq!(out, format!("<instance {i}>"));
        }
    }

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (2.0, "2.0"),
            (0.5, "0.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (-1.5, "-1.5"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (f, expected) in cases {
            assert_eq!(float_repr(f), expected, "{f:e}");
        }
    }

    #[test]
    fn arithmetic_follows_python() {
        let i = |v| Value::Int(v);
        let check = |op, a: &Value, b: &Value, expected: &str| {
            assert_eq!(arith(op, a, b).unwrap().py_repr(), expected, "{op:?} {a:?} {b:?}");
        };
        check(ArithOp::Div, &i(4), &i(2), "2.0");
        check(ArithOp::Mod, &i(-7), &i(3), "2");
        check(ArithOp::Mod, &i(7), &i(-3), "-2");
        check(ArithOp::Pow, &i(2), &i(-1), "0.5");
        check(ArithOp::Pow, &i(2), &i(64), "18446744073709551616");
        check(ArithOp::Add, &i(i64::MAX), &i(1), "9223372036854775808");
        check(ArithOp::Add, &Value::Bool(true), &i(1), "2");
        check(ArithOp::Add, &Value::str("a"), &Value::str("b"), "'ab'");
        assert_eq!(arith(ArithOp::Div, &i(1), &i(0)).unwrap_err(), ValueError::ZeroDivision("division by zero".into()));
        assert!(matches!(arith(ArithOp::Add, &Value::str("a"), &i(1)), Err(ValueError::Typing(_))));
    }

    /// `/` on ints is the exact quotient rounded once, whatever the size of the operands; a
    /// float out of range is Python's `OverflowError`. Expectations from CPython 3.12.
    #[test]
    fn int_division_and_float_overflow_follow_python() {
        let big = |e: u32| Value::int(BigInt::from(10).pow(e));
        let two = |e: u32| Value::int(BigInt::from(2).pow(e));
        let plus = |v: &Value, n: i64| arith(ArithOp::Add, v, &Value::Int(n)).unwrap();
        let neg = |v: &Value| arith(ArithOp::Sub, &Value::Int(0), v).unwrap();
        let check = |a: &Value, b: &Value, expected: &str| {
            assert_eq!(arith(ArithOp::Div, a, b).unwrap().py_repr(), expected, "{a:?} / {b:?}");
        };
        check(&big(400), &big(399), "10.0");
        check(&two(1100), &two(1000), "1.2676506002282294e+30");
        check(&plus(&two(53), 1), &Value::Int(1), "9007199254740992.0");
        check(&plus(&two(54), 3), &Value::Int(2), "9007199254740994.0");
        check(&neg(&plus(&two(60), 1)), &Value::Int(3), "-3.843071682022823e+17");
        check(&Value::Int(1), &big(400), "0.0");
        check(&Value::Int(7), &neg(&two(70)), "-5.929230630780102e-21");
        check(&Value::Int(1), &Value::Int(3), "0.3333333333333333");
        let overflow = |op, a: &Value, b: &Value, message: &str| {
            assert_eq!(arith(op, a, b).unwrap_err(), ValueError::Overflow(message.into()), "{op:?} {a:?} {b:?}");
        };
        overflow(ArithOp::Div, &big(400), &Value::Int(3), "integer division result too large for a float");
        overflow(ArithOp::Add, &big(400), &Value::Float(1.5), "int too large to convert to float");
        overflow(ArithOp::Mul, &big(400), &Value::Float(1.0), "int too large to convert to float");
        overflow(ArithOp::Pow, &Value::Float(2.0), &Value::Int(1024), "(34, 'Numerical result out of range')");
        overflow(ArithOp::Pow, &big(400), &Value::Int(-1), "int too large to convert to float");
        // A zero remainder takes the divisor's sign.
        assert_eq!(arith(ArithOp::Mod, &big(20), &Value::Float(-2.5)).unwrap().py_repr(), "-0.0");
        assert_eq!(arith(ArithOp::Mod, &Value::Float(0.0), &Value::Int(-1)).unwrap().py_repr(), "-0.0");
        // An integral float converts to the int it equals, exactly.
        assert_eq!(Value::int_of_float(2f64.powi(100)).py_repr(), "1267650600228229401496703205376");
        assert_eq!(Value::int_of_float(1e300).py_repr().len(), 301);
        // Multiplying floats gives infinity, as in Python.
        assert_eq!(arith(ArithOp::Mul, &Value::Float(1e308), &Value::Float(10.0)).unwrap().py_repr(), "inf");
    }

    #[test]
    fn equality_and_membership_follow_python() {
        assert!(Value::Int(1).py_eq(&Value::Float(1.0)));
        assert!(Value::Bool(true).py_eq(&Value::Int(1)));
        assert!(!Value::str("1").py_eq(&Value::Int(1)));
        let l = Value::List(Arc::from(vec![Value::Int(1), Value::str("a")]));
        assert!(Value::py_contains(&l, &Value::Float(1.0)).unwrap());
        assert_eq!(l.repr_with_null("null"), "[1, 'a']");
        assert!(Value::py_contains(&Value::str("abc"), &Value::str("a")).is_err());
        assert_eq!(Value::Int(2).py_compare(&Value::Float(2.5)).unwrap(), Ordering::Less);
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a\nb"), "'a\\nb'");
    }
}
