//! Start-up: the `weft` binary run as a process on a trivial project, the way a user or a CI
//! job runs it. The goal is `weft compile` of a trivial project in at most 10 ms.
//!
//! * `startup/compile/trivial`: `weft compile DIR` of a two-file project (one entity, one
//!   instance, one `std::print`; see `weft_benches::trivial_project`), from spawn to exit:
//!   loading the binary, parsing and checking the embedded `std` and the project, evaluating,
//!   printing. Its output goes to `/dev/null`.
//! * `startup/check/trivial`: `weft check DIR` of the same project (no evaluation).
//! * `startup/version`: `weft --version`: loading the binary and parsing the command line, the
//!   floor under every command.
//! * `baseline/spawn/true`: `/bin/true`, what spawning and waiting for any process costs from
//!   this bench, to subtract from the above.
//!
//! The binary is `target/release/weft`, built first with `cargo build --release -p weft-cli`
//! (nothing to do when it is up to date); `WEFT_BIN=/path/to/weft` measures another binary.
//!
//! Run with `cargo bench -p weft-benches --bench startup`.

use std::path::Path;
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use weft_benches::{trivial_project, weft_binary};

/// The `weft` binary's global allocator (see `cli/src/main.rs`). The processes measured here
/// are separate binaries; this only keeps the bench targets alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs a command to its end with no output kept, and panics unless it succeeded: a failing
/// command would measure an error path.
fn run(program: &Path, args: &[&std::ffi::OsStr]) {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(status.success(), "{} {args:?} failed: {status}", program.display());
}

/// Runs the command once with its output shown, so that a failure says why.
fn check_once(program: &Path, args: &[&std::ffi::OsStr]) {
    let output =
        Command::new(program).args(args).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn bench_startup(c: &mut Criterion) {
    let weft = weft_binary();
    let project = trivial_project();
    let compile = [std::ffi::OsStr::new("compile"), project.as_os_str()];
    let check = [std::ffi::OsStr::new("check"), project.as_os_str()];
    let version = [std::ffi::OsStr::new("--version")];
    for args in [&compile[..], &check[..], &version[..]] {
        check_once(&weft, args);
    }

    let mut group = c.benchmark_group("startup");
    group.bench_function("compile/trivial", |b| b.iter(|| run(&weft, &compile)));
    group.bench_function("check/trivial", |b| b.iter(|| run(&weft, &check)));
    group.bench_function("version", |b| b.iter(|| run(&weft, &version)));
    group.finish();

    let mut group = c.benchmark_group("baseline");
    group.bench_function("spawn/true", |b| b.iter(|| run(Path::new("/bin/true"), &[])));
    group.finish();
}

criterion_group!(benches, bench_startup);
criterion_main!(benches);
