//! The apply stage: deploying an exported resource graph.
//!
//! * `apply/null/hosts2500`: the `gen_model.py --flavor resources --hosts 2500` model, about
//!   46,000 `std::testing::NullResource`s wired with `requires` edges. The handler does no I/O,
//!   so this measures the scheduler: dependency counting, parallel dispatch, reports.
//! * `apply/files/create10k` against `baseline/files/create10k`: 10,000 `fs::File`s of 1 KiB
//!   in 100 directories under a fresh temporary root, all created, and a plain loop that
//!   writes the same files with `std::fs::write`. The goal is at least half the baseline's
//!   throughput.
//! * `apply/files/unchanged10k`: the same graph applied again onto an up-to-date tree (every
//!   file read and compared, nothing written), the common case of a repeated apply.
//!
//! Throughput is in resources per second. Run with `cargo bench -p weft-benches --bench apply`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use weft_benches::{Flavor, generated_model};
use weft_frontend::project::LoadOptions;
use weft_runtime::apply::{ApplyOptions, Status, apply};
use weft_runtime::graph::ResourceGraph;

/// The `weft` binary's global allocator (see `cli/src/main.rs`), so that the figures are the
/// binary's: the system allocator makes evaluation about a quarter slower.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FILES: usize = 10_000;
const DIRS: usize = 100;
const FILE_SIZE: usize = 1024;

/// Evaluates and exports a generated model.
fn exported_graph(hosts: u32) -> ResourceGraph {
    let model = generated_model(hosts, Flavor::Resources);
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &model.dir, &LoadOptions { python_env: None });
    let modules = weft_runtime::modules::Modules::from_dirs(compiled.project.module_dirs());
    let lowered = compiled.lowered.unwrap_or_else(|| panic!("{}: {:?}", model.name, compiled.diagnostics));
    let options = weft_runtime::Options { modules: modules.clone(), ..weft_runtime::Options::default() };
    let (outcome, evaluated) = weft_runtime::evaluate_model(Arc::new(lowered), &options);
    let evaluated = evaluated.unwrap_or_else(|| panic!("{}: {:?}", model.name, outcome.errors));
    match weft_runtime::export::export(&evaluated, &modules) {
        Ok(export) => export.graph,
        Err(e) => panic!("{}: {:?}", model.name, e.diagnostics),
    }
}

/// The content of file `n`: distinct per file, `FILE_SIZE` bytes.
fn content(n: usize) -> Vec<u8> {
    let line = format!("file {n}: the quick brown fox jumps over the lazy dog\n");
    line.bytes().cycle().take(FILE_SIZE).collect()
}

fn file_path(n: usize) -> String {
    format!("/srv/data/d{:03}/f{n:05}.conf", n % DIRS)
}

/// `FILES` fs::File resources (content in the file store, as the export leaves it) requiring
/// their `DIRS` directories, which require `/srv/data`.
fn file_graph() -> ResourceGraph {
    let mut resources = Vec::with_capacity(FILES + DIRS + 2);
    let base = |id: String, extra: serde_json::Value, requires: Vec<String>| {
        let mut object = json!({
            "purged": false, "purge_on_delete": false, "send_event": true, "receive_events": true,
            "report_only": false, "references": [], "mutators": [], "via": {"method_name": "local"},
            "owner": null, "group": null, "requires": requires, "id": id,
        });
        object.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        object
    };
    let dir_id = |path: &str| format!("fs::Directory[bench,path={path}]");
    for path in ["/srv", "/srv/data"] {
        let requires = if path == "/srv" { vec![] } else { vec![dir_id("/srv")] };
        resources.push(base(dir_id(path) + ",v=0", json!({"path": path, "permissions": 755}), requires));
    }
    for d in 0..DIRS {
        let path = format!("/srv/data/d{d:03}");
        resources.push(base(
            dir_id(&path) + ",v=0",
            json!({"path": path, "permissions": 755}),
            vec![dir_id("/srv/data")],
        ));
    }
    for n in 0..FILES {
        let hash = sha1_hex(&content(n));
        let path = file_path(n);
        let parent = format!("/srv/data/d{:03}", n % DIRS);
        resources.push(base(
            format!("fs::File[bench,path={path}],v=0"),
            json!({"path": path, "hash": hash, "content": null, "permissions": 644}),
            vec![dir_id(&parent)],
        ));
    }
    let mut graph = ResourceGraph::from_json(&serde_json::Value::Array(resources)).expect("a valid graph");
    graph.files = (0..FILES).map(|n| (sha1_hex(&content(n)), content(n))).collect();
    graph
}

fn sha1_hex(data: &[u8]) -> String {
    use sha1::Digest;
    sha1::Sha1::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// A scratch directory. Roots are not removed between iterations: deleting 10,000 files makes
/// ext4 slow to allocate inodes for a while afterwards (it avoids recently freed ones), which
/// would measure the previous iteration's cleanup instead of this one's work. They are all
/// removed at the start and the end of the run.
struct Scratch(PathBuf);

const SCRATCH_PREFIX: &str = "weft-bench-";

fn remove_scratch_roots() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A fresh empty directory under the system's temporary directory.
fn fresh_root(tag: &str) -> Scratch {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{SCRATCH_PREFIX}{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a bench root");
    Scratch(dir)
}

/// The baseline: the same directories and files written one after the other, with the same
/// permissions, and nothing else.
fn write_plainly(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for d in 0..DIRS {
        std::fs::create_dir_all(root.join(format!("srv/data/d{d:03}"))).expect("mkdir");
    }
    for n in 0..FILES {
        let path = root.join(&file_path(n)[1..]);
        std::fs::write(&path, content(n)).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
}

fn options(root: &Path) -> ApplyOptions {
    ApplyOptions { root: root.to_path_buf(), ..ApplyOptions::default() }
}

fn assert_all_ok(report: &weft_runtime::apply::ApplyReport) {
    let summary = report.summary();
    assert_eq!(summary.failed + summary.skipped, 0, "{}", report.render_text());
}

fn bench_apply(c: &mut Criterion) {
    remove_scratch_roots();
    let mut group = c.benchmark_group("apply");
    group.sample_size(10);

    let null_graph = exported_graph(2500);
    group.throughput(Throughput::Elements(null_graph.resources.len() as u64));
    let root = fresh_root("null");
    assert_all_ok(&apply(&null_graph, &options(&root.0)));
    group.bench_with_input(BenchmarkId::new("null", "hosts2500"), &null_graph, |b, graph| {
        b.iter(|| apply(graph, &options(&root.0)))
    });

    let files = file_graph();
    group.throughput(Throughput::Elements(files.resources.len() as u64));
    group.bench_with_input(BenchmarkId::new("files", "create10k"), &files, |b, graph| {
        b.iter_batched(
            || fresh_root("create"),
            |root| {
                let report = apply(graph, &options(&root.0));
                debug_assert!(report.resources.iter().all(|r| r.status == Status::Changed));
                root
            },
            BatchSize::PerIteration,
        )
    });
    let up_to_date = fresh_root("unchanged");
    assert_all_ok(&apply(&files, &options(&up_to_date.0)));
    group.bench_with_input(BenchmarkId::new("files", "unchanged10k"), &files, |b, graph| {
        b.iter(|| apply(graph, &options(&up_to_date.0)))
    });
    group.finish();

    let mut baseline = c.benchmark_group("baseline");
    baseline.sample_size(10);
    baseline.throughput(Throughput::Elements(files.resources.len() as u64));
    baseline.bench_function("files/create10k", |b| {
        b.iter_batched(
            || fresh_root("baseline"),
            |root| {
                write_plainly(&root.0);
                root
            },
            BatchSize::PerIteration,
        )
    });
    baseline.finish();
    remove_scratch_roots();
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
