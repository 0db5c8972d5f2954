//! The reference's scheduler loop (spec §3.5) and end-of-compile checks (§3.13).

use std::collections::VecDeque;
use std::ops::ControlFlow;

use hashbrown::HashSet;

use weft_ir::ErrorKind;
use weft_ir::program::EntityId;
use weft_vm::{CellId, EvalError, Fifo, InstanceId, Machine};

use crate::memory::{self, Bytes, CHECK_EVERY, MemoryLimit};

/// The reference's default `INMANTA_MAX_ITERATIONS`.
pub const MAX_ITERATIONS: usize = 100_000;

/// How many cells ahead the scheduler's walks over cells prefetch a cell's extension; they
/// prefetch the cell itself twice as far ahead.
const PREFETCH_DISTANCE: usize = 8;

/// The prefetching of a walk over cells, given the cell `distance` places ahead of the one
/// being taken: the cell far ahead, and the extension of the one half as far, whose cell the
/// walk prefetched earlier. Each cell examined is a cache miss otherwise, and a freeze
/// decision can examine thousands.
#[inline]
fn prefetch_ahead(machine: &Machine, ahead: impl Fn(usize) -> Option<CellId>) {
    if let Some(cell) = ahead(2 * PREFETCH_DISTANCE) {
        machine.prefetch_cell(cell);
    }
    if let Some(cell) = ahead(PREFETCH_DISTANCE) {
        machine.prefetch_cell_extension(cell);
    }
}

/// The reference's `PrioritisedDelayedResultVariableQueue` without precedence rules: relation
/// cells first, in the order they were queued, then the other delayed cells.
#[derive(Default)]
struct WaitQueue {
    relations: Fifo<CellId>,
    others: Fifo<CellId>,
}

impl WaitQueue {
    fn push(&mut self, machine: &Machine, cell: CellId) {
        if machine.is_relation(cell) {
            self.relations.push_back(cell);
        } else {
            self.others.push_back(cell);
        }
    }

    /// Takes the cells the machine queued since the last call.
    fn absorb(&mut self, machine: &mut Machine) {
        while let Some((c, relation)) = machine.wait_queue.pop_front() {
            if relation {
                self.relations.push_back(c);
            } else {
                self.others.push_back(c);
            }
        }
    }

    /// Takes the next cell, and has the processor load the cells a few places behind it
    /// ([`prefetch_ahead`]).
    fn pop(&mut self, machine: &Machine) -> Option<CellId> {
        let queue = if self.relations.is_empty() { &self.others } else { &self.relations };
        prefetch_ahead(machine, |distance| queue.get(distance).copied());
        self.relations.pop_front().or_else(|| self.others.pop_front())
    }

    fn is_empty(&self) -> bool {
        self.relations.is_empty() && self.others.is_empty()
    }
}

/// The reference's zerowaiters: the delayed cells step 2 set aside because nobody waits for
/// them, oldest first. Step 3 takes out those frozen since and moves those that gained waiters
/// back to the queue; the reference rebuilds the list for that, which made a model that
/// reaches step 3 once per instance quadratic. Only two events change a cell's fate here, its
/// freeze and a new waiter (the only ways it gains a value or progress potential), so the
/// machine reports those for the cells set aside and step 3 looks at them alone.
///
/// A cell is set aside once at a time (it stays queued meanwhile, and the machine queues a
/// cell only once), and the machine's watch flag (`Machine::watch_zerowaiter`) says whether it
/// is: an entry whose cell is not watched any more was taken out. A frozen cell never comes
/// back; one moved back to the queue may, so its entry is removed when it moves, which costs a
/// pass over the entries but happens only for cells that gained waiters.
#[derive(Default)]
struct ZeroWaiters {
    entries: VecDeque<CellId>,
    /// How many cells are set aside (the entries of watched cells).
    members: usize,
}

impl ZeroWaiters {
    fn push(&mut self, machine: &mut Machine, cell: CellId) {
        debug_assert!(!machine.is_watched_zerowaiter(cell), "cell {cell} set aside twice");
        self.entries.push_back(cell);
        self.members += 1;
        machine.watch_zerowaiter(cell, true);
        if self.entries.len() > 2 * self.members + 64 {
            self.entries.retain(|&cell| machine.is_watched_zerowaiter(cell));
        }
    }

    fn is_empty(&self) -> bool {
        self.members == 0
    }

    fn take_out(&mut self, machine: &mut Machine, cell: CellId) {
        machine.watch_zerowaiter(cell, false);
        self.members -= 1;
    }

    /// Step 3: forgets the cells frozen since they were set aside, and takes out those that
    /// gained progress potential, in the order they were set aside.
    fn take_revived(&mut self, machine: &mut Machine) -> Vec<CellId> {
        let mut events = machine.take_zerowaiter_events();
        events.sort_unstable();
        events.dedup();
        let mut revived: HashSet<CellId> = HashSet::new();
        for cell in events {
            if !machine.is_watched_zerowaiter(cell) {
                continue;
            }
            if machine.has_value(cell) {
                self.take_out(machine, cell);
            } else if machine.progress_potential(cell) > 0 {
                revived.insert(cell);
            }
        }
        if revived.is_empty() {
            return Vec::new();
        }
        let mut in_order = Vec::with_capacity(revived.len());
        self.entries.retain(|&cell| {
            let revive = revived.contains(&cell) && machine.is_watched_zerowaiter(cell);
            if revive {
                in_order.push(cell);
            }
            !revive
        });
        for &cell in &in_order {
            self.take_out(machine, cell);
        }
        in_order
    }

    /// Step 5: takes the cell set aside last.
    fn pop_back(&mut self, machine: &mut Machine) -> Option<CellId> {
        while let Some(cell) = self.entries.pop_back() {
            // Taken from the back: the cells ahead are the ones before it.
            let entries = &self.entries;
            prefetch_ahead(machine, |distance| {
                entries.len().checked_sub(distance).and_then(|i| entries.get(i)).copied()
            });
            if machine.is_watched_zerowaiter(cell) {
                self.take_out(machine, cell);
                return Some(cell);
            }
        }
        None
    }
}

/// How many tasks run between two chances for the machine to compact its task slots
/// (`Machine::compact_task_slots`, which declines in a few comparisons when it is not worth
/// it): often enough that the table follows the pending tasks down within a long drain of the
/// run queue, where the 93k-instance benchmark's resident memory peaks. Entries in the
/// machine's queue of delayed cells move to the scheduler's at the same time, at half the
/// size (324k of them waited for the end of that drain). A divisor of [`CHECK_EVERY`], whose
/// countdown it shares; a debug build takes the chance far more often, so that the test
/// corpus goes through compactions in the middle of drains.
const COMPACT_EVERY: u32 = if cfg!(debug_assertions) { 1 << 3 } else { 1 << 12 };
const _: () = assert!(CHECK_EVERY.is_multiple_of(COMPACT_EVERY));

/// Runs the event loop to the end and performs the final checks. Returns the number of
/// iterations, or the errors (the reported one first). With a memory limit, the evaluation
/// stops with an error once the process's resident memory exceeds it (see [`crate::memory`]).
pub fn run(
    machine: &mut Machine,
    max_iterations: usize,
    memory_limit: Option<&MemoryLimit>,
) -> Result<usize, Vec<EvalError>> {
    machine.start().map_err(|e| vec![e])?;
    let mut until_memory_check = CHECK_EVERY;
    let mut queue = WaitQueue::default();
    let mut zerowaiters = ZeroWaiters::default();
    let mut i = 0;
    while i < max_iterations {
        queue.absorb(machine);
        if machine.run_queue.is_empty() && queue.is_empty() && zerowaiters.is_empty() {
            break;
        }
        i += 1;
        // 1. Drain the run queue.
        while let Some(w) = machine.run_queue.pop_front() {
            machine.prefetch_upcoming(w);
            machine.execute(w).map_err(|e| vec![e])?;
            until_memory_check -= 1;
            if until_memory_check.is_multiple_of(COMPACT_EVERY) {
                machine.compact_task_slots();
                queue.absorb(machine);
                if until_memory_check == 0 {
                    until_memory_check = CHECK_EVERY;
                    if let Some(limit) = memory_limit {
                        check_memory(machine, limit).map_err(|e| vec![e])?;
                    }
                }
            }
        }
        machine.compact_task_slots();
        queue.absorb(machine);
        // 2. Freeze the first cell that can be frozen and that someone waits for.
        let mut progress = false;
        while !progress {
            let Some(cell) = queue.pop(machine) else { break };
            if machine.has_value(cell) {
                continue;
            }
            if machine.progress_potential(cell) <= 0 {
                zerowaiters.push(machine, cell);
            } else if machine.outstanding_providers(cell) > 0 {
                machine.unqueue(cell);
            } else {
                machine.freeze(cell);
                progress = true;
            }
        }
        // 3. Retry the cells nobody waited for, if they gained waiters since.
        if !progress {
            let mut retry = WaitQueue::default();
            for c in zerowaiters.take_revived(machine) {
                retry.push(machine, c);
            }
            while !progress {
                let Some(cell) = retry.pop(machine) else { break };
                if machine.outstanding_providers(cell) > 0 {
                    machine.unqueue(cell);
                } else {
                    machine.freeze(cell);
                    progress = true;
                }
            }
            // Whatever was not examined stays queued for the next iteration, as the
            // reference's queue keeps it.
            while let Some(c) = retry.pop(machine) {
                queue.push(machine, c);
            }
        }
        // 4. Break a wait cycle.
        if !progress {
            progress = break_wait_cycle(machine);
        }
        // 5. Flush: freeze everything nobody waits for.
        if !progress {
            while let Some(cell) = zerowaiters.pop_back(machine) {
                machine.freeze(cell);
            }
        }
    }
    if i == max_iterations {
        return Err(vec![EvalError::new(
            ErrorKind::CompilerException,
            format!("Could not complete model, max_iterations {max_iterations} reached."),
        )]);
    }
    final_checks(machine)?;
    Ok(i)
}

/// Stops the evaluation when the process holds more memory than `limit` allows. The error
/// names the entity with the most instances and where the last of them was constructed: a
/// model that outgrows any memory almost always does so by constructing instances without
/// end, and that constructor call is where to look.
#[cold]
fn check_memory(machine: &Machine, limit: &MemoryLimit) -> Result<(), EvalError> {
    let Some(resident) = memory::resident_bytes() else { return Ok(()) };
    if resident <= limit.bytes {
        return Ok(());
    }
    let program = machine.program();
    let mut counts = vec![0usize; program.entities.len()];
    let mut last = vec![0 as InstanceId; program.entities.len()];
    for id in 0..machine.instances.len() {
        let entity = machine.instances[id].entity.index();
        counts[entity] += 1;
        last[entity] = id as InstanceId;
    }
    let mut message = format!(
        "evaluation stopped: weft's memory ({}) passed its limit of {} ({}); the model holds {} instances",
        Bytes(resident),
        Bytes(limit.bytes),
        limit.origin,
        machine.instances.len()
    );
    let largest = (0..counts.len()).max_by_key(|&e| (counts[e], std::cmp::Reverse(e))).filter(|&e| counts[e] > 0);
    let mut location = None;
    if let Some(entity) = largest {
        message.push_str(&format!(
            ", {} of them `{}`, the last constructed here",
            counts[entity], program.entities[entity].name
        ));
        location = Some(machine.last_location(last[entity]));
    }
    let error = EvalError::new(ErrorKind::MemoryLimitException, message);
    Err(match location {
        Some(at) => error.at(at),
        None => error,
    })
}

/// Step 4: a relation with outstanding providers that a waiter needs, where those providers
/// themselves wait (directly or not) for something only a freeze can give. The candidates are
/// the requirements of the pending tasks, oldest task first, ordered as the wait queue orders
/// them: the first relation, or without one the first other cell. So the scan can stop at the
/// first relation.
fn break_wait_cycle(machine: &mut Machine) -> bool {
    let is_candidate = |machine: &Machine, cell: CellId| {
        machine.cells[cell as usize].is_delayed()
            && !machine.has_value(cell)
            && machine.outstanding_providers(cell) > 0
            && machine.progress_potential(cell) > 0
    };
    let mut first_other = None;
    let first_relation = machine.visit_pending_tasks(|machine, w| {
        for cell in machine.requirement_cells(w) {
            if !is_candidate(machine, cell) {
                continue;
            }
            if machine.is_relation(cell) {
                return ControlFlow::Break(cell);
            }
            first_other.get_or_insert(cell);
        }
        ControlFlow::Continue(())
    });
    match first_relation.or(first_other) {
        Some(cell) => {
            machine.freeze(cell);
            true
        }
        None => false,
    }
}

/// The end-of-compile checks: unmatched index lookups, instances without implementation,
/// incomplete attributes; then statements that never ran.
fn final_checks(machine: &mut Machine) -> Result<(), Vec<EvalError>> {
    let program = machine.program().clone();
    let mut errors: Vec<EvalError> = Vec::new();
    for (i, entity) in program.entities.iter().enumerate() {
        for (key, location) in machine.pending_lookups(EntityId(i as u32)) {
            errors.push(
                EvalError::new(
                    ErrorKind::NotFoundException,
                    format!("No match in index on type {} with key {key}", entity.name),
                )
                .at(location),
            );
        }
    }
    for inst in 0..machine.instances.len() as u32 {
        let (entity, has_impl) = {
            let i = &machine.instances[inst as usize];
            (i.entity, i.has_implementation())
        };
        let cells = machine.instance_cells(inst);
        let e = program.entity(entity);
        if !has_impl {
            let simple = e.name.rsplit("::").next().unwrap_or(&e.name);
            let mut err = EvalError::new(
                ErrorKind::RuntimeException,
                format!("Unable to select implementation for entity {simple}"),
            );
            err.location = Some(machine.last_location(inst));
            errors.push(err);
        }
        // The cells by index, with their names from the entity: the machine is needed
        // mutably below, to freeze.
        for (cell, &(name, _)) in cells.zip(&e.slots) {
            if machine.is_ready(cell) {
                continue;
            }
            if machine.cells[cell as usize].is_delayed() && machine.could_complete(cell) {
                machine.freeze(cell);
                continue;
            }
            let attr = e.slots.iter().find(|s| s.0 == name).map(|s| s.1).expect("slot");
            let a = program.attribute(attr);
            let display = machine.instance_display(inst);
            let attr_location = program.location_text_with_column(a.location);
            let message = match a.kind {
                weft_ir::program::AttributeKind::Relation(r) if r.is_multi() => format!(
                    "The object {display} is not complete: attribute {} ({attr_location}) requires {} values but only {} are set",
                    program.name(name),
                    r.lower,
                    machine.item_count(cell)
                ),
                _ => format!(
                    "The object {display} is not complete: attribute {} ({attr_location}) is not set",
                    program.name(name)
                ),
            };
            // The reference gives this error no place; it is shown at the constructor, with
            // the attribute's declaration, without changing the order errors are sorted in.
            let mut error = EvalError::new(ErrorKind::UnsetException, message);
            error.shown_at = Some((machine.last_location(inst), "this instance is not complete".to_string()));
            error.labels.push((a.location, format!("`{}` is declared here", program.name(name))));
            errors.push(error);
        }
    }
    if !errors.is_empty() {
        errors.sort_by(|a, b| {
            let key = |e: &EvalError| {
                let (file, line) = match e.location {
                    Some(l) => (program.files[l.file.0 as usize].display.clone(), program.line(l)),
                    None => (String::new(), 0),
                };
                (e.importance(), file, line)
            };
            key(a).cmp(&key(b))
        });
        return Err(errors);
    }
    if machine.has_pending_tasks() {
        let mut e = EvalError::new(ErrorKind::RuntimeException, "not all statements executed");
        // The reference reports the expression of the first pending `ExecutionUnit`, passing
        // over the plugin calls and hooks that wait before it.
        let pending = machine.pending_tasks();
        if let Some(&w) = pending.iter().find(|&&w| machine.is_execution_unit(w)).or(pending.first()) {
            e.location = machine.waiter_location(w);
        }
        return Err(vec![e]);
    }
    Ok(())
}
