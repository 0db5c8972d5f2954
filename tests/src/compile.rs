//! Compiling a project end to end, as `weft compile` does, for the conformance suites.

use std::path::Path;
use std::sync::Arc;

use weft_frontend::project::LoadOptions;
use weft_ir::ErrorKind;

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
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions { python_env: None });
    let (program, mut diagnostics) = (compiled.project, compiled.diagnostics);
    let mut prints = Vec::new();
    if let Some(lowered) = compiled.lowered {
        let options = weft_runtime::Options { module_dirs: program.module_dirs(), max_iterations: None };
        let outcome = weft_runtime::evaluate(Arc::new(lowered), &options);
        prints = outcome.prints;
        diagnostics.extend(outcome.errors.into_iter().take(1));
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
