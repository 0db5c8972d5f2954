//! Lowering: `weft_frontend::lower::lower` from a checked model to the IR (constant folding,
//! desugaring, declared variables, eager promises, constructor arguments). The project is
//! loaded and checked once; every iteration lowers the same checked model, which lowering only
//! reads. The resulting program is dropped outside the timing.
//!
//! Inputs are `benches/gen_model.py --flavor pure` models with `--hosts 500` and `--hosts 5000`;
//! throughput is in IR instructions produced (criterion's "elements"). The number of
//! instructions and lines of each model is printed on standard error at start-up.
//!
//! Run with `cargo bench -p weft-benches --bench lower`.

use bumpalo::Bump;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, generated_model};
use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::Diagnostic;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [500, 5000];

fn bench_lower(c: &mut Criterion) {
    let mut group = c.benchmark_group("lower");
    for hosts in HOSTS {
        let model = generated_model(hosts, Flavor::Pure);
        let arena = Bump::new();
        let (mut program, mut diagnostics) = load_project(&arena, &model.dir, &LoadOptions { python_env: None });
        let checked = weft_frontend::check::check(&mut program);
        diagnostics.extend(checked.diagnostics);
        assert!(!diagnostics.iter().any(Diagnostic::is_error), "{}: {diagnostics:?}", model.name);
        let instructions = weft_frontend::lower::lower(&program, &checked.model).exprs.len();
        eprintln!("lower {}: {} lines of main.cf, {instructions} instructions", model.name, model.lines);
        group.throughput(Throughput::Elements(instructions as u64));
        group.bench_function(BenchmarkId::from_parameter(&model.name), |b| {
            b.iter_with_large_drop(|| weft_frontend::lower::lower(&program, &checked.model))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_lower);
criterion_main!(benches);
