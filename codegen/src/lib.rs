//! weft's native code generator.
//!
//! This crate will compile the same IR the VM runs to native code with Cranelift (pinned at
//! `=0.135.8` in the workspace manifest) and fill the artifact's reserved native section. It
//! is introduced after the bytecode VM; until then it only fixes the crate's place in the
//! dependency graph, and it does not yet pull in Cranelift so that builds stay fast.
//!
//! Architecture invariant: only the CLI, benches and tests depend on this crate; the runtime
//! never does.
