//! The reference's scheduler loop (spec §3.5) and end-of-compile checks (§3.13).

use std::collections::VecDeque;

use weft_ir::ErrorKind;
use weft_ir::Symbol;
use weft_ir::program::EntityId;
use weft_vm::{CellId, EvalError, Fifo, Machine};

/// The reference's default `INMANTA_MAX_ITERATIONS`.
pub const MAX_ITERATIONS: usize = 100_000;

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

    fn pop(&mut self) -> Option<CellId> {
        self.relations.pop_front().or_else(|| self.others.pop_front())
    }

    fn is_empty(&self) -> bool {
        self.relations.is_empty() && self.others.is_empty()
    }
}

/// Runs the event loop to the end and performs the final checks. Returns the number of
/// iterations, or the errors (the reported one first).
pub fn run(machine: &mut Machine, max_iterations: usize) -> Result<usize, Vec<EvalError>> {
    machine.start().map_err(|e| vec![e])?;
    let mut queue = WaitQueue::default();
    let mut zerowaiters: VecDeque<CellId> = VecDeque::new();
    let mut i = 0;
    while i < max_iterations {
        queue.absorb(machine);
        if machine.run_queue.is_empty() && queue.is_empty() && zerowaiters.is_empty() {
            break;
        }
        i += 1;
        // 1. Drain the run queue.
        while let Some(w) = machine.run_queue.pop_front() {
            machine.prefetch_upcoming();
            machine.execute(w).map_err(|e| vec![e])?;
        }
        queue.absorb(machine);
        // 2. Freeze the first cell that can be frozen and that someone waits for.
        let mut progress = false;
        while !progress {
            let Some(cell) = queue.pop() else { break };
            if machine.has_value(cell) {
                continue;
            }
            if machine.progress_potential(cell) <= 0 {
                zerowaiters.push_back(cell);
            } else if machine.outstanding_providers(cell) > 0 {
                machine.unqueue(cell);
            } else {
                machine.freeze(cell);
                progress = true;
            }
        }
        // 3. Retry the cells nobody waited for, if they gained waiters since.
        if !progress {
            let pending: Vec<CellId> = zerowaiters.iter().copied().filter(|&c| !machine.has_value(c)).collect();
            let mut retry = WaitQueue::default();
            zerowaiters.clear();
            for c in pending {
                if machine.progress_potential(c) > 0 {
                    retry.push(machine, c);
                } else {
                    zerowaiters.push_back(c);
                }
            }
            while !progress {
                let Some(cell) = retry.pop() else { break };
                if machine.outstanding_providers(cell) > 0 {
                    machine.unqueue(cell);
                } else {
                    machine.freeze(cell);
                    progress = true;
                }
            }
            // Whatever was not examined stays queued for the next iteration, as the
            // reference's queue keeps it.
            while let Some(c) = retry.pop() {
                queue.push(machine, c);
            }
        }
        // 4. Break a wait cycle.
        if !progress {
            progress = break_wait_cycle(machine);
        }
        // 5. Flush: freeze everything nobody waits for.
        if !progress {
            while let Some(cell) = zerowaiters.pop_back() {
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

/// Step 4: a relation with outstanding providers that a waiter needs, where those providers
/// themselves wait (directly or not) for something only a freeze can give.
fn break_wait_cycle(machine: &mut Machine) -> bool {
    let mut candidates = WaitQueue::default();
    for w in machine.pending_tasks() {
        for cell in machine.requirement_cells(w) {
            if !machine.cells[cell as usize].is_delayed() || machine.has_value(cell) {
                continue;
            }
            if machine.outstanding_providers(cell) > 0 && machine.progress_potential(cell) > 0 {
                candidates.push(machine, cell);
            }
        }
    }
    match candidates.pop() {
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
        let (entity, has_impl, location) = {
            let i = &machine.instances[inst as usize];
            (i.entity, !i.implementations.is_empty(), Some(machine.last_location(inst)))
        };
        let slots: Vec<(Symbol, CellId)> = machine.instance_slots(inst).collect();
        let e = program.entity(entity);
        if !has_impl {
            let simple = e.name.rsplit("::").next().unwrap_or(&e.name);
            let mut err = EvalError::new(
                ErrorKind::RuntimeException,
                format!("Unable to select implementation for entity {simple}"),
            );
            err.location = location;
            errors.push(err);
        }
        for (name, cell) in slots {
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
            let attr_location = program.location_text(a.location);
            let message = match a.kind {
                weft_ir::program::AttributeKind::Relation(r) if r.is_multi() => format!(
                    "The object {display} is not complete: attribute {} ({attr_location}) requires {} values but only {} are set",
                    program.name(name),
                    r.lower,
                    machine.items(cell).len()
                ),
                _ => format!(
                    "The object {display} is not complete: attribute {} ({attr_location}) is not set",
                    program.name(name)
                ),
            };
            errors.push(EvalError::new(ErrorKind::UnsetException, message));
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
        if let Some(&w) = machine.pending_tasks().first() {
            e.location = machine.waiter_location(w);
        }
        return Err(vec![e]);
    }
    Ok(())
}
