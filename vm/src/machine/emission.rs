//! Emission: turning statements into tasks, with the requirements of each expression
//! (`requires_of`), the hooks that resolve `a.b` and the collectors of `for` and comprehensions.

use super::*;

impl Machine {
    /// Creates the namespaces' execution contexts and emits every top-level block.
    pub fn start(&mut self) -> R<()> {
        let p = self.prog();
        self.sink = self.new_cell(CellKind::Sink);
        for (i, ns) in p.namespaces.iter().enumerate() {
            let root = self.push_scope(Scope::Root { ns: NsId(i as u32) });
            let ctx = self.block_context(ns.root, root);
            self.ns_scopes.push(ctx);
        }
        for (i, ns) in p.namespaces.iter().enumerate() {
            let ctx = self.ns_scopes[i];
            self.emit_block(ns.root, ctx)?;
        }
        Ok(())
    }

    pub(super) fn emit_block(&mut self, block: BlockId, ctx: ScopeId) -> R<()> {
        let p = self.prog();
        for &s in &p.block(block).stmts {
            let location = p.stmt(s).location;
            self.emit_stmt(s, ctx).map_err(|e| e.at(location))?;
        }
        Ok(())
    }

    pub(super) fn emit_stmt(&mut self, stmt: StmtId, scope: ScopeId) -> R<()> {
        let p = self.prog();
        match &p.stmt(stmt).kind {
            StmtKind::Assign { var, value } => {
                let target = self.lookup_var(scope, VarRef::Name(*var))?;
                let reqs = self.requires(*value, scope)?;
                self.spawn(
                    reqs,
                    Body::Exec {
                        target,
                        promise: OptPromise::NONE,
                        what: Exec::Expr(*value),
                        scope,
                        attr: AttrSite::NONE,
                    },
                );
            }
            StmtKind::SetAttr { instance, .. } => {
                let reqs = self.requires(*instance, scope)?;
                self.spawn(reqs, Body::SetAttr { stmt, scope });
            }
            StmtKind::If { cond, then, otherwise } => {
                let mut reqs = self.schedule_promises(&[*then, *otherwise], scope)?;
                reqs.extend(self.requires(*cond, scope)?);
                self.spawn_statement(reqs, stmt, scope);
            }
            StmtKind::For { iterable, body, .. } => {
                let mut reqs = self.schedule_promises(&[*body], scope)?;
                let collector = self.add_collector(Collector::For { stmt, scope, seen: SeenElements::new() });
                reqs.extend(self.requires_gradual(*iterable, scope, collector)?);
                self.spawn_statement(reqs, stmt, scope);
            }
            StmtKind::Expr(e) => {
                let reqs = self.requires(*e, scope)?;
                let target = self.sink;
                self.spawn(
                    reqs,
                    Body::Exec { target, promise: OptPromise::NONE, what: Exec::Expr(*e), scope, attr: AttrSite::NONE },
                );
            }
        }
        Ok(())
    }

    /// Spawns the task of an `if` or a `for`: it runs the statement once `reqs` are ready, and
    /// its result goes nowhere (the machine's sink).
    fn spawn_statement(&mut self, reqs: Reqs, stmt: StmtId, scope: ScopeId) {
        let target = self.sink;
        let what = Exec::Stmt(stmt);
        self.spawn(reqs, Body::Exec { target, promise: OptPromise::NONE, what, scope, attr: AttrSite::NONE });
    }

    pub(super) fn add_collector(&mut self, c: Collector) -> CollectorId {
        self.collectors.push(c) as CollectorId
    }

    /// Acquires the eager promises of the blocks an `if`/`for` owns.
    pub(super) fn schedule_promises(&mut self, blocks: &[BlockId], scope: ScopeId) -> R<Reqs> {
        let p = self.prog();
        let mut ids = Vec::new();
        for b in blocks {
            for promise in &p.block(*b).promises {
                let id = self.eager.len() as u32;
                self.eager.push(EagerPromise { promise: None, fulfilled: false });
                let base = Some(promise.instance);
                self.schedule_hook(base, promise.attribute, scope, Resumer::Eager(id), true, promise.location)?;
                ids.push(id);
            }
        }
        let Some(&first) = ids.first() else { return Ok(Reqs::new()) };
        // The ids are consecutive (a hook's requirements make no promises of their own), so
        // the cell holds the first and the count in one integer (see `eager_promise_ids`)
        // rather than a list allocated for each `if` and `for` (a megabyte of the 93k-instance
        // benchmark's peak). A list remains the form for any other sequence.
        let consecutive = ids.iter().enumerate().all(|(n, &id)| id == first + n as u32);
        let value = if consecutive {
            Value::Int(i64::from(first) << 32 | ids.len() as i64)
        } else {
            Value::List(Arc::from(ids.iter().map(|&i| Value::Int(i64::from(i))).collect::<Vec<_>>()))
        };
        let cell = self.new_carrier(value);
        Ok(smallvec![(Key::PROMISES, cell)])
    }

    pub(super) fn schedule_hook(
        &mut self,
        base: Option<ExprId>,
        name: Symbol,
        scope: ScopeId,
        resumer: Resumer,
        propagate_unset: bool,
        location: Location,
    ) -> R<()> {
        match base {
            None => {
                let cell = self.lookup_var(scope, VarRef::Name(name))?;
                self.resume_variable(resumer, cell)
            }
            Some(b) => {
                let reqs = self.requires(b, scope)?;
                if let Some(cell) = self.attribute_cell_now(b, name, &reqs) {
                    // The hook task would be ready at once, so it would take the next place
                    // in the run queue; the resumption takes that place instead.
                    self.resumptions.push_back((resumer, cell));
                    self.run_queue.push_back(RESUMPTION);
                    return Ok(());
                }
                let location = self.loc_id(location);
                self.spawn(reqs, Body::Hook { base: b, name, scope, resumer, propagate_unset, location });
                Ok(())
            }
        }
    }

    /// The cell a hook on `base.name` would resume with, when the hook would find it without
    /// waiting and without an error: `base` is a variable that already holds an instance, and
    /// the instance has the attribute. Such a value never changes once set, and neither do
    /// an instance's attribute cells, so the cell found now is the cell the hook would find.
    pub(super) fn attribute_cell_now(&self, base: ExprId, name: Symbol, reqs: &Reqs) -> Option<CellId> {
        let [(_, cell)] = reqs.as_slice() else { return None };
        if !matches!(self.code().expr(base).kind, Op::Var(_)) {
            return None;
        }
        let c = &self.cells[*cell as usize];
        if matches!(c.kind(), CellKind::Proxy | CellKind::List | CellKind::ListLiteral) || !c.has_value() {
            return None;
        }
        match c.value().as_deref() {
            Some(Value::Instance(i)) => self.slot(*i, name),
            _ => None,
        }
    }

    pub(super) fn resume_variable(&mut self, resumer: Resumer, cell: CellId) -> R<()> {
        match resumer {
            Resumer::Reader(proxy) => self.connect_proxy(proxy, cell),
            Resumer::Requirement(proxy) => {
                self.connect_requirement(proxy, cell);
                Ok(())
            }
            Resumer::Eager(id) => {
                if !self.eager[id as usize].fulfilled {
                    let target = self.resolve_proxy(cell);
                    let promise = self.get_promise(target);
                    self.eager[id as usize].promise = promise;
                }
                Ok(())
            }
            Resumer::IsDefined { target, location: location_id } => {
                let location = self.loc(location_id);
                if self.is_ready(cell) {
                    let v = self.is_defined_value(cell);
                    self.set_cell(target, v, location, true)
                } else {
                    let collector = self.add_collector(Collector::IsDefined { target, location });
                    self.listen(cell, collector, location)?;
                    self.spawn(
                        smallvec![(Key::extra(0), cell)],
                        Body::IsDefinedWait { cell, target, location: location_id },
                    );
                    Ok(())
                }
            }
        }
    }

    pub(super) fn resolve_proxy(&self, cell: CellId) -> CellId {
        let c = &self.cells[cell as usize];
        if c.kind() == CellKind::Proxy
            && let Some(t) = c.target()
        {
            return self.resolve_proxy(t);
        }
        cell
    }

    pub(super) fn is_defined_value(&mut self, cell: CellId) -> Value {
        match self.get_value(cell) {
            Ok(Value::Unknown) => Value::Unknown,
            Ok(Value::List(items)) => {
                if items.is_empty() {
                    Value::Bool(false)
                } else if items.iter().all(|v| matches!(v, Value::Unknown)) {
                    Value::Unknown
                } else {
                    Value::Bool(true)
                }
            }
            Ok(Value::Null(_)) => Value::Bool(false),
            Ok(_) => Value::Bool(true),
            Err(_) => Value::Bool(false),
        }
    }

    /// `requires_emit`: the cells an expression waits for, spawning sub-tasks.
    pub(super) fn requires(&mut self, expr: ExprId, scope: ScopeId) -> R<Reqs> {
        let mut reqs = Reqs::new();
        self.requires_into(expr, scope, &mut reqs)?;
        Ok(reqs)
    }

    /// [`Self::requires`], appending to `reqs` so that an expression tree builds one list.
    #[inline]
    pub(super) fn requires_into(&mut self, expr: ExprId, scope: ScopeId, reqs: &mut Reqs) -> R<()> {
        // A constant requires nothing: most constructor arguments and every literal default.
        if self.code().constant(expr).is_some() {
            return Ok(());
        }
        match self.requires_of(expr, scope, reqs) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.locate_operand_error(expr, e)),
        }
    }

    /// The reference's `ReferenceStatement`s (a map lookup, operators, collection literals,
    /// strings, calls, index lookups) give an error from their operands their own place, when
    /// it has none yet; `and`, `or`, `is defined`, `?:`, constructors, comprehensions and
    /// attribute reads leave it to what is around them.
    #[cold]
    pub(super) fn locate_operand_error(&self, expr: ExprId, error: EvalError) -> EvalError {
        let c = self.code();
        let e = c.expr(expr);
        match e.kind {
            Op::Subscript { .. }
            | Op::Not(_)
            | Op::Binary { .. }
            | Op::List(_)
            | Op::Dict(_)
            | Op::Format { .. }
            | Op::FString { .. }
            | Op::Call { .. }
            | Op::IndexLookup { .. }
            | Op::SelectorLookup { .. } => error.at(e.location()),
            _ => error,
        }
    }

    /// The requirements of one instruction, its operands' through [`Self::requires_into`].
    pub(super) fn requires_of(&mut self, expr: ExprId, scope: ScopeId, reqs: &mut Reqs) -> R<()> {
        let p = self.prog();
        let c = self.code();
        let e = c.expr(expr);
        let location = || e.location();
        match &e.kind {
            Op::Const(_) => {}
            Op::Var(name) => {
                let cell = self.lookup_var(scope, *name).map_err(|err| err.arose_at(location()))?;
                reqs.push((Self::var_key(expr, *name), cell));
            }
            Op::Attr { base, name } => {
                let proxy = self.new_requirement_proxy();
                self.schedule_hook(Some(*base), *name, scope, Resumer::Requirement(proxy), false, location())?;
                reqs.push((Key::expr(expr), proxy));
            }
            Op::Subscript { map, key } => {
                self.requires_into(*map, scope, reqs)?;
                self.requires_into(*key, scope, reqs)?;
            }
            Op::Not(a) => reqs.extend(self.requires(*a, scope)?),
            Op::Binary { lhs, rhs, .. } => {
                self.requires_into(*lhs, scope, reqs)?;
                self.requires_into(*rhs, scope, reqs)?;
            }
            Op::And { lhs, .. } | Op::Or { lhs, .. } => {
                let target = self.new_temporary();
                self.cells[target as usize].set_ty(PackedType::BOOL);
                let sub = self.requires(*lhs, scope)?;
                self.spawn(sub, Body::Lazy { expr, scope, target });
                reqs.push((Key::temporary(expr), target));
            }
            Op::Cond { cond, .. } => {
                let result = self.new_temporary();
                let sub = self.requires(*cond, scope)?;
                self.spawn(sub, Body::Cond { src: CondSrc::Expr(expr), scope, result, lhs: None, chosen: None });
                reqs.push((Key::temporary(expr), result));
            }
            Op::List(items) => {
                for i in items.iter() {
                    self.requires_into(*i, scope, reqs)?;
                }
            }
            Op::Dict(entries) => {
                for (_, v) in entries.iter() {
                    self.requires_into(*v, scope, reqs)?;
                }
            }
            Op::Format { parts, .. } => {
                for (_, r) in parts.iter() {
                    self.requires_into(*r, scope, reqs)?;
                }
            }
            Op::FString { fields, .. } => {
                for (_, r) in fields.iter() {
                    self.requires_into(*r, scope, reqs)?;
                }
            }
            Op::Call { args, kwargs, splats, .. } => {
                let mut sub = Reqs::new();
                for a in args.iter() {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                for (_, a) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                for a in splats.iter() {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                let result = self.new_temporary();
                self.spawn(sub, Body::Call { expr, scope, result, args: None });
                reqs.push((Key::temporary(expr), result));
            }
            Op::Construct(c) => {
                let ctor = &p.ctors[c.index()];
                for (_, v) in &ctor.direct {
                    self.requires_into(*v, scope, reqs)?;
                }
                for v in &ctor.splats {
                    self.requires_into(*v, scope, reqs)?;
                }
                if let Some((inst, _)) = ctor.lhs {
                    self.requires_into(inst, scope, reqs)?;
                }
            }
            Op::IndexLookup { entity, query, splats } => {
                let mut sub = Reqs::new();
                for (_, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                for v in splats.iter() {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                let target = self.new_temporary();
                self.cells[target as usize].set_ty(PackedType::entity(*entity));
                self.spawn(sub, Body::Lookup { expr, scope, target });
                reqs.push((Key::temporary(expr), target));
            }
            Op::SelectorLookup { base, query, splats, .. } => {
                let mut sub = Reqs::new();
                for (_, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                self.requires_into(*base, scope, &mut sub)?;
                for v in splats.iter() {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                let target = self.new_temporary();
                self.spawn(sub, Body::Lookup { expr, scope, target });
                reqs.push((Key::temporary(expr), target));
            }
            Op::ListComp { .. } => {
                let result = self.list_comp(expr, scope, None)?;
                reqs.push((Key::expr(expr), result));
            }
            Op::IsDefined { base, name } => {
                let target = self.new_cell(CellKind::Plain);
                let resumer = Resumer::IsDefined { target, location: self.loc_id(location()) };
                self.schedule_hook(*base, *name, scope, resumer, false, location())?;
                reqs.push((Key::expr(expr), target));
            }
        }
        Ok(())
    }

    /// `requires_emit_gradual`: like [`Self::requires`], delivering the value's elements to
    /// `collector` as they arrive where the expression allows it.
    pub(super) fn requires_gradual(&mut self, expr: ExprId, scope: ScopeId, collector: CollectorId) -> R<Reqs> {
        let c = self.code();
        let e = c.expr(expr);
        let location = || e.location();
        match &e.kind {
            Op::Var(_) => {
                let mut reqs = self.requires(expr, scope)?;
                let cell = reqs[0].1;
                if !self.listen(cell, collector, location())? {
                    let c = self.new_carrier(Value::Int(collector as i64));
                    reqs.push((Key::collector(expr), c));
                }
                Ok(reqs)
            }
            Op::Attr { base, name } => {
                let proxy = self.new_cell(CellKind::Proxy);
                self.proxy_listeners.insert(proxy, ProxyListener { collector, location: location(), notify: false });
                self.cells[proxy as usize].flag(Cell::LISTENED, true);
                self.schedule_hook(Some(*base), *name, scope, Resumer::Reader(proxy), false, location())?;
                Ok(smallvec![(Key::expr(expr), proxy)])
            }
            Op::List(items) => {
                let temp = self.new_cell(CellKind::ListLiteral);
                self.listen(temp, collector, location())?;
                let temp_collector = self.add_collector(Collector::Cell(temp));
                for item in items.iter() {
                    let promise = self.get_promise(temp);
                    let reqs = self.requires_gradual(*item, scope, temp_collector)?;
                    self.spawn(
                        reqs,
                        Body::Exec {
                            target: temp,
                            promise: promise.into(),
                            what: Exec::Expr(*item),
                            scope,
                            attr: AttrSite::NONE,
                        },
                    );
                }
                if items.is_empty() {
                    self.freeze(temp);
                }
                Ok(smallvec![(Key::expr(expr), temp)])
            }
            Op::Cond { cond, .. } => {
                let result = self.new_temporary();
                let sub = self.requires(*cond, scope)?;
                self.spawn(
                    sub,
                    Body::Cond { src: CondSrc::Expr(expr), scope, result, lhs: Some(collector), chosen: None },
                );
                Ok(smallvec![(Key::temporary(expr), result)])
            }
            Op::ListComp { .. } => {
                let result = self.list_comp(expr, scope, Some(collector))?;
                Ok(smallvec![(Key::expr(expr), result)])
            }
            _ => {
                let mut reqs = self.requires(expr, scope)?;
                let c = self.new_carrier(Value::Int(collector as i64));
                reqs.push((Key::collector(expr), c));
                Ok(reqs)
            }
        }
    }

    pub(super) fn list_comp(&mut self, expr: ExprId, scope: ScopeId, lhs: Option<CollectorId>) -> R<CellId> {
        let c = self.code();
        let Op::ListComp { iterable, .. } = c.expr(expr).kind else { unreachable!() };
        let final_result = self.new_cell(CellKind::Plain);
        let helper = self.comps.len() as u32;
        self.comps.push(CompHelper { expr, scope, lhs, results: Vec::new(), complete: false, final_result });
        let reqs = match lhs {
            None => self.requires(iterable, scope)?,
            Some(_) => {
                let c = self.add_collector(Collector::Comp(helper));
                self.requires_gradual(iterable, scope, c)?
            }
        };
        self.spawn(reqs, Body::Comp { helper, scope });
        Ok(final_result)
    }

    pub(super) fn comp_receive(&mut self, helper: u32, value: Value, _location: Location) -> R<()> {
        let c = self.code();
        let h = &self.comps[helper as usize];
        if h.complete {
            return Err(rt("list comprehension helper received gradual result after it was declared complete"));
        }
        let (expr, scope, lhs) = (h.expr, h.scope, h.lhs);
        let Op::ListComp { element, var, guard, .. } = c.expr(expr).kind else { unreachable!() };
        let location = c.location(expr);
        let element_cell = self.filled_cell(CellKind::Element, value.clone(), Some(location));
        let value_scope = self.push_scope(Scope::Var { name: var, cell: element_cell, parent: scope });
        let result = self.new_cell(CellKind::Plain);
        self.comps[helper as usize].results.push(result);
        let unknown = matches!(value, Value::Unknown);
        // The element task evaluates `guard ? element : <filtered>`; an Unknown element passes
        // through as is.
        // What the element and the guard need is emitted here, in the reference by the helper
        // its `RawUnit` runs, which puts any error (a name that is not defined) at the
        // comprehension, even one that an operator around the name had placed.
        let at_comprehension = |e: EvalError| e.relocated(location);
        let reqs = match (guard, unknown, lhs) {
            (Some(g), _, _) => {
                let cond_result = self.new_cell(CellKind::Plain);
                let sub = self.requires(g, value_scope).map_err(at_comprehension)?;
                self.spawn(
                    sub,
                    Body::Cond {
                        src: CondSrc::Guard { helper, unknown },
                        scope: value_scope,
                        result: cond_result,
                        lhs,
                        chosen: None,
                    },
                );
                smallvec![(Key::extra(1), cond_result)]
            }
            (None, true, _) => Reqs::new(),
            (None, false, None) => self.requires(element, value_scope).map_err(at_comprehension)?,
            (None, false, Some(c)) => self.requires_gradual(element, value_scope, c).map_err(at_comprehension)?,
        };
        self.spawn(
            reqs,
            Body::Exec {
                target: result,
                promise: OptPromise::NONE,
                what: Exec::CompElement { helper, unknown, guarded: guard.is_some() },
                scope: value_scope,
                attr: AttrSite::NONE,
            },
        );
        Ok(())
    }

    pub(super) fn comp_complete(&mut self, helper: u32, all: Value) -> R<()> {
        let h = &self.comps[helper as usize];
        if h.results.is_empty() {
            let location = self.code.location(h.expr);
            let values: Vec<Value> = match all {
                Value::Unknown => vec![Value::Unknown],
                Value::List(items) => items.to_vec(),
                other => vec![other],
            };
            for v in values {
                self.comp_receive(helper, v, location)?;
            }
        }
        self.comps[helper as usize].complete = true;
        // Each result is keyed by its position in 29 bits; a comprehension with more
        // elements would need some twelve gigabytes of cells before it got here.
        let count = self.comps[helper as usize].results.len();
        if count > MAX_KEY_INDEX as usize + 1 {
            return Err(rt(format!(
                "a list comprehension of {count} elements: weft supports at most {}",
                MAX_KEY_INDEX as usize + 1
            )));
        }
        let reqs: Reqs = self.comps[helper as usize]
            .results
            .clone()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (Key::index(i as u32), c))
            .collect();
        self.spawn(reqs, Body::CompFinal { helper });
        Ok(())
    }
}
