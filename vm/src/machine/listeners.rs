//! Gradual listeners: collectors that receive a relation's elements as they arrive, and the
//! proxies that stand for `a.b` until `a` is known.

use super::*;
use weft_ir::value::is_shared_python_str;

/// The place of a listener removed while its list was being notified: the places of the others
/// stay put, so the notifying loop finds each where its copy of the list has it, and the list
/// is compacted when the loop ends.
pub(super) const REMOVED_LISTENER: CollectorId = CollectorId::MAX;

/// Up to this many listeners on one cell, whether a collector is among them is found by a scan;
/// beyond, in a set (`Machine::listener_sets`). A relation that many instances ask `is
/// defined` of has one listener per instance.
const LISTENERS_SCANNED: usize = 32;

impl Machine {
    /// The gradual listeners of a list cell (see `Machine::cell_listeners`).
    #[inline]
    pub(super) fn listeners(&self, cell: CellId) -> Option<&Vec<CollectorId>> {
        if !self.cells[cell as usize].has_list_listeners() {
            return None;
        }
        self.cell_listeners.get(&cell)
    }

    /// Takes a list cell's listeners away, once it is frozen.
    pub(super) fn take_listeners(&mut self, cell: CellId) -> Option<Vec<CollectorId>> {
        let c = &mut self.cells[cell as usize];
        if !c.has_list_listeners() {
            return None;
        }
        c.flag(Cell::LISTENED, false);
        self.cell_listeners.remove(&cell)
    }

    /// Whether `collector` listens to `cell` already.
    fn is_listening(&self, cell: CellId, collector: CollectorId) -> bool {
        match self.listener_sets.get(&cell) {
            Some(set) => set.contains(&collector),
            None => self.listeners(cell).is_some_and(|listeners| listeners.contains(&collector)),
        }
    }

    /// Keeps the set of `cell`'s listeners once they are more than [`LISTENERS_SCANNED`],
    /// after `collector` joined them.
    fn note_listener(&mut self, cell: CellId, collector: CollectorId) {
        if let Some(set) = self.listener_sets.get_mut(&cell) {
            set.insert(collector);
            return;
        }
        let Some(listeners) = self.listeners(cell) else { return };
        if listeners.len() > LISTENERS_SCANNED {
            let set = listeners.iter().copied().filter(|&c| c != REMOVED_LISTENER).collect();
            self.listener_sets.insert(cell, set);
        }
    }

    /// Registers a gradual listener; false when the cell does not support listening.
    pub(super) fn listen(&mut self, cell: CellId, collector: CollectorId, location: Location) -> R<bool> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::List | CellKind::ListLiteral => {
                // The elements so far, by place: a list only grows, so the first `len` stay
                // what they were while the collector receives them (and may append to this
                // very list). A collector done with the list (`is defined`, at its first
                // element) is given no more of them: the reference hands it every element, but
                // setting its answer again changes nothing, and a relation of n elements asked
                // `is defined` n times cost n^2.
                let len = self.x(cell).items.len();
                for position in 0..len {
                    let v = self.x(cell).items.get(position);
                    if self.receive(collector, v, location)? {
                        break;
                    }
                }
                let pure = self.collectors[collector as usize].pure_gradual();
                if !self.cells[cell as usize].has_value() {
                    if self.is_listening(cell, collector) {
                        self.xm(cell).nb_gradual_waiters += 1;
                        return Ok(true);
                    }
                    self.cells[cell as usize].flag(Cell::LISTENED, true);
                    self.cell_listeners.entry(cell).or_default().push(collector);
                    if pure {
                        self.xm(cell).nb_gradual_waiters += 1;
                    }
                    self.note_listener(cell, collector);
                }
                Ok(true)
            }
            CellKind::Proxy => Ok(false),
            CellKind::Element => {
                // The element reaches the listener now, before the task that reads the loop
                // variable runs: the reference adds it to a relation in the same step that
                // the comprehension receives it, ahead of statements queued meanwhile.
                let value = self.cells[cell as usize].value_cloned().unwrap_or(Value::NULL);
                self.receive(collector, value, location)?;
                Ok(true)
            }
            CellKind::Plain | CellKind::Single | CellKind::Option | CellKind::Sink => Ok(false),
        }
    }

    pub(super) fn receive_flatten(&mut self, collector: CollectorId, value: Value, location: Location) -> R<bool> {
        match value {
            Value::List(items) => {
                for v in items.iter() {
                    if self.receive(collector, v.clone(), location)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            other => self.receive(collector, other, location),
        }
    }

    /// Delivers one element to a collector; true when it needs no more.
    pub(super) fn receive(&mut self, collector: CollectorId, value: Value, location: Location) -> R<bool> {
        match &mut self.collectors[collector as usize] {
            Collector::For { stmt, scope, seen } => {
                if matches!(value, Value::Unknown) {
                    return Ok(false);
                }
                let key = match &value {
                    Value::Null(id) => IdentityKey::Null(*id),
                    Value::Bool(b) => IdentityKey::Bool(*b),
                    Value::Int(i) if (-5..=256).contains(i) => IdentityKey::SmallInt(*i),
                    Value::Str(s) if is_shared_python_str(s) => IdentityKey::SharedStr(s.clone()),
                    Value::Str(s) => IdentityKey::Str(SameObject(s.clone())),
                    Value::Dict(d) => IdentityKey::Dict(SameObject(d.shared().clone())),
                    Value::Instance(i) => IdentityKey::Instance(*i),
                    _ => {
                        self.unique += 1;
                        IdentityKey::Unique(self.unique)
                    }
                };
                if !seen.insert(key) {
                    return Ok(false);
                }
                let (stmt, scope) = (*stmt, *scope);
                let p = self.prog();
                let StmtKind::For { var, body, .. } = p.stmt(stmt).kind else { unreachable!() };
                let ns = p.block(body).ns;
                let ns_scope = self.nested_ns_scope(ns, scope);
                let ctx = self.block_context(body, ns_scope);
                let loop_cell = self.lookup_in(ctx, VarRef::Name(var), None).expect("loop variable");
                let stmt_location = p.stmt(stmt).location;
                self.set_cell(loop_cell, value, stmt_location, true)?;
                self.emit_block(body, ctx)?;
                Ok(false)
            }
            Collector::Cell(cell) => {
                let cell = *cell;
                self.set_cell(cell, value, location, true)?;
                Ok(false)
            }
            Collector::SetAttr { instance, attr, next, location: stmt_location } => {
                let (instance, attr, next, stmt_location) = (*instance, *attr, *next, *stmt_location);
                match self.set_cell(next, value, location, true) {
                    Ok(()) => Ok(false),
                    Err(e) if e.kind == ErrorKind::AttributeException => Err(e.at(stmt_location)),
                    Err(e) => Err(self.attribute_error(instance, attr, e.at(stmt_location), Some(stmt_location))),
                }
            }
            Collector::IsDefined { target, location: owner } => {
                if matches!(value, Value::Unknown) {
                    return Ok(false);
                }
                let (target, owner) = (*target, *owner);
                self.set_cell(target, Value::Bool(true), owner, true)?;
                Ok(true)
            }
            Collector::Comp(helper) => {
                let helper = *helper;
                self.comp_receive(helper, value, location)?;
                Ok(false)
            }
        }
    }

    pub(super) fn notify_listeners(&mut self, cell: CellId, value: &Value, location: Location) -> R<()> {
        let Some(listeners) = self.listeners(cell).cloned() else { return Ok(()) };
        let mut removed = false;
        for (position, collector) in listeners.into_iter().enumerate() {
            if collector == REMOVED_LISTENER {
                continue;
            }
            let done = self.receive(collector, value.clone(), location)?;
            if done {
                let pure = self.collectors[collector as usize].pure_gradual();
                if let Some(ls) = self.cell_listeners.get_mut(&cell) {
                    // A listener leaves its list at once, as the reference's does, but only
                    // its place is cleared: removing it from the vector moved the rest, for
                    // each of them (quadratic when all of many listeners are done at the first
                    // element). Its place is where the copy has it unless a listener nested in
                    // this loop compacted the list.
                    let at = match ls.get(position) {
                        Some(&c) if c == collector => Some(position),
                        _ => ls.iter().position(|&c| c == collector),
                    };
                    if let Some(at) = at {
                        ls[at] = REMOVED_LISTENER;
                        removed = true;
                    }
                    if !pure {
                        self.xm(cell).nb_gradual_waiters += 1;
                    }
                }
                if let Some(set) = self.listener_sets.get_mut(&cell) {
                    set.remove(&collector);
                }
            }
        }
        if removed && let Some(ls) = self.cell_listeners.get_mut(&cell) {
            ls.retain(|&c| c != REMOVED_LISTENER);
        }
        Ok(())
    }

    pub(super) fn remove_proxy_listener(&mut self, proxy: CellId) {
        self.proxy_listeners.remove(&proxy);
        self.cells[proxy as usize].flag(Cell::LISTENED, false);
    }

    pub(super) fn connect_proxy(&mut self, proxy: CellId, target: CellId) -> R<()> {
        self.cells[proxy as usize].set_target(target);
        if self.cells[proxy as usize].is_set(Cell::LISTENED)
            && let Some(&ProxyListener { collector, location, .. }) = self.proxy_listeners.get(&proxy)
        {
            if self.listen(target, collector, location)? {
                self.remove_proxy_listener(proxy);
            } else if let Some(listener) = self.proxy_listeners.get_mut(&proxy) {
                listener.notify = true;
            }
        }
        let mut waiters = self.take_waiters(proxy);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            self.register(target, w);
        }
        Ok(())
    }

    /// A proxy for [`Resumer::Requirement`], reusing one that was connected before.
    pub(super) fn new_requirement_proxy(&mut self) -> CellId {
        match self.free_proxies.pop() {
            Some(proxy) => proxy,
            None => self.new_cell(CellKind::Proxy),
        }
    }

    /// Connects a requirement proxy. Every task that holds the proxy holds it in its
    /// requirement list and waits on it: the requirements an expression gets are handed to
    /// the task spawned with them before anything runs, and the hook that connects the proxy
    /// runs later, from the run queue. So pointing those lists at the attribute cell itself
    /// leaves no reference to the proxy, and its cell serves the next read. Those are a fifth
    /// of all cells otherwise (381k of 1.8M on the 93k-instance benchmark).
    pub(super) fn connect_requirement(&mut self, proxy: CellId, target: CellId) {
        debug_assert!(!self.cells[proxy as usize].is_set(Cell::LISTENED), "requirement proxies have no listener");
        let mut waiters = self.take_waiters(proxy);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            for (_, cell) in self.task_requirements_mut(w).iter_mut() {
                if *cell == proxy {
                    *cell = target;
                }
            }
            self.register(target, w);
        }
        self.cells[proxy as usize] = Cell::new(CellKind::Proxy);
        self.free_proxies.push(proxy);
    }
}
