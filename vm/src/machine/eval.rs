//! Expression evaluation: the bytecode's operators, string interpolation and formatting.

use super::*;

impl Machine {
    /// The requirement key of a read of a variable (see [`Key`]).
    pub(super) fn var_key(expr: ExprId, name: VarRef) -> Key {
        match name {
            VarRef::Name(symbol) => Key::name(symbol),
            VarRef::Qualified(..) => Key::expr(expr),
        }
    }

    /// Evaluates an expression from its requirements' values. A constant (an attribute's
    /// default, most constructor arguments) is answered here, inlined into the caller: through
    /// [`Self::eval_operator`]'s frame it cost about a hundred instructions more. A constant
    /// that a gradual listener collects (a list literal's element) takes the full path, which
    /// delivers it.
    #[inline(always)]
    pub(super) fn eval(&mut self, expr: ExprId, values: &Values, scope: ScopeId) -> R<Value> {
        if let Some(v) = self.code().constant(expr)
            && !values.has_collector(expr)
        {
            return Ok(v.clone());
        }
        self.eval_operator(expr, values, scope)
    }

    /// The key under which `eval` reads the value of an expression that is only a read of a
    /// requirement (a variable, an attribute, and the operators a sub-task computes), `None`
    /// for the others. With a set of values that holds only that key, `eval` returns the
    /// key's value: a constant is not such an expression, and no collector key is in the set.
    #[inline]
    pub(super) fn passthrough_key(&self, expr: ExprId) -> Option<Key> {
        Self::read_key(expr, &self.code().expr(expr).kind)
    }

    /// [`Self::passthrough_key`] of a decoded instruction, and the one list of these
    /// operators: `eval_operator` reads every operator that has a key from the set of values.
    /// Exhaustive, so that a new operator is sorted here.
    #[inline]
    fn read_key(expr: ExprId, kind: &Op<'_>) -> Option<Key> {
        match kind {
            Op::Var(name) => Some(Self::var_key(expr, *name)),
            Op::And { .. }
            | Op::Or { .. }
            | Op::Cond { .. }
            | Op::Call { .. }
            | Op::IndexLookup { .. }
            | Op::SelectorLookup { .. } => Some(Key::temporary(expr)),
            Op::Attr { .. } | Op::ListComp { .. } | Op::IsDefined { .. } => Some(Key::expr(expr)),
            Op::Const(_)
            | Op::Subscript { .. }
            | Op::Not(_)
            | Op::Binary { .. }
            | Op::List(_)
            | Op::Dict(_)
            | Op::Format { .. }
            | Op::FString { .. }
            | Op::Construct(_) => None,
        }
    }

    /// [`Self::eval`] for an operand that the caller only reads: a constant, a variable or an
    /// attribute read is lent from the code or the set of values instead of cloned (for a
    /// string, a list or a dict, a clone and a drop are two atomic updates of a shared count).
    /// Anything else, and a value a gradual listener collects, is evaluated as `eval` does.
    #[inline]
    fn eval_borrowed<'v>(
        &mut self,
        expr: ExprId,
        values: &'v Values,
        code: &'v Code,
        scope: ScopeId,
    ) -> R<Cow<'v, Value>> {
        if !values.has_collector(expr) {
            if let Some(v) = code.constant(expr) {
                return Ok(Cow::Borrowed(v));
            }
            if let Some(key) = self.passthrough_key(expr)
                && let Some(v) = values.get(&key)
            {
                return Ok(Cow::Borrowed(v));
            }
        }
        self.eval(expr, values, scope).map(Cow::Owned)
    }

    /// [`Self::eval`] of any expression but a constant.
    fn eval_operator(&mut self, expr: ExprId, values: &Values, scope: ScopeId) -> R<Value> {
        let c = self.code();
        let e = c.expr(expr);
        let location = || e.location();
        let result = match &e.kind {
            Op::Const(v) => (*v).clone(),
            kind if let Some(key) = Self::read_key(expr, kind) => values.get(&key).cloned().unwrap_or(Value::NULL),
            Op::Subscript { map, key } => {
                let m = self.eval_borrowed(*map, values, &c, scope)?;
                let k = self.eval_borrowed(*key, values, &c, scope)?;
                self.subscript(&m, &k).map_err(|e| e.at(location()))?
            }
            Op::Not(a) => {
                let v = self.eval(*a, values, scope)?;
                self.negate(v).map_err(|e| e.at(location()))?
            }
            Op::Binary { op, lhs, rhs } => {
                let a = self.eval_borrowed(*lhs, values, &c, scope)?;
                let b = self.eval_borrowed(*rhs, values, &c, scope)?;
                self.binary(*op, &a, &b).map_err(|e| {
                    let e = e.at(location());
                    self.with_operand_labels(e, &[(*lhs, self.operand_type(&a)), (*rhs, self.operand_type(&b))])
                })?
            }
            Op::List(items) => {
                if let Some(v) = values.get(&Key::expr(expr)) {
                    v.clone()
                } else {
                    let mut out = Vec::new();
                    for i in items.iter() {
                        match self.eval(*i, values, scope)? {
                            Value::List(inner) => out.extend(inner.iter().cloned()),
                            v => out.push(v),
                        }
                    }
                    Value::List(Arc::from(out))
                }
            }
            Op::Dict(entries) => {
                // `Dict::new` keeps a repeated key's first place and its last value, in time
                // linear in the number of entries.
                let mut out: Vec<(Arc<str>, Value)> = Vec::with_capacity(entries.len());
                for (k, v) in entries.iter() {
                    out.push((k.clone(), self.eval(*v, values, scope)?));
                }
                Value::Dict(out.into())
            }
            Op::Format { template, parts } => {
                // The reference replaces each part's matched text everywhere in the string,
                // one part after the other, so a replacement can create text that a later part
                // matches. The parts are evaluated in order first (the first Unknown makes the
                // string Unknown), then substituted in one pass where that gives the same text.
                let mut part_values: SmallVec<[Value; 4]> = SmallVec::new();
                let mut unknown = false;
                for (_, r) in parts.iter() {
                    let v = self.eval(*r, values, scope)?;
                    match self.interpolated(v, || self.expr_text(*r)).map_err(|e| e.at(location()))? {
                        None => {
                            unknown = true;
                            break;
                        }
                        Some(v) => part_values.push(v),
                    }
                }
                if unknown {
                    Value::Unknown
                } else if part_values.iter().any(weft_ir::value::holds_int_too_long_for_text) {
                    // Each part becomes `str()` of its value, which CPython refuses for an int
                    // of too many digits.
                    return Err(
                        EvalError::new(ErrorKind::ValueError, weft_ir::value::INT_TO_TEXT_LIMIT_MESSAGE).at(location())
                    );
                } else {
                    // Keyed by the instruction, whose template and parts the plan is made of.
                    if !self.interpolations.contains_key(&expr.0) {
                        let matched: SmallVec<[&str; 4]> = parts.iter().map(|(m, _)| m.as_ref()).collect();
                        self.interpolations.insert(expr.0, OnePassPlan::new(template, &matched));
                    }
                    let rendered: SmallVec<[Cow<'_, str>; 4]> =
                        part_values.iter().map(|v| self.display_value_fmt(v)).collect();
                    let plan = self.interpolations.get(&expr.0).and_then(Option::as_ref);
                    let text = plan.and_then(|plan| plan.apply(template, &rendered)).unwrap_or_else(|| {
                        let mut text = template.to_string();
                        for ((m, _), v) in parts.iter().zip(&rendered) {
                            text = text.replace(m.as_ref(), v.as_ref());
                        }
                        text
                    });
                    Value::str(&text)
                }
            }
            Op::FString { template, fields } => {
                let mut kwargs: Vec<(String, Value)> = Vec::new();
                let mut unknown = false;
                for (key, r) in fields.iter() {
                    let v = self.eval(*r, values, scope)?;
                    let Some(v) = self.interpolated(v, || key.trim().to_string()).map_err(|e| e.at(location()))? else {
                        unknown = true;
                        break;
                    };
                    kwargs.push((key.to_string(), v));
                }
                if unknown {
                    Value::Unknown
                } else {
                    let render = |v: &Value| self.display_value_fmt(v).into_owned();
                    pyformat::format_value(template, &kwargs, &render).map_err(|e| e.at(location()))?
                }
            }
            Op::Construct(c) => self.construct(*c, values, scope, location())?,
            // `read_key` has a key for every operator without an arm here (the guarded arm).
            _ => unreachable!("an operator without a read key has an arm of its own"),
        };
        if let Some(Value::Int(collector)) = values.get(&Key::collector(expr)) {
            self.receive_flatten(*collector as CollectorId, result.clone(), location())?;
        }
        Ok(result)
    }

    /// A value as string formatting shows it: as [`Self::display_value`] does, and a string
    /// is lent, not copied.
    pub(super) fn display_value_fmt<'v>(&self, v: &'v Value) -> Cow<'v, str> {
        self.display_value_with_null(v, "null")
    }

    /// A value as `{{ x }}` and f-string fields take it (the reference's `FormattedString`):
    /// `None` for Unknown, which makes the whole string Unknown; a reference is refused; a
    /// float with an integral value becomes an int. `name` (the field's text, for the error) is
    /// only rendered when there is an error.
    pub(super) fn interpolated(&self, v: Value, name: impl FnOnce() -> String) -> R<Option<Value>> {
        Ok(match v {
            Value::Unknown => None,
            Value::Reference(_) => {
                return Err(EvalError::new(
                    ErrorKind::UnexpectedReference,
                    format!("Encountered reference in string format for variable `{}`. This is not supported.", name()),
                ));
            }
            // An integral float shows as the int it equals, exactly: `1e300` has 301 digits.
            Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(Value::int_of_float(f)),
            other => Some(other),
        })
    }

    pub(super) fn expr_text(&self, expr: ExprId) -> String {
        let p = &self.program;
        match self.code.expr(expr).kind {
            Op::Var(VarRef::Name(n)) => p.name(n).to_string(),
            Op::Var(VarRef::Qualified(ns, n)) => format!("{}::{}", p.namespaces[ns.index()].name, p.name(n)),
            Op::Attr { base, name } => format!("{}.{}", self.expr_text(base), p.name(name)),
            _ => "expression".to_string(),
        }
    }

    /// `not v`: Unknown stays Unknown; anything but a boolean is an error (a reference one of
    /// its own kind).
    pub(super) fn negate(&self, v: Value) -> R<Value> {
        match v {
            Value::Unknown => Ok(Value::Unknown),
            Value::Bool(b) => Ok(Value::Bool(!b)),
            other => {
                let kind = if matches!(other, Value::Reference(_)) {
                    ErrorKind::UnexpectedReference
                } else {
                    ErrorKind::RuntimeException
                };
                Err(EvalError::new(
                    kind,
                    format!("Invalid value `{}`: `not` expects a boolean", self.display_value(&other)),
                ))
            }
        }
    }

    pub(super) fn subscript(&self, m: &Value, k: &Value) -> R<Value> {
        if matches!(m, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        let Value::Dict(entries) = m else {
            return Err(typing(format!(
                "dict lookup is only possible on dicts, {} is not an object",
                self.display_value(m)
            )));
        };
        if matches!(k, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        let Value::Str(key) = k else {
            return Err(typing(format!("dict keys must be string, {} is not a string", self.display_value(k))));
        };
        match entries.get(key) {
            Some(v) => Ok(v.clone()),
            None => Err(EvalError::new(
                ErrorKind::KeyException,
                format!(
                    "key {key} not found in dict, options are [{}]",
                    entries.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>().join(",")
                ),
            )),
        }
    }

    pub(super) fn binary(&self, op: BinOp, a: &Value, b: &Value) -> R<Value> {
        if op == BinOp::In {
            if matches!(a, Value::Unknown) || matches!(b, Value::Unknown) {
                return Ok(Value::Unknown);
            }
            return match b {
                Value::List(items) => {
                    if items.iter().any(|x| x.py_eq(a)) {
                        Ok(Value::Bool(true))
                    } else if items.iter().any(|x| matches!(x, Value::Unknown)) {
                        Ok(Value::Unknown)
                    } else {
                        Ok(Value::Bool(false))
                    }
                }
                Value::Dict(_) => Value::py_contains(b, a).map(Value::Bool).map_err(|e| self.value_error(e)),
                other => Err(typing(format!(
                    "Operand two of 'in' can only be a list or dict ({})",
                    self.display_value(other)
                ))),
            };
        }
        if matches!(a, Value::Unknown) || matches!(b, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        match op {
            BinOp::Eq => Ok(Value::Bool(a.py_eq(b))),
            BinOp::Ne => Ok(Value::Bool(!a.py_eq(b))),
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => {
                let ord = a.py_compare(b).map_err(|e| self.value_error(e))?;
                Ok(Value::Bool(match op {
                    BinOp::Lt => ord.is_lt(),
                    BinOp::Gt => ord.is_gt(),
                    BinOp::Le => ord.is_le(),
                    _ => ord.is_ge(),
                }))
            }
            _ => {
                let aop = match op {
                    BinOp::Add => ArithOp::Add,
                    BinOp::Sub => ArithOp::Sub,
                    BinOp::Mul => ArithOp::Mul,
                    BinOp::Div => ArithOp::Div,
                    BinOp::Mod => ArithOp::Mod,
                    _ => ArithOp::Pow,
                };
                let repr = |v: &Value| v.repr_with("null", &|i| self.instance_display(i));
                if let (Value::Reference(_), _) | (_, Value::Reference(_)) = (a, b) {
                    return Err(typing(format!(
                        "Unsupported operand type(s) for {}: '{}' ({}) and '{}' ({})",
                        aop.name(),
                        python_type(a),
                        repr(a),
                        python_type(b),
                        repr(b)
                    )));
                }
                value::arith_with(aop, a, b, &repr).map_err(|e| self.value_error(e))
            }
        }
    }

    pub(super) fn value_error(&self, e: ValueError) -> EvalError {
        match e {
            ValueError::Typing(m) => typing(m),
            ValueError::ZeroDivision(m) => EvalError::new(ErrorKind::ZeroDivisionError, m),
            ValueError::Overflow(m) => EvalError::new(ErrorKind::OverflowError, m),
            ValueError::Unhashable(m) => EvalError::new(ErrorKind::TypeError, m),
        }
    }
}
