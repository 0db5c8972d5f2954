//! Cells and tasks: making cells, queueing delayed cells and freezing them, waiter lists,
//! promises, spawning tasks and the order of pending tasks.

use super::*;

impl Machine {
    pub(super) fn new_cell(&mut self, kind: CellKind) -> CellId {
        let id = self.cells.push(Cell::new(kind)) as CellId;
        if self.cells[id as usize].is_delayed() && self.can_get(id) {
            self.queue(id);
        }
        id
    }

    /// The cell an operator's sub-task computes its result into (a conditional expression, a
    /// lazy `and`/`or`, a plugin call, an index or selector lookup): a plain cell that only
    /// the sub-task sets and only the one task whose requirements hold it reads, under the
    /// operator's key ([`Key::temporary`]). Once that task finished, nothing refers to the
    /// cell any more ([`Self::release_temporaries`]), and the next such result reuses it.
    /// They were 118k of the 1.5M cells of the 93k-instance benchmark.
    pub(super) fn new_temporary(&mut self) -> CellId {
        match self.free_temporaries.pop() {
            Some(cell) => cell,
            None => self.new_cell(CellKind::Plain),
        }
    }

    /// A plain cell that hands `value` to the one task whose requirements hold it, under a
    /// key of a kind only such cells have: a gradual reader's collector
    /// ([`Key::collector`]) or the eager promises of an `if` or `for` ([`Key::PROMISES`]).
    /// Like a temporary, it is released once that task finished, and reused (33k of the
    /// 93k-instance benchmark's cells were such carriers).
    pub(super) fn new_carrier(&mut self, value: Value) -> CellId {
        let cell = self.new_temporary();
        let c = &mut self.cells[cell as usize];
        c.fill(value);
        c.set_has_value(true);
        cell
    }

    /// Makes the temporaries and carriers among the requirements of a task that finished
    /// reusable. The task read their values (it finished), they had them before that (it was
    /// ready), and no other task holds them; a cell that grew an extension is left as it is.
    pub(super) fn release_temporaries(&mut self, requires: &Reqs) {
        for &(key, cell) in requires {
            if matches!(key.kind(), Key::KIND_TEMPORARY | Key::KIND_COLLECTOR | Key::KIND_PROMISES) {
                let c = &self.cells[cell as usize];
                debug_assert!(c.kind() == CellKind::Plain && c.has_value(), "a temporary is set before it is read");
                if c.ext_index().is_none() {
                    self.cells[cell as usize] = Cell::new(CellKind::Plain);
                    self.free_temporaries.push(cell);
                }
            }
        }
    }

    pub(super) fn plain_with(&mut self, value: Value, location: Option<Location>) -> CellId {
        self.filled_cell(CellKind::Plain, value, location)
    }

    /// A new cell of a kind without providers (plain or element) that already has `value`.
    pub(super) fn filled_cell(&mut self, kind: CellKind, value: Value, location: Option<Location>) -> CellId {
        debug_assert!(!kind.is_delayed());
        let id = self.new_cell(kind);
        let c = &mut self.cells[id as usize];
        c.fill(value);
        c.set_has_value(true);
        if let Some(l) = location {
            c.set_location_index(&mut self.exts, self.locations.intern(l));
        }
        id
    }

    #[inline]
    pub fn is_ready(&self, cell: CellId) -> bool {
        let c = &self.cells[cell as usize];
        if c.kind() == CellKind::Proxy {
            return self.is_proxy_ready(c);
        }
        c.has_value()
    }

    /// [`Self::is_ready`] of a proxy: its target's, once it is connected.
    pub(super) fn is_proxy_ready(&self, proxy: &Cell) -> bool {
        proxy.target().is_some_and(|t| self.is_ready(t))
    }

    /// A cell's extension, or an empty one for a cell without.
    #[inline]
    pub(super) fn x(&self, cell: CellId) -> &CellExt {
        match self.cells[cell as usize].ext_index() {
            None => &EMPTY_EXT,
            Some(ext) => &self.exts[ext],
        }
    }

    /// A cell's extension if it has one, to change without making one.
    #[inline]
    pub(super) fn existing_xm(&mut self, cell: CellId) -> Option<&mut CellExt> {
        self.cells[cell as usize].ext_index().map(|ext| &mut self.exts[ext])
    }

    /// A cell's extension, made when first needed.
    #[inline]
    pub(super) fn xm(&mut self, cell: CellId) -> &mut CellExt {
        let ext = self.cells[cell as usize].ext_or_make(&mut self.exts);
        &mut self.exts[ext]
    }

    /// How many elements a list cell has.
    pub fn item_count(&self, cell: CellId) -> usize {
        self.x(cell).items.len()
    }

    /// Promises acquired on a delayed cell and not yet fulfilled.
    pub fn outstanding_providers(&self, cell: CellId) -> i64 {
        let c = &self.cells[cell as usize];
        if c.tracks_promises() { self.x(cell).outstanding as i64 } else { 0 }
    }

    /// The attribute of an attribute cell.
    #[inline]
    pub fn cell_attribute(&self, cell: CellId) -> Option<AttrId> {
        self.cells[cell as usize].attribute_of()
    }

    /// For attribute cells: the instance and attribute. An instance's cells are consecutive
    /// and instances are numbered in the order their cells were made, so the owner is the last
    /// instance whose first cell is at or before this one: a binary search among the few
    /// instances that start in the cell's block of `instance_blocks`. Only relation ends (for
    /// the other end) and error messages ask.
    pub fn cell_owner(&self, cell: CellId) -> Option<(InstanceId, AttrId)> {
        let attr = self.cells[cell as usize].attribute_of()?;
        // The number of instances whose first cell is at or before `cell` lies between those
        // before its block and those before the next block.
        let block = cell as usize / OWNER_BLOCK;
        let (mut low, mut high) = match self.instance_blocks.get(block) {
            Some(&before) => {
                let before_next = self.instance_blocks.get(block + 1).map_or(self.instances.len(), |&n| n as usize);
                (before as usize, before_next)
            }
            // No instance starts at or after this block: all of them start before the cell.
            None => (self.instances.len(), self.instances.len()),
        };
        while low < high {
            let middle = low + (high - low) / 2;
            if self.instances[middle].first_cell <= cell {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        debug_assert!(low > 0, "an attribute cell belongs to an instance");
        let owner = low.saturating_sub(1) as InstanceId;
        debug_assert!(self.instance_cells(owner).contains(&cell), "cell {cell} is not among its owner's");
        Some((owner, attr))
    }

    pub(super) fn relation_bounds(&self, cell: CellId) -> Option<(i64, Option<i64>)> {
        let c = &self.cells[cell as usize];
        let attr = c.relation_attr()?;
        match self.program.attribute(attr).kind {
            AttributeKind::Relation(r) => Some((r.lower, r.upper)),
            _ => None,
        }
    }

    pub(super) fn can_get(&self, cell: CellId) -> bool {
        let c = &self.cells[cell as usize];
        match c.kind() {
            CellKind::List => {
                let low = self.relation_bounds(cell).map(|b| b.0).unwrap_or(0);
                self.x(cell).items.len() as i64 >= low && self.outstanding_providers(cell) == 0
            }
            CellKind::Option | CellKind::ListLiteral => self.outstanding_providers(cell) == 0,
            _ => c.has_value(),
        }
    }

    /// Whether a delayed cell could be frozen now (no outstanding providers, enough elements).
    pub fn could_complete(&self, cell: CellId) -> bool {
        self.can_get(cell)
    }

    pub fn progress_potential(&self, cell: CellId) -> i64 {
        let c = &self.cells[cell as usize];
        debug_assert!(c.is_delayed(), "only delayed cells count their waiters");
        let x = self.x(cell);
        x.waiting as i64 - x.nb_gradual_waiters as i64
    }

    pub fn is_relation(&self, cell: CellId) -> bool {
        self.cells[cell as usize].is_relation()
    }

    pub(super) fn queue(&mut self, cell: CellId) {
        let c = &mut self.cells[cell as usize];
        if c.queued() {
            return;
        }
        c.set_queued(true);
        self.wait_queue.push_back((cell, c.is_relation()));
    }

    pub fn unqueue(&mut self, cell: CellId) {
        self.cells[cell as usize].set_queued(false);
    }

    /// Freezes a delayed cell: it takes no more values and its waiters are released.
    pub fn freeze(&mut self, cell: CellId) {
        if self.cells[cell as usize].has_value() {
            return;
        }
        // Before the cell has its value: an option's waiters share a word with its location.
        let mut waiters = self.take_waiters(cell);
        let c = &mut self.cells[cell as usize];
        c.set_queued(true);
        c.set_has_value(true);
        c.set_tracks_promises(false);
        if c.is_set(Cell::WATCHED) {
            self.zerowaiter_events.push(cell);
        }
        if let Some(listeners) = self.take_listeners(cell) {
            self.forget_seen(&listeners);
            if !self.listener_sets.is_empty() {
                self.listener_sets.remove(&cell);
            }
        }
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            self.ready(w);
        }
    }

    /// Frees what the `for` loops among `listeners` remember of the elements they have run
    /// (`Collector::For::seen`), once no element can come: their list froze (a loop listens
    /// to one list and is given no element after its freeze), or the loop's statement ran
    /// over a value handed whole. The sets of a model's finished loops are megabytes at its
    /// peak.
    pub(super) fn forget_seen(&mut self, listeners: &[CollectorId]) {
        for &collector in listeners.iter().filter(|&&c| c != listeners::REMOVED_LISTENER) {
            if let Collector::For { seen, .. } = &mut self.collectors[collector as usize] {
                *seen = SeenElements::new();
            }
        }
    }

    /// Adds a waiter to a cell's list, counting it for a delayed cell (`progress_potential`).
    pub(super) fn push_waiter(&mut self, cell: CellId, waiter: WaiterId) {
        let c = &mut self.cells[cell as usize];
        debug_assert!(!c.holds_location(), "a waiter for a cell that has its value");
        self.wait_nodes.push(c.waiters_mut(&mut self.exts), waiter);
        if c.is_delayed() {
            if c.is_set(Cell::WATCHED) {
                self.zerowaiter_events.push(cell);
            }
            self.xm(cell).waiting += 1;
        }
    }

    /// Has `freeze` and the next waiter of a delayed cell reported in
    /// [`Machine::take_zerowaiter_events`] (`on`), or stops that. The scheduler watches the
    /// cells it set aside for having no waiter: only those events can change whether they
    /// stay aside.
    pub fn watch_zerowaiter(&mut self, cell: CellId, on: bool) {
        self.cells[cell as usize].flag(Cell::WATCHED, on);
    }

    /// Whether [`Machine::watch_zerowaiter`] watches a cell.
    pub fn is_watched_zerowaiter(&self, cell: CellId) -> bool {
        self.cells[cell as usize].is_set(Cell::WATCHED)
    }

    /// The watched cells that were frozen or gained a waiter since the last call, in no
    /// particular order and possibly more than once.
    pub fn take_zerowaiter_events(&mut self) -> Vec<CellId> {
        std::mem::take(&mut self.zerowaiter_events)
    }

    /// Detaches a cell's waiter list, to be released with `WaitNodes::pop`. Inlined: it runs
    /// for every value set, and as a call it cost half a percent of the evaluation.
    #[inline(always)]
    pub(super) fn take_waiters(&mut self, cell: CellId) -> WaitList {
        if let Some(x) = self.existing_xm(cell) {
            x.waiting = 0;
        }
        let c = &mut self.cells[cell as usize];
        if c.holds_location() {
            // A cell with its value has no waiters: the word is its location.
            return WaitList::EMPTY;
        }
        std::mem::replace(c.waiters_mut(&mut self.exts), WaitList::EMPTY)
    }

    pub(super) fn get_promise(&mut self, cell: CellId) -> Option<PromiseId> {
        let c = &mut self.cells[cell as usize];
        if !c.tracks_promises() {
            return None;
        }
        self.xm(cell).outstanding += 1;
        let id = self.promises.len() as PromiseId;
        self.promises.push(Promise { owner: cell, done: false });
        Some(id)
    }

    pub(super) fn fulfill(&mut self, promise: PromiseId) {
        let p = &mut self.promises[promise as usize];
        if p.done {
            return;
        }
        p.done = true;
        let cell = p.owner;
        let kind = self.cells[cell as usize].kind();
        let c = &mut self.cells[cell as usize];
        if !c.tracks_promises() {
            return;
        }
        self.xm(cell).outstanding -= 1;
        if self.can_get(cell) {
            self.queue(cell);
        }
        if kind == CellKind::ListLiteral && self.outstanding_providers(cell) == 0 {
            self.freeze(cell);
        }
    }

    pub(super) fn wait_for(&mut self, waiter: WaiterId, cell: CellId) {
        self.waiters[waiter as usize].waitcount += 1;
        self.register(cell, waiter);
    }

    pub(super) fn register(&mut self, cell: CellId, waiter: WaiterId) {
        let c = &mut self.cells[cell as usize];
        if c.kind() == CellKind::Proxy {
            match c.target() {
                Some(t) => self.register(t, waiter),
                // A proxy is read through its target and never holds a value itself
                // (`Machine::set_cell` refuses one): until it is connected, it keeps its
                // waiters, which `connect_proxy` moves to the target.
                None => self.push_waiter(cell, waiter),
            }
            return;
        }
        if c.has_value() {
            self.ready(waiter);
        } else {
            self.push_waiter(cell, waiter);
        }
    }

    pub(super) fn ready(&mut self, waiter: WaiterId) {
        let w = &mut self.waiters[waiter as usize];
        w.waitcount -= 1;
        if w.waitcount == 0 {
            self.run_queue.push_back(waiter);
        }
    }

    pub(super) fn spawn(&mut self, requires: Reqs, body: Body) {
        let seq = self.spawned;
        self.spawned += 1;
        if requires.is_empty()
            && let Some(deferred) = Deferred::of(&body)
        {
            // Ready at once, as a slot task with no requirement would be: it takes the same
            // place in the run queue.
            let task = DeferredTask::of(&deferred);
            if task.kept_apart() {
                self.deferred_bodies.push_back(deferred);
            }
            self.deferred.push_back(task);
            self.run_queue.push_back(DEFERRED);
            return;
        }
        let waiter = Waiter { waitcount: 1, seq, requirement: (Key::NONE, 0), body: Some(body) };
        let id = match self.free_slots.take_lowest() {
            Some(slot) => {
                self.waiters[slot as usize] = waiter;
                slot
            }
            None => self.waiters.push(waiter) as WaiterId,
        };
        self.live_tasks += 1;
        if let Some(order) = &mut self.pending_order {
            order.push_back((seq, id));
            // Finished tasks leave the order only when a visit passes them: past this size,
            // listing the pending tasks afresh at the next visit is cheaper than the order.
            if Self::pending_order_outgrown(order, self.live_tasks) {
                self.pending_order = None;
            }
        }
        for &(_, cell) in &requires {
            self.wait_for(id, cell);
        }
        self.set_task_requirements(id, requires);
        self.ready(id);
    }

    /// The requirements of the task in `waiter` (see `Waiter::requirement`).
    #[inline(always)]
    pub(super) fn task_requirements(&self, waiter: WaiterId) -> &[(Key, CellId)] {
        Self::requirements_in(&self.waiters[waiter as usize], &self.spilled_requirements)
    }

    #[inline(always)]
    fn requirements_in<'a>(task: &'a Waiter, spilled: &'a spilled::SpilledLists) -> &'a [(Key, CellId)] {
        match task.requirement.0.kind() {
            Key::KIND_NONE => &[],
            Key::KIND_SPILLED => spilled.get(task.requirement),
            _ => std::slice::from_ref(&task.requirement),
        }
    }

    pub(super) fn task_requirements_mut(&mut self, waiter: WaiterId) -> &mut [(Key, CellId)] {
        let task = &mut self.waiters[waiter as usize];
        match task.requirement.0.kind() {
            Key::KIND_NONE => &mut [],
            Key::KIND_SPILLED => self.spilled_requirements.get_mut(task.requirement),
            _ => std::slice::from_mut(&mut task.requirement),
        }
    }

    /// Gives the task in `waiter`, which has no requirements in its slot, the list `requires`.
    pub(super) fn set_task_requirements(&mut self, waiter: WaiterId, requires: Reqs) {
        debug_assert!(self.waiters[waiter as usize].requirement.0.kind() == Key::KIND_NONE);
        let requirement = match requires.as_slice() {
            [] => (Key::NONE, 0),
            &[one] => one,
            _ => self.spilled_requirements.store(requires),
        };
        self.waiters[waiter as usize].requirement = requirement;
    }

    /// Takes the requirements of the task in `waiter` out of its slot, which then has none.
    pub(super) fn take_task_requirements(&mut self, waiter: WaiterId) -> Reqs {
        let requirement = std::mem::replace(&mut self.waiters[waiter as usize].requirement, (Key::NONE, 0));
        match requirement.0.kind() {
            Key::KIND_NONE => Reqs::new(),
            Key::KIND_SPILLED => self.spilled_requirements.take(requirement),
            _ => smallvec![requirement],
        }
    }

    /// Makes a finished task's slot free; when it was the top slot, cuts the free slots off
    /// the top of the table (see `free_slots`).
    pub(super) fn free_task_slot(&mut self, slot: WaiterId) {
        self.free_slots.release(slot);
        if slot as usize + 1 == self.waiters.len() {
            self.cut_free_top();
        }
    }

    /// Cuts the free slots off the top of the task table, noting the size it had; returns its
    /// length after the cut.
    fn cut_free_top(&mut self) -> usize {
        let len = self.waiters.len();
        self.peak_task_slots = self.peak_task_slots.max(len);
        let kept = self.free_slots.cut_top(len);
        self.waiters.truncate(kept);
        kept
    }

    /// Moves the pending tasks into the lowest slots of the task table once enough of it is
    /// free, and cuts off the rest, giving its pages back. The scheduler calls it between
    /// tasks, when none runs.
    ///
    /// Handing out the lowest free slot first gathers long-lived tasks at the bottom only as
    /// far as the order of spawns allows. On the 93k-instance benchmark, the process's
    /// resident memory peaks in the first drain of the run queue, when every instance has
    /// its cells and the pending tasks start to fall from their 231k: without compaction,
    /// the table kept its 11 MB while they fell, and at the end of the drain 8.5k of them
    /// (170 KB) still held 111k slots (5.3 MB) apart. Which slot a task is in changes nothing
    /// the evaluation shows (see `free_slots`); what names a slot is the waiter lists of the
    /// cells a task waits for, the run queue and the pending order, and all three are
    /// rewritten here.
    ///
    /// A compaction runs when at least one slot in five is free (and, in a release build,
    /// 1 MB of them) and the wait nodes and the run queue are each at most four times the
    /// free slots. It costs a pass over the slots above the pending tasks' count, the wait
    /// nodes and the run queue, so at most a few steps per free slot; and it leaves no free
    /// slot, so each slot the next one frees was freed by a task that finished in between.
    pub fn compact_task_slots(&mut self) {
        /// Below this many free slots (1 MB of them), the pages are not worth a pass. A debug
        /// build compacts small tables too, so that the test corpus goes through compaction.
        const MIN_FREE_SLOTS: usize =
            if cfg!(debug_assertions) { 1 } else { (1 << 20) / std::mem::size_of::<Waiter>() };
        let len = self.waiters.len();
        let live = self.live_tasks;
        let free = len - live;
        if free < MIN_FREE_SLOTS
            || 4 * free < live
            || self.wait_nodes.nodes.len() > 4 * free
            || self.run_queue.len() > 4 * free
        {
            return;
        }
        // The new slot of each task moved from above `live`, by its old slot minus `live`.
        let mut moved = vec![NONE; free];
        for old in live..len {
            if self.free_slots.is_free(old) {
                continue;
            }
            // There are as many free slots below `live` as pending tasks above it, and the
            // lowest free slot is below `live` until each of those tasks moved.
            let new = self.free_slots.take_lowest().expect("a free slot below the pending tasks' count");
            debug_assert!((new as usize) < live && self.waiters[old].body.is_some());
            let task = std::mem::replace(&mut self.waiters[old], Waiter::FREE);
            self.waiters[new as usize] = task;
            self.free_slots.release(old as WaiterId);
            moved[old - live] = new;
        }
        let new_slot = |slot: WaiterId| match (slot as usize).checked_sub(live).and_then(|i| moved.get(i)) {
            Some(&new) if new != NONE => new,
            _ => slot,
        };
        // Free nodes keep the slot of their last waiter, which nothing reads: rewriting it
        // too is harmless, and cheaper than telling free nodes apart.
        for node in self.wait_nodes.nodes.iter_mut() {
            node.0 = new_slot(node.0);
        }
        self.run_queue.for_each_mut(|entry| *entry = new_slot(*entry));
        if let Some(order) = &mut self.pending_order {
            for entry in order.iter_mut() {
                entry.1 = new_slot(entry.1);
            }
        }
        let kept = self.cut_free_top();
        debug_assert_eq!(kept, live);
    }

    /// Whether some task was spawned and did not finish.
    pub fn has_pending_tasks(&self) -> bool {
        self.live_tasks > 0
    }

    /// The tasks that were spawned and did not finish, oldest first. Only the slots of those
    /// hold a body while no task runs: a finished task's slot is free until it is reused.
    pub fn pending_tasks(&self) -> Vec<WaiterId> {
        self.pending_task_order().into_iter().map(|(_, slot)| slot).collect()
    }

    /// [`Machine::pending_tasks`] with their creation sequence numbers.
    pub(super) fn pending_task_order(&self) -> Vec<(u32, WaiterId)> {
        let mut pending: Vec<(u32, WaiterId)> = (0..self.waiters.len())
            .filter_map(|slot| {
                let w = &self.waiters[slot];
                w.body.is_some().then_some((w.seq, slot as WaiterId))
            })
            .collect();
        pending.sort_unstable();
        debug_assert_eq!(pending.len(), self.live_tasks);
        pending
    }

    /// Whether the task created `seq`-th is still pending in `slot`: a slot is reused once
    /// its task finished, a free slot has no body, and a free slot at the top of the table
    /// may have been cut off it.
    pub(super) fn is_pending(&self, seq: u32, slot: WaiterId) -> bool {
        self.waiters.get(slot as usize).is_some_and(|w| w.body.is_some() && w.seq == seq)
    }

    /// Whether finished tasks make up more than half of `pending_order` (with some slack, so
    /// that a small order is not listed afresh for a few finished tasks).
    pub(super) fn pending_order_outgrown(order: &VecDeque<(u32, WaiterId)>, live_tasks: usize) -> bool {
        order.len() > 2 * live_tasks + 1024
    }

    /// Calls `visit` on the pending tasks oldest first, as [`Machine::pending_tasks`] lists
    /// them, until it breaks, and returns what it broke with.
    ///
    /// Wait-cycle breaking asks for the pending tasks at every iteration that needs it, and a
    /// model can need one per instance (each waiting on a relation its own statement may
    /// still extend). Listing them afresh each time (every slot, sorted) made such models
    /// quadratic: 13.6 s for 16,000 instances. So the first call lists them and from then on
    /// `spawn` appends to that order; a visit drops the finished tasks it passes at the front,
    /// and the order is listed afresh when finished tasks make up more than half of it. A
    /// visit that breaks at the first tasks, as wait-cycle breaking usually does, costs little.
    pub fn visit_pending_tasks<B>(&mut self, mut visit: impl FnMut(&Machine, WaiterId) -> ControlFlow<B>) -> Option<B> {
        let mut order = match self.pending_order.take() {
            Some(order) if !Self::pending_order_outgrown(&order, self.live_tasks) => order,
            _ => self.pending_task_order().into(),
        };
        while let Some(&(seq, slot)) = order.front() {
            if self.is_pending(seq, slot) {
                break;
            }
            order.pop_front();
        }
        let mut result = None;
        for &(seq, slot) in &order {
            if self.is_pending(seq, slot)
                && let ControlFlow::Break(b) = visit(self, slot)
            {
                result = Some(b);
                break;
            }
        }
        self.pending_order = Some(order);
        result
    }

    /// Whether a pending task is what the reference runs as an `ExecutionUnit`: the
    /// evaluation of an expression or a statement into its target, as opposed to a plugin
    /// call, a hook, a lookup or a lazy operator, which wait in units of other kinds.
    pub fn is_execution_unit(&self, waiter: WaiterId) -> bool {
        matches!(self.waiters[waiter as usize].body, Some(Body::Exec { .. }))
    }

    /// Where a pending task's code is, for "not all statements executed".
    pub fn waiter_location(&self, waiter: WaiterId) -> Option<Location> {
        let p = &self.program;
        match self.waiters[waiter as usize].body.as_ref()? {
            Body::Exec { what: Exec::Expr(e), .. } => Some(self.code.location(*e)),
            Body::Exec { what: Exec::Stmt(s), .. } | Body::SetAttr { stmt: s, .. } => Some(p.stmt(*s).location),
            Body::Lazy { expr, .. } | Body::Lookup { expr, .. } | Body::Call { expr, .. } => {
                Some(self.code.location(*expr))
            }
            Body::Hook { location, .. } | Body::IsDefinedWait { location, .. } => Some(self.loc(*location)),
            _ => None,
        }
    }

    /// The requirement cells of a pending task (following proxies), for wait-cycle breaking.
    pub fn requirement_cells(&self, waiter: WaiterId) -> impl Iterator<Item = CellId> + '_ {
        self.task_requirements(waiter).iter().filter_map(|&(_, c)| {
            let mut c = c;
            loop {
                let cell = &self.cells[c as usize];
                if cell.kind() != CellKind::Proxy {
                    return Some(c);
                }
                c = cell.target()?;
            }
        })
    }

    /// Asks the processor to start loading what the next entries of the run queue will touch,
    /// while the current one runs. The evaluator's time goes mostly to cache misses: the
    /// task slots and cells of a large model are spread over hundreds of megabytes, and a
    /// task's first access to its slot and to its requirement cells each waits for memory.
    /// Three stages, as in software pipelining, each reading only what an earlier call asked
    /// for, two entries apart (one entry apart left many loads still waiting: resumptions
    /// and deferred tasks run in a fraction of a task's time):
    ///
    /// * the fifth entry after the current one: a task's slot; a resumption's cells (the
    ///   proxy it connects and the cell it connects it to); a deferred task's target cell;
    /// * the third: a task's requirement cells and target cell; the wait node of the
    ///   task that a resumption's requirement proxy holds;
    /// * the next entry: the shared values (their reference counts) held by a task's
    ///   requirement cells; the slot of the task that a requirement proxy holds, whose
    ///   requirement list the resumption rewrites.
    ///
    /// `current` is the entry just taken from the run queue, which has not run yet: when it
    /// is a resumption or a deferred task, it is still the front of its queue.
    pub fn prefetch_upcoming(&self, current: WaiterId) {
        // Near the end of the queue, or of its front block, nothing is prefetched: that is a
        // few entries in thousands.
        let upcoming = self.run_queue.front_block();
        let Some(&[next, first_gap, third, second_gap, fifth]) = upcoming.first_chunk::<5>() else { return };
        let resumptions = self.resumptions.front_block();
        // Where each upcoming resumption is in its own queue: after the current entry and the
        // entries before it that are one.
        let is_resumption = |entry: WaiterId| usize::from(entry == RESUMPTION);
        let mut resumption = is_resumption(current);
        self.prefetch_entry(0, next, resumptions, resumption);
        resumption += is_resumption(next) + is_resumption(first_gap);
        self.prefetch_entry(2, third, resumptions, resumption);
        resumption += is_resumption(third) + is_resumption(second_gap);
        if fifth == DEFERRED {
            let is_deferred = |entry: WaiterId| usize::from(entry == DEFERRED);
            let deferred = is_deferred(current)
                + is_deferred(next)
                + is_deferred(first_gap)
                + is_deferred(third)
                + is_deferred(second_gap);
            if let Some(task) = self.deferred.front_block().get(deferred)
                && let Some(cell) = self.cells.get(task.target as usize)
            {
                prefetch(cell);
            }
        } else {
            self.prefetch_entry(4, fifth, resumptions, resumption);
        }
    }

    /// One stage of [`Self::prefetch_upcoming`] for the entry `ahead` places after the
    /// current one, a task or a resumption (`resumptions[resumption]` if it is one).
    #[inline(always)]
    pub(super) fn prefetch_entry(
        &self,
        ahead: usize,
        entry: WaiterId,
        resumptions: &[(Resumer, CellId)],
        resumption: usize,
    ) {
        if is_task_slot(entry) {
            self.prefetch_task(ahead, entry);
        } else if entry == RESUMPTION
            && let Some(&(resumer, cell)) = resumptions.get(resumption)
        {
            self.prefetch_resumption(ahead, resumer, cell);
        }
    }

    #[inline(always)]
    pub(super) fn prefetch_task(&self, ahead: usize, task: WaiterId) {
        match ahead {
            4 => {
                let slot = &self.waiters[task as usize];
                prefetch(slot);
                prefetch((slot as *const Waiter).wrapping_byte_add(std::mem::size_of::<Waiter>() - 1));
            }
            2 => {
                let task = &self.waiters[task as usize];
                for &(_, cell) in Self::requirements_in(task, &self.spilled_requirements) {
                    prefetch(&self.cells[cell as usize]);
                }
                // The cell the task will set.
                if let Some(cell) = Self::target_cell(task) {
                    prefetch(&self.cells[cell as usize]);
                }
            }
            0 => {
                let task = &self.waiters[task as usize];
                for &(_, cell) in Self::requirements_in(task, &self.spilled_requirements) {
                    // A clone of a shared value writes its reference count, which is at the
                    // address the payload holds.
                    if let Some(shared) = self.cells[cell as usize].shared_value_address() {
                        prefetch(shared);
                    }
                }
                // The last node of the target cell's waiter list, which setting the cell
                // reads to wake its waiters (see `prefetch_first_waiter`).
                if let Some(cell) = Self::target_cell(task)
                    && let Some(node) =
                        self.wait_nodes.nodes.get(self.cells[cell as usize].waiters(&self.exts).tail as usize)
                {
                    prefetch(node);
                }
            }
            _ => {}
        }
    }

    /// The cell a task sets, if it sets one.
    #[inline(always)]
    fn target_cell(task: &Waiter) -> Option<CellId> {
        match &task.body {
            Some(
                Body::Exec { target: cell, .. }
                | Body::Lazy { target: cell, .. }
                | Body::Lookup { target: cell, .. }
                | Body::Cond { result: cell, .. }
                | Body::Call { result: cell, .. },
            ) => Some(*cell),
            _ => None,
        }
    }

    /// Has the processor load the task slot of a cell's first waiter, which setting the cell
    /// wakes (a write to the slot's wait count), while the set runs its type check: the slots
    /// of waiting tasks are spread over the whole task table. The wait node it reads was
    /// prefetched with the task that sets the cell.
    #[inline]
    pub(super) fn prefetch_first_waiter(&self, cell: CellId) {
        let tail = self.cells[cell as usize].waiters(&self.exts).tail;
        if tail == NONE {
            return;
        }
        if let Some(&(_, first)) = self.wait_nodes.nodes.get(tail as usize)
            && let Some(&(waiter, _)) = self.wait_nodes.nodes.get(first as usize)
            && let Some(slot) = self.waiters.get(waiter as usize)
        {
            prefetch(slot);
        }
    }

    #[inline(always)]
    pub(super) fn prefetch_resumption(&self, ahead: usize, resumer: Resumer, cell: CellId) {
        // The wait node of a requirement proxy: one task holds such a proxy nearly always,
        // and a list of one node is its own successor, so the tail node names the task.
        let requirement_node = || match resumer {
            Resumer::Requirement(proxy) => {
                self.wait_nodes.nodes.get(self.cells[proxy as usize].waiters(&self.exts).tail as usize)
            }
            _ => None,
        };
        match ahead {
            4 => {
                prefetch(&self.cells[cell as usize]);
                if let Resumer::Reader(proxy) | Resumer::Requirement(proxy) = resumer {
                    prefetch(&self.cells[proxy as usize]);
                }
            }
            2 => {
                if let Some(node) = requirement_node() {
                    prefetch(node);
                }
            }
            0 => {
                if let Some(&(task, _)) = requirement_node()
                    && let Some(slot) = self.waiters.get(task as usize)
                {
                    prefetch(slot);
                }
            }
            _ => {}
        }
    }

    /// Where a cell's value was set.
    pub fn cell_location(&self, cell: CellId) -> Option<Location> {
        self.locations.get(self.cells[cell as usize].location_index(&self.exts))
    }

    /// Asks the processor to start loading a cell that the caller will look at soon: the
    /// scheduler's freeze decisions walk long lists of cells spread over the whole table.
    #[inline]
    pub fn prefetch_cell(&self, cell: CellId) {
        if let Some(c) = self.cells.get(cell as usize) {
            prefetch(c);
        }
    }

    /// The second stage of [`Self::prefetch_cell`], a few places later, once the cell is in
    /// the cache: its extension, which the freeze decisions read too (waiter counts,
    /// promises, listeners).
    #[inline]
    pub fn prefetch_cell_extension(&self, cell: CellId) {
        if let Some(ext) = self.cells.get(cell as usize).and_then(Cell::ext_index)
            && let Some(x) = self.exts.get(ext)
        {
            prefetch(x);
        }
    }

    pub fn has_value(&self, cell: CellId) -> bool {
        self.cells[cell as usize].has_value()
    }
}
