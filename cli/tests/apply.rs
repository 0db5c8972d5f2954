//! `weft apply` as an operator runs it, under `--root` in a scratch directory: what lands on
//! disk, what the report says, and what a second apply does.
//!
//! The models live in `tests/fixtures/apply/<case>/`. Those using the public `fs` and `exec`
//! modules get them from the real-world module cache (downloaded from PyPI once; skipped with
//! `WEFT_SKIP_NETWORK_TESTS=1`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use weft_tests::scratch::Scratch;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/apply").join(case)
}

/// A scratch directory for one test, removed at the end. As a root it holds what every
/// host has and models take for granted: `/etc`, `/var/log`, `/srv`.
fn scratch_root(name: &str) -> Scratch {
    let scratch = Scratch::new("apply", name);
    for base in ["etc", "var/log", "srv"] {
        std::fs::create_dir_all(scratch.path(base)).expect("create a scratch root");
    }
    scratch
}

/// The modules' Python environment, or `None` when network tests are skipped.
fn modules() -> Option<PathBuf> {
    let env = weft_tests::realworld::python_env();
    if env.is_none() {
        eprintln!("\n*** SKIPPED: needs the public fs/exec modules (WEFT_SKIP_NETWORK_TESTS=1).\n");
    }
    env
}

/// Runs `weft apply <case> --root <root> <args>`.
fn apply(case: &Path, root: &Path, python_env: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
    command.arg("apply").arg(case).arg("--root").arg(root).args(args);
    if let Some(env) = python_env {
        command.arg("--python-env").arg(env);
    }
    command.output().expect("weft runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The JSON report of an apply.
fn json_report(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&output.stdout)))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o7777
}

/// The status of each resource in a JSON report, by id.
fn statuses(report: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    report["resources"]
        .as_array()
        .expect("a resources list")
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or("").to_string(), r["status"].as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn files_directories_and_symlinks_are_created_then_left_alone() {
    let Some(env) = modules() else { return };
    let root = scratch_root("files");
    let case = fixture("files");

    let first = apply(&case, &root.0, Some(&env), &[]);
    assert!(first.status.success(), "{}\n{}", text(&first.stdout), text(&first.stderr));
    assert_eq!(std::fs::read_to_string(root.path("/etc/app/app.conf")).unwrap(), "# managed\nport=8080\n");
    assert_eq!(mode(&root.path("/etc/app/app.conf")), 0o640);
    assert_eq!(mode(&root.path("/etc/app")), 0o750);
    assert!(root.path("/etc/app/conf.d").is_dir());
    assert_eq!(std::fs::read_to_string(root.path("/etc/app/conf.d/extra.conf")).unwrap(), "extra=true");
    let link = std::fs::read_link(root.path("/etc/app/current")).expect("a symlink");
    assert_eq!(link, root.path("/etc/app/app.conf"));

    let second = apply(&case, &root.0, Some(&env), &["--report-format=json"]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    let report = json_report(&second);
    assert_eq!(report["summary"]["changed"], 0, "{report:#}");
    assert_eq!(report["summary"]["failed"], 0, "{report:#}");
    assert!(statuses(&report).values().all(|s| s == "unchanged"), "{report:#}");

    let third = apply(&case, &root.0, Some(&env), &[]);
    assert!(text(&third.stdout).contains("no changes"), "{}", text(&third.stdout));
}

#[test]
fn a_changed_file_is_rewritten_and_dry_run_only_reports_it() {
    let Some(env) = modules() else { return };
    let root = scratch_root("drift");
    let case = fixture("files");
    assert!(apply(&case, &root.0, Some(&env), &[]).status.success());
    let config = root.path("/etc/app/app.conf");
    std::fs::write(&config, "tampered\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();

    let dry = apply(&case, &root.0, Some(&env), &["--dry-run", "--report-format=json"]);
    let report = json_report(&dry);
    assert_eq!(report["summary"]["changed"], 1, "{report:#}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "tampered\n", "a dry run must change nothing");

    let real = apply(&case, &root.0, Some(&env), &[]);
    assert!(real.status.success());
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# managed\nport=8080\n");
    assert_eq!(mode(&config), 0o640);
}

#[test]
fn a_failing_resource_skips_exactly_its_dependents() {
    let root = scratch_root("failing");
    let output = apply(&fixture("failing"), &root.0, None, &["--report-format=json"]);
    assert_eq!(output.status.code(), Some(1), "a failed resource fails the apply");
    let got = statuses(&json_report(&output));
    let id = |name: &str| format!("std::testing::NullResource[internal,name={name}]");
    let expected: std::collections::BTreeMap<String, String> = [
        ("broken", "failed"),
        ("needs_broken", "skipped"),
        ("needs_needs_broken", "skipped"),
        ("needs_broken_and_fine", "skipped"),
        ("fine", "unchanged"),
        ("needs_fine", "unchanged"),
    ]
    .into_iter()
    .map(|(name, status)| (id(name), status.to_string()))
    .collect();
    assert_eq!(got, expected);
}

#[test]
fn an_agent_deploys_only_its_share() {
    let root = scratch_root("agent");
    let output = apply(&fixture("agents"), &root.0, None, &["--agent", "web", "--report-format=json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let got = statuses(&json_report(&output));
    assert!(!got.is_empty());
    assert!(got.keys().all(|id| id.contains("[web,")), "{got:?}");
}

#[test]
fn secrets_reach_the_file_but_no_output() {
    let Some(env) = modules() else { return };
    let root = scratch_root("secret");
    let case = fixture("secret");
    let secret = "s3cr3t-value-that-must-not-leak";
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
        command.arg("apply").arg(&case).arg("--root").arg(&root.0).arg("--python-env").arg(&env).args(args);
        command.env("WEFT_TEST_DB_PASSWORD", secret).output().expect("weft runs")
    };
    for args in [&["--dry-run"][..], &[][..], &["--report-format=json"][..]] {
        let output = run(args);
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert!(
            !text(&output.stdout).contains(secret) && !text(&output.stderr).contains(secret),
            "leaked with {args:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(root.path("/etc/db/password")).unwrap(), secret);
    assert_eq!(mode(&root.path("/etc/db/password")), 0o600);

    let export = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("export")
        .arg(&case)
        .args(["--python-env"])
        .arg(&env)
        .args(["-o", "-"])
        .env("WEFT_TEST_DB_PASSWORD", secret)
        .output()
        .expect("weft runs");
    assert!(export.status.success(), "{}", text(&export.stderr));
    assert!(!text(&export.stdout).contains(secret));
    assert!(text(&export.stdout).contains("std::Environment"));
}

#[test]
fn a_command_reloads_when_what_it_requires_changed() {
    let Some(env) = modules() else { return };
    let root = scratch_root("reload");
    let case = fixture("reload");
    let log = root.path("/var/log/reloads");
    let lines = || std::fs::read_to_string(&log).unwrap_or_default().lines().count();

    assert!(apply(&case, &root.0, Some(&env), &[]).status.success());
    assert_eq!(lines(), 1, "the new file notifies the command once");
    assert!(apply(&case, &root.0, Some(&env), &[]).status.success());
    assert_eq!(lines(), 1, "nothing changed, so nothing is notified");
    std::fs::write(root.path("/etc/svc/svc.conf"), "drifted").unwrap();
    assert!(apply(&case, &root.0, Some(&env), &[]).status.success());
    assert_eq!(lines(), 2, "the repaired file notifies the command again");
}

/// Kills `weft apply` at several moments while it writes large files: every file is then
/// either absent or complete, and no temporary file is left behind.
#[test]
fn a_killed_apply_leaves_no_partially_written_file() {
    let Some(env) = modules() else { return };
    let root = scratch_root("kill");
    let project = scratch_root("kill-project");
    const FILES: usize = 40;
    let payload: String = (0..250_000).map(|i| format!("{i:07} ")).collect();
    let mut main = String::from("import fs\nimport mitogen\n");
    main.push_str("h = std::Host(name=\"kill\", os=std::linux, ip=\"127.0.0.1\")\n");
    main.push_str(&format!("payload = \"{payload}\"\n"));
    for n in 0..FILES {
        main.push_str(&format!("fs::File(host=h, path=\"/srv/f{n:03}\", content=payload)\n"));
    }
    std::fs::write(project.path("main.cf"), main).unwrap();

    // Kill as soon as the apply has written `written` files: the kill then lands while the
    // next ones are being written, whatever the machine's speed.
    let mut killed_mid_apply = 0;
    for written in [1usize, 5, 20] {
        let _ = std::fs::remove_dir_all(root.path("/srv"));
        std::fs::create_dir_all(root.path("/srv")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("apply")
            .arg(&project.0)
            .arg("--root")
            .arg(&root.0)
            .arg("--python-env")
            .arg(&env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("weft runs");
        let started = std::time::Instant::now();
        let count = || {
            std::fs::read_dir(root.path("/srv"))
                .map(|d| {
                    d.filter(|e| e.as_ref().is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.'))).count()
                })
                .unwrap_or(0)
        };
        while count() < written && child.try_wait().ok().flatten().is_none() && started.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let _ = child.kill();
        let status = child.wait().expect("wait for weft");
        if !status.success() {
            killed_mid_apply += 1;
        }
        for entry in std::fs::read_dir(root.path("/srv")).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().to_string();
            // A kill between naming the new file and renaming it over the target leaves it
            // under its temporary name, complete; the next write of that target replaces it.
            let is_temporary = name.starts_with(".f") && name.ends_with(".weft-tmp");
            assert!(
                (name.starts_with('f') && name.len() == 4) || is_temporary,
                "a stray file after a kill at {written} files: {name}"
            );
            let content = std::fs::read(entry.path()).unwrap();
            assert!(content == payload.as_bytes(), "{name} is partial after a kill at {written} files");
        }
    }
    assert!(killed_mid_apply > 0, "every apply finished before it could be killed; the test proves nothing");
    let finish = apply(&project.0, &root.0, Some(&env), &[]);
    assert!(finish.status.success(), "{}", text(&finish.stderr));
    for n in 0..FILES {
        assert_eq!(std::fs::read(root.path(&format!("/srv/f{n:03}"))).unwrap(), payload.as_bytes());
    }
    let left: Vec<String> = std::fs::read_dir(root.path("/srv"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|name| name.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left after a complete apply: {left:?}");
}
