//! weft's bytecode virtual machine.
//!
//! This crate will hold the instruction set (each opcode documented with its operand layout),
//! the compiler from IR to bytecode, and the interpreter loop that runs one task until it
//! finishes or reaches a wait. It is introduced by the evaluation milestone; until then it
//! only fixes the crate's place in the dependency graph.
//!
//! Architecture invariant: no scheduling policy and no threads live here; the VM talks to
//! the runtime only through the host interface defined in `weft-ir`.
