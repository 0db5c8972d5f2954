//! What an apply did, as data, and its text and JSON renderings.

use std::fmt::{self, Write as _};
use std::time::Duration;

use serde_json::{Value as Json, json};

/// The outcome of one apply.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplyReport {
    /// One entry per deployed resource, in graph order.
    pub resources: Vec<ResourceReport>,
    /// Wall-clock time of the whole apply.
    pub elapsed: Duration,
    /// Whether this was a dry run: then `Changed` means "would change" and nothing was touched.
    pub dry_run: bool,
}

/// What happened to one resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceReport {
    /// The resource id without version: `type[agent,attribute=value]`.
    pub id: String,
    pub status: Status,
    /// The fields that differed from the desired state (and were changed, unless dry run).
    pub changes: Vec<Change>,
    /// Why the resource failed or was skipped, or a note on what the handler did.
    pub message: Option<String>,
    /// Whether a requirement that sends events changed, so the resource was notified; a
    /// handler that can reload (exec::Run) then reloaded.
    pub notified: bool,
}

/// The state a resource ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The host differed from the desired state and was changed (in a dry run: would be).
    Changed,
    /// The host already matched the desired state.
    Unchanged,
    /// The handler failed; the message says why.
    Failed,
    /// Not deployed: a requirement failed, was skipped or is undefined, the resource itself is
    /// undefined, the handler asked to skip it (exec::Run's `skip_on_fail`), or it is
    /// `report_only` and differs from its desired state (the reference's "non-compliant").
    Skipped,
}

impl Status {
    /// The lower-case name used in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Changed => "changed",
            Status::Unchanged => "unchanged",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field that differed. Values a reference filled in are shown as `"<secret>"`.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub field: String,
    pub current: Json,
    pub desired: Json,
}

impl Change {
    /// A change of `field` from `current` to `desired`.
    pub fn new(field: impl Into<String>, current: impl Into<Json>, desired: impl Into<Json>) -> Change {
        Change { field: field.into(), current: current.into(), desired: desired.into() }
    }
}

/// How many resources ended in each status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub changed: usize,
    pub unchanged: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Summary {
    /// The number of resources counted.
    pub fn total(&self) -> usize {
        self.changed + self.unchanged + self.failed + self.skipped
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} changed, {} unchanged, {} failed, {} skipped",
            self.changed, self.unchanged, self.failed, self.skipped
        )
    }
}

/// Values longer than this are cut in the text rendering, so one large file content does not
/// flood the terminal; the JSON report keeps them whole.
const RENDERED_VALUE_LIMIT: usize = 72;

impl ApplyReport {
    /// Counts the resources per status.
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for resource in &self.resources {
            match resource.status {
                Status::Changed => summary.changed += 1,
                Status::Unchanged => summary.unchanged += 1,
                Status::Failed => summary.failed += 1,
                Status::Skipped => summary.skipped += 1,
            }
        }
        summary
    }

    /// The report as JSON: `dry_run`, `elapsed_seconds`, `summary` and one object per resource
    /// (`id`, `status`, `changes` as `{field, current, desired}`, `message`, `notified`).
    pub fn to_json(&self) -> Json {
        let summary = self.summary();
        let resources: Vec<Json> = self
            .resources
            .iter()
            .map(|resource| {
                let changes: Vec<Json> = resource
                    .changes
                    .iter()
                    .map(|c| json!({"field": c.field, "current": c.current, "desired": c.desired}))
                    .collect();
                json!({
                    "id": resource.id,
                    "status": resource.status.as_str(),
                    "changes": changes,
                    "message": resource.message,
                    "notified": resource.notified,
                })
            })
            .collect();
        json!({
            "dry_run": self.dry_run,
            "elapsed_seconds": self.elapsed.as_secs_f64(),
            "summary": {
                "changed": summary.changed,
                "unchanged": summary.unchanged,
                "failed": summary.failed,
                "skipped": summary.skipped,
            },
            "resources": resources,
        })
    }

    /// A human-readable report: one block per changed, failed or skipped resource (its status,
    /// id, message and field diff), then a summary line. When everything was already up to
    /// date it says so explicitly.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for resource in &self.resources {
            let label = match (resource.status, self.dry_run) {
                (Status::Unchanged, _) => continue,
                (Status::Changed, true) => "would change",
                (Status::Changed, false) => "changed",
                (Status::Failed, _) => "failed",
                (Status::Skipped, _) => "skipped",
            };
            let _ = write!(out, "{label} {}", resource.id);
            if resource.notified {
                out.push_str(" (notified)");
            }
            if let Some(message) = &resource.message {
                let _ = write!(out, ": {message}");
            }
            out.push('\n');
            for change in &resource.changes {
                let _ = writeln!(out, "    {}", render_change(change));
            }
        }
        let summary = self.summary();
        if summary.changed == 0 && summary.failed == 0 && summary.skipped == 0 {
            let count = summary.unchanged;
            let noun = if count == 1 { "resource" } else { "resources" };
            let _ = write!(out, "no changes: {count} {noun} already up to date");
        } else {
            let _ = write!(out, "{summary}");
        }
        if self.dry_run {
            out.push_str(" (dry run: nothing was changed)");
        }
        out.push('\n');
        out
    }
}

/// One change as `field: current -> desired`; creation and deletion (the reference's `purged`
/// change) read as words.
fn render_change(change: &Change) -> String {
    if change.field == "purged" {
        match (&change.current, &change.desired) {
            (Json::Bool(true), Json::Bool(false)) => return "create".to_string(),
            (Json::Bool(false), Json::Bool(true)) => return "delete".to_string(),
            _ => {}
        }
    }
    format!("{}: {} -> {}", change.field, render_value(&change.current), render_value(&change.desired))
}

fn render_value(value: &Json) -> String {
    let text = value.to_string();
    if text.chars().count() <= RENDERED_VALUE_LIMIT {
        return text;
    }
    let mut cut: String = text.chars().take(RENDERED_VALUE_LIMIT).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(statuses: &[Status], dry_run: bool) -> ApplyReport {
        let resources = statuses
            .iter()
            .enumerate()
            .map(|(n, &status)| ResourceReport {
                id: format!("std::testing::NullResource[a,name={n}]"),
                status,
                changes: if status == Status::Changed { vec![Change::new("value", "old", "new")] } else { vec![] },
                message: (status == Status::Failed).then(|| "boom".to_string()),
                notified: false,
            })
            .collect();
        ApplyReport { resources, elapsed: Duration::from_millis(5), dry_run }
    }

    #[test]
    fn text_lists_changes_and_summarises() {
        let text = report(&[Status::Changed, Status::Unchanged, Status::Failed, Status::Skipped], false).render_text();
        assert_eq!(
            text,
            "changed std::testing::NullResource[a,name=0]\n    value: \"old\" -> \"new\"\n\
             failed std::testing::NullResource[a,name=2]: boom\n\
             skipped std::testing::NullResource[a,name=3]\n\
             1 changed, 1 unchanged, 1 failed, 1 skipped\n"
        );
    }

    #[test]
    fn text_says_when_nothing_changed() {
        assert_eq!(
            report(&[Status::Unchanged, Status::Unchanged], false).render_text(),
            "no changes: 2 resources already up to date\n"
        );
        assert_eq!(
            report(&[Status::Changed], true).render_text(),
            "would change std::testing::NullResource[a,name=0]\n    value: \"old\" -> \"new\"\n\
             1 changed, 0 unchanged, 0 failed, 0 skipped (dry run: nothing was changed)\n"
        );
    }

    #[test]
    fn long_values_are_cut_in_text_only() {
        let long = "x".repeat(500);
        let change = Change::new("content", Json::Null, long.clone());
        assert!(render_change(&change).ends_with('…'));
        let report = ApplyReport {
            resources: vec![ResourceReport {
                id: "fs::File[h,path=/a]".into(),
                status: Status::Changed,
                changes: vec![change],
                message: None,
                notified: false,
            }],
            elapsed: Duration::ZERO,
            dry_run: false,
        };
        assert_eq!(report.to_json()["resources"][0]["changes"][0]["desired"], Json::String(long));
        assert_eq!(report.to_json()["summary"]["changed"], 1);
    }
}
