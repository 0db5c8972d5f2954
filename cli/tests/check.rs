//! `weft check` as a user runs it: exit codes and rendered diagnostics.
//!
//! Each case of `tests/fixtures/check/` (shared with the static conformance suite, whose
//! expectations are recorded from the reference) is checked with the real binary; the
//! snapshot holds the exit code and stderr, in the human format (without color) and in JSON.

use std::path::Path;
use std::process::Command;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// Runs `weft check` in `dir` with extra arguments; returns the exit code and stderr.
fn check(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = weft().arg("check").arg(".").args(args).current_dir(dir).output().expect("weft runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn diagnostics_render_for_every_check_fixture() {
    insta::glob!("../../tests/fixtures/check", "*/main.cf", |path| {
        let dir = path.parent().expect("a case directory");
        let (code, human) = check(dir, &["--color=never"]);
        let (json_code, json) = check(dir, &["--error-format=json"]);
        assert_eq!(code, json_code, "the output format must not change the exit code");
        insta::assert_snapshot!(format!("exit code: {code}\n\n{human}\n--- json ---\n{json}"));
    });
}

#[test]
fn the_bundled_example_checks_clean() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/inventory");
    let (code, stderr) = check(&example, &[]);
    assert_eq!((code, stderr.as_str()), (0, ""));
}

#[test]
fn usage_errors_exit_with_2() {
    let out = weft().args(["check", "--no-such-flag"]).output().expect("weft runs");
    assert_eq!(out.status.code(), Some(2));
    let out = weft().args(["check", "/no/such/directory"]).output().expect("weft runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a directory"));
}
