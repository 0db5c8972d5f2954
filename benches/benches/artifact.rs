//! Artifacts (`model.weft`): building one from a compiled program, loading it, and running it.
//!
//! * `artifact/load/*`: `weft_runtime::artifact::load` of the artifact file, which is what
//!   `weft run` does before evaluating: map the file, check the container (header, section
//!   table, checksum) and the weft version, decode the metadata and the embedded module files,
//!   and verify the bytecode in place. The file is in the page cache after the first
//!   iteration, so this is the warm load. Dropping the loaded artifact (freeing the decoded
//!   tables, unmapping) happens outside the timing.
//! * `artifact/build/*`: `weft_runtime::artifact::build` from an already compiled program and
//!   its embedded module files: encoding only (no parsing, checking or lowering, no file
//!   written).
//! * `artifact/run/*`: load and evaluate, as `weft run` does (without process start-up and
//!   printing). Throughput is in instances per second, as for the `eval` bench.
//!
//! Inputs are `benches/gen_model.py --flavor pure` models with `--hosts 500` and `--hosts 5000`
//! (the model the goal is stated for). Each artifact is built once, the way `weft build` builds
//! it, into `target/bench-models/hosts<N>-pure.weft`; its size is printed on standard error.
//!
//! Run with `cargo bench -p weft-benches --bench artifact`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_benches::{Flavor, generated_model, models_dir};
use weft_frontend::project::LoadOptions;
use weft_runtime::artifact::{self, BuildInput, Provenance};
use weft_runtime::modules::{EmbeddedModules, Modules};

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's: the system allocator makes evaluation about a quarter slower.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOSTS: [u32; 2] = [500, 5000];

/// A model compiled as `weft build` compiles it, ready to be encoded.
struct Built {
    name: String,
    executable: weft_vm::Executable,
    provenance: Provenance,
    inputs: weft_ir::inputs::Inputs,
    files: EmbeddedModules,
    /// The artifact file.
    path: PathBuf,
    size: usize,
}

/// Compiles the generated model, encodes it and writes the artifact next to the model.
fn build_model(hosts: u32) -> Built {
    let model = generated_model(hosts, Flavor::Pure);
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &model.dir, &LoadOptions { python_env: None });
    let lowered = compiled.lowered.as_ref().unwrap_or_else(|| panic!("{}: {:?}", model.name, compiled.diagnostics));
    let executable = weft_vm::Executable::from_program(Arc::new(lowered.clone()))
        .unwrap_or_else(|e| panic!("{}: the program does not assemble: {e}", model.name));
    let files = Modules::from_dirs(compiled.project.module_dirs())
        .embed()
        .unwrap_or_else(|e| panic!("{}: cannot embed the module files: {e}", model.name));
    let provenance =
        Provenance { project: compiled.project.config.name.clone(), source_digest: compiled.source_digest() };
    let inputs = weft_ir::inputs::inputs(lowered);
    let bytes = artifact::build(&BuildInput {
        executable: &executable,
        provenance: provenance.clone(),
        inputs: inputs.clone(),
        files: &files,
    });
    let path = models_dir().join(format!("hosts{hosts}-{}.weft", Flavor::Pure.as_str()));
    write_atomically(&path, &bytes);
    eprintln!(
        "artifact {}: {} bytes ({} instructions), {}",
        model.name,
        bytes.len(),
        executable.code.len(),
        path.display()
    );
    Built { name: model.name, executable, provenance, inputs, files, path, size: bytes.len() }
}

/// Writes next to the final place and renames, as `weft build` does, so that a concurrent
/// reader never maps a half-written artifact.
fn write_atomically(path: &Path, bytes: &[u8]) {
    let staging = path.with_extension(format!("weft.{}.tmp", std::process::id()));
    std::fs::write(&staging, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", staging.display()));
    std::fs::rename(&staging, path).unwrap_or_else(|e| panic!("cannot rename to {}: {e}", path.display()));
}

/// What `weft run` does with an artifact file: load it and evaluate it.
fn load_and_run(path: &Path) -> weft_runtime::Outcome {
    let loaded = artifact::load(path).unwrap_or_else(|e| panic!("{e}"));
    let options = weft_runtime::Options { modules: Modules::from_embedded(loaded.files), ..Default::default() };
    let (outcome, _model) = weft_runtime::run(&loaded.executable, &options);
    outcome
}

fn bench_artifact(c: &mut Criterion) {
    let built: Vec<Built> = HOSTS.into_iter().map(build_model).collect();

    let mut group = c.benchmark_group("artifact");
    for model in &built {
        group.throughput(Throughput::Bytes(model.size as u64));
        group.bench_with_input(BenchmarkId::new("load", &model.name), &model.path, |b, path| {
            // One load per batch, dropped outside the timing: freeing the decoded tables is
            // not part of loading (a `weft run` process exits with them).
            b.iter_batched(|| (), |()| artifact::load(path).unwrap_or_else(|e| panic!("{e}")), BatchSize::PerIteration)
        });
        group.bench_with_input(BenchmarkId::new("build", &model.name), model, |b, model| {
            b.iter_batched(
                || model.inputs.clone(),
                |inputs| {
                    artifact::build(&BuildInput {
                        executable: &model.executable,
                        provenance: model.provenance.clone(),
                        inputs,
                        files: &model.files,
                    })
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();

    let mut group = c.benchmark_group("artifact");
    group.sample_size(10);
    for model in &built {
        // Check once that the artifact evaluates without errors, so that the bench never
        // measures a failing run, and count its instances for the throughput.
        let probe = load_and_run(&model.path);
        assert!(probe.errors.is_empty(), "{}: {:?}", model.name, probe.errors);
        group.throughput(Throughput::Elements(probe.instances as u64));
        group.bench_with_input(BenchmarkId::new("run", &model.name), &model.path, |b, path| {
            b.iter(|| load_and_run(path))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_artifact);
criterion_main!(benches);
