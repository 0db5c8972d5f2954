//! The export: from an evaluated model to the resource graph, and the graph to the JSON text
//! `weft export` writes (what `inmanta export -j` writes).
//!
//! * `export/graph/*`: `weft_runtime::export::export`: find the resource instances, map their
//!   fields to JSON, resolve ids, `requires` and references, check the graph.
//! * `export/json/*`: `ResourceGraph::to_json` and `serde_json::to_string` of it, as
//!   `weft export` serialises the graph (writing the file is not included). The intermediate
//!   JSON value is freed within the timing, as it is in `weft export`.
//!
//! Inputs are `benches/gen_model.py --flavor resources` models with `--hosts 250` (about 4,600
//! resources) and `--hosts 2500` (about 46,000 resources, the `apply` bench's model). Each is
//! compiled and evaluated once; every iteration exports the same evaluated model, which the
//! export only reads. Results are dropped outside the timing. Throughput is in resources.
//!
//! Run with `cargo bench -p weft-benches --bench export`.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, generated_model};
use weft_frontend::project::LoadOptions;
use weft_runtime::modules::Modules;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [250, 2500];

/// A generated model, evaluated, with the modules the export reads its resource types from.
struct Evaluated {
    name: String,
    model: weft_runtime::export::Model,
    modules: Modules,
}

fn evaluate(hosts: u32) -> Evaluated {
    let model = generated_model(hosts, Flavor::Resources);
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &model.dir, &LoadOptions { python_env: None });
    let modules = Modules::from_dirs(compiled.project.module_dirs());
    let lowered = compiled.lowered.unwrap_or_else(|| panic!("{}: {:?}", model.name, compiled.diagnostics));
    let options = weft_runtime::Options { modules: modules.clone(), ..weft_runtime::Options::default() };
    let (outcome, evaluated) = weft_runtime::evaluate_model(Arc::new(lowered), &options);
    let evaluated = evaluated.unwrap_or_else(|| panic!("{}: {:?}", model.name, outcome.errors));
    Evaluated { name: model.name, model: evaluated, modules }
}

fn bench_export(c: &mut Criterion) {
    let mut group = c.benchmark_group("export");
    for hosts in HOSTS {
        let evaluated = evaluate(hosts);
        // Export once outside the timing: the graph is the JSON bench's input, and a model
        // whose export fails would make the bench measure an error path.
        let graph = match weft_runtime::export::export(&evaluated.model, &evaluated.modules) {
            Ok(export) => export.graph,
            Err(e) => panic!("{}: {:?}", evaluated.name, e.diagnostics),
        };
        let json_len = serde_json::to_string(&graph.to_json()).expect("the graph serialises").len();
        eprintln!("export {}: {} resources, {json_len} bytes of JSON", evaluated.name, graph.resources.len());
        group.throughput(Throughput::Elements(graph.resources.len() as u64));
        group.bench_with_input(BenchmarkId::new("graph", &evaluated.name), &evaluated, |b, evaluated| {
            b.iter_with_large_drop(|| weft_runtime::export::export(&evaluated.model, &evaluated.modules).ok())
        });
        group.bench_with_input(BenchmarkId::new("json", &evaluated.name), &graph, |b, graph| {
            b.iter_with_large_drop(|| serde_json::to_string(&graph.to_json()).expect("the graph serialises"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_export);
criterion_main!(benches);
