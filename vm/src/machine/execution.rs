//! Execution: running a ready task's body once its requirements have values.

use super::*;

impl Machine {
    /// Runs a ready task, or the resumption whose place in the run queue came up. `Ok(Some(cell))`
    /// asks the scheduler to requeue the task once `cell` is ready (a plugin read an unset value).
    pub fn execute(&mut self, waiter: WaiterId) -> R<Option<CellId>> {
        if waiter == RESUMPTION {
            let (resumer, cell) = self.resumptions.pop_front().expect("a resumption for each place in the run queue");
            return self.resume_variable(resumer, cell).map(|()| None);
        }
        if waiter == DEFERRED {
            let task = self.deferred.pop_front().expect("a deferred task for each place in the run queue");
            if task.kept_apart() {
                let deferred = self.deferred_bodies.pop_front().expect("a body for each deferred task kept apart");
                return self.run_body(&mut deferred.body(), &Reqs::new()).map(|()| None);
            }
            let DeferredTask { target, expr, scope, attr } = task;
            let expr = ExprId(expr);
            // A constant (an attribute's default, a constructor's literal argument) reads
            // nothing, so its value goes straight to its target: `run_body` would give the
            // same result through an empty set of values and the evaluator's dispatch.
            if let Some(value) = self.code().constant(expr) {
                let location = self.code().location(expr);
                return match self.store_result(target, value.clone(), location, OptPromise::NONE) {
                    Ok(()) => Ok(None),
                    Err(e) => Err(self.execution_error(e, target, Exec::Expr(expr), attr)),
                };
            }
            let mut body = Body::Exec { target, promise: OptPromise::NONE, what: Exec::Expr(expr), scope, attr };
            return self.run_body(&mut body, &Reqs::new()).map(|()| None);
        }
        let mut body = self.waiters[waiter as usize].body.take().expect("a task runs once");
        let requires = self.take_task_requirements(waiter);
        let result = self.run_body(&mut body, &requires);
        match result {
            Ok(()) => {
                // Nothing refers to a finished task any more: every cell it waited for has
                // released it (that is how it became ready), so its slot can be reused. Its
                // slot has no requirements since they were taken.
                self.free_task_slot(waiter);
                self.live_tasks -= 1;
                self.release_temporaries(&requires);
                Ok(None)
            }
            Err(e) if e.unset.is_some() && matches!(body, Body::Call { .. }) => {
                let cell = e.unset.expect("checked");
                self.waiters[waiter as usize].body = Some(body);
                let mut requires = requires;
                requires.push((Key::extra(requires.len() as u32), cell));
                self.set_task_requirements(waiter, requires);
                self.wait_for(waiter, cell);
                Ok(Some(cell))
            }
            Err(e) => {
                self.set_task_requirements(waiter, requires);
                Err(e)
            }
        }
    }

    /// Adds the values of a task's requirements to `out`, in order (proxies deliver to their
    /// listener). The caller keeps the 136-byte `Values` in its own frame: returned, even
    /// inlined, it was copied with `memcpy` out of the `Result` for every task (1.8% of the
    /// instructions of the 9k-instance model).
    #[inline(always)]
    pub(super) fn values_into(&mut self, requires: &Reqs, out: &mut Values) -> R<()> {
        if requires.len() > Values::SCANNED {
            return self.many_values_into(requires, out);
        }
        for (k, c) in requires {
            let v = self.get_value(*c)?;
            out.insert(*k, v);
        }
        Ok(())
    }

    /// [`Self::values_into`] for a task of more than [`Values::SCANNED`] requirements.
    #[cold]
    #[inline(never)]
    fn many_values_into(&mut self, requires: &Reqs, out: &mut Values) -> R<()> {
        out.extend_many(requires.iter().map(|(k, c)| Ok((*k, self.get_value(*c)?))))
    }

    /// The end of an `ExecutionUnit`: its value goes to its target, and the promise it held
    /// on the target is kept.
    #[inline(always)]
    fn store_result(&mut self, target: CellId, value: Value, location: Location, promise: OptPromise) -> R<()> {
        self.set_cell(target, value, location, true)?;
        if let Some(pr) = promise.get() {
            self.fulfill(pr);
        }
        Ok(())
    }

    /// The error of an `ExecutionUnit`, in the words and at the place the reference gives it,
    /// or, for an attribute assignment (`attr`), its `SetAttributeHelper`'s: wrapped as an
    /// error of the attribute, which is the one the task's `target` cell holds.
    #[cold]
    fn execution_error(&self, e: EvalError, target: CellId, what: Exec, attr: AttrSite) -> EvalError {
        match attr.get() {
            Some(site) => {
                let location = self.loc(site);
                if e.kind == ErrorKind::AttributeException {
                    return e.at(location);
                }
                let mut e = e;
                if e.kind == ErrorKind::OptionalValueException {
                    e.location = Some(location);
                }
                // The target of an attribute assignment is the attribute's cell
                // (`emit_attribute_value`).
                match self.cell_owner(target) {
                    Some((instance, attr)) => {
                        let name = self.program.attribute(attr).name;
                        self.attribute_error(instance, name, e.at(location), Some(location))
                    }
                    // `x.self = ...` sets the instance's `self` variable (`Machine::slot`).
                    None => match self.self_cell_owner(target) {
                        Some(instance) => {
                            self.attribute_error(instance, self.symbols.self_, e.at(location), Some(location))
                        }
                        None => e.at(location),
                    },
                }
            }
            // The reference's `ExecutionUnit` gives an error its expression's place when
            // nothing inside did (a constructor emitting an attribute's value).
            None => match what {
                Exec::Expr(expr) => e.at(self.code().location(expr)),
                // The unit of an `implement` statement's condition (the reference's
                // `SubConstructor`) gives the statement's place to an error raised without one,
                // such as reading an optional relation that holds no value.
                Exec::SubCtor { instance, index } => {
                    let entity = self.instances[instance as usize].entity;
                    e.at(self.program.entity(entity).implements[index as usize].location)
                }
                _ => e,
            },
        }
    }

    pub(super) fn run_body(&mut self, body: &mut Body, requires: &Reqs) -> R<()> {
        let p = self.prog();
        let c = self.code();
        match *body {
            Body::Exec { target, promise, what, scope, attr } => {
                let result = (|| -> R<()> {
                    // An expression whose value is its one requirement's (`self`, `x`,
                    // `a.b`, a call's result) passes the value on: what `eval` returns from a
                    // set of values holding just that one, without making the set.
                    if let Exec::Expr(e) = what
                        && let [(key, cell)] = requires.as_slice()
                        && self.passthrough_key(e) == Some(*key)
                    {
                        let value = self.get_value(*cell)?;
                        return self.store_result(target, value, c.location(e), promise);
                    }
                    let mut values = Values::new();
                    self.values_into(requires, &mut values)?;
                    let (value, location) = match what {
                        Exec::CompElement { helper, unknown, guarded } => {
                            let v = self.comp_element_value(helper, unknown, guarded, &values, scope)?;
                            (v, c.location(self.comps[helper as usize].expr))
                        }
                        Exec::Expr(e) => (self.eval(e, &values, scope)?, c.location(e)),
                        Exec::Stmt(s) => {
                            self.exec_stmt(s, &values, scope)?;
                            return Ok(());
                        }
                        Exec::SubCtor { instance, index } => {
                            self.exec_subctor(instance, index, &values, scope)?;
                            return Ok(());
                        }
                    };
                    self.store_result(target, value, location, promise)
                })();
                result.map_err(|e| self.execution_error(e, target, what, attr))
            }
            Body::SetAttr { stmt, scope } => {
                let StmtKind::SetAttr { instance, attribute, value, extend } = p.stmt(stmt).kind else {
                    unreachable!()
                };
                let location = p.stmt(stmt).location;
                let mut values = Values::new();
                self.values_into(requires, &mut values)?;
                let inst_value = self.eval(instance, &values, scope)?;
                let Value::Instance(inst) = inst_value else {
                    return Err(typing(format!(
                        "The object at {} is not an Entity but a {} with value {}",
                        self.expr_text(instance),
                        python_class(&inst_value),
                        self.display_value(&inst_value)
                    ))
                    .at(location));
                };
                let Some(cell) = self.slot(inst, attribute) else {
                    return Err(EvalError::new(
                        ErrorKind::NotFoundException,
                        format!(
                            "could not find attribute with name: {} in type {}",
                            p.name(attribute),
                            p.entity(self.instances[inst as usize].entity).name
                        ),
                    )
                    .at(location));
                };
                let multi = matches!(self.cells[cell as usize].kind(), CellKind::List);
                if extend && !multi {
                    return Err(typing("Can not use += on relations with multiplicity 1").at(location));
                }
                self.emit_attribute_value(inst, attribute, cell, value, scope, location)?;
                Ok(())
            }
            Body::Lazy { expr, scope, target } => {
                let (lhs, rhs, is_and) = match c.expr(expr).kind {
                    Op::And { lhs, rhs } => (lhs, rhs, true),
                    Op::Or { lhs, rhs } => (lhs, rhs, false),
                    _ => unreachable!(),
                };
                let location = c.location(expr);
                let mut values = Values::new();
                self.values_into(requires, &mut values)?;
                let result = self.eval(lhs, &values, scope)?;
                if matches!(result, Value::Unknown) {
                    return self.set_cell(target, result, location, true);
                }
                let Value::Bool(b) = result else {
                    let error = rt(format!(
                        "Invalid left hand value `{}`: `{}` expects a boolean",
                        self.display_value(&result),
                        if is_and { "and" } else { "or" }
                    ))
                    .at(location);
                    let operand_type = self.operand_type(&result);
                    return Err(self.with_operand_labels(error, &[(lhs, operand_type)]));
                };
                if b != is_and {
                    self.set_cell(target, Value::Bool(b), location, true)
                } else {
                    let reqs = self.requires(rhs, scope)?;
                    self.spawn(
                        reqs,
                        Body::Exec {
                            target,
                            promise: OptPromise::NONE,
                            what: Exec::Expr(rhs),
                            scope,
                            attr: AttrSite::NONE,
                        },
                    );
                    Ok(())
                }
            }
            Body::Lookup { expr, scope, target } => {
                let mut values = Values::new();
                self.values_into(requires, &mut values)?;
                let location = c.location(expr);
                let (entity, params) = match &c.expr(expr).kind {
                    Op::IndexLookup { entity, query, splats } => {
                        let mut params = Vec::new();
                        for (k, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                            params.push((*k, self.eval(*v, &values, scope)?));
                        }
                        for s in splats.iter() {
                            params.extend(self.splat(*s, &values, scope)?);
                        }
                        (*entity, params)
                    }
                    Op::SelectorLookup { base, relation, query, splats } => {
                        let root = self.eval(*base, &values, scope)?;
                        let Value::Instance(inst) = root else {
                            return Err(typing(format!(
                                "short index lookup is only possible one objects, {} is not an object",
                                self.display_value(&root)
                            ))
                            .at(location));
                        };
                        let ent = self.instances[inst as usize].entity;
                        let Some(attr) = p.entity(ent).slots.iter().find(|s| s.0 == *relation).map(|s| s.1) else {
                            return Err(EvalError::new(
                                ErrorKind::NotFoundException,
                                format!(
                                    "could not find attribute with name: {} in type {}",
                                    p.name(*relation),
                                    p.entity(ent).name
                                ),
                            )
                            .at(location));
                        };
                        let AttributeKind::Relation(end) = p.attribute(attr).kind else {
                            return Err(typing(format!(
                                "short index lookup is only possible on relations, {} is an attribute",
                                p.name(*relation)
                            ))
                            .at(location));
                        };
                        let Some(inverse) = end.inverse else {
                            return Err(typing(format!(
                                "short index lookup is only possible on bi-drectional relations, {} is unidirectional",
                                p.name(*relation)
                            ))
                            .at(location));
                        };
                        let mut params = vec![(p.attribute(inverse).name, Value::Instance(inst))];
                        for (k, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                            params.push((*k, self.eval(*v, &values, scope)?));
                        }
                        for s in splats.iter() {
                            params.extend(self.splat(*s, &values, scope)?);
                        }
                        self.cells[target as usize].set_ty(PackedType::entity(end.target));
                        (end.target, params)
                    }
                    _ => unreachable!(),
                };
                self.lookup_index(entity, &params, Some(target), location).map_err(|e| e.at(location))?;
                Ok(())
            }
            Body::Hook { base, name, scope, resumer, propagate_unset, location } => {
                let location = self.loc(location);
                let mut values = Values::new();
                let mut unset: Option<CellId> = None;
                for (k, c) in requires {
                    match self.get_value(*c) {
                        Ok(v) => {
                            values.insert(*k, v);
                        }
                        Err(e) if propagate_unset && e.kind == ErrorKind::OptionalValueException => {
                            unset = Some(*c);
                            break;
                        }
                        Err(e) => return Err(e.at(location)),
                    }
                }
                let cell = match unset {
                    Some(c) => c,
                    None => {
                        let inst = self.eval(base, &values, scope).map_err(|e| e.at(location))?;
                        match inst {
                            Value::Instance(i) => match self.slot(i, name) {
                                Some(c) => c,
                                None => {
                                    return Err(EvalError::new(
                                        ErrorKind::NotFoundException,
                                        format!(
                                            "could not find attribute with name: {} in type {}",
                                            p.name(name),
                                            p.entity(self.instances[i as usize].entity).name
                                        ),
                                    )
                                    .at(location));
                                }
                            },
                            Value::List(_) => {
                                return Err(rt(format!(
                                    "can not get attribute {}, {} is not an entity but a list",
                                    p.name(name),
                                    self.display_value(&inst)
                                ))
                                .at(location));
                            }
                            other => {
                                return Err(rt(format!(
                                    "can not get attribute {}, {} is not an entity but a {} with value '{}'",
                                    p.name(name),
                                    self.expr_text(base),
                                    python_type(&other),
                                    self.display_value(&other)
                                ))
                                .at(location));
                            }
                        }
                    }
                };
                self.resume_variable(resumer, cell)
            }
            Body::IsDefinedWait { cell, target, location } => {
                let location = self.loc(location);
                let v = self.is_defined_value(cell);
                self.set_cell(target, v, location, true)
            }
            Body::Cond { src, scope, result, lhs, chosen } => {
                // The branches: `None` is a branch with a fixed value (an Unknown element, or
                // the filtered marker).
                let (cond, then, otherwise, location) = match src {
                    CondSrc::Expr(expr) => match c.expr(expr).kind {
                        Op::Cond { cond, then, otherwise } => (cond, Ok(then), Ok(otherwise), c.location(expr)),
                        _ => unreachable!(),
                    },
                    CondSrc::Guard { helper, unknown } => {
                        let h = &self.comps[helper as usize];
                        let Op::ListComp { element, guard, .. } = c.expr(h.expr).kind else { unreachable!() };
                        let then = if unknown { Err(Value::Unknown) } else { Ok(element) };
                        (guard.expect("guarded"), then, Err(Value::str(FILTERED)), c.location(h.expr))
                    }
                };
                let mut values = Values::new();
                self.values_into(requires, &mut values)?;
                match chosen {
                    None => {
                        let c = self.eval(cond, &values, scope)?;
                        if matches!(c, Value::Unknown) {
                            return self.set_cell(result, Value::Unknown, location, true);
                        }
                        let Value::Bool(b) = c else {
                            let message = match src {
                                CondSrc::Expr(_) => format!(
                                    "Invalid value `{}`: the condition for a conditional expression must be a boolean expression",
                                    self.display_value(&c)
                                ),
                                CondSrc::Guard { .. } => format!(
                                    "Invalid value `{}`: the guard condition for a list comprehension must be a boolean expression",
                                    self.display_value(&c)
                                ),
                            };
                            return Err(rt(message).at(location));
                        };
                        let branch = if b { then } else { otherwise };
                        let reqs = match (branch, lhs) {
                            (Ok(e), None) => self.requires(e, scope)?,
                            (Ok(e), Some(col)) => self.requires_gradual(e, scope, col)?,
                            (Err(_), _) => Reqs::new(),
                        };
                        self.spawn(reqs, Body::Cond { src, scope, result, lhs, chosen: Some(b) });
                        Ok(())
                    }
                    Some(b) => {
                        let branch = if b { then } else { otherwise };
                        let v = match branch {
                            Ok(e) => self.eval(e, &values, scope)?,
                            Err(fixed) => {
                                if let (Some(col), Value::Unknown) = (lhs, &fixed) {
                                    self.receive_flatten(col, fixed.clone(), location)?;
                                }
                                fixed
                            }
                        };
                        self.set_cell(result, v, location, true)
                    }
                }
            }
            Body::Comp { helper, scope } => {
                let mut values = Values::new();
                self.values_into(requires, &mut values)?;
                let expr = self.comps[helper as usize].expr;
                let Op::ListComp { iterable, .. } = c.expr(expr).kind else { unreachable!() };
                let location = c.location(expr);
                let it = self.eval(iterable, &values, scope)?;
                if !matches!(it, Value::List(_) | Value::Unknown) {
                    return Err(typing(format!(
                        "A list comprehension can only be applied to lists and relations, got {}",
                        python_type(&it)
                    ))
                    .at(location));
                }
                self.comp_complete(helper, it)
            }
            Body::CompFinal { helper } => {
                let mut out = Vec::new();
                for (_, c) in requires {
                    let v = self.get_value(*c)?;
                    match v {
                        Value::Str(ref s) if s.as_ref() == FILTERED => {}
                        Value::List(items) => out.extend(items.iter().cloned()),
                        other => out.push(other),
                    }
                }
                let h = &self.comps[helper as usize];
                let (result, location) = (h.final_result, c.location(h.expr));
                self.set_cell(result, Value::List(Arc::from(out)), location, true)
            }
            Body::Call { expr, scope, result, args: ref mut saved } => {
                let location = c.location(expr);
                let Op::Call { callee, name, args: a, kwargs, splats } = &c.expr(expr).kind else { unreachable!() };
                let (args, kwargs) = match saved.take() {
                    Some(x) => *x,
                    None => {
                        let mut values = Values::new();
                        // Reading an argument's value can fail (an optional relation with no
                        // value); the call is the place to show, as for other reads.
                        self.values_into(requires, &mut values).map_err(|e| e.at(location))?;
                        let mut pos = Vec::new();
                        for x in a.iter() {
                            pos.push(self.eval(*x, &values, scope)?);
                        }
                        let mut kw: Vec<(String, Value)> = Vec::new();
                        for (k, x) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                            kw.push((p.name(*k).to_string(), self.eval(*x, &values, scope)?));
                        }
                        for s in splats.iter() {
                            for (k, v) in self.splat(*s, &values, scope)? {
                                let k = self.sym_name(k).to_string();
                                if kw.iter().any(|(x, _)| *x == k) {
                                    return Err(
                                        rt(format!("Keyword argument {k} repeated in function call")).at(location)
                                    );
                                }
                                kw.push((k, v));
                            }
                        }
                        (pos, kw)
                    }
                };
                let value = match callee {
                    Callee::Cast(prim) => {
                        if !kwargs.is_empty() {
                            return Err(rt("Only positional arguments allowed in type cast").at(location));
                        }
                        cast(*prim, &args).map_err(|e| e.at(location))?
                    }
                    Callee::Plugin(plugin) => {
                        let mut host = self.host.take().unwrap_or_else(|| Box::new(NoHost));
                        let r = host.call_plugin(self, scope, *plugin, args.clone(), kwargs.clone());
                        self.host = Some(host);
                        match r {
                            Ok(v) => self.fresh_nulls(v),
                            Err(PluginFailure::Unset(cell)) => {
                                // The arguments are kept for the retry, so that they are
                                // evaluated once, as the reference's FunctionUnit does.
                                *saved = Some(Box::new((args, kwargs)));
                                let mut e = rt(format!("plugin {name} read an unset value"));
                                e.unset = Some(cell);
                                return Err(e);
                            }
                            Err(PluginFailure::Error(e)) => return Err(e.at(location)),
                        }
                    }
                };
                self.set_cell(result, value, location, true)
            }
        }
    }

    /// A plugin's result with a new object for each `null` in it, as the reference's
    /// conversion of a plugin's `None`s (`DynamicProxy.unwrap`) makes: each is a `NoneValue`
    /// of its own, even inside a list (see `NullId`). A result without nulls comes back as it
    /// was, without a copy.
    pub(super) fn fresh_nulls(&mut self, value: Value) -> Value {
        fn renumber(value: &Value, next: &mut u64) -> Value {
            match value {
                Value::Null(_) => {
                    *next += 1;
                    Value::Null(value::NullId(*next))
                }
                Value::List(items) => Value::List(items.iter().map(|v| renumber(v, next)).collect()),
                Value::Dict(entries) => {
                    Value::Dict(entries.iter().map(|(k, v)| (k.clone(), renumber(v, next))).collect())
                }
                other => other.clone(),
            }
        }
        if !value.any_nested(&|v| matches!(v, Value::Null(_))) {
            return value;
        }
        renumber(&value, &mut self.fresh_null)
    }

    pub(super) fn comp_element_value(
        &mut self,
        helper: u32,
        unknown: bool,
        guarded: bool,
        values: &Values,
        scope: ScopeId,
    ) -> R<Value> {
        let c = self.code();
        let (expr, lhs) = (self.comps[helper as usize].expr, self.comps[helper as usize].lhs);
        let Op::ListComp { element, .. } = c.expr(expr).kind else { unreachable!() };
        if guarded {
            return Ok(values.get(&Key::extra(1)).cloned().unwrap_or(Value::NULL));
        }
        if unknown {
            if let Some(col) = lhs {
                self.receive_flatten(col, Value::Unknown, c.location(expr))?;
            }
            return Ok(Value::Unknown);
        }
        self.eval(element, values, scope)
    }

    pub(super) fn splat(&mut self, expr: ExprId, values: &Values, scope: ScopeId) -> R<Vec<(Symbol, Value)>> {
        let v = self.eval(expr, values, scope)?;
        let Value::Dict(entries) = v else {
            return Err(typing("The ** operator can only be applied to dictionaries").at(self.code.location(expr)));
        };
        let mut out = Vec::new();
        for (k, v) in entries.iter() {
            out.push((self.symbol(k), v.clone()));
        }
        Ok(out)
    }

    /// Emits the value of an attribute assignment (`SetAttribute.resume` and constructors).
    pub(super) fn emit_attribute_value(
        &mut self,
        inst: InstanceId,
        attribute: Symbol,
        cell: CellId,
        value: ExprId,
        scope: ScopeId,
        location: Location,
    ) -> R<()> {
        let multi = matches!(self.cells[cell as usize].kind(), CellKind::List);
        let promise = self.get_promise(cell);
        let reqs = if multi {
            let collector =
                self.add_collector(Collector::SetAttr { instance: inst, attr: attribute, next: cell, location });
            self.requires_gradual(value, scope, collector)?
        } else {
            self.requires(value, scope)?
        };
        let site = AttrSite(self.loc_id(location).0);
        self.spawn(
            reqs,
            Body::Exec { target: cell, promise: promise.into(), what: Exec::Expr(value), scope, attr: site },
        );
        Ok(())
    }

    pub(super) fn exec_stmt(&mut self, stmt: StmtId, values: &Values, scope: ScopeId) -> R<()> {
        let p = self.prog();
        let c = self.code();
        let location = p.stmt(stmt).location;
        for id in eager_promise_ids(values.get(&Key::PROMISES)) {
            let ep = &mut self.eager[id as usize];
            ep.fulfilled = true;
            if let Some(pr) = ep.promise {
                self.fulfill(pr);
            }
        }
        match p.stmt(stmt).kind {
            StmtKind::If { cond, then, otherwise } => {
                let c = self.eval(cond, values, scope)?;
                if matches!(c, Value::Unknown) {
                    return Ok(());
                }
                let Value::Bool(b) = c else {
                    return Err(rt(format!(
                        "Invalid value `{}`: the condition for an if statement can only be a boolean expression",
                        self.display_value(&c)
                    ))
                    .at(location));
                };
                let branch = if b { then } else { otherwise };
                let ns = p.block(branch).ns;
                let ns_scope = self.nested_ns_scope(ns, scope);
                let ctx = self.block_context(branch, ns_scope);
                self.emit_block(branch, ctx)
            }
            StmtKind::For { iterable, .. } => {
                let v = self.eval(iterable, values, scope)?;
                if !matches!(v, Value::List(_) | Value::Unknown) {
                    let hint = match c.expr(iterable).kind {
                        Op::Var(_) | Op::Attr { .. } => {
                            format!(" Hint: '{}' resolves to '{}'.", self.expr_text(iterable), self.display_value(&v))
                        }
                        _ => format!(" Hint: '{}' is not a list.", self.display_value(&v)),
                    };
                    return Err(
                        typing(format!("A for loop can only be applied to lists and relations.{hint}")).at(location)
                    );
                }
                // The loop's task runs once its iterable is complete, and evaluating the
                // iterable just now handed a value that is not a list cell (a plugin's list, a
                // variable's) to the collector whole: no element comes after, so what the
                // loop remembers of them can go. Loops over a list cell forget theirs when it
                // freezes (`forget_seen`); these never would, and the 5,000 loops over
                // `std::sequence` of the 93k-instance benchmark kept 1.9 MB of sets to its end.
                if let Some(&Value::Int(collector)) = values.get(&Key::collector(iterable)) {
                    self.forget_seen(&[collector as CollectorId]);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Runs an `implement` for an instance once its condition's inputs are ready; `scope` is
    /// the one the condition was emitted in.
    pub(super) fn exec_subctor(&mut self, inst: InstanceId, index: u32, values: &Values, scope: ScopeId) -> R<()> {
        let p = self.prog();
        let entity = self.instances[inst as usize].entity;
        let implement = &p.entity(entity).implements[index as usize];
        let condition = match implement.condition {
            None => Value::Bool(true),
            Some(c) => self.eval(c, values, scope)?,
        };
        match condition {
            Value::Unknown | Value::Bool(false) => return Ok(()),
            Value::Bool(true) => {}
            other => {
                return Err(rt(format!(
                    "Invalid value `{}`: the condition for a conditional implementation can only be a boolean expression",
                    self.display_value(&other)
                ))
                .at(implement.location));
            }
        }
        for &imp in &implement.implementations {
            if !self.record_implementation(inst, imp) {
                continue;
            }
            let implementation = &p.implementations[imp.index()];
            let ns_scope = self.instance_ns_scope(inst, implementation.ns);
            let ctx = self.block_context(implementation.body, ns_scope);
            self.emit_block(implementation.body, ctx)?;
        }
        Ok(())
    }

    /// Records that an implementation applies to an instance; false when it already did (an
    /// implementation runs once per instance, however many `implement`s select it). The first
    /// two are kept in the instance and the others in a set (`Machine::more_implementations`):
    /// an entity can have thousands, and a scan of a list for each made the instance's
    /// construction quadratic in their number.
    #[inline]
    pub(super) fn record_implementation(&mut self, inst: InstanceId, imp: weft_ir::program::ImplId) -> bool {
        for listed in self.instances[inst as usize].implementations.iter_mut() {
            if *listed == imp {
                return false;
            }
            if *listed == Instance::NO_IMPLEMENTATION {
                *listed = imp;
                return true;
            }
        }
        self.more_implementations.entry(inst).or_default().insert(imp)
    }

    /// The scope of an instance's attributes and `self` seen from namespace `ns`, where an
    /// implementation's body or an `implement`'s condition resolves the names the instance
    /// lacks. Every such scope of one instance and one namespace resolves alike, so the
    /// instance keeps one: its instance scope is followed by the namespace scope of the first
    /// namespace asked (nearly always the only one), and another namespace gets a scope of its
    /// own each time. A server of the 93k-instance benchmark asked for eleven.
    pub(super) fn instance_ns_scope(&mut self, inst: InstanceId, ns: NsId) -> ScopeId {
        let instance_scope = self.instances[inst as usize].scope;
        if instance_scope == NONE {
            let s = self.push_scope(Scope::Instance { instance: inst });
            self.instances[inst as usize].scope = s;
            return self.push_scope(Scope::Ns { ns, parent: s });
        }
        let first = instance_scope + 1;
        if let Some(Scope::Ns { ns: first_ns, parent }) = self.scopes.get(first as usize).map(|s| s.unpack())
            && first_ns == ns
            && parent == instance_scope
        {
            return first;
        }
        self.push_scope(Scope::Ns { ns, parent: instance_scope })
    }
}

/// The eager promises a statement acquired (`Machine::schedule_promises`): a range packed in
/// one integer, the first id in the high 32 bits and the count in the low ones, or a list.
fn eager_promise_ids(held: Option<&Value>) -> EagerPromiseIds<'_> {
    match held {
        Some(Value::Int(packed)) => {
            let (first, count) = ((*packed >> 32) as u32, *packed as u32);
            EagerPromiseIds::Range(first..first.saturating_add(count))
        }
        Some(Value::List(ids)) => EagerPromiseIds::List(ids.iter()),
        _ => EagerPromiseIds::Range(0..0),
    }
}

/// What [`eager_promise_ids`] gives, without an allocation.
enum EagerPromiseIds<'a> {
    Range(std::ops::Range<u32>),
    List(std::slice::Iter<'a, Value>),
}

impl Iterator for EagerPromiseIds<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        match self {
            EagerPromiseIds::Range(range) => range.next(),
            EagerPromiseIds::List(ids) => ids.find_map(|id| match id {
                Value::Int(i) => u32::try_from(*i).ok(),
                _ => None,
            }),
        }
    }
}
