//! Parser fixtures: one `.cf` file per construct under `fixtures/parser/ok/` and one per syntax
//! error under `fixtures/parser/err/`, each with an insta snapshot in
//! `fixtures/parser/snapshots/`.
//!
//! An `ok` snapshot is the AST dump (`weft_frontend::dump`), followed by any warnings. An `err`
//! snapshot is the list of diagnostics. Every `err` fixture starts with a line
//! `# reference: <Kind> at <line>:<col>: <message>` (or `<Kind> without location: ...`)
//! recorded from `tools/parser-oracle.py --detail`; the check compares weft's first error with
//! its kind and line, so a snapshot cannot silently drift away from the reference's behaviour.
//!
//! To add a case, write the `.cf` file, run `INSTA_UPDATE=always cargo test -p weft-tests --test
//! parser_fixtures` (or `cargo insta test`), and read the new snapshot before committing it.

use std::path::Path;

use weft_tests::parser::{RefOutcome, parse_and_dump, render_diagnostics, weft_outcome};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The reference accepts every file: weft must report no error (warnings are allowed).
    Accept,
    /// The reference rejects every file, as its `# reference:` line says.
    Reject,
}

#[test]
fn accepted_constructs() {
    check("ok", Expect::Accept);
}

#[test]
fn syntax_errors() {
    check("err", Expect::Reject);
}

/// Parses every `.cf` file of `fixtures/parser/<dir>` and snapshots the result.
fn check(dir: &str, expect: Expect) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../fixtures/parser/snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::glob!(format!("../fixtures/parser/{dir}"), "*.cf", |path| {
            let src = std::fs::read_to_string(path).expect("fixture is readable UTF-8");
            let (dump, diagnostics) = parse_and_dump(&src);
            let outcome = weft_outcome(&src, &diagnostics);
            let snapshot = match expect {
                Expect::Accept => {
                    assert_eq!(outcome, RefOutcome::Ok, "{} must parse without errors", path.display());
                    if diagnostics.is_empty() {
                        dump
                    } else {
                        format!("{dump}\n{}", render_diagnostics(&src, &diagnostics))
                    }
                }
                Expect::Reject => {
                    let reference = reference_line(path, &src);
                    assert!(
                        reference.agrees_with(&outcome),
                        "{}: weft's first error `{outcome}` differs from the reference's `{reference}`",
                        path.display()
                    );
                    render_diagnostics(&src, &diagnostics)
                }
            };
            insta::assert_snapshot!(dir, snapshot);
        });
    });
}

/// Reads the reference's verdict from the fixture's first line.
fn reference_line(path: &Path, src: &str) -> RefOutcome {
    let first = src.lines().next().unwrap_or("");
    let Some(rest) = first.strip_prefix("# reference: ") else {
        panic!("{}: the first line must be `# reference: <Kind> at <line>:<col>: <message>`", path.display());
    };
    let (kind, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let line = if let Some(at) = rest.strip_prefix("at ") {
        let line = at.split(':').next().and_then(|l| l.parse().ok());
        assert!(line.is_some(), "{}: malformed location in `{first}`", path.display());
        line
    } else {
        None
    };
    RefOutcome::Err { line, kind: kind.to_string() }
}
