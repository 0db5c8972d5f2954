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

/// Runs `f`, first moving to a fresh stack segment if less than 128 KB of stack is left.
///
/// Every pass over a syntax tree recurses once per level of nesting. The parser bounds that
/// depth, but a level costs several kilobytes in unoptimised builds, so recursive functions
/// call this to stay safe on any thread, whatever its stack size.
#[inline]
pub(crate) fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(128 * 1024, 4 * 1024 * 1024, f)
}
