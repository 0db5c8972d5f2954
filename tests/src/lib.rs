//! Shared helpers for the end-to-end suites.

pub mod parser;
pub mod compile;
