//! weft's virtual machine: the evaluator's cells, tasks and the semantics of every
//! instruction of the IR.
//!
//! # Bytecode
//!
//! The program's code is the IR instruction table ([`weft_ir::program::Program::exprs`]): a
//! compact array of opcodes ([`weft_ir::program::ExprKind`]) whose operands are `u32` indices
//! of earlier instructions, constructors, entities or plugins. Every statement and every
//! lazily evaluated operand (the right side of `and`/`or`, the branches of `?:`, a
//! comprehension's element, a constructor's indirect attributes) is the root of its own
//! *task*. The opcodes and their operand layout:
//!
//! | opcode | operands | emission | execution |
//! |---|---|---|---|
//! | `Const` | value | nothing | the value |
//! | `Var` | name | resolve the name to a cell: **wait.value** | the cell's value |
//! | `Attr` | base, name | spawn a hook task on `base`, a proxy cell: **wait.frozen** | the attribute's value |
//! | `Subscript`, `Not`, `Binary`, `List`, `Dict`, `Format`, `FString` | operand indices | emit operands | compute |
//! | `And`, `Or` | lhs, rhs | spawn a task on lhs: **wait.value** | its result |
//! | `Cond` | cond, then, otherwise | spawn a task on cond: **wait.value** | its result |
//! | `Call` | callee, args, kwargs, splats | spawn a call task on the arguments (**wait.frozen**) | its result |
//! | `Construct` | ctor | emit the index attributes | create or find the instance, spawn attribute tasks |
//! | `IndexLookup`, `SelectorLookup` | entity or base, query | spawn a lookup task | the instance |
//! | `ListComp` | element, var, iterable, guard | spawn a comprehension task (**listen.gradual** on the iterable when assigned to a relation) | its result |
//! | `IsDefined` | base, name | spawn a hook task: **listen.gradual** | its result |
//!
//! The interpreter emits a task (collects the cells it waits for, spawning sub-tasks on the
//! way), registers it as a waiter, and runs it when all its cells are ready. A task runs until
//! it finishes or registers a new wait. The VM never decides *when* to freeze a relation:
//! the runtime's scheduler drives it through [`Machine`]'s queues.
//!
//! Architecture invariant: no scheduling policy and no threads live here; plugins are called
//! through the [`Host`] trait, which the runtime implements.

pub mod bytecode;
pub mod fifo;
mod machine;
pub mod patterns;
pub mod table;
pub mod verify;

use std::sync::Arc;

pub use bytecode::{Code, CodeError, CodeTables};
pub use fifo::Fifo;
use weft_ir::program::Program;

/// A program ready to run: its tables, and its instructions as checked bytecode.
#[derive(Clone, Debug)]
pub struct Executable {
    pub program: Arc<Program>,
    pub code: Arc<Code>,
}

impl Executable {
    /// Assembles a program the frontend produced. The program keeps its instruction table
    /// (for `--emit=ir`); the machine only reads the bytecode.
    pub fn from_program(program: Arc<Program>) -> Result<Executable, CodeError> {
        let code = Self::assemble(&program)?;
        Ok(Executable { program, code: Arc::new(code) })
    }

    /// [`Executable::from_program`] for a program only evaluated: the machine reads the
    /// bytecode, never the instruction table, so the table is let go of before the evaluation
    /// (as an artifact's program has none). On the 93k-instance benchmark the table held 9 MB
    /// of the heap.
    pub fn for_evaluation(mut program: Program) -> Result<Executable, CodeError> {
        let code = Self::assemble(&program)?;
        program.exprs = Vec::new();
        Ok(Executable { program: Arc::new(program), code: Arc::new(code) })
    }

    /// The checked bytecode of a program's instruction table.
    fn assemble(program: &Program) -> Result<Code, CodeError> {
        let (bytes, tables) = Code::assemble(program);
        verify::verify_program(program, &tables, program.exprs.len())?;
        let len = bytes.len();
        Code::new(Arc::new(bytecode::AlignedBytes::copy_from(&bytes)), 0..len, tables, program)
    }

    /// Replaces the constant of a `CONST` instruction: how `--set` gives a declared
    /// parameter its value.
    pub fn set_const(&mut self, expr: weft_ir::program::ExprId, value: weft_ir::value::Value) -> Result<(), CodeError> {
        Arc::make_mut(&mut self.code).set_const(expr, value)
    }

    /// Checks a program and its code read from an artifact. The code buffer is used in
    /// place.
    pub fn load(
        program: Program,
        backing: Arc<dyn bytecode::Backing>,
        range: std::ops::Range<usize>,
        mut tables: CodeTables,
    ) -> Result<Executable, CodeError> {
        // A decoder grows a long vector by doubling from a cautious first guess, which can
        // leave nearly half of it empty: 0.9 MB of the constants of the 93k-instance benchmark.
        tables.consts.shrink_to_fit();
        tables.texts.shrink_to_fit();
        let code_len = bytecode::instruction_count(backing.bytes().get(range.clone()).unwrap_or(&[]))?;
        verify::verify_program(&program, &tables, code_len)?;
        let code = Code::new(backing, range, tables, &program)?;
        Ok(Executable { program: Arc::new(program), code: Arc::new(code) })
    }
}

pub use machine::*;
