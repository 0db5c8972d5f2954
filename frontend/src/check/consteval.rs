//! Constant defaults and their validation.
//!
//! The reference checks every attribute default when the entity is defined: the default must
//! be a constant, and it must validate against the attribute's type, including typedef
//! constraints, which it evaluates with only `self` bound. This module does the same on
//! [`Value`]s with Python semantics. A constraint that calls a plugin cannot be evaluated by
//! the frontend; its check is left to the evaluator ([`Validation::Deferred`]).

use std::sync::Arc;

use num_bigint::BigInt;
use weft_ir::value::{ArithOp, NullId, Value, ValueError, arith};
use weft_ir::{ErrorKind, FileId};

use super::*;
use crate::ast::{BinOp, ExprKind};

#[derive(Debug, PartialEq)]
pub(crate) enum Validation {
    Valid,
    Invalid(ErrorKind, String),
    /// The check needs a plugin; the evaluator performs it.
    Deferred,
}

/// Why evaluating a constraint stopped.
enum Stop {
    Error(ErrorKind, String),
    Deferred,
}

impl From<ValueError> for Stop {
    fn from(e: ValueError) -> Stop {
        match e {
            ValueError::Typing(m) => Stop::Error(ErrorKind::TypingException, m),
            ValueError::ZeroDivision(m) => Stop::Error(ErrorKind::ZeroDivisionError, m),
            ValueError::Overflow(m) => Stop::Error(ErrorKind::OverflowError, m),
            ValueError::Unhashable(m) => Stop::Error(ErrorKind::TypeError, m),
        }
    }
}

/// Python's `str()` of a value as the reference shows it in "Invalid value" messages.
pub(crate) fn shown(value: &Value) -> String {
    value.str_with_null("null")
}

impl<'p, 'a> Checker<'p, 'a> {
    /// The reference's `as_constant()`: literals, and lists and dicts of constants (nested
    /// lists are flattened, as list literals always are).
    ///
    /// `file` is the file the expression is in, when the value becomes part of the program
    /// (an attribute's default): a `null` literal then has the identity of its place in the
    /// source (`NullId::literal`). Without it, a `null` has none, for values that are only
    /// compared.
    pub(crate) fn constant_value(&mut self, expr: &'a ast::Expr<'a>, file: Option<FileId>) -> Result<Value, String> {
        crate::with_stack(|| self.constant_value_inner(expr, file))
    }

    fn constant_value_inner(&mut self, expr: &'a ast::Expr<'a>, file: Option<FileId>) -> Result<Value, String> {
        Ok(match &expr.kind {
            ExprKind::Int(i) => Value::Int(*i),
            ExprKind::BigInt(text) => match text.parse::<BigInt>() {
                Ok(b) => Value::int(b),
                Err(_) => return Err(format!("{text} is not a valid integer")),
            },
            ExprKind::Float(f) => Value::Float(*f),
            ExprKind::Bool(b) => Value::Bool(*b),
            ExprKind::Null => match file {
                Some(file) => Value::Null(NullId::literal(file.0, expr.span.start)),
                None => Value::NULL,
            },
            ExprKind::Str(lit) if lit.interpolations.is_empty() => Value::str(lit.value),
            ExprKind::Str(lit) => {
                return Err(format!("Format({}) is not a constant", weft_ir::value::str_repr(lit.value)));
            }
            ExprKind::RawStr(s) => Value::str(s),
            ExprKind::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in *items {
                    match self.constant_value(item, file)? {
                        Value::List(inner) => out.extend(inner.iter().cloned()),
                        v => out.push(v),
                    }
                }
                Value::List(Arc::from(out))
            }
            ExprKind::Dict(entries) => {
                let mut out = Vec::with_capacity(entries.len());
                for entry in *entries {
                    out.push((Arc::from(entry.key), self.constant_value(entry.value, file)?));
                }
                Value::Dict(out.into())
            }
            _ => return Err(format!("{} is not a constant", self.pretty(expr))),
        })
    }

    /// Validates a value against a declared attribute type, as the reference's types do.
    pub(crate) fn validate_value(&mut self, value: &Value, ty: ValueType) -> Validation {
        if ty.nullable && matches!(value, Value::Null(_)) {
            return Validation::Valid;
        }
        if ty.list {
            let Value::List(items) = value else {
                let type_name = self.value_type_name(ValueType { nullable: false, ..ty });
                return Validation::Invalid(
                    ErrorKind::TypingException,
                    format!("Invalid value '{}', expected {type_name}", shown(value)),
                );
            };
            let mut result = Validation::Valid;
            for item in items.iter() {
                match self.validate_base(item, ty.base) {
                    Validation::Valid => {}
                    Validation::Deferred => result = Validation::Deferred,
                    invalid => return invalid,
                }
            }
            return result;
        }
        self.validate_base(value, ty.base)
    }

    fn validate_base(&mut self, value: &Value, base: BaseType) -> Validation {
        match base {
            BaseType::Primitive(p) => match validate_primitive(value, p) {
                Ok(()) => Validation::Valid,
                Err((kind, message)) => Validation::Invalid(kind, message),
            },
            BaseType::Typedef(t) => {
                let Some(inner) = self.model.typedefs[t.index()].base else {
                    // The base failed to resolve; that error is reported already.
                    return Validation::Valid;
                };
                match self.validate_base(value, inner) {
                    Validation::Valid => {}
                    other => return other,
                }
                let typedef = &self.model.typedefs[t.index()];
                let (constraint, name) = (typedef.constraint, typedef.name);
                match self.eval(constraint, value, name) {
                    Ok(result) if result.truthy() => Validation::Valid,
                    Ok(_) => Validation::Invalid(
                        ErrorKind::RuntimeException,
                        format!(
                            "Invalid value {}, does not match constraint `{}`",
                            value.repr_with_null("null"),
                            self.pretty(constraint)
                        ),
                    ),
                    Err(Stop::Deferred) => Validation::Deferred,
                    Err(Stop::Error(kind, message)) => Validation::Invalid(kind, message),
                }
            }
        }
    }

    /// Evaluates a typedef constraint with `self` (and the typedef's own name) bound to
    /// `value`.
    fn eval(&mut self, expr: &'a ast::Expr<'a>, value: &Value, typedef_name: Symbol) -> Result<Value, Stop> {
        crate::with_stack(|| self.eval_inner(expr, value, typedef_name))
    }

    fn eval_inner(&mut self, expr: &'a ast::Expr<'a>, value: &Value, typedef_name: Symbol) -> Result<Value, Stop> {
        let self_sym = self.known.self_;
        let eval = |this: &mut Self, e: &'a ast::Expr<'a>| this.eval(e, value, typedef_name);
        Ok(match &expr.kind {
            ExprKind::Name(path)
                if path.is_simple() && (path.last().name == self_sym || path.last().name == typedef_name) =>
            {
                value.clone()
            }
            ExprKind::Name(path) => {
                let name = self.path_text(path.parts);
                return Err(Stop::Error(
                    ErrorKind::NotFoundException,
                    format!("Unable to resolve `{name}`: a type constraint can not reference variables."),
                ));
            }
            ExprKind::Regex(pattern) => match value {
                Value::Str(s) => match crate::regex::python_match(pattern, s) {
                    Ok(m) => Value::Bool(m),
                    // The parser reported the pattern already.
                    Err(_) => return Err(Stop::Deferred),
                },
                other => {
                    return Err(Stop::Error(
                        ErrorKind::RuntimeException,
                        format!("Invalid value '{}', a regex constraint needs a string", shown(other)),
                    ));
                }
            },
            ExprKind::Int(_)
            | ExprKind::BigInt(_)
            | ExprKind::Float(_)
            | ExprKind::Bool(_)
            | ExprKind::Null
            | ExprKind::RawStr(_) => self.constant_value(expr, None).map_err(|_| Stop::Deferred)?,
            ExprKind::Str(lit) if lit.interpolations.is_empty() => Value::str(lit.value),
            ExprKind::List(items) => {
                let mut out = Vec::new();
                for item in *items {
                    match eval(self, item)? {
                        Value::List(inner) => out.extend(inner.iter().cloned()),
                        v => out.push(v),
                    }
                }
                Value::List(Arc::from(out))
            }
            ExprKind::Dict(entries) => {
                let mut out = Vec::new();
                for entry in *entries {
                    out.push((Arc::from(entry.key), eval(self, entry.value)?));
                }
                Value::Dict(out.into())
            }
            ExprKind::Not(inner) => match eval(self, inner)? {
                Value::Bool(b) => Value::Bool(!b),
                other => {
                    return Err(Stop::Error(
                        ErrorKind::RuntimeException,
                        format!("Invalid value `{}`: `not` expects a boolean", shown(&other)),
                    ));
                }
            },
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let l = eval(self, lhs)?;
                match op {
                    BinOp::And | BinOp::Or => {
                        let Value::Bool(lb) = l else {
                            let which = if *op == BinOp::And { "and" } else { "or" };
                            return Err(Stop::Error(
                                ErrorKind::RuntimeException,
                                format!("Invalid left hand value `{}`: `{which}` expects a boolean", shown(&l)),
                            ));
                        };
                        if (*op == BinOp::And && !lb) || (*op == BinOp::Or && lb) {
                            return Ok(Value::Bool(lb));
                        }
                        match eval(self, rhs)? {
                            Value::Bool(rb) => Value::Bool(rb),
                            other => {
                                let which = if *op == BinOp::And { "and" } else { "or" };
                                return Err(Stop::Error(
                                    ErrorKind::RuntimeException,
                                    format!(
                                        "Invalid right hand value `{}`: `{which}` expects a boolean",
                                        shown(&other)
                                    ),
                                ));
                            }
                        }
                    }
                    _ => {
                        let r = eval(self, rhs)?;
                        binary(*op, &l, &r)?
                    }
                }
            }
            ExprKind::Conditional { cond, then, otherwise } => match eval(self, cond)? {
                Value::Bool(true) => eval(self, then)?,
                Value::Bool(false) => eval(self, otherwise)?,
                other => {
                    return Err(Stop::Error(
                        ErrorKind::RuntimeException,
                        format!(
                            "Invalid value `{}`: the condition for a conditional expression must be a boolean expression",
                            shown(&other)
                        ),
                    ));
                }
            },
            ExprKind::Subscript { base, key } => {
                let (b, k) = (eval(self, base)?, eval(self, key)?);
                match (&b, &k) {
                    (Value::Dict(entries), Value::Str(key)) => match entries.iter().find(|(name, _)| name == key) {
                        Some((_, v)) => v.clone(),
                        None => {
                            let keys: Vec<&str> = entries.iter().map(|(name, _)| &**name).collect();
                            return Err(Stop::Error(
                                ErrorKind::KeyException,
                                format!("key {key} not found in dict, options are [{}]", keys.join(", ")),
                            ));
                        }
                    },
                    _ => return Err(Stop::Deferred),
                }
            }
            // Plugin calls, casts, interpolation and the rest are left to the evaluator.
            _ => return Err(Stop::Deferred),
        })
    }

    /// An expression as the reference prints it in messages ([`super::pretty::expr_text`]).
    pub(crate) fn pretty(&self, expr: &ast::Expr<'_>) -> String {
        super::pretty::expr_text(&self.program.interner, expr)
    }
}

fn binary(op: BinOp, l: &Value, r: &Value) -> Result<Value, Stop> {
    use std::cmp::Ordering::*;
    Ok(match op {
        BinOp::Eq => Value::Bool(l.py_eq(r)),
        BinOp::NotEq => Value::Bool(!l.py_eq(r)),
        BinOp::Lt => Value::Bool(l.py_compare(r)? == Less),
        BinOp::Gt => Value::Bool(l.py_compare(r)? == Greater),
        BinOp::Le => Value::Bool(l.py_compare(r)? != Greater),
        BinOp::Ge => Value::Bool(l.py_compare(r)? != Less),
        BinOp::In => Value::Bool(Value::py_contains(r, l)?),
        BinOp::NotIn => Value::Bool(!Value::py_contains(r, l)?),
        BinOp::Add => arith(ArithOp::Add, l, r)?,
        BinOp::Sub => arith(ArithOp::Sub, l, r)?,
        BinOp::Mul => arith(ArithOp::Mul, l, r)?,
        BinOp::Div => arith(ArithOp::Div, l, r)?,
        BinOp::Mod => arith(ArithOp::Mod, l, r)?,
        BinOp::Pow => arith(ArithOp::Pow, l, r)?,
        BinOp::And | BinOp::Or => unreachable!("lazy operators are evaluated by the caller"),
    })
}

/// The reference's primitive type checks.
pub(crate) fn validate_primitive(value: &Value, p: Primitive) -> Result<(), (ErrorKind, String)> {
    if p.accepts(value) {
        Ok(())
    } else {
        Err((p.mismatch_kind(), format!("Invalid value '{}', expected {}", shown(value), p.name())))
    }
}
