//! Every `.cf` file of the public Inmanta modules pinned in `realworld/modules.tsv` must parse
//! without errors: the reference parser accepts all of them, so any error here is a
//! difference between weft's parser and the reference's.
//!
//! The modules are wheels on PyPI. `realworld/fetch.py` downloads them (once; they are
//! cached in `realworld/.cache/`, which git ignores) and unpacks their model code. The
//! fetcher runs only when the cache does not match the module list (see
//! `weft_tests::realworld`), so after the first run this needs neither the network nor Python.
//!
//! Set `WEFT_SKIP_NETWORK_TESTS=1` to skip the test where PyPI cannot be reached.

use bumpalo::Bump;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use weft_ir::{FileId, Interner, SourceFile};
use weft_tests::realworld::{ensure_cache, import_project, network_tests_skipped, python_env, realworld_dir};

/// How many `.cf` files the 33 modules of `modules.tsv` contain. Update it together with the
/// list.
const EXPECTED_CF_FILES: usize = 60;

/// Every `.cf` file under `<cache>/<module>/model/`, relative to the cache and with `/` as
/// separator, found by walking the directories rather than trusting `cf_files.txt`.
fn walk_cf_files(cache: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, relative: &str, out: &mut BTreeSet<String>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("directory entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let child = format!("{relative}/{name}");
            if path.is_dir() {
                walk(&path, &child, out);
            } else if name.ends_with(".cf") {
                out.insert(child);
            }
        }
    }

    let mut out = BTreeSet::new();
    for entry in fs::read_dir(cache).expect("the cache directory exists") {
        let entry = entry.expect("directory entry");
        let module = entry.file_name().to_string_lossy().into_owned();
        let model = entry.path().join("model");
        // Wheels live in `wheels/`; `fetch.py` unpacks into hidden staging directories first.
        if module.starts_with('.') || !model.is_dir() {
            continue;
        }
        walk(&model, &format!("{module}/model"), &mut out);
    }
    out
}

#[test]
fn every_realworld_module_parses_without_errors() {
    if network_tests_skipped() {
        eprintln!(
            "\n{banner}\n*** SKIPPED: real-world module parsing, because WEFT_SKIP_NETWORK_TESTS=1.\n\
             *** The .cf files of tests/realworld/modules.tsv were NOT checked.\n{banner}\n",
            banner = "*".repeat(78)
        );
        return;
    }

    let cache = ensure_cache();

    let listed: BTreeSet<String> = fs::read_to_string(cache.join("cf_files.txt"))
        .expect("cf_files.txt is readable")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let found = walk_cf_files(&cache);
    assert_eq!(
        listed,
        found,
        "cf_files.txt and the unpacked modules disagree; delete {} and run the test again",
        cache.display()
    );
    assert_eq!(
        found.len(),
        EXPECTED_CF_FILES,
        "expected {EXPECTED_CF_FILES} .cf files in the modules of modules.tsv, found {}:\n{}",
        found.len(),
        found.iter().cloned().collect::<Vec<_>>().join("\n")
    );

    // One arena, reset between files, and one interner for all files, as the compiler uses them.
    let mut arena = Bump::new();
    let mut interner = Interner::new();
    let mut errors = Vec::new();
    let mut lines = 0;
    for (index, relative) in found.iter().enumerate() {
        let text = fs::read_to_string(cache.join(relative)).unwrap_or_else(|e| panic!("cannot read {relative}: {e}"));
        let source = SourceFile::new(relative.clone(), text);
        lines += source.line_count();
        arena.reset();
        let output = weft_frontend::parse_file(&arena, &source.text, FileId(index as u32), &mut interner);
        for diagnostic in output.diagnostics.iter().filter(|d| d.is_error()) {
            let at = diagnostic.primary_location().map(|l| source.line_col(l.span.start));
            let position = at.map(|p| format!(":{}:{}", p.line, p.column)).unwrap_or_default();
            errors.push(format!("{relative}{position}: {} {}", diagnostic.code.0, diagnostic.message));
        }
    }
    assert!(
        errors.is_empty(),
        "{} error(s) in real-world modules that the reference parser accepts:\n{}",
        errors.len(),
        errors.join("\n")
    );
    eprintln!("parsed {} real-world .cf files ({lines} lines) without errors", found.len());
}

/// A project per module whose `main.cf` is `import <module>`, checked as `weft check` does
/// with the downloaded modules presented as v2 modules of a Python environment: the static
/// outcome must be the reference's (`realworld/static-expect.tsv`, recorded with
/// `tools/static-oracle.py` on the same projects).
#[test]
fn importing_each_realworld_module_checks_as_the_reference_does() {
    let Some(venv) = python_env() else {
        eprintln!("\n*** SKIPPED: real-world module checks, because WEFT_SKIP_NETWORK_TESTS=1.\n");
        return;
    };
    let dir = realworld_dir();
    let parse_table = |text: String| -> Vec<(String, String)> {
        weft_tests::table_rows(&text)
            .into_iter()
            .map(|(name, columns)| {
                assert!(!columns.is_empty(), "a tab-separated line: {name}");
                (name, columns.join("\t"))
            })
            .collect()
    };
    let expected = parse_table(fs::read_to_string(dir.join("static-expect.tsv")).expect("static-expect.tsv"));
    let known: Vec<(String, String)> =
        parse_table(fs::read_to_string(dir.join("known-divergences.tsv")).expect("list"))
            .into_iter()
            .map(|(name, rest)| (name, rest.split('\t').next().unwrap_or("").to_string()))
            .collect();
    let mut failures = Vec::new();
    for (module, want) in &expected {
        let project = import_project(module);
        let options = weft_frontend::project::LoadOptions { python_env: Some(venv.clone()) };
        let arena = Bump::new();
        let (mut program, mut diagnostics) = weft_frontend::project::load_project(&arena, &project, &options);
        if !diagnostics.iter().any(|d| d.is_error()) {
            diagnostics.extend(weft_frontend::check::check(&mut program).diagnostics);
        }
        let got = match diagnostics.iter().find(|d| d.is_error()) {
            None => "ok".to_string(),
            Some(d) => {
                let line =
                    d.primary_location().map_or("-".to_string(), |l| program.sources.line_col(l).line.to_string());
                format!("error\t{}\t{line}", d.kind)
            }
        };
        let listed = known.iter().find(|(m, _)| m == module);
        match listed {
            Some(_) if got == *want => failures
                .push(format!("{module}: listed as a known divergence but weft now gives the reference's {got}")),
            Some((_, outcome)) if *outcome == got => {}
            Some((_, outcome)) => {
                failures.push(format!("{module}: listed as a known divergence ({outcome}) but weft now gives {got}"))
            }
            None if got != *want => failures.push(format!("{module}: weft {got}, reference {want}")),
            None => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
