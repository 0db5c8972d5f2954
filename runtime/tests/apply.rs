//! End-to-end tests of the apply engine: graphs built from export JSON, deployed under a
//! scratch root, checked on disk and in the report.

use std::cell::Cell;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value as Json, json};
use sha1::{Digest, Sha1};
use weft_runtime::apply::{ApplyOptions, ApplyReport, EnvironmentReader, Status, apply};
use weft_runtime::graph::ResourceGraph;

// ---------------------------------------------------------------------------------------------
// Building graphs

const HOST: &str = "host1";

/// The fields every exported resource has, as `inmanta export -j` writes them.
fn base_fields() -> Json {
    json!({"purged": false, "send_event": true, "receive_events": true, "report_only": false,
           "references": [], "mutators": []})
}

/// One resource of the export JSON: `fields` over the base fields, with its id and requires.
fn resource(id: &str, fields: Json, requires: &[&str]) -> Json {
    let mut object = base_fields();
    let target = object.as_object_mut().unwrap();
    for (key, value) in fields.as_object().unwrap() {
        target.insert(key.clone(), value.clone());
    }
    target.insert("requires".into(), json!(requires));
    target.insert("id".into(), json!(format!("{id},v=1")));
    object
}

fn null(name: &str, agent: &str, fail: bool, requires: &[&str]) -> Json {
    resource(
        &null_id(name, agent),
        json!({"name": name, "agentname": agent, "fail": fail, "value": null, "int_value": null, "managed": true}),
        requires,
    )
}

fn null_id(name: &str, agent: &str) -> String {
    format!("std::testing::NullResource[{agent},name={name}]")
}

fn file_id(path: &str) -> String {
    format!("fs::File[{HOST},path={path}]")
}

fn dir_id(path: &str) -> String {
    format!("fs::Directory[{HOST},path={path}]")
}

fn file(path: &str, content: &[u8], permissions: Option<u32>, requires: &[&str]) -> Json {
    resource(
        &file_id(path),
        json!({"path": path, "hash": sha1_hex(content), "content": null, "permissions": permissions,
               "owner": null, "group": null}),
        requires,
    )
}

fn directory(path: &str, permissions: Option<u32>, requires: &[&str]) -> Json {
    resource(&dir_id(path), json!({"path": path, "permissions": permissions, "owner": null, "group": null}), requires)
}

fn symlink(src: &str, dst: &str, requires: &[&str]) -> Json {
    resource(&format!("fs::Symlink[{HOST},dst={dst}]"), json!({"src": src, "dst": dst}), requires)
}

fn exec_id(command: &str) -> String {
    format!("exec::Run[{HOST},command={command}]")
}

/// An exec::Run with the module's defaults, `overrides` on top.
fn exec(command: &str, overrides: Json, requires: &[&str]) -> Json {
    let mut fields = json!({"command": command, "creates": null, "cwd": null, "environment": {}, "onlyif": null,
                            "path": "/usr/bin:/bin", "reload": null, "reload_only": false, "returns": [0],
                            "timeout": 300, "unless": null, "skip_on_fail": false});
    for (key, value) in overrides.as_object().unwrap() {
        fields[key] = value.clone();
    }
    resource(&exec_id(command), fields, requires)
}

fn sha1_hex(content: &[u8]) -> String {
    Sha1::digest(content).iter().map(|b| format!("{b:02x}")).collect()
}

/// A graph from export JSON, with `contents` in its file store.
fn graph(resources: Vec<Json>, contents: &[&[u8]]) -> ResourceGraph {
    let mut graph = ResourceGraph::from_json(&Json::Array(resources)).expect("test graphs are well formed");
    for content in contents {
        graph.files.insert(sha1_hex(content), content.to_vec());
    }
    graph
}

/// A scratch directory to deploy under.
struct Scratch {
    directory: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { directory: tempfile::tempdir().unwrap() }
    }

    fn root(&self) -> &Path {
        self.directory.path()
    }

    /// Where a model path lands.
    fn host(&self, path: &str) -> PathBuf {
        self.root().join(path.trim_start_matches('/'))
    }

    fn options(&self) -> ApplyOptions {
        ApplyOptions { root: self.root().to_path_buf(), threads: Some(2), ..ApplyOptions::default() }
    }

    fn apply(&self, graph: &ResourceGraph) -> ApplyReport {
        apply(graph, &self.options())
    }

    /// Every path under the root, relative, sorted.
    fn listing(&self) -> Vec<String> {
        fn walk(directory: &Path, root: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(directory).unwrap() {
                let path = entry.unwrap().path();
                out.push(path.strip_prefix(root).unwrap().display().to_string());
                if path.is_dir() && !path.is_symlink() {
                    walk(&path, root, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root(), self.root(), &mut out);
        out.sort();
        out
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
}

/// The status and message of each resource, by id.
fn outcomes(report: &ApplyReport) -> HashMap<String, (Status, Option<String>)> {
    report.resources.iter().map(|r| (r.id.clone(), (r.status, r.message.clone()))).collect()
}

/// Checks the status of every listed resource, and that no other resource was reported.
fn check_statuses(report: &ApplyReport, expected: &[(String, Status)]) {
    let got = outcomes(report);
    for (id, status) in expected {
        let Some((actual, message)) = got.get(id) else {
            panic!("{id} is not in the report:\n{}", report.render_text())
        };
        assert_eq!(actual, status, "{id}: {message:?}\n{}", report.render_text());
    }
    assert_eq!(got.len(), expected.len(), "unexpected resources in the report:\n{}", report.render_text());
}

// ---------------------------------------------------------------------------------------------
// Files, directories and symlinks

#[test]
fn files_directories_and_symlinks_are_created_then_left_alone() {
    let scratch = Scratch::new();
    let motd = b"welcome\n".as_slice();
    let graph = graph(
        vec![
            directory("/etc", Some(750), &[]),
            file("/etc/motd", motd, Some(640), &[&dir_id("/etc")]),
            file("/etc/plain", b"no mode given", None, &[&dir_id("/etc")]),
            symlink("/etc/motd", "/etc/motd.link", &[&file_id("/etc/motd")]),
        ],
        &[motd, b"no mode given"],
    );
    let first = scratch.apply(&graph);
    assert_eq!(first.summary().changed, 4, "{}", first.render_text());
    assert_eq!(std::fs::read(scratch.host("/etc/motd")).unwrap(), motd);
    assert_eq!(mode(&scratch.host("/etc")), 0o750);
    assert_eq!(mode(&scratch.host("/etc/motd")), 0o640);
    assert_eq!(mode(&scratch.host("/etc/plain")), 0o666 & !umask());
    assert_eq!(std::fs::read_link(scratch.host("/etc/motd.link")).unwrap(), scratch.host("/etc/motd"));
    assert_eq!(scratch.listing(), vec!["etc", "etc/motd", "etc/motd.link", "etc/plain"]);

    let second = scratch.apply(&graph);
    assert_eq!(second.summary().changed, 0, "{}", second.render_text());
    assert_eq!(second.summary().unchanged, 4);
    assert_eq!(second.render_text(), "no changes: 4 resources already up to date\n");
}

/// A resource of the files module, as its Python classes export it (text content inline, the
/// link's own path as `path` and its target as `target`).
fn files_resource(kind: &str, path: &str, fields: Json, requires: &[&str]) -> Json {
    let mut all = json!({"path": path, "permissions": null, "owner": null, "group": null, "managed": true,
                         "purge_on_delete": false, "via": {"method_name": "local", "name": ""}});
    for (key, value) in fields.as_object().unwrap() {
        all[key] = value.clone();
    }
    resource(&format!("files::{kind}[{HOST},path={path}]"), all, requires)
}

#[test]
fn the_files_modules_text_files_directories_and_symlinks_deploy() {
    let scratch = Scratch::new();
    let directory = |path: &str, fields: Json| files_resource("Directory", path, fields, &[]);
    let graph = graph(
        vec![
            directory("/srv/app/conf.d", json!({"create_parents": true, "permissions": 750})),
            files_resource(
                "TextFile",
                "/srv/app/conf.d/a.conf",
                json!({"content": "a=1\n", "permissions": 640}),
                &["files::Directory[host1,path=/srv/app/conf.d]"],
            ),
            files_resource(
                "Symlink",
                "/srv/app/current",
                json!({"target": "/srv/app/conf.d/a.conf"}),
                &["files::TextFile[host1,path=/srv/app/conf.d/a.conf]"],
            ),
        ],
        &[],
    );
    let first = scratch.apply(&graph);
    assert_eq!(first.summary().changed, 3, "{}", first.render_text());
    assert_eq!(std::fs::read(scratch.host("/srv/app/conf.d/a.conf")).unwrap(), b"a=1\n");
    assert_eq!(mode(&scratch.host("/srv/app/conf.d")), 0o750);
    assert_eq!(mode(&scratch.host("/srv/app/conf.d/a.conf")), 0o640);
    // The parents the directory made take the mode of the scratch root above them.
    assert_eq!(mode(&scratch.host("/srv")), mode(scratch.root()));
    assert_eq!(std::fs::read_link(scratch.host("/srv/app/current")).unwrap(), scratch.host("/srv/app/conf.d/a.conf"));
    let second = scratch.apply(&graph);
    assert_eq!(second.summary().unchanged, 3, "{}", second.render_text());

    // A link pointing elsewhere is replaced, and reported under the module's field name.
    std::fs::remove_file(scratch.host("/srv/app/current")).unwrap();
    std::os::unix::fs::symlink("/elsewhere", scratch.host("/srv/app/current")).unwrap();
    let third = scratch.apply(&graph);
    assert_eq!(third.summary().changed, 1, "{}", third.render_text());
    assert!(third.render_text().contains("target"), "{}", third.render_text());
}

#[test]
fn drifted_files_are_repaired_in_place_or_rewritten() {
    let scratch = Scratch::new();
    let content = b"desired".as_slice();
    let graph = graph(vec![file("/motd", content, Some(644), &[])], &[content]);
    scratch.apply(&graph);
    let path = scratch.host("/motd");
    let inode = std::fs::metadata(&path).unwrap().ino();

    // Only the mode drifted: fixed with chmod, the file is not rewritten.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let report = scratch.apply(&graph);
    let change = &report.resources[0].changes;
    assert_eq!(change.len(), 1);
    assert_eq!(
        (change[0].field.as_str(), &change[0].current, &change[0].desired),
        ("permissions", &json!(600), &json!(644))
    );
    assert_eq!(mode(&path), 0o644);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);

    // The content drifted: replaced by a new file with the old mode.
    std::fs::write(&path, b"tampered").unwrap();
    let report = scratch.apply(&graph);
    let change = &report.resources[0].changes[0];
    assert_eq!(change.field, "hash");
    assert_eq!(change.current, json!(sha1_hex(b"tampered")));
    assert_eq!(change.desired, json!(sha1_hex(content)));
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(mode(&path), 0o644);
    assert_eq!(scratch.listing(), vec!["motd"]);
}

/// One resource deployed onto a prepared root.
struct EdgeCase {
    /// Puts things under the root before the apply.
    prepare: fn(&Scratch),
    resource: Json,
    /// What the file store holds.
    contents: &'static [&'static [u8]],
    status: Status,
    /// The expected message, the root shown as `<root>`.
    message: Option<&'static str>,
    /// Everything under the root afterwards.
    listing: &'static [&'static str],
}

/// Deploys the case's resource and checks its status and message and the resulting root.
fn check_edge_case(case: EdgeCase) {
    let scratch = Scratch::new();
    (case.prepare)(&scratch);
    let report = scratch.apply(&graph(vec![case.resource], case.contents));
    let resource = &report.resources[0];
    assert_eq!(resource.status, case.status, "{}", report.render_text());
    let message = resource.message.as_ref().map(|m| m.replace(&scratch.root().display().to_string(), "<root>"));
    assert_eq!(message.as_deref(), case.message, "{}", resource.id);
    assert_eq!(scratch.listing(), case.listing, "{}", resource.id);
}

#[test]
fn file_system_edge_cases() {
    const X: &[u8] = b"x";
    let nothing: fn(&Scratch) = |_| {};
    let with_file: fn(&Scratch) = |s| std::fs::write(s.host("/f"), X).unwrap();
    let with_dir: fn(&Scratch) = |s| std::fs::create_dir(s.host("/d")).unwrap();
    let with_pipe: fn(&Scratch) = |s| {
        assert!(std::process::Command::new("mkfifo").arg(s.host("/p")).status().unwrap().success());
    };
    let with_full_dir: fn(&Scratch) = |s| {
        std::fs::create_dir(s.host("/d")).unwrap();
        std::fs::write(s.host("/d/inner"), X).unwrap();
    };
    let with_link: fn(&Scratch) = |s| std::os::unix::fs::symlink("/elsewhere", s.host("/l")).unwrap();
    let with = |mut resource: Json, field: &str, value: Json| {
        resource[field] = value;
        resource
    };
    let purged = |resource: Json| with(resource, "purged", json!(true));
    let x_file = |path: &str| file(path, X, None, &[]);
    let case = |prepare, resource, status, message, listing| EdgeCase {
        prepare,
        resource,
        contents: &[X],
        status,
        message,
        listing,
    };

    let cases = [
        // The parent directory must be its own resource; the file handler does not create it.
        case(
            nothing,
            x_file("/missing/f"),
            Status::Failed,
            Some("cannot create <root>/missing/f: its directory <root>/missing does not exist"),
            &[],
        ),
        EdgeCase {
            contents: &[],
            ..case(
                nothing,
                x_file("/f"),
                Status::Failed,
                Some("File with hash 11f6ad8ec52a2984abaafd7c3b516503785c2072 is not available"),
                &[],
            )
        },
        case(
            nothing,
            with(x_file("/f"), "owner", json!("no-such-user-weft")),
            Status::Failed,
            Some("no user named no-such-user-weft"),
            &[],
        ),
        case(with_file, purged(x_file("/f")), Status::Changed, None, &[]),
        case(nothing, purged(x_file("/f")), Status::Unchanged, None, &[]),
        case(with_full_dir, purged(directory("/d", None, &[])), Status::Changed, None, &[]),
        case(with_dir, x_file("/d"), Status::Failed, Some("<root>/d is a directory, not a file"), &["d"]),
        // Comparing a pipe's content would wait for a writer that never comes.
        case(with_pipe, x_file("/p"), Status::Failed, Some("<root>/p is a named pipe, not a file"), &["p"]),
        case(
            with_file,
            directory("/f", None, &[]),
            Status::Failed,
            Some("<root>/f already exists but is not a directory"),
            &["f"],
        ),
        case(
            nothing,
            directory("/a/b", None, &[]),
            Status::Failed,
            Some("cannot create directory <root>/a/b: No such file or directory (os error 2)"),
            &[],
        ),
        // A symlink pointing elsewhere is replaced; a non-symlink in its place is an error.
        case(with_link, symlink("/target", "/l", &[]), Status::Changed, None, &["l"]),
        case(
            with_file,
            symlink("/target", "/f", &[]),
            Status::Failed,
            Some("<root>/f already exists but is not a symlink"),
            &["f"],
        ),
        case(with_link, purged(symlink("/target", "/l", &[])), Status::Changed, None, &[]),
    ];
    for case in cases {
        check_edge_case(case);
    }
}

#[test]
fn symlink_replacement_reports_the_old_target() {
    let scratch = Scratch::new();
    std::os::unix::fs::symlink(scratch.host("/old"), scratch.host("/l")).unwrap();
    let report = scratch.apply(&graph(vec![symlink("/new", "/l", &[])], &[]));
    let change = &report.resources[0].changes[0];
    assert_eq!((change.field.as_str(), &change.current, &change.desired), ("src", &json!("/old"), &json!("/new")));
    assert_eq!(std::fs::read_link(scratch.host("/l")).unwrap(), scratch.host("/new"));
}

#[test]
fn ownership_is_compared_by_name_and_chown_errors_are_reported() {
    let scratch = Scratch::new();
    // SAFETY: geteuid cannot fail.
    let privileged = unsafe { libc::geteuid() } == 0;
    let mut own = file("/own", b"x", None, &[]);
    own["owner"] = json!(whoami());
    let mut nobody = file("/nobody", b"x", None, &[]);
    nobody["owner"] = json!("nobody");
    std::fs::write(scratch.host("/own"), b"x").unwrap();
    std::fs::write(scratch.host("/nobody"), b"x").unwrap();
    let report = scratch.apply(&graph(vec![own, nobody], &[b"x"]));
    let got = outcomes(&report);
    assert_eq!(got[&file_id("/own")].0, Status::Unchanged);
    let (status, message) = &got[&file_id("/nobody")];
    if privileged {
        assert_eq!(*status, Status::Changed);
    } else {
        assert_eq!(*status, Status::Failed);
        assert!(message.as_deref().unwrap().contains("Operation not permitted"), "{message:?}");
    }
}

fn whoami() -> String {
    let output = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

// ---------------------------------------------------------------------------------------------
// Scheduling: failures, skips, agents, unknown types

#[test]
fn failures_skip_exactly_their_transitive_dependents() {
    let id = |name: &str| null_id(name, "a");
    let failing_exec = exec("false", json!({}), &[]);
    let skipping_exec = exec("sh -c 'exit 2'", json!({"skip_on_fail": true}), &[]);
    let unknown = resource("acme::Thing[a,name=u]", json!({"name": "u"}), &[]);
    let graph = graph(
        vec![
            null("broken", "a", true, &[]),
            null("child", "a", false, &[&id("broken")]),
            null("grandchild", "a", false, &[&id("child")]),
            null("healthy", "a", false, &[]),
            null("after-healthy", "a", false, &[&id("healthy")]),
            null("joins-both", "a", false, &[&id("healthy"), &id("broken")]),
            failing_exec,
            null("after-exec", "a", false, &[&exec_id("false")]),
            skipping_exec,
            null("after-skip", "a", false, &[&exec_id("sh -c 'exit 2'")]),
            unknown,
            null("after-unknown", "a", false, &["acme::Thing[a,name=u]"]),
        ],
        &[],
    );
    let report = Scratch::new().apply(&graph);
    check_statuses(
        &report,
        &[
            (id("broken"), Status::Failed),
            (id("child"), Status::Skipped),
            (id("grandchild"), Status::Skipped),
            (id("healthy"), Status::Unchanged),
            (id("after-healthy"), Status::Unchanged),
            (id("joins-both"), Status::Skipped),
            (exec_id("false"), Status::Failed),
            (id("after-exec"), Status::Skipped),
            (exec_id("sh -c 'exit 2'"), Status::Skipped),
            (id("after-skip"), Status::Skipped),
            ("acme::Thing[a,name=u]".to_string(), Status::Failed),
            (id("after-unknown"), Status::Skipped),
        ],
    );
    let got = outcomes(&report);
    let message = |id: &str| got[id].1.clone().unwrap_or_default();
    assert_eq!(message(&null_id("broken", "a")), "This resource is set to fail");
    assert_eq!(message(&null_id("child", "a")), format!("skipped because dependency {} failed", id("broken")));
    assert_eq!(message(&null_id("grandchild", "a")), format!("skipped because dependency {} was skipped", id("child")));
    assert_eq!(message(&exec_id("false")), "Failed to execute command (exit code 1)");
    assert_eq!(message(&exec_id("sh -c 'exit 2'")), "Failed to execute command (exit code 2)");
    assert_eq!(message("acme::Thing[a,name=u]"), "no handler for resource type acme::Thing");
    assert_eq!(report.summary().to_string(), "0 changed, 2 unchanged, 3 failed, 7 skipped");
}

#[test]
fn undefined_resources_skip_with_their_dependents() {
    let mut undefined = null("unknown-value", "a", false, &[]);
    undefined["value"] = json!("<<undefined>>");
    let graph = graph(vec![undefined, null("after", "a", false, &[&null_id("unknown-value", "a")])], &[]);
    let report = Scratch::new().apply(&graph);
    let got = outcomes(&report);
    assert_eq!(
        got[&null_id("unknown-value", "a")],
        (Status::Skipped, Some("undefined: the value of value is unknown".into()))
    );
    assert_eq!(got[&null_id("after", "a")].0, Status::Skipped);
    assert!(got[&null_id("after", "a")].1.as_deref().unwrap().ends_with("is undefined"));
}

#[test]
fn agent_share_deploys_only_its_resources_and_trusts_the_others() {
    let graph = graph(
        vec![
            null("a1", "agent-a", true, &[]),
            null("b1", "agent-b", false, &[&null_id("a1", "agent-a")]),
            null("b2", "agent-b", false, &[&null_id("b1", "agent-b")]),
            null("a2", "agent-a", false, &[&null_id("b2", "agent-b")]),
        ],
        &[],
    );
    let scratch = Scratch::new();
    let share = |agent: &str| apply(&graph, &ApplyOptions { agent: Some(agent.to_string()), ..scratch.options() });
    // a1 fails, but it is agent-a's: for agent-b the requirement counts as satisfied.
    check_statuses(
        &share("agent-b"),
        &[(null_id("b1", "agent-b"), Status::Unchanged), (null_id("b2", "agent-b"), Status::Unchanged)],
    );
    check_statuses(
        &share("agent-a"),
        &[(null_id("a1", "agent-a"), Status::Failed), (null_id("a2", "agent-a"), Status::Unchanged)],
    );
    check_statuses(&share("agent-c"), &[]);
}

#[test]
fn report_only_resources_are_compared_but_never_changed() {
    let scratch = Scratch::new();
    std::fs::write(scratch.host("/drifted"), b"old").unwrap();
    std::fs::write(scratch.host("/compliant"), b"same").unwrap();
    let report_only = |mut resource: Json| {
        resource["report_only"] = json!(true);
        resource
    };
    let graph = graph(
        vec![
            null("broken", HOST, true, &[]),
            report_only(file("/drifted", b"new", None, &[&null_id("broken", HOST)])),
            report_only(file("/compliant", b"same", None, &[])),
            null("after-drifted", HOST, false, &[&file_id("/drifted")]),
            null("after-compliant", HOST, false, &[&file_id("/compliant")]),
        ],
        &[b"new", b"same"],
    );
    let report = scratch.apply(&graph);
    // The failed requirement does not stop the comparison; the difference skips dependents.
    check_statuses(
        &report,
        &[
            (null_id("broken", HOST), Status::Failed),
            (file_id("/drifted"), Status::Skipped),
            (file_id("/compliant"), Status::Unchanged),
            (null_id("after-drifted", HOST), Status::Skipped),
            (null_id("after-compliant", HOST), Status::Unchanged),
        ],
    );
    let drifted = report.resources.iter().find(|r| r.id == file_id("/drifted")).unwrap();
    assert_eq!(drifted.changes[0].field, "hash");
    assert_eq!(std::fs::read(scratch.host("/drifted")).unwrap(), b"old");
}

// ---------------------------------------------------------------------------------------------
// Dry runs

#[test]
fn dry_run_reports_the_diff_and_changes_nothing() {
    let scratch = Scratch::new();
    let content = b"new content".as_slice();
    std::fs::create_dir(scratch.host("/etc")).unwrap();
    std::fs::write(scratch.host("/etc/existing"), b"old content").unwrap();
    let graph = graph(
        vec![
            directory("/etc", None, &[]),
            file("/etc/existing", content, None, &[&dir_id("/etc")]),
            file("/etc/new", content, Some(600), &[&dir_id("/etc")]),
            exec("touch ran", json!({"unless": "touch guard-ran"}), &[&file_id("/etc/new")]),
            exec("touch plain-ran", json!({}), &[]),
        ],
        &[content],
    );
    let report = apply(&graph, &ApplyOptions { dry_run: true, ..scratch.options() });
    assert_eq!(scratch.listing(), vec!["etc", "etc/existing"]);
    assert_eq!(std::fs::read(scratch.host("/etc/existing")).unwrap(), b"old content");
    assert!(report.dry_run);
    check_statuses(
        &report,
        &[
            (dir_id("/etc"), Status::Unchanged),
            (file_id("/etc/existing"), Status::Changed),
            (file_id("/etc/new"), Status::Changed),
            (exec_id("touch ran"), Status::Changed),
            (exec_id("touch plain-ran"), Status::Changed),
        ],
    );
    let existing = report.resources.iter().find(|r| r.id == file_id("/etc/existing")).unwrap();
    assert_eq!(existing.changes[0].current, json!(sha1_hex(b"old content")));
    assert_eq!(existing.changes[0].desired, json!(sha1_hex(content)));
    let guarded = outcomes(&report)[&exec_id("touch ran")].1.clone().unwrap();
    assert!(guarded.contains("guard commands do not run in a dry run"), "{guarded}");
    let text = report.render_text();
    assert!(text.contains("would change fs::File[host1,path=/etc/new]\n    create\n"), "{text}");
    assert!(text.ends_with("4 changed, 1 unchanged, 0 failed, 0 skipped (dry run: nothing was changed)\n"), "{text}");
    assert_eq!(report.to_json()["dry_run"], json!(true));
}

// ---------------------------------------------------------------------------------------------
// exec::Run

#[test]
fn exec_guards_decide_whether_the_command_runs() {
    // Each case: the extra fields, whether the command ran on the first and the second apply.
    let cases = [
        (json!({}), true, true),
        (json!({"creates": "/marker"}), true, false),
        (json!({"unless": "test -e marker"}), true, false),
        (json!({"onlyif": "test ! -e marker"}), true, false),
        (json!({"onlyif": "false"}), false, false),
        (json!({"reload_only": true}), false, false),
    ];
    for (fields, first_runs, second_runs) in cases {
        let scratch = Scratch::new();
        // The command runs in the root (no cwd given), so `marker` lands there.
        let graph = graph(vec![exec("sh -c 'echo ran >> log; touch marker'", fields.clone(), &[])], &[]);
        let runs = |report: &ApplyReport| {
            let status = report.resources[0].status;
            assert_ne!(status, Status::Failed, "{fields}: {}", report.render_text());
            status == Status::Changed
        };
        assert_eq!(runs(&scratch.apply(&graph)), first_runs, "{fields}, first apply");
        assert_eq!(runs(&scratch.apply(&graph)), second_runs, "{fields}, second apply");
        let lines = std::fs::read_to_string(scratch.host("/log")).unwrap_or_default().lines().count();
        assert_eq!(lines, usize::from(first_runs) + usize::from(second_runs), "{fields}");
    }
}

#[test]
fn exec_environment_cwd_returns_and_timeout() {
    let scratch = Scratch::new();
    std::fs::create_dir(scratch.host("/work")).unwrap();
    let graph = graph(
        vec![
            exec("sh -c 'echo \"$GREETING\" > out'", json!({"cwd": "/work", "environment": {"GREETING": "hi"}}), &[]),
            exec("sh -c 'exit 3'", json!({"returns": [0, 3]}), &[]),
            exec("sh -c 'echo nope >&2; exit 4'", json!({}), &[]),
            exec("sleep 20", json!({"timeout": 1}), &[]),
            exec("no-such-program-weft", json!({}), &[]),
        ],
        &[],
    );
    let report = scratch.apply(&graph);
    let got = outcomes(&report);
    assert_eq!(std::fs::read_to_string(scratch.host("/work/out")).unwrap(), "hi\n");
    assert_eq!(got[&exec_id("sh -c 'exit 3'")].0, Status::Changed);
    assert_eq!(
        got[&exec_id("sh -c 'echo nope >&2; exit 4'")].1.as_deref(),
        Some("Failed to execute command (exit code 4): nope")
    );
    assert_eq!(
        got[&exec_id("sleep 20")].1.as_deref(),
        Some("the command did not finish within 1 seconds and was killed")
    );
    assert!(
        got[&exec_id("no-such-program-weft")].1.as_deref().unwrap().starts_with("cannot run no-such-program-weft: ")
    );
}

// ---------------------------------------------------------------------------------------------
// Events

#[test]
fn a_changed_requirement_notifies_and_reloads_once() {
    // Each case: the file's send_event, the exec's extra fields, and the lines the log holds
    // after the first and the second apply.
    let cases = [
        // reload_only: the command runs only on reload.
        (true, json!({"reload_only": true}), 1, 1),
        // An explicit reload command runs after the command itself.
        (true, json!({"reload": "sh -c 'echo reload >> log'", "creates": "/marker"}), 2, 2),
        // Without a reload command the command runs again, as the reference does.
        (true, json!({"creates": "/marker"}), 2, 2),
        // No event sent, or none received: no reload.
        (false, json!({"reload_only": true}), 0, 0),
        (true, json!({"reload_only": true, "receive_events": false}), 0, 0),
    ];
    for (send_event, fields, after_first, after_second) in cases {
        let scratch = Scratch::new();
        let mut config = file("/config", b"v1", None, &[]);
        config["send_event"] = json!(send_event);
        let graph = graph(
            vec![config, exec("sh -c 'echo run >> log; touch marker'", fields.clone(), &[&file_id("/config")])],
            &[b"v1"],
        );
        let log_lines = || std::fs::read_to_string(scratch.host("/log")).unwrap_or_default().lines().count();
        let first = scratch.apply(&graph);
        let exec_report = first.resources.iter().find(|r| r.id.starts_with("exec::Run")).unwrap();
        assert_eq!(exec_report.notified, send_event && fields.get("receive_events").is_none(), "{fields}");
        assert_eq!(log_lines(), after_first, "{fields}: {}", first.render_text());
        let second = scratch.apply(&graph);
        assert!(
            second.resources.iter().all(|r| !r.notified && r.status == Status::Unchanged),
            "{}",
            second.render_text()
        );
        assert_eq!(log_lines(), after_second, "{fields}");
    }
}

// ---------------------------------------------------------------------------------------------
// References

const SECRET: &str = "s3cr3t-passw0rd";

fn environment_reader() -> EnvironmentReader {
    Arc::new(|name: &str| (name == "WEFT_TEST_SECRET").then(|| SECRET.to_string()))
}

/// A resource with its field `destination` filled from the environment variable `variable`.
fn with_env_reference(mut resource: Json, variable: &str, destination: &str) -> Json {
    let id = resource["id"].as_str().unwrap().trim_end_matches(",v=1").to_string();
    resource["references"] = json!([{"type": "std::Environment", "id": "7d5c1c4e-0000-0000-0000-000000000001",
        "args": [{"type": "literal", "name": "name", "value": variable}]}]);
    resource["mutators"] = json!([{"type": "core::Replace", "args": [
        {"type": "resource", "name": "resource", "id": id},
        {"type": "reference", "name": "value", "id": "7d5c1c4e-0000-0000-0000-000000000001"},
        {"type": "literal", "name": "destination", "value": destination}]}]);
    resource
}

#[test]
fn secrets_reach_the_host_but_never_the_report() {
    let scratch = Scratch::new();
    let mut secret_file = file("/secret", b"", Some(600), &[]);
    secret_file["hash"] = Json::Null;
    let secret_file = with_env_reference(secret_file, "WEFT_TEST_SECRET", "content");
    let leaky = with_env_reference(
        exec("sh -c 'echo \"token=$TOKEN\" >&2; exit 1'", json!({"environment": {"TOKEN": null}}), &[]),
        "WEFT_TEST_SECRET",
        "environment.'TOKEN'",
    );
    let missing = with_env_reference(null("missing", HOST, false, &[]), "WEFT_TEST_UNSET", "value");
    let graph = graph(vec![secret_file, leaky, missing], &[]);
    let progress_calls = Arc::new(Mutex::new(Vec::new()));
    let recorder = progress_calls.clone();
    let options = ApplyOptions {
        environment: environment_reader(),
        progress: Some(Arc::new(move |done, total| recorder.lock().unwrap().push(format!("{done}/{total}")))),
        ..scratch.options()
    };

    let report = apply(&graph, &options);
    assert_eq!(std::fs::read_to_string(scratch.host("/secret")).unwrap(), SECRET);
    let got = outcomes(&report);
    assert_eq!(got[&file_id("/secret")].0, Status::Changed);
    assert_eq!(
        got[&exec_id("sh -c 'echo \"token=$TOKEN\" >&2; exit 1'")].1.as_deref(),
        Some("Failed to execute command (exit code 1): token=<secret>")
    );
    assert_eq!(got[&null_id("missing", HOST)].1.as_deref(), Some("Environment variable WEFT_TEST_UNSET is not set"));
    let rendered = [report.render_text(), report.to_json().to_string(), format!("{report:?}")];
    for text in &rendered {
        assert!(!text.contains(SECRET), "the secret leaked into {text}");
    }
    assert_eq!(progress_calls.lock().unwrap().len(), 3);

    // The content changed outside weft: the diff shows only placeholders.
    std::fs::write(scratch.host("/secret"), "tampered").unwrap();
    let report = apply(&graph, &options);
    let change = &report.resources.iter().find(|r| r.id == file_id("/secret")).unwrap().changes[0];
    assert_eq!(
        (change.field.as_str(), &change.current, &change.desired),
        ("content", &json!("<secret>"), &json!("<secret>"))
    );
    assert_eq!(std::fs::read_to_string(scratch.host("/secret")).unwrap(), SECRET);
    assert!(!report.to_json().to_string().contains(SECRET));
    assert_eq!(apply(&graph, &options).resources[0].status, Status::Unchanged);
}

// ---------------------------------------------------------------------------------------------
// A large random graph

thread_local! {
    /// The resource this worker thread is deploying, set when its reference is resolved.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

#[test]
fn a_large_random_graph_deploys_in_dependency_order() {
    const COUNT: usize = 5_000;
    // A deterministic xorshift generator: the same graph every run.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    // Resource n requires up to four resources created before it; they are listed in a
    // shuffled order, so graph order is not dependency order.
    let mut edges: Vec<Vec<usize>> = Vec::with_capacity(COUNT);
    for n in 0..COUNT {
        let requires = if n == 0 { Vec::new() } else { (0..random(5)).map(|_| random(n)).collect() };
        edges.push(requires);
    }
    let mut order: Vec<usize> = (0..COUNT).collect();
    for i in (1..COUNT).rev() {
        order.swap(i, random(i + 1));
    }
    let name = |n: usize| format!("r{n}");
    let resources = order
        .iter()
        .map(|&n| {
            let requires: Vec<String> = edges[n].iter().map(|&r| null_id(&name(r), "a")).collect();
            let requires: Vec<&str> = requires.iter().map(String::as_str).collect();
            // Every resource reads "its" variable through a reference, which tells the test
            // when its deploy starts and on which thread.
            with_env_reference(null(&name(n), "a", false, &requires), &name(n), "value")
        })
        .collect();
    let graph = graph(resources, &[]);

    let clock = Arc::new(AtomicUsize::new(1));
    let started: Arc<Vec<AtomicUsize>> = Arc::new((0..COUNT).map(|_| AtomicUsize::new(0)).collect());
    let finished: Arc<Vec<AtomicUsize>> = Arc::new((0..COUNT).map(|_| AtomicUsize::new(0)).collect());
    let (start_clock, start_times) = (clock.clone(), started.clone());
    let environment = Arc::new(move |variable: &str| {
        let n: usize = variable[1..].parse().unwrap();
        start_times[n].store(start_clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
        CURRENT.with(|current| current.set(Some(n)));
        Some("v".to_string())
    });
    let (finish_clock, finish_times) = (clock.clone(), finished.clone());
    let progress = Arc::new(move |_done: usize, _total: usize| {
        // The worker reports progress right after its resource finished, before it releases
        // the dependents.
        let n = CURRENT.with(|current| current.take()).expect("progress follows a deploy on the same thread");
        finish_times[n].store(finish_clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
    });
    let options = ApplyOptions { threads: Some(4), environment, progress: Some(progress), ..ApplyOptions::default() };
    let report = apply(&graph, &options);

    assert_eq!(report.summary().unchanged, COUNT, "{}", report.render_text());
    for (n, requires) in edges.iter().enumerate() {
        for &r in requires {
            let (done, begun) = (finished[r].load(Ordering::SeqCst), started[n].load(Ordering::SeqCst));
            assert!(
                done > 0 && done < begun,
                "r{n} started at {begun}, before its requirement r{r} finished at {done}"
            );
        }
    }
    let ids: Vec<&str> = report.resources.iter().map(|r| r.id.as_str()).collect();
    let expected: Vec<String> = order.iter().map(|&n| null_id(&name(n), "a")).collect();
    assert_eq!(ids, expected, "reports come in graph order");
}
