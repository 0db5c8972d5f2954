//! The whole pipeline in one process, over a ladder of model sizes, to show how its cost grows
//! with the model (linearly, if instances per second stay the same from rung to rung).
//!
//! * `pipeline/compile/*`: what `weft compile` does, without process start-up and printing:
//!   load, check and lower the sources (`weft_frontend::compile`), assemble the bytecode
//!   (`Executable::from_program`) and evaluate (`weft_runtime::run`). Models:
//!   `gen_model.py --flavor pure` with `--hosts 54`, `540` and `5000` (about 1,000, 10,000 and
//!   93,000 instances).
//! * `pipeline/export/*`: what `weft export` does, without start-up and writing the file: the
//!   same, then the export to the resource graph and its JSON text. Models:
//!   `gen_model.py --flavor resources` with `--hosts 27`, `270` and `2500` (about 1,000, 10,000
//!   and 93,000 instances; about half of them are exported resources).
//!
//! Everything a run allocates is freed within the timing, as the `weft` process frees it.
//! Throughput is in instances (criterion's "elements"). Larger models (up to a million
//! instances) are left to `benches/ladder.sh`, which runs the binary: one iteration of those
//! takes longer than a criterion sample should.
//!
//! Run with `cargo bench -p weft-benches --bench pipeline`.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, Model, generated_model};
use weft_frontend::project::LoadOptions;
use weft_runtime::modules::Modules;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hosts per rung of the ladder, for about 1k, 10k and 93k instances in each flavor: a
/// resources model has about twice the instances of a pure one with the same hosts.
const PURE_HOSTS: [u32; 3] = [54, 540, 5000];
const RESOURCES_HOSTS: [u32; 3] = [27, 270, 2500];

/// What one run produced, checked once before measuring.
struct Run {
    instances: usize,
    resources: usize,
}

/// The whole pipeline on one model; with `export`, also the export and its JSON text.
fn pipeline(model: &Model, export: bool) -> Run {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &model.dir, &LoadOptions { python_env: None });
    let modules = Modules::from_dirs(compiled.project.module_dirs());
    let lowered = compiled.lowered.unwrap_or_else(|| panic!("{}: {:?}", model.name, compiled.diagnostics));
    let executable = weft_vm::Executable::from_program(Arc::new(lowered))
        .unwrap_or_else(|e| panic!("{}: the program does not assemble: {e}", model.name));
    let options = weft_runtime::Options { modules: modules.clone(), ..weft_runtime::Options::default() };
    let (outcome, evaluated) = weft_runtime::run(&executable, &options);
    assert!(outcome.errors.is_empty(), "{}: {:?}", model.name, outcome.errors);
    let mut resources = 0;
    if export {
        let evaluated = evaluated.unwrap_or_else(|| panic!("{}: no evaluated model", model.name));
        let graph = match weft_runtime::export::export(&evaluated, &modules) {
            Ok(export) => export.graph,
            Err(e) => panic!("{}: {:?}", model.name, e.diagnostics),
        };
        let text = serde_json::to_string(&graph.to_json()).expect("the graph serialises");
        std::hint::black_box(&text);
        resources = graph.resources.len();
    }
    Run { instances: outcome.instances, resources }
}

fn bench_pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline");
    // One iteration of the largest rung takes about two seconds.
    group.sample_size(10);
    for (kind, flavor, ladder) in
        [("compile", Flavor::Pure, PURE_HOSTS), ("export", Flavor::Resources, RESOURCES_HOSTS)]
    {
        let export = flavor == Flavor::Resources;
        for hosts in ladder {
            let model = generated_model(hosts, flavor);
            let probe = pipeline(&model, export);
            // The generator states what the reference creates; a difference is a bug of
            // weft's, but the bench still measures what weft does, so it only says so.
            for (key, got) in [("instances", probe.instances), ("resources", probe.resources)] {
                let expected = model.expected_count(key);
                if (export || key == "instances") && expected != Some(got as u64) {
                    let name = &model.name;
                    eprintln!("warning: {kind} {name}: weft made {got} {key}, the generator expects {expected:?}");
                }
            }
            eprintln!("pipeline/{kind}/{}: {} instances, {} resources", model.name, probe.instances, probe.resources);
            group.throughput(Throughput::Elements(probe.instances as u64));
            group.bench_with_input(BenchmarkId::new(kind, &model.name), &model, |b, model| {
                b.iter(|| pipeline(model, export))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_pipeline);
criterion_main!(benches);
