//! weft's runtime.
//!
//! This crate will load artifacts, hold instances and attribute cells, schedule evaluation
//! with the reference compiler's freeze rules (on rayon between freeze points), implement the
//! std plugins natively, and export and apply the resource graph. It is introduced by the
//! evaluation milestone; until then it only fixes the crate's place in the dependency graph.
//!
//! Architecture invariant: the runtime never depends on the frontend or on codegen, so a host
//! that only runs artifacts carries neither a parser nor a code generator.
