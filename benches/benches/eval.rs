//! The evaluation stage: `weft compile` of a generated model, end to end (load, check, lower,
//! evaluate), and evaluation alone on an already lowered program.
//!
//! Inputs are `benches/gen_model.py --flavor pure` models: `--hosts 500` (about 9,400 instances)
//! and `--hosts 5000` (about 93,000 instances), the model the project's goal is stated for.
//! Throughput is reported in instances per second; for `eval/python_calls/1000`, a model of
//! 1,000 instances each calling two Python plugins of its module, in calls per second.
//!
//! Run with `cargo bench -p weft-benches --bench eval`.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, generated_model};

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's: the system allocator makes evaluation about a quarter slower.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [500, 5000];

fn bench_eval(c: &mut Criterion) {
    let mut group = c.benchmark_group("eval");
    group.sample_size(10);
    for hosts in HOSTS {
        let model = generated_model(hosts, Flavor::Pure);
        let program = Arc::new(model.lower());
        let probe = weft_runtime::evaluate(program.clone(), &weft_runtime::Options::default());
        assert!(probe.errors.is_empty(), "{}: {:?}", model.name, probe.errors);
        group.throughput(Throughput::Elements(probe.instances as u64));
        group.bench_with_input(BenchmarkId::new("compile", &model.name), &model, |b, model| {
            b.iter(|| {
                let program = Arc::new(model.lower());
                weft_runtime::evaluate(program, &weft_runtime::Options::default())
            })
        });
        group.bench_with_input(BenchmarkId::new("evaluate", &model.name), &program, |b, program| {
            b.iter(|| weft_runtime::evaluate(program.clone(), &weft_runtime::Options::default()))
        });
    }
    group.finish();
}

/// A model calling a module's Python plugins 2,001 times (two per instance, and one more),
/// compiled and evaluated as `weft compile` does: each iteration starts the module's Python
/// server, as each evaluation does.
fn bench_python_calls(c: &mut Criterion) {
    const INSTANCES: u32 = 1000;
    let mut group = c.benchmark_group("eval");
    group.sample_size(10);
    let dir = weft_benches::python_plugin_project(INSTANCES);
    let compile = || {
        let arena = bumpalo::Bump::new();
        let load = weft_frontend::project::LoadOptions { python_env: None };
        let compiled = weft_frontend::compile(&arena, &dir, &load);
        let program = Arc::new(compiled.lowered.expect("the project compiles"));
        let modules = weft_runtime::modules::Modules::from_dirs(compiled.project.module_dirs());
        weft_runtime::evaluate(program, &weft_runtime::Options { modules, ..weft_runtime::Options::default() })
    };
    let probe = compile();
    assert!(probe.errors.is_empty() && probe.prints == ["first=1"], "{:?} {:?}", probe.errors, probe.prints);
    group.throughput(Throughput::Elements(2 * u64::from(INSTANCES) + 1));
    group.bench_function(BenchmarkId::new("python_calls", INSTANCES), |b| b.iter(compile));
    group.finish();
}

criterion_group!(benches, bench_eval, bench_python_calls);
criterion_main!(benches);
