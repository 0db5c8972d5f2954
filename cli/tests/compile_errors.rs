//! Evaluation errors as `weft compile` renders them: the exit code and stderr of each case of
//! `tests/fixtures/eval-errors/`, in the human format (without color) and in JSON.
//!
//! An operator's error points at the operator, where the reference reports it, and labels
//! each operand with its type under the operand's whole source.

use std::path::Path;
use std::process::Command;

/// Runs `weft compile` in `dir` with extra arguments; returns the exit code and stderr.
fn compile(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("compile")
        .arg(".")
        .args(args)
        .current_dir(dir)
        .env_remove("VIRTUAL_ENV")
        .output()
        .expect("weft runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn evaluation_errors_render_with_their_operands() {
    insta::glob!("../../tests/fixtures/eval-errors", "*/main.cf", |path| {
        let dir = path.parent().expect("a case directory");
        let (code, human) = compile(dir, &["--color=never"]);
        let (json_code, json) = compile(dir, &["--error-format=json"]);
        assert_eq!(code, json_code, "the output format must not change the exit code");
        insta::assert_snapshot!(format!("exit code: {code}\n\n{human}\n--- json ---\n{json}"));
    });
}
