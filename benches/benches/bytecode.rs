//! Bytecode: from the lowered IR to the code the VM runs.
//!
//! * `bytecode/assemble/*`: `weft_vm::Code::assemble`: encode the instruction table into
//!   fixed-size records, the location table and the operand pool, with the constant and text
//!   side tables.
//! * `bytecode/executable/*`: `weft_vm::Executable::from_program`, what `weft compile` does
//!   between lowering and evaluation: assemble, verify the program's tables
//!   (`verify::verify_program`) and check the code buffer (`Code::new`).
//!
//! The program is compiled once; results are dropped outside the timing. Inputs are
//! `benches/gen_model.py --flavor pure` models with `--hosts 500` and `--hosts 5000`;
//! throughput is in instructions.
//!
//! Run with `cargo bench -p weft-benches --bench bytecode`.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, generated_model};
use weft_ir::program::Program;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [500, 5000];

fn bench_bytecode(c: &mut Criterion) {
    let programs: Vec<(String, Arc<Program>)> = HOSTS
        .into_iter()
        .map(|hosts| {
            let model = generated_model(hosts, Flavor::Pure);
            let program = Arc::new(model.lower());
            // A program that does not assemble would make the bench measure an early error.
            weft_vm::Executable::from_program(program.clone())
                .unwrap_or_else(|e| panic!("{}: the program does not assemble: {e}", model.name));
            (model.name, program)
        })
        .collect();

    let mut group = c.benchmark_group("bytecode");
    for (name, program) in &programs {
        group.throughput(Throughput::Elements(program.exprs.len() as u64));
        group.bench_with_input(BenchmarkId::new("assemble", name), program, |b, program| {
            b.iter_with_large_drop(|| weft_vm::Code::assemble(program))
        });
        group.bench_with_input(BenchmarkId::new("executable", name), program, |b, program| {
            b.iter_with_large_drop(|| weft_vm::Executable::from_program(program.clone()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_bytecode);
criterion_main!(benches);
