//! The conformance corpus, up to the end of the static phase.
//!
//! Two suites over `tests/conformance/` (the project's copy of the reference-recorded corpus):
//!
//! * `every_case_parses_as_the_reference_parses`: every `main.cf` parses, except the cases whose
//!   recorded error is a parser error, which fail with that kind on the recorded line;
//! * `check_matches_the_reference_static_phase`: `weft check` (loading, parsing and static checks)
//!   reports the first error the reference reports *before executing anything*, with the same
//!   kind and line, and no error where the reference's static phase passes. The expected
//!   outcomes are in `tests/conformance/static-expect.tsv`, recorded from the reference by
//!   `tools/static-oracle.py`;
//! * `check_fixtures_match_the_reference_static_phase`: the same comparison on
//!   `tests/fixtures/check/`, cases written for the static checks the corpus does not reach.

use std::path::{Path, PathBuf};

use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::{Diagnostic, ErrorKind};
use weft_tests::parser::reference_line;
use weft_tests::{cases_in, corpus};

fn check_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("check")
}

fn cases() -> Vec<PathBuf> {
    cases_in(&corpus())
}

fn case_name_in(root: &Path, case: &Path) -> String {
    case.strip_prefix(root).expect("inside the root").to_string_lossy().replace('\\', "/")
}

fn case_name(case: &Path) -> String {
    case_name_in(&corpus(), case)
}

/// A compiler outcome reduced to what is compared: `ok`, or the first error's kind and line.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Error { kind: String, line: Option<u32> },
}

/// Loads and checks a case like `weft check` does; the first error is the one the reference
/// would report.
fn check_case(case: &Path) -> Outcome {
    let arena = bumpalo::Bump::new();
    let (mut program, mut diagnostics) = load_project(&arena, case, &LoadOptions::default());
    if !diagnostics.iter().any(Diagnostic::is_error) {
        diagnostics.extend(weft_frontend::check::check(&mut program).diagnostics);
    }
    match diagnostics.iter().find(|d| d.is_error()) {
        None => Outcome::Ok,
        Some(d) => {
            let line = d.primary_location().map(|l| reference_line(d, program.sources.line_col(l).line));
            Outcome::Error { kind: d.kind.as_str().to_string(), line }
        }
    }
}

/// Compares an outcome with an expected one; an expected line of `None` (the reference gave no
/// location) accepts any line.
fn agrees(ours: &Outcome, expected: &Outcome) -> bool {
    match (ours, expected) {
        (Outcome::Ok, Outcome::Ok) => true,
        (Outcome::Error { kind: k1, line: l1 }, Outcome::Error { kind: k2, line: l2 }) => {
            k1 == k2 && (l2.is_none() || l1 == l2)
        }
        _ => false,
    }
}

#[test]
fn check_matches_the_reference_static_phase() {
    compare_static_phase(&corpus());
}

#[test]
fn check_fixtures_match_the_reference_static_phase() {
    compare_static_phase(&check_fixtures());
}

/// Runs every case under `root` through the static phase and compares with the recorded
/// `static-expect.tsv` there.
fn compare_static_phase(root: &Path) {
    let table = std::fs::read_to_string(root.join("static-expect.tsv")).expect("static-expect.tsv");
    let mut expected = std::collections::BTreeMap::new();
    for (case, columns) in weft_tests::table_rows(&table) {
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let outcome = match columns.as_slice() {
            ["ok"] => Outcome::Ok,
            ["error", kind, line] => Outcome::Error { kind: kind.to_string(), line: line.parse().ok() },
            _ => panic!("malformed line in static-expect.tsv: {case}\t{}", columns.join("\t")),
        };
        expected.insert(case, outcome);
    }
    let mut failures = Vec::new();
    let all = cases_in(root);
    for case in &all {
        let name = case_name_in(root, case);
        let Some(want) = expected.get(&name) else {
            failures.push(format!("{name}: no expectation recorded in static-expect.tsv"));
            continue;
        };
        let got = check_case(case);
        if !agrees(&got, want) {
            failures.push(format!("{name}: weft {got:?}, reference {want:?}"));
        }
    }
    assert_eq!(all.len(), expected.len(), "static-expect.tsv and the corpus list different cases");
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), all.len(), failures.join("\n"));
}

#[derive(serde::Deserialize)]
struct Expect {
    error: Option<ExpectError>,
}

#[derive(serde::Deserialize)]
struct ExpectError {
    kind: String,
    line: Option<u32>,
    file: Option<String>,
}

#[test]
fn every_case_parses_as_the_reference_parses() {
    let mut failures = Vec::new();
    for case in cases() {
        let name = case_name(&case);
        let expect: Expect =
            serde_json::from_str(&std::fs::read_to_string(case.join("expect.json")).expect("expect.json"))
                .expect("valid json");
        let parser_error = expect
            .error
            .as_ref()
            .filter(|e| ErrorKind::from_name(&e.kind).is_some_and(|k| k.is_a(ErrorKind::ParserException)));
        // Parse every .cf file of the case: main.cf and the modules in libs/.
        let mut files = vec![case.join("main.cf")];
        collect_cf(&case.join("libs"), &mut files);
        let mut first_error: Option<(String, String, u32)> = None;
        for file in &files {
            let text = std::fs::read_to_string(file).expect("readable");
            let mut sources = weft_ir::SourceMap::new();
            let id = sources.add(weft_ir::SourceFile::new(file.display().to_string(), text.as_str()));
            let arena = bumpalo::Bump::new();
            let mut interner = weft_ir::Interner::new();
            let out = weft_frontend::parse_file(&arena, &text, id, &mut interner);
            if let Some(d) = out.diagnostics.iter().find(|d| d.is_error()) {
                let line = d.primary_location().map_or(0, |l| reference_line(d, sources.line_col(l).line));
                let rel = file.strip_prefix(&case).expect("inside the case").to_string_lossy().into_owned();
                first_error.get_or_insert((rel, d.kind.as_str().to_string(), line));
            }
        }
        // Some errors the reference raises while parsing have other kinds (a duplicate dict
        // key, a hyphen in a name): a parse-time error is right when it is the recorded one.
        let recorded_at_parse =
            first_error.as_ref().and_then(|(_, kind, _)| expect.error.as_ref().filter(|e| e.kind == *kind));
        match (parser_error.or(recorded_at_parse), first_error) {
            (None, None) => {}
            (Some(e), Some((file, kind, line))) => {
                let same_file = e.file.as_deref().is_none_or(|f| f == file);
                if kind != e.kind || e.line.is_some_and(|l| l != line) || !same_file {
                    failures.push(format!(
                        "{name}: expected {} at {:?}:{:?}, got {kind} at {file}:{line}",
                        e.kind, e.file, e.line
                    ));
                }
            }
            (Some(e), None) => failures.push(format!("{name}: expected a {} but the case parsed", e.kind)),
            (None, Some((file, kind, line))) => failures.push(format!("{name}: unexpected {kind} at {file}:{line}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn collect_cf(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_cf(&path, out);
        } else if path.extension().is_some_and(|e| e == "cf") {
            out.push(path);
        }
    }
}
