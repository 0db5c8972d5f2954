//! Deploying a resource graph: the library part of `weft apply`.
//!
//! [`apply`] takes a [`ResourceGraph`] (what `inmanta export -j` writes, plus the file store) and
//! brings the host in line with it, the way the reference's agent does with its CRUD handlers:
//! for every resource it reads the current state, compares it with the desired state, and
//! creates, updates or deletes what differs. The outcome comes back as data, an
//! [`ApplyReport`], which the CLI renders.
//!
//! The pieces, in the order a resource meets them:
//!
//! * `schedule`: deploys in dependency order on a rayon pool. Every resource has an atomic
//!   count of unfinished requirements; the worker that finishes the last requirement of a
//!   resource starts it. A failed or skipped requirement makes its dependents skip. It also
//!   decides whether a resource is *notified* (a requirement that sends events changed).
//! * `secrets`: resolves the resource's references (`std::Environment`, `std::IntReference`)
//!   and runs its mutators on a private copy of the fields. Resolved values stay in that copy:
//!   reports show `<secret>` for the fields they fill, and messages are scrubbed of them.
//! * `handler`: the `Handler` trait (read the current state, diff, apply, reload) and the
//!   generic driver; one implementation per resource type in `null`, `file`, `directory`,
//!   `symlink` and `exec`. A `report_only` resource is only read and diffed.
//! * `atomic`: crash-safe file replacement (an unnamed `O_TMPFILE` written, chown-ed and
//!   chmod-ed before it gets a name and is renamed over the target); also what
//!   `std::generate_password` writes its store with.
//! * `report`: the report types and their text and JSON renderings.

mod accounts;
pub(crate) mod atomic;
mod directory;
mod exec;
mod file;
mod handler;
mod null;
mod report;
mod schedule;
mod secrets;
mod shlex;
mod symlink;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub use report::{ApplyReport, Change, ResourceReport, Status, Summary};

use crate::graph::ResourceGraph;

/// Called as resources finish, with the number finished so far and the number to deploy.
pub type ProgressCallback = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Reads an environment variable for `std::Environment` references.
pub type EnvironmentReader = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// How to deploy a graph.
#[derive(Clone)]
pub struct ApplyOptions {
    /// The directory paths are applied under; `/` deploys onto the host itself. Absolute paths
    /// in fields (file and directory paths, symlink `src` and `dst`, exec `creates` and `cwd`)
    /// are joined under it, so a graph can be deployed into a scratch directory.
    pub root: PathBuf,
    /// Computes and reports the changes without making any. Exec commands do not run, and
    /// neither do their `unless`/`onlyif` guard commands: such a resource reports that it
    /// would run.
    pub dry_run: bool,
    /// Deploys only the resources whose agent is this one. A requirement deployed by another
    /// agent counts as satisfied, as that agent deploys it on its own.
    pub agent: Option<String>,
    /// The number of worker threads; `None` uses rayon's global pool.
    pub threads: Option<usize>,
    /// Called each time a resource finishes (the CLI draws a progress bar from it).
    pub progress: Option<ProgressCallback>,
    /// How `std::Environment` references read variables; the process environment by default.
    pub environment: EnvironmentReader,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            root: PathBuf::from("/"),
            dry_run: false,
            agent: None,
            threads: None,
            progress: None,
            environment: Arc::new(|name: &str| std::env::var(name).ok()),
        }
    }
}

impl fmt::Debug for ApplyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The callbacks have no useful rendering; saying whether one is set is what a reader
        // of a debug dump needs.
        f.debug_struct("ApplyOptions")
            .field("root", &self.root)
            .field("dry_run", &self.dry_run)
            .field("agent", &self.agent)
            .field("threads", &self.threads)
            .field("progress", &self.progress.as_ref().map(|_| "<callback>"))
            .field("environment", &"<reader>")
            .finish()
    }
}

/// Deploys `graph` as `options` say and reports what happened to every resource of the
/// deployed share, in graph order.
///
/// Nothing in the graph makes this panic: malformed fields, unknown resource types, missing
/// file contents, dependency cycles and out-of-range requirement indices all become failed
/// resources in the report.
pub fn apply(graph: &ResourceGraph, options: &ApplyOptions) -> ApplyReport {
    let started = Instant::now();
    let mut resources = schedule::run(graph, options);
    // Files are not synced one by one; the apply is durable once the filesystem is flushed.
    if !options.dry_run
        && resources.iter().any(|r| r.status == Status::Changed)
        && let Err(error) = atomic::flush_filesystem(&options.root)
    {
        for resource in resources.iter_mut().filter(|r| r.status == Status::Changed) {
            resource.status = Status::Failed;
            resource.message = Some(format!("the changes could not be flushed to disk: {error}"));
        }
    }
    ApplyReport { resources, elapsed: started.elapsed(), dry_run: options.dry_run }
}
