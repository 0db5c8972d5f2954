//! A value that fails a typedef's constraint at run time is refused with the constraint as
//! the reference prints it (`does not match constraint `(std::length(self) > 3)``): every row
//! of `tests/fixtures/constraint-text/cases.tsv`, whose messages `tools/constraint-oracle.py`
//! recorded from the reference, compiles to an error whose first cause reads exactly so.

use std::path::Path;

use weft_tests::compile::compile;
use weft_tests::scratch::Scratch;

/// One row: the model the oracle compiled, and the first cause it recorded.
fn check(index: usize, base: &str, constraint: &str, value: &str, expected: &str) -> Option<String> {
    let dir = Scratch::new("constraint-text", &index.to_string());
    dir.write(
        "main.cf",
        &format!(
            "typedef t as {base} matching {constraint}\nentity A:\n  t v\nend\nimplement A using std::none\nx = {value}\na = A(v=x)\n"
        ),
    );
    let outcome = compile(&dir.0);
    let actual = outcome.cause_message.as_deref();
    (actual != Some(expected)).then(|| format!("`{constraint}` with {value}: expected {expected:?}, got {actual:?}"))
}

#[test]
fn failed_constraints_read_as_the_reference_prints_them() {
    let table = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/constraint-text/cases.tsv");
    let text = std::fs::read_to_string(&table).expect("the table exists");
    let mut rows = 0;
    let failures: Vec<String> = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .enumerate()
        .filter_map(|(index, line)| {
            rows += 1;
            let [base, constraint, value, expected] = line.split('\t').collect::<Vec<_>>()[..] else {
                return Some(format!("row {index} does not have four columns: {line:?}"));
            };
            check(index, base, constraint, value, expected)
        })
        .collect();
    assert!(rows >= 20, "the table has its rows ({rows})");
    assert!(failures.is_empty(), "{} of {rows} rows differ:\n{}", failures.len(), failures.join("\n"));
}
