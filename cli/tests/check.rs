//! Diagnostics as a user sees them: exit codes and rendered errors of the real binary.
//!
//! Each case of `tests/fixtures/check/` (shared with the static conformance suite, whose
//! expectations are recorded from the reference) goes through `weft check`, and each case of
//! `tests/fixtures/eval-errors/` through `weft compile`: an operator's evaluation error points
//! at the operator, where the reference reports it, and labels each operand with its type
//! under the operand's whole source; an unknown name in a call spread over lines is reported
//! at the call, as the reference does, and labelled where it is; an incomplete instance, which
//! the reference reports without a place, is shown at its constructor; a null given to a
//! constrained type is refused by the primitive type at the root of its chain, in the
//! reference's words, and so are a value that is no list for a typed list (`expected
//! string[]`) and a typedef constraint that names a variable (the name, at its place). The
//! snapshot holds the
//! exit code and stderr, in the human format (without color) and in JSON.

use std::path::Path;
use std::process::Command;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// Runs `weft <command> .` in `dir` with extra arguments; returns the exit code and stderr.
fn run(command: &str, dir: &Path, args: &[&str]) -> (i32, String) {
    let out =
        weft().arg(command).arg(".").args(args).current_dir(dir).env_remove("VIRTUAL_ENV").output().expect("weft runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn check(dir: &Path, args: &[&str]) -> (i32, String) {
    run("check", dir, args)
}

/// The snapshot of one case: `command` in both output formats, which must agree on the exit
/// code.
fn rendered(command: &str, dir: &Path) -> String {
    let (code, human) = run(command, dir, &["--color=never"]);
    let (json_code, json) = run(command, dir, &["--error-format=json"]);
    assert_eq!(code, json_code, "the output format must not change the exit code");
    format!("exit code: {code}\n\n{human}\n--- json ---\n{json}")
}

#[test]
fn diagnostics_render_for_every_check_fixture() {
    insta::glob!("../../tests/fixtures/check", "*/main.cf", |path| {
        insta::assert_snapshot!(rendered("check", path.parent().expect("a case directory")));
    });
}

#[test]
fn evaluation_errors_render_with_their_operands() {
    insta::glob!("../../tests/fixtures/eval-errors", "*/main.cf", |path| {
        insta::assert_snapshot!(rendered("compile", path.parent().expect("a case directory")));
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
