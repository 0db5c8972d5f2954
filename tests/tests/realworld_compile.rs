//! A project per real-world module whose `main.cf` is `import <module>`, compiled in full as
//! `weft compile` does it (load, check, lower, evaluate), with the downloaded modules presented
//! as v2 modules of a Python environment (see `weft_tests::realworld`).
//!
//! The outcome must be the reference's full `inmanta compile` of the same project
//! (`realworld/compile-expect.tsv`, recorded with `tools/realworld-compile-oracle.sh`): the
//! modules it compiles must compile, and the others must fail with the same kind of error at
//! the same line of the same file. Differences that cannot be removed are listed with their
//! reason in `realworld/compile-known-divergences.tsv`.
//!
//! Set `WEFT_SKIP_NETWORK_TESTS=1` to skip the test where PyPI cannot be reached.

use std::fs;
use std::path::Path;
use weft_frontend::project::LoadOptions;
use weft_tests::compile::{Outcome, compile_with};
use weft_tests::realworld::{import_project, python_env, realworld_dir};
use weft_tests::table_rows;

/// The rows of a tab-separated table file (see [`table_rows`]).
fn read_table(path: &Path) -> Vec<(String, Vec<String>)> {
    table_rows(&fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())))
}

/// An outcome in the form of `compile-expect.tsv`: `ok`, or `error <kind> <line> <file>` with
/// tabs, the file relative to the site-packages directory, as the reference's file is.
fn describe(outcome: &Outcome) -> String {
    match &outcome.error {
        None => "ok".to_string(),
        Some((kind, line, file)) => {
            let line = line.map_or("-".to_string(), |l| l.to_string());
            let file = file.as_deref().map_or("-", |f| f.rsplit_once("site-packages/").map_or(f, |(_, rest)| rest));
            format!("error\t{kind}\t{line}\t{file}")
        }
    }
}

#[test]
fn compiling_each_realworld_module_ends_as_the_reference_does() {
    let Some(venv) = python_env() else {
        eprintln!("\n*** SKIPPED: real-world module compiles, because WEFT_SKIP_NETWORK_TESTS=1.\n");
        return;
    };
    let dir = realworld_dir();
    let expected = read_table(&dir.join("compile-expect.tsv"));
    // A listed divergence is the outcome weft gives (every column but the last) and the reason
    // (the last column).
    let known: Vec<(String, String)> = read_table(&dir.join("compile-known-divergences.tsv"))
        .into_iter()
        .map(|(module, mut columns)| {
            columns.pop();
            (module, columns.join("\t"))
        })
        .collect();

    // The recording must cover the module list, and agree with its `ref_compile` column, which
    // is what the issue names: the modules the reference compiles.
    let modules = read_table(&dir.join("modules.tsv"));
    let mut failures = Vec::new();
    for (module, columns) in &modules {
        let ref_compile = columns.get(3).map_or("", String::as_str);
        match expected.iter().find(|(m, _)| m == module) {
            None => failures.push(format!("{module}: not in compile-expect.tsv; record it again")),
            Some((_, want)) if (want[0] == "ok") != (ref_compile == "ok") => failures
                .push(format!("{module}: modules.tsv says {ref_compile}, compile-expect.tsv says {}", want.join(" "))),
            Some(_) => {}
        }
    }
    for (module, _) in &known {
        if !expected.iter().any(|(m, _)| m == module) {
            failures.push(format!("{module}: listed as a known divergence but not in compile-expect.tsv"));
        }
    }

    let options = LoadOptions { python_env: Some(venv) };
    for (module, want) in &expected {
        let want = want.join("\t");
        let outcome = compile_with(&import_project(module), &options);
        let got = describe(&outcome);
        // The reference prints nothing for any of these projects (the recording script refuses
        // a project that prints).
        if !outcome.prints.is_empty() {
            failures.push(format!("{module}: weft printed {:?}, the reference prints nothing", outcome.prints));
        }
        // A listed divergence must still occur, exactly as listed.
        match known.iter().find(|(m, _)| m == module) {
            Some(_) if got == want => failures
                .push(format!("{module}: listed as a known divergence but weft now gives the reference's {want}")),
            Some((_, listed)) if *listed != got => failures.push(format!(
                "{module}: listed as a known divergence ({listed}) but weft now gives {got} (reference: {want})"
            )),
            Some(_) => {}
            None if got != want => failures.push(format!("{module}: weft {got}, reference {want}")),
            None => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n").replace('\t', " "));
}
