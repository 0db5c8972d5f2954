//! Type checks of values set into cells: entity, primitive and typedef types, constraints.

use super::*;

impl Machine {
    pub(super) fn validate_cell(&mut self, cell: CellId, value: &Value) -> R<()> {
        let c = &self.cells[cell as usize];
        let ty = match c.ty() {
            PackedType::NONE => CellType::None,
            PackedType::BOOL => CellType::Bool,
            PackedType::FROM_OWNER => match c.attribute_of().map(|attr| self.program.attribute(attr).kind) {
                Some(AttributeKind::Value(t)) => CellType::Value(t),
                Some(AttributeKind::Relation(r)) => CellType::Entity(r.target),
                None => CellType::None,
            },
            PackedType(e) => CellType::Entity(EntityId(e - PackedType::FIRST_ENTITY)),
        };
        match ty {
            CellType::None => Ok(()),
            CellType::Bool => {
                if matches!(value, Value::Bool(_)) {
                    Ok(())
                } else {
                    Err(rt(format!("Invalid value '{}', expected bool", self.display_value(value))))
                }
            }
            CellType::Entity(e) => self.validate_entity(e, value),
            CellType::Value(t) => self.validate_value_type(t, value),
        }
    }

    pub(super) fn validate_entity(&self, entity: EntityId, value: &Value) -> R<()> {
        let p = &self.program;
        match value {
            Value::Instance(i) => {
                let ty = self.instances[*i as usize].entity;
                if p.is_subclass(ty, entity) {
                    Ok(())
                } else {
                    Err(rt(format!(
                        "Invalid class type for {}, should be {}",
                        self.instance_display(*i),
                        p.entity(entity).name
                    )))
                }
            }
            other => Err(rt(format!(
                "Invalid type for value '{}', should be type {}",
                self.display_value(other),
                p.entity(entity).name
            ))),
        }
    }

    /// Why a value that fails a typedef does, as the error the reference raises: its base
    /// type's refusal, or the constraint it does not match. For the causes of plugin type
    /// errors, whose annotations name typedefs; the caller has found that the value fails,
    /// and the constraint is not evaluated again (it may call a plugin, and this runs inside
    /// one). `None` for a typedef of a typedef, whose words are not known here.
    pub fn typedef_refusal(&self, typedef: TypedefId, value: &Value) -> Option<(ErrorKind, String)> {
        let typedef = &self.program.typedefs[typedef.index()];
        let BaseType::Primitive(base) = typedef.base else { return None };
        let error =
            self.validate_primitive(base, value).err().unwrap_or_else(|| self.constraint_mismatch(typedef, value));
        let error = error.into_data();
        Some((error.kind, error.message))
    }

    /// Whether a value satisfies the typedef of that fully qualified name, for a plugin argument
    /// annotated with one; `None` when no typedef has the name (it names an entity). A typedef
    /// whose constraint, or whose base typedef's, calls a plugin can not be evaluated inside
    /// the plugin call that asks, and is taken as satisfied.
    pub fn typedef_accepts(&mut self, name: &str, value: &Value) -> Option<bool> {
        let typedef = self.program.typedef_by_name(name)?;
        let mut base = BaseType::Typedef(typedef);
        while let BaseType::Typedef(td) = base {
            let prog = self.prog();
            let checked = &prog.typedefs[td.index()];
            let pure = match &checked.constraint {
                Constraint::Regex { .. } => true,
                Constraint::Expr { expr, .. } => self.constraint_is_pure(td, *expr),
            };
            if !pure {
                return Some(true);
            }
            base = checked.base;
        }
        Some(self.validate_base(BaseType::Typedef(typedef), value).is_ok())
    }

    /// The reference's refusal of a value that does not match a typedef's constraint, which
    /// it shows as written (`(self > 0)`, `/^a+$/`).
    fn constraint_mismatch(&self, typedef: &weft_ir::program::Typedef, value: &Value) -> EvalError {
        let constraint = match &typedef.constraint {
            Constraint::Regex { python, .. } => format!("/{python}/"),
            Constraint::Expr { text, .. } => text.to_string(),
        };
        rt(format!(
            "Invalid value {}, does not match constraint `{constraint}`",
            value.repr_with("null", &|i| self.instance_display(i))
        ))
    }

    /// Validates a value against an attribute type (references allowed, as for attributes).
    pub fn validate_value_type(&mut self, t: ValueType, value: &Value) -> R<()> {
        if matches!(value, Value::Reference(_)) {
            return self.validate_reference(t.base, value);
        }
        if matches!(value, Value::Null(_)) {
            if t.nullable {
                return Ok(());
            }
            // The reference's typedef checks its base type first, so a null given to a
            // constrained type is refused by the primitive at the root of its chain; a typed
            // list refuses it as a whole.
            let mut base = t.base;
            while let (BaseType::Typedef(td), false) = (base, t.list) {
                base = self.program.typedefs[td.index()].base;
            }
            let name = self.type_name(ValueType { base, ..t });
            return Err(rt(format!("Invalid value 'null', expected {name}")));
        }
        if t.list {
            // `T[]` is the reference's typed list, whose check raises a `TypingException`
            // naming the list type (`T[]`, also for `T[]?`).
            let Value::List(items) = value else {
                let name = self.type_name(ValueType { nullable: false, ..t });
                return Err(typing(format!("Invalid value '{}', expected {name}", self.display_value(value))));
            };
            for item in items.iter() {
                if matches!(item, Value::Unknown) {
                    continue;
                }
                if matches!(item, Value::Reference(_)) {
                    self.validate_reference(t.base, item)?;
                    continue;
                }
                self.validate_base(t.base, item)?;
            }
            return Ok(());
        }
        self.validate_base(t.base, value)
    }

    /// A reference stands for a value of a primitive type, which must be the attribute's or a
    /// subtype of it (an int for a `number`; the reference's `Reference[T] | T` check); a
    /// constrained type (a typedef) cannot be checked before the reference is resolved, so it
    /// is refused.
    pub(super) fn validate_reference(&self, base: BaseType, value: &Value) -> R<()> {
        match base {
            BaseType::Primitive(expected) => {
                let Value::Reference(reference) = value else { return Ok(()) };
                let resolves_to = self.host.as_deref().and_then(|host| host.reference_resolves_to(reference));
                match resolves_to {
                    Some(actual)
                        if actual != expected
                            && !(expected == Primitive::Number
                                && matches!(actual, Primitive::Int | Primitive::Float)) =>
                    {
                        Err(typing(format!(
                            "Invalid value: {} is not a subtype of Reference[{}]: it refers to a value of type {}",
                            self.display_value(value),
                            expected.name(),
                            actual.name()
                        )))
                    }
                    _ => Ok(()),
                }
            }
            BaseType::Typedef(td) => Err(typing(format!(
                "Invalid value `{}`: references can not be used for values of the constrained type {}",
                self.display_value(value),
                self.program.typedefs[td.index()].name
            ))),
        }
    }

    pub(super) fn type_name(&self, t: ValueType) -> String {
        let base = match t.base {
            BaseType::Primitive(p) => p.name().to_string(),
            BaseType::Typedef(td) => self.program.typedefs[td.index()].name.clone(),
        };
        format!("{base}{}", if t.list { "[]" } else { "" })
    }

    pub(super) fn validate_base(&mut self, base: BaseType, value: &Value) -> R<()> {
        let outermost = match base {
            BaseType::Primitive(p) => return self.validate_primitive(p, value),
            BaseType::Typedef(td) => td,
        };
        // A typedef's constraint is checked after the constraints of the typedefs it refines,
        // down to their primitive. The chain is walked in a loop rather than by recursion: a
        // model may chain a million typedefs, and the verifier keeps the chains acyclic.
        let prog = self.prog();
        // Most typedefs refine a primitive directly.
        if let BaseType::Primitive(p) = prog.typedefs[outermost.index()].base {
            self.validate_primitive(p, value)?;
            return self.check_typedef_constraint(outermost, value);
        }
        let mut chain: SmallVec<[TypedefId; 4]> = smallvec![outermost];
        let primitive = loop {
            match prog.typedefs[chain[chain.len() - 1].index()].base {
                BaseType::Primitive(p) => break p,
                BaseType::Typedef(td) => chain.push(td),
            }
        };
        self.validate_primitive(primitive, value)?;
        chain.iter().rev().try_for_each(|td| self.check_typedef_constraint(*td, value))
    }

    /// Checks `value` against the constraint of typedef `td` alone, not those it refines.
    fn check_typedef_constraint(&mut self, td: TypedefId, value: &Value) -> R<()> {
        let prog = self.prog();
        let typedef = &prog.typedefs[td.index()];
        // A regex, and an expression without plugin calls, are functions of the value.
        let pure = match &typedef.constraint {
            Constraint::Regex { .. } => true,
            Constraint::Expr { expr, .. } => self.constraint_is_pure(td, *expr),
        };
        let memo = if pure { MemoValue::of(value) } else { None };
        let known = memo.as_ref().and_then(|m| self.constraint_memo.get(&(td.0, m.clone())).copied());
        let ok = match known {
            Some(ok) => ok,
            None => {
                let ok = match (&typedef.constraint, value) {
                    (Constraint::Regex { engine, .. }, Value::Str(s)) => match regex_match(engine, s) {
                        Ok(matched) => matched,
                        Err(why) => {
                            return Err(rt(format!(
                                "Could not decide whether {} matches the pattern of {}: {why}",
                                self.display_value(value),
                                typedef.name
                            )));
                        }
                    },
                    (Constraint::Regex { .. }, other) => {
                        return Err(typing(format!(
                            "Regex can only be match with strings. {} is of type {}",
                            self.display_value(other),
                            other.type_name()
                        )));
                    }
                    (Constraint::Expr { expr, .. }, _) => self.eval_direct(*expr, value)?.truthy(),
                };
                if let Some(m) = memo {
                    // A full memo starts over: the values a model repeats come back into it
                    // at once, and the unique ones (names) do not hold its memory.
                    if self.constraint_memo.len() >= CONSTRAINT_MEMO_LIMIT {
                        self.constraint_memo.clear();
                    }
                    self.constraint_memo.insert((td.0, m), ok);
                }
                ok
            }
        };
        if ok { Ok(()) } else { Err(self.constraint_mismatch(typedef, value)) }
    }

    pub(super) fn validate_primitive(&self, p: Primitive, value: &Value) -> R<()> {
        if !p.accepts(value) {
            return Err(EvalError::new(
                p.mismatch_kind(),
                format!("Invalid value '{}', expected {}", self.display_value(value), p.name()),
            ));
        }
        match value {
            // The container itself is at depth 0; `p` accepted it, so it is no instance.
            Value::List(_) | Value::Dict(_) => self.validate_literal(value, 0),
            _ => Ok(()),
        }
    }

    /// Checks that a value holds no instance, at any depth. `depth` is how deep the value is
    /// in the attribute's value (its elements are one deeper): past [`MAX_VALUE_DEPTH`] the
    /// check stops with the reference's `RecursionError`. Without the bound, a chain of instances that each nest the previous
    /// value one level deeper costs a walk of the whole value per instance: quadratic, hours
    /// for 200,000 instances. The reference's own recursive checks give up between 400 and
    /// 800 levels.
    pub(super) fn validate_literal(&self, v: &Value, depth: usize) -> R<()> {
        if depth > MAX_VALUE_DEPTH {
            return Err(EvalError::new(
                ErrorKind::RecursionError,
                format!("maximum recursion depth exceeded: a value nested more than {MAX_VALUE_DEPTH} levels deep"),
            ));
        }
        match v {
            Value::Instance(_) => Err(rt(format!("Invalid value '{}', expected Literal", self.display_value(v)))),
            Value::List(items) => items.iter().try_for_each(|i| self.validate_literal(i, depth + 1)),
            Value::Dict(items) => items.iter().try_for_each(|(_, i)| self.validate_literal(i, depth + 1)),
            _ => Ok(()),
        }
    }

    /// Whether a typedef's constraint `expr` calls no plugin but pure ones (the host says
    /// which: `Host::plugin_is_pure`), so that its result depends on the value alone (casts
    /// are pure; a variable other than `self` is an error, which is never memoized).
    pub(super) fn constraint_is_pure(&mut self, td: TypedefId, expr: ExprId) -> bool {
        if self.constraint_pure.len() <= td.index() {
            self.constraint_pure.resize(td.index() + 1, None);
        }
        if let Some(pure) = self.constraint_pure[td.index()] {
            return pure;
        }
        let code = self.code();
        let mut pending = vec![expr];
        let mut pure = true;
        while let Some(e) = pending.pop() {
            match code.expr(e).kind {
                Op::Const(_) | Op::Var(_) => {}
                Op::Not(a) => pending.push(a),
                Op::Binary { lhs, rhs, .. } | Op::And { lhs, rhs } | Op::Or { lhs, rhs } => {
                    pending.extend([lhs, rhs]);
                }
                Op::List(items) => pending.extend(items.iter().copied()),
                Op::Dict(entries) => pending.extend(entries.iter().map(|(_, v)| *v)),
                Op::Cond { cond, then, otherwise } => pending.extend([cond, then, otherwise]),
                Op::Subscript { map, key } => pending.extend([map, key]),
                Op::Call { callee, args, kwargs, splats, .. }
                    if match callee {
                        Callee::Cast(_) => true,
                        Callee::Plugin(plugin) => match self.host.as_deref_mut() {
                            Some(host) => host.plugin_is_pure(&self.program, plugin),
                            // The host is out while a plugin runs: undecided, so not
                            // remembered either.
                            None => return false,
                        },
                    } =>
                {
                    pending.extend(args.iter().copied());
                    pending.extend(kwargs.iter().map(|n| n.expr));
                    pending.extend(splats.iter().copied());
                }
                _ => {
                    pure = false;
                    break;
                }
            }
        }
        self.constraint_pure[td.index()] = Some(pure);
        pure
    }

    /// Evaluates a typedef constraint with only `self` bound (the reference's direct execution).
    pub(super) fn eval_direct(&mut self, expr: ExprId, self_value: &Value) -> R<Value> {
        let p = self.prog();
        let c = self.code();
        let e = c.expr(expr);
        let sub = |m: &mut Machine, id: ExprId| m.eval_direct(id, self_value);
        Ok(match &e.kind {
            Op::Const(v) => (*v).clone(),
            Op::Var(VarRef::Name(n)) if *n == self.symbols.self_ => self_value.clone(),
            Op::Var(name) => {
                // The reference reports it at the name, inside the typedef.
                return Err(EvalError::new(
                    ErrorKind::NotFoundException,
                    format!(
                        "Unable to resolve `{}`: a type constraint can not reference variables.",
                        self.var_text(*name)
                    ),
                )
                .at(e.location()));
            }
            Op::Not(a) => {
                let v = sub(self, *a)?;
                self.negate(v)?
            }
            Op::Binary { op, lhs, rhs } => {
                let a = sub(self, *lhs)?;
                let b = sub(self, *rhs)?;
                self.binary(*op, &a, &b)?
            }
            Op::And { lhs, rhs } | Op::Or { lhs, rhs } => {
                let is_and = matches!(e.kind, Op::And { .. });
                let a = sub(self, *lhs)?;
                let Value::Bool(av) = a else {
                    return Err(rt(format!(
                        "Invalid left hand value `{}`: `{}` expects a boolean",
                        self.display_value(&a),
                        if is_and { "and" } else { "or" }
                    )));
                };
                if av != is_and { Value::Bool(av) } else { sub(self, *rhs)? }
            }
            Op::List(items) => {
                let mut out = Vec::new();
                for i in items.iter() {
                    match sub(self, *i)? {
                        Value::List(inner) => out.extend(inner.iter().cloned()),
                        v => out.push(v),
                    }
                }
                Value::List(Arc::from(out))
            }
            Op::Dict(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries.iter() {
                    out.push((k.clone(), sub(self, *v)?));
                }
                Value::Dict(out.into())
            }
            Op::Cond { cond, then, otherwise } => match sub(self, *cond)? {
                Value::Bool(true) => sub(self, *then)?,
                Value::Bool(false) => sub(self, *otherwise)?,
                other => {
                    return Err(rt(format!(
                        "Invalid value `{}`: the condition for a conditional expression must be a boolean expression",
                        self.display_value(&other)
                    )));
                }
            },
            Op::Subscript { map, key } => {
                let m = sub(self, *map)?;
                let k = sub(self, *key)?;
                self.subscript(&m, &k)?
            }
            Op::Call { callee, args, kwargs, .. } => {
                let mut a = Vec::new();
                for x in args.iter() {
                    a.push(sub(self, *x)?);
                }
                let mut kw = Vec::new();
                for (k, x) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                    kw.push((p.name(*k).to_string(), sub(self, *x)?));
                }
                match callee {
                    Callee::Cast(prim) => cast(*prim, &a)?,
                    Callee::Plugin(plugin) => {
                        let mut host = self.host.take().unwrap_or_else(|| Box::new(NoHost));
                        let r = host.call_plugin(self, u32::MAX, *plugin, a, kw);
                        self.host = Some(host);
                        match r {
                            Ok(v) => v,
                            Err(PluginFailure::Error(e)) => return Err(e),
                            Err(PluginFailure::Unset(_)) => return Err(rt("unset value in a type constraint")),
                        }
                    }
                }
            }
            // The reference names the statement by its repr: an f-string's is its text, an
            // interpolated string's `Format('...')`.
            Op::FString { template, .. } | Op::Format { template, .. } => {
                let text = value::str_repr(template);
                let statement = if matches!(e.kind, Op::Format { .. }) { format!("Format({text})") } else { text };
                return Err(EvalError::new(
                    ErrorKind::DirectExecuteException,
                    format!("The statement {statement} can not be executed in this context"),
                )
                .at(e.location()));
            }
            _ => {
                return Err(EvalError::new(
                    ErrorKind::DirectExecuteException,
                    "this expression can not be executed in a type constraint",
                )
                .at(e.location()));
            }
        })
    }
}
