//! Shared helpers for the end-to-end suites.

pub mod compile;
pub mod parser;
