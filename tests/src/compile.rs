//! Compiling a project end to end, as `weft compile` does, for the conformance suites.

use std::path::Path;
use std::sync::Arc;

use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::{Diagnostic, ErrorKind};

/// What a compile observably did: the fields the conformance corpus records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    /// `std::print` lines, sorted.
    pub prints: Vec<String>,
    /// The reported error: its kind, and its line and file (relative to the project) when it
    /// has a location.
    pub error: Option<(ErrorKind, Option<u32>, Option<String>)>,
}

/// Loads, checks, lowers and evaluates the project in `dir`.
pub fn compile(dir: &Path) -> Outcome {
    let arena = bumpalo::Bump::new();
    let (mut program, mut diagnostics) = load_project(&arena, dir, &LoadOptions { python_env: None });
    let mut prints = Vec::new();
    if !diagnostics.iter().any(Diagnostic::is_error) {
        let checked = weft_frontend::check::check(&mut program);
        diagnostics.extend(checked.diagnostics);
        if !diagnostics.iter().any(Diagnostic::is_error) {
            let lowered = Arc::new(weft_frontend::lower::lower(&program, &checked.model));
            let module_dirs =
                program.modules.iter().filter_map(|m| m.root().map(|r| (m.name.clone(), r.to_path_buf()))).collect();
            let outcome = weft_runtime::evaluate(lowered, &weft_runtime::Options { module_dirs, max_iterations: None });
            prints = outcome.prints;
            diagnostics.extend(outcome.errors.into_iter().take(1));
        }
    }
    prints.sort();
    let error = diagnostics.iter().find(|d| d.is_error()).map(|d| {
        let location = d.primary_location();
        let line = location.map(|l| program.sources.line_col(l).line);
        let file = location.map(|l| program.sources.get(l.file).name.clone());
        (d.kind, line, file)
    });
    Outcome { ok: error.is_none(), prints, error }
}
