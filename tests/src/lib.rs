//! Shared helpers for the end-to-end suites.

pub mod compile;
pub mod export;
pub mod parser;
pub mod realworld;
pub mod scratch;

use std::path::{Path, PathBuf};

/// The rows of a tab-separated table (the `.tsv` files of expected outcomes and known
/// divergences): each line that is neither blank nor a `#` comment, as its first column and
/// the other columns.
pub fn table_rows(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut columns = line.split('\t').map(str::to_string);
            let first = columns.next().expect("split yields at least one column");
            (first, columns.collect())
        })
        .collect()
}

/// The project's copy of the conformance corpus.
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance")
}

/// Every case directory under `root` (one holding `main.cf`, outside `libs/`), sorted.
pub fn cases_in(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("main.cf").is_file() {
            out.push(dir.to_path_buf());
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "libs") {
                walk(&path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}
