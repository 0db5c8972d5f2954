//! Shared helpers for the end-to-end suites.

pub mod compile;
pub mod export;
pub mod parser;
pub mod realworld;
pub mod scratch;

use std::path::{Path, PathBuf};

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
