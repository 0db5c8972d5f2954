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

/// Loads, checks and lowers a project. Checking is skipped after load errors, lowering after
/// any error, as the reference stops at its first static error.
pub fn compile<'a>(arena: &'a bumpalo::Bump, dir: &std::path::Path, options: &project::LoadOptions) -> Compiled<'a> {
    let (mut program, mut diagnostics) = project::load_project(arena, dir, options);
    let mut lowered = None;
    if !diagnostics.iter().any(Diagnostic::is_error) {
        let checked = check::check(&mut program);
        diagnostics.extend(checked.diagnostics);
        if !diagnostics.iter().any(Diagnostic::is_error) {
            lowered = Some(lower::lower(&program, &checked.model));
        }
    }
    Compiled { project: program, diagnostics, lowered }
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
