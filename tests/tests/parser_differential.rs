//! Differential test against the reference parser.
//!
//! `fixtures/parser/differential/` holds programs made by mutating real ones
//! (`tools/make-parser-corpus.py`) and `expected.tsv`, the reference parser's verdict on each
//! (`tools/parser-oracle.py`). weft must accept exactly the programs the reference accepts, and
//! for the others report its first error with the same kind on the same line, except for the
//! disagreements listed with a reason in `known-divergences.tsv`. A listed disagreement that
//! disappears, or whose outcome changes, fails the test too, so the list stays true.

use std::collections::BTreeMap;
use std::path::Path;

use weft_tests::parser::{RefOutcome, parse_diagnostics, weft_outcome};

#[test]
fn weft_agrees_with_the_reference_parser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/parser/differential");
    let expected = read_tsv(&dir.join("expected.tsv"));
    let known = read_tsv(&dir.join("known-divergences.tsv"));
    assert!(expected.len() >= 100, "expected.tsv lists only {} programs", expected.len());

    let mut failures = Vec::new();
    for (file, columns) in &expected {
        let reference =
            RefOutcome::parse(&columns[0]).unwrap_or_else(|| panic!("expected.tsv: bad outcome for {file}"));
        let src = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let weft = weft_outcome(&src, &parse_diagnostics(&src));
        let accepts_alike = (reference == RefOutcome::Ok) == (weft == RefOutcome::Ok);
        match known.get(file) {
            // Accepting a program the reference rejects, or the reverse, is never acceptable.
            _ if !accepts_alike => {
                failures.push(format!("{file}: weft `{weft}`, reference `{reference}` (accept/reject differs)"))
            }
            Some(listed) if reference.agrees_with(&weft) => {
                failures.push(format!("{file}: listed in known-divergences.tsv ({}) but weft now agrees", listed[1]));
            }
            Some(listed) if listed[0] != weft.to_string() => {
                failures.push(format!("{file}: weft `{weft}`, but known-divergences.tsv records `{}`", listed[0]));
            }
            Some(_) => {}
            None if !reference.agrees_with(&weft) => {
                failures.push(format!("{file}: weft `{weft}`, reference `{reference}`"))
            }
            None => {}
        }
    }
    for file in known.keys() {
        if !expected.contains_key(file) {
            failures.push(format!("{file}: listed in known-divergences.tsv but not in expected.tsv"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreement(s) with the reference parser:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Reads a tab-separated file into `first column -> other columns`, skipping `#` comments.
fn read_tsv(path: &Path) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    weft_tests::table_rows(&text).into_iter().collect()
}
