//! weft's Inmanta frontend.
//!
//! Source text goes in, a checked program and diagnostics come out:
//!
//! * [`lexer`] and [`parser`] turn one `.cf` file into an arena-allocated [`ast`];
//! * `project` finds `project.yml`, `main.cf` and the modules a project imports (v1 modules
//!   under the module path, v2 modules in a Python environment, and weft's embedded `std`);
//! * `check` performs the static checks the reference compiler performs before it executes
//!   anything.
//!
//! Architecture invariant: the frontend never panics on input. Every problem in a user's files
//! becomes a [`weft_ir::Diagnostic`]; functions return partial results together with the
//! diagnostics rather than stopping at the first one.

pub mod ast;
pub mod check;
pub mod dump;
pub mod lexer;
pub mod lower;
pub mod parser;
pub mod project;
pub mod python;
pub mod regex;
mod relocate;
pub mod strings;

pub use parser::{ParseOutput, parse_file};

use weft_ir::Diagnostic;

/// A project taken through the whole frontend.
#[derive(Debug)]
pub struct Compiled<'a> {
    /// The loaded project: its sources (for rendering diagnostics) and modules.
    pub project: project::Program<'a>,
    /// In the order the reference would report them.
    pub diagnostics: Vec<Diagnostic>,
    /// The lowered program, when loading and checking reported no error.
    pub lowered: Option<weft_ir::program::Program>,
}

/// Loads, checks and lowers a project, and resolves the parameters `project.yml` declares.
/// Checking is skipped after load errors, lowering after any error, as the reference stops at
/// its first static error; a program with an invalid parameter declaration is not returned.
pub fn compile<'a>(arena: &'a bumpalo::Bump, dir: &std::path::Path, options: &project::LoadOptions) -> Compiled<'a> {
    let (mut program, mut diagnostics) = project::load_project(arena, dir, options);
    let mut lowered = None;
    if !diagnostics.iter().any(Diagnostic::is_error) {
        let checked = check::check(&mut program);
        diagnostics.extend(checked.diagnostics);
        if !diagnostics.iter().any(Diagnostic::is_error) {
            let mut ir = lower::lower(&program, &checked.model);
            // Declared parameters are weft's own addition: the reference accepts the project
            // either way, so their errors come after everything it would report.
            let parameter_errors = lower::parameters(&program, &mut ir);
            let ok = parameter_errors.is_empty();
            diagnostics.extend(parameter_errors);
            lowered = ok.then_some(ir);
        }
    }
    Compiled { project: program, diagnostics, lowered }
}

impl Compiled<'_> {
    /// The digest of the project's sources, for the provenance of an artifact. See
    /// [`project::Program::source_digest`] for exactly what it covers.
    pub fn source_digest(&self) -> String {
        self.project.source_digest()
    }
}

/// The digest of a compiled project's sources: `project.yml` and every loaded `.cf` file, by
/// machine-independent path, in load order (see [`project::Program::source_digest`]).
pub fn source_digest(compiled: &Compiled<'_>) -> String {
    compiled.source_digest()
}

/// Runs `f`, first moving to a fresh stack segment if less than 128 KB of stack is left.
///
/// Every pass over a syntax tree recurses once per level of nesting. The parser bounds that
/// depth, but a level costs several kilobytes in unoptimised builds, so recursive functions
/// call this to stay safe on any thread, whatever its stack size.
#[inline]
pub(crate) fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(128 * 1024, 4 * 1024 * 1024, f)
}
