//! The front end up to the checked model: loading a project, and the static checks.
//!
//! * `load/*`: `weft_frontend::project::load_project`: read `project.yml`, find the modules,
//!   read and parse `main.cf` and every namespace it imports (the embedded `std` included), in
//!   the reference's import order. This is the input of the checks.
//! * `check/*`: `weft_frontend::check::check` of a freshly loaded project: registration and
//!   type lookup, definitions, statements and constructor inference, constant defaults and
//!   typedef constraints, dataclasses. The checks intern names into the project, so every
//!   iteration checks a project loaded for it (the load is not timed).
//!
//! The checked model and the loaded project are dropped outside the timing: freeing them is
//! not part of either stage (the compiler keeps them until it exits).
//!
//! Inputs are `benches/gen_model.py --flavor pure` models with `--hosts 500` and `--hosts 5000`;
//! throughput is in lines of `main.cf`, the unit of the `parse` bench.
//!
//! Run with `cargo bench -p weft-benches --bench check`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bumpalo::Bump;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, Model, generated_model};
use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::Diagnostic;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [500, 5000];

fn options() -> LoadOptions {
    LoadOptions { python_env: None }
}

/// A bench of a model with errors would measure error reporting, not the checks.
fn assert_checks_cleanly(model: &Model) {
    let arena = Bump::new();
    let (mut program, diagnostics) = load_project(&arena, &model.dir, &options());
    assert!(!diagnostics.iter().any(Diagnostic::is_error), "{} does not load: {diagnostics:?}", model.name);
    let checked = weft_frontend::check::check(&mut program);
    assert!(
        !checked.diagnostics.iter().any(Diagnostic::is_error),
        "{} does not check: {:?}",
        model.name,
        checked.diagnostics
    );
}

fn bench_check(c: &mut Criterion) {
    let models: Vec<Model> = HOSTS.into_iter().map(|hosts| generated_model(hosts, Flavor::Pure)).collect();
    for model in &models {
        assert_checks_cleanly(model);
    }

    let mut group = c.benchmark_group("load");
    for model in &models {
        group.throughput(Throughput::Elements(model.lines));
        group.bench_with_input(BenchmarkId::from_parameter(&model.name), model, |b, model| {
            // The arena is made and freed outside the timing; the load allocates its trees in
            // it, as the compiler's does.
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let arena = Bump::new();
                    let start = Instant::now();
                    let loaded = load_project(&arena, &model.dir, &options());
                    total += start.elapsed();
                    black_box(&loaded);
                }
                total
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("check");
    for model in &models {
        group.throughput(Throughput::Elements(model.lines));
        group.bench_with_input(BenchmarkId::from_parameter(&model.name), model, |b, model| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let arena = Bump::new();
                    let (mut program, _) = load_project(&arena, &model.dir, &options());
                    let start = Instant::now();
                    let checked = weft_frontend::check::check(&mut program);
                    total += start.elapsed();
                    black_box(&checked);
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_check);
criterion_main!(benches);
