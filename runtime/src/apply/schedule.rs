//! Deploying in dependency order, in parallel.
//!
//! Every resource of the share has an atomic count of requirements that have not finished.
//! Resources with none start at once; the worker that finishes a resource decrements the
//! counts of its dependents and starts those that reach zero: one it continues with itself,
//! the others it spawns onto the rayon pool. There is no global lock and no level-by-level
//! barrier, so the overhead per resource is a few atomic operations and, at most, one spawn.
//!
//! Failure propagates through the same path: a resource whose requirement failed or was
//! skipped still becomes ready, sees the outcome, and is skipped without running its handler.
//! A resource on a dependency cycle never becomes ready; after the pool is done it is
//! reported as failed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use super::ApplyOptions;
use super::handler::Engine;
use super::report::{ResourceReport, Status};
use crate::graph::{ResourceGraph, UNDEFINED};

/// Marks a graph index outside the deployed share.
const OUTSIDE: usize = usize::MAX;

/// A resource's outcome as its dependents read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Outcome {
    Pending = 0,
    Changed = 1,
    Unchanged = 2,
    Failed = 3,
    Skipped = 4,
}

impl Outcome {
    fn of(status: Status) -> Outcome {
        match status {
            Status::Changed => Outcome::Changed,
            Status::Unchanged => Outcome::Unchanged,
            Status::Failed => Outcome::Failed,
            Status::Skipped => Outcome::Skipped,
        }
    }

    fn from_u8(value: u8) -> Outcome {
        match value {
            1 => Outcome::Changed,
            2 => Outcome::Unchanged,
            3 => Outcome::Failed,
            4 => Outcome::Skipped,
            _ => Outcome::Pending,
        }
    }
}

/// Adjacency lists in one flat array: the items of node `n` are
/// `targets[offsets[n]..offsets[n + 1]]`.
#[derive(Debug, Default)]
struct Adjacency {
    offsets: Vec<usize>,
    targets: Vec<usize>,
}

impl Adjacency {
    fn of(&self, node: usize) -> &[usize] {
        &self.targets[self.offsets[node]..self.offsets[node + 1]]
    }
}

/// The share of the graph to deploy and its edges, in slot numbers (positions in `members`).
#[derive(Debug)]
struct Plan {
    /// Slot to graph index.
    members: Vec<usize>,
    /// Slot to the slots it requires (those outside the share are left out: satisfied).
    requires: Adjacency,
    /// Slot to the slots that require it.
    dependents: Adjacency,
    /// Per slot, the first requirement index that is not in the graph at all, if any.
    dangling: Vec<Option<usize>>,
}

impl Plan {
    fn new(graph: &ResourceGraph, agent: Option<&str>) -> Plan {
        let count = graph.resources.len();
        let mut slot_of = vec![OUTSIDE; count];
        let mut members = Vec::with_capacity(count);
        for (index, resource) in graph.resources.iter().enumerate() {
            if agent.is_none_or(|agent| resource.id.agent == agent) {
                slot_of[index] = members.len();
                members.push(index);
            }
        }
        let mut requires = Adjacency { offsets: Vec::with_capacity(members.len() + 1), targets: Vec::new() };
        let mut dangling = vec![None; members.len()];
        let mut dependent_counts = vec![0usize; members.len()];
        requires.offsets.push(0);
        for (slot, &index) in members.iter().enumerate() {
            let start = requires.targets.len();
            for &required in &graph.resources[index].requires {
                match slot_of.get(required) {
                    None => {
                        dangling[slot].get_or_insert(required);
                    }
                    Some(&OUTSIDE) => {}
                    Some(&required_slot) => requires.targets.push(required_slot),
                }
            }
            // The graph keeps requires sorted and unique; a hand-built one might not, and a
            // duplicate edge would be counted twice below.
            requires.targets[start..].sort_unstable();
            let mut unique = start;
            for at in start..requires.targets.len() {
                if at == start || requires.targets[at] != requires.targets[unique - 1] {
                    requires.targets[unique] = requires.targets[at];
                    unique += 1;
                }
            }
            requires.targets.truncate(unique);
            for &required_slot in &requires.targets[start..] {
                dependent_counts[required_slot] += 1;
            }
            requires.offsets.push(requires.targets.len());
        }
        let mut dependents = Adjacency { offsets: Vec::with_capacity(members.len() + 1), targets: Vec::new() };
        dependents.offsets.push(0);
        for count in &dependent_counts {
            dependents.offsets.push(dependents.offsets.last().copied().unwrap_or(0) + count);
        }
        dependents.targets = vec![0; requires.targets.len()];
        let mut fill = dependents.offsets.clone();
        for slot in 0..members.len() {
            for &required_slot in requires.of(slot) {
                dependents.targets[fill[required_slot]] = slot;
                fill[required_slot] += 1;
            }
        }
        Plan { members, requires, dependents, dangling }
    }
}

/// The state of one apply, shared by its workers.
struct Run<'g> {
    graph: &'g ResourceGraph,
    options: &'g ApplyOptions,
    plan: Plan,
    engine: Engine<'g>,
    /// Per slot, the number of requirements not finished yet.
    pending: Vec<AtomicUsize>,
    /// Per slot, its [`Outcome`], written before its dependents' counts are decremented.
    outcomes: Vec<AtomicU8>,
    reports: Vec<OnceLock<ResourceReport>>,
    finished: AtomicUsize,
}

/// Deploys the share of `graph` that `options` selects; reports are in graph order.
pub(super) fn run(graph: &ResourceGraph, options: &ApplyOptions) -> Vec<ResourceReport> {
    let plan = Plan::new(graph, options.agent.as_deref());
    let slots = plan.members.len();
    let state = Run {
        graph,
        options,
        pending: (0..slots).map(|slot| AtomicUsize::new(plan.requires.of(slot).len())).collect(),
        outcomes: (0..slots).map(|_| AtomicU8::new(Outcome::Pending as u8)).collect(),
        reports: (0..slots).map(|_| OnceLock::new()).collect(),
        finished: AtomicUsize::new(0),
        engine: Engine::new(graph, options),
        plan,
    };
    let ready: Vec<usize> = (0..slots).filter(|&slot| state.plan.requires.of(slot).is_empty()).collect();
    match options.threads.map(|threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build()) {
        Some(Ok(pool)) => pool.scope(|scope| state.start(scope, ready)),
        // A pool that cannot be built (the system refuses threads) still leaves the global
        // one, which is better than not deploying.
        Some(Err(_)) | None => rayon::scope(|scope| state.start(scope, ready)),
    }
    let Run { reports, plan, graph, .. } = state;
    reports
        .into_iter()
        .zip(&plan.members)
        .map(|(report, &index)| {
            report.into_inner().unwrap_or_else(|| ResourceReport {
                id: graph.resources[index].id.text(),
                status: Status::Failed,
                changes: Vec::new(),
                message: Some("never started: the resource is on a dependency cycle or requires one".to_string()),
                notified: false,
            })
        })
        .collect()
}

impl<'g> Run<'g> {
    /// Spawns the resources that require nothing.
    fn start<'s>(&'s self, scope: &rayon::Scope<'s>, ready: Vec<usize>) {
        for slot in ready {
            scope.spawn(move |scope| self.deploy_from(scope, slot));
        }
    }

    /// Deploys `slot`, then keeps deploying one dependent it made ready (spawning the others),
    /// so a chain runs on one worker without a spawn per link.
    fn deploy_from<'s>(&'s self, scope: &rayon::Scope<'s>, mut slot: usize) {
        loop {
            let report = self.deploy(slot);
            self.outcomes[slot].store(Outcome::of(report.status) as u8, Ordering::Release);
            let _ = self.reports[slot].set(report);
            let done = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
            if let Some(progress) = &self.options.progress {
                progress(done, self.plan.members.len());
            }
            let mut next = None;
            for &dependent in self.plan.dependents.of(slot) {
                // AcqRel: the worker that takes a count to zero sees every outcome stored
                // before the other decrements.
                if self.pending[dependent].fetch_sub(1, Ordering::AcqRel) == 1 {
                    match next {
                        None => next = Some(dependent),
                        Some(_) => scope.spawn(move |scope| self.deploy_from(scope, dependent)),
                    }
                }
            }
            match next {
                Some(dependent) => slot = dependent,
                None => return,
            }
        }
    }

    /// Deploys one ready resource: skips it when it or a requirement cannot be deployed,
    /// otherwise runs its handler.
    fn deploy(&self, slot: usize) -> ResourceReport {
        let index = self.plan.members[slot];
        let resource = &self.graph.resources[index];
        let not_deployed = |status: Status, message: String| ResourceReport {
            id: resource.id.text(),
            status,
            changes: Vec::new(),
            message: Some(message),
            notified: false,
        };
        if let Some(missing) = self.plan.dangling[slot] {
            return not_deployed(Status::Failed, format!("requires resource #{missing}, which is not in the graph"));
        }
        if resource.undefined {
            let unknown: Vec<String> = resource
                .fields
                .iter()
                .filter(|(_, v)| v.as_str() == Some(UNDEFINED))
                .map(|(k, _)| k.into_owned())
                .collect();
            return not_deployed(Status::Skipped, format!("undefined: the value of {} is unknown", unknown.join(", ")));
        }
        // A report-only resource changes nothing, so, as in the reference, it is compared
        // whatever its requirements' outcomes.
        let report_only = resource.fields.value_text("report_only") == Some("true");
        let requirements: &[usize] = if report_only { &[] } else { self.plan.requires.of(slot) };
        let mut notified = false;
        for &required_slot in requirements {
            let required = &self.graph.resources[self.plan.members[required_slot]];
            match Outcome::from_u8(self.outcomes[required_slot].load(Ordering::Acquire)) {
                Outcome::Failed => {
                    return not_deployed(Status::Skipped, format!("skipped because dependency {} failed", required.id));
                }
                Outcome::Skipped if required.undefined => {
                    return not_deployed(
                        Status::Skipped,
                        format!("skipped because dependency {} is undefined", required.id),
                    );
                }
                Outcome::Skipped => {
                    return not_deployed(
                        Status::Skipped,
                        format!("skipped because dependency {} was skipped", required.id),
                    );
                }
                Outcome::Changed => notified |= required.fields.value_text("send_event") == Some("true"),
                Outcome::Unchanged | Outcome::Pending => {}
            }
        }
        let receives = resource.fields.value_text("receive_events") != Some("false");
        self.engine.deploy(&resource.id, &resource.fields, notified && receives)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Resource, ResourceId};

    fn graph(edges: &[&[usize]], agents: &[&str]) -> ResourceGraph {
        let resources = edges
            .iter()
            .enumerate()
            .map(|(n, requires)| Resource {
                id: ResourceId {
                    entity_type: "std::testing::NullResource".into(),
                    agent: agents[n % agents.len()].into(),
                    attribute: "name".into(),
                    value: n.to_string(),
                },
                fields: crate::graph::Fields::new(),
                requires: requires.to_vec(),
                undefined: false,
            })
            .collect();
        ResourceGraph { version: 0, resources, files: Default::default() }
    }

    #[test]
    fn plan_builds_both_directions_within_the_share() {
        let graph = graph(&[&[], &[0], &[0, 1, 1], &[2, 9]], &["a", "b"]);
        let all = Plan::new(&graph, None);
        assert_eq!(all.requires.of(2), &[0, 1]);
        assert_eq!(all.dependents.of(0), &[1, 2]);
        assert_eq!(all.dangling, vec![None, None, None, Some(9)]);
        // Agent a holds resources 0 and 2; 2's requirement on 1 (agent b) is left out.
        let share = Plan::new(&graph, Some("a"));
        assert_eq!(share.members, vec![0, 2]);
        assert_eq!(share.requires.of(1), &[0]);
        assert_eq!(share.dependents.of(0), &[1]);
    }

    #[test]
    fn cycles_and_dangling_edges_fail_without_panicking() {
        let graph = graph(&[&[1], &[0], &[], &[7]], &["a"]);
        let reports = run(&graph, &ApplyOptions::default());
        let statuses: Vec<Status> = reports.iter().map(|r| r.status).collect();
        assert_eq!(statuses, vec![Status::Failed, Status::Failed, Status::Unchanged, Status::Failed]);
        assert!(reports[0].message.as_deref().unwrap().contains("dependency cycle"));
        assert_eq!(reports[3].message.as_deref(), Some("requires resource #7, which is not in the graph"));
    }
}
