//! `--max-memory`: a model that grows without end stops with a located error instead of running
//! until the system kills a process, and a model within the limit is not disturbed by it.
//! Nothing here is timed; a run that the limit fails to stop is killed after a minute and fails
//! the test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weft_tests::scratch::Scratch;

/// An implementation that constructs an instance of its own entity: each instance builds the
/// next, for ever, in a single iteration of the scheduler (no freeze ever comes).
const ENDLESS: &str = "\
entity A:
    int n
end
A.next [0:1] -- A
implementation grow for A:
    self.next = A(n=self.n + 1)
end
implement A using grow
A(n=0)
";

const SMALL: &str = "\
entity A:
    int n
end
index A(n)
implement A using std::none
for i in std::sequence(1000):
    A(n=i)
end
found = A[n=5]
std::print(found.n)
";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `weft compile <args>` on `main` and kills it if it is still running after a minute.
fn compile(scratch: &Scratch, main: &str, args: &[&str]) -> Run {
    scratch.write("project/main.cf", main);
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("compile")
        .arg(scratch.path("project"))
        .args(args)
        .env_remove("VIRTUAL_ENV")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weft runs");
    let started = Instant::now();
    while child.try_wait().expect("weft can be waited for").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("weft compile {args:?} still ran after a minute: the memory limit did not stop it");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("weft's output can be read");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn a_model_that_grows_without_end_stops_at_the_limit_with_a_located_error() {
    if !Path::new("/proc/self/statm").exists() {
        // The limit reads the resident memory from /proc; elsewhere it does nothing.
        return;
    }
    let scratch = Scratch::new("limits", "endless");
    let run = compile(&scratch, ENDLESS, &["--max-memory", "200M", "--error-format", "json"]);
    assert_eq!(run.code, Some(1), "stderr: {}", run.stderr);
    let error: serde_json::Value =
        serde_json::from_str(run.stderr.lines().next().expect("one diagnostic")).expect("a JSON diagnostic");
    assert_eq!(error["kind"], "MemoryLimitException", "{error}");
    // The constructor call that keeps the model growing.
    assert_eq!((error["line"].as_u64(), error["column"].as_u64()), (Some(6), Some(17)), "{error}");
    let message = error["message"].as_str().expect("a message");
    assert!(message.contains("passed its limit of 200.0 MiB (`--max-memory 200M`)"), "{message}");
    assert!(message.contains("of them `__config__::A`"), "{message}");
}

#[test]
fn a_model_within_the_limit_compiles_as_without_one() {
    let scratch = Scratch::new("limits", "small");
    let limited = compile(&scratch, SMALL, &["--max-memory", "200M"]);
    let unlimited = compile(&scratch, SMALL, &["--max-memory", "none"]);
    let default = compile(&scratch, SMALL, &[]);
    for run in [&limited, &unlimited, &default] {
        assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
        assert_eq!(run.stdout, "5\n");
    }
}

#[test]
fn a_malformed_limit_is_refused_before_anything_runs() {
    let scratch = Scratch::new("limits", "malformed");
    for (size, complaint) in [
        ("12Q", "unknown unit `q` (expected K, M, G or T)"),
        ("lots", "expected a size such as 512M or 8G, found `lots`"),
        ("0", "the size `0` is out of range"),
    ] {
        let run = compile(&scratch, SMALL, &["--max-memory", size]);
        assert_eq!(run.code, Some(2), "--max-memory {size}: {}", run.stderr);
        assert!(run.stderr.contains(complaint), "--max-memory {size}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
}

/// Under a limit on the address space (`ulimit -v`, which some hosts and CI runners set), the
/// evaluator's tables reserve a share of it rather than the tens of gigabytes of addresses they
/// take without one, so that the allocator still finds room: a model compiles as without it.
#[test]
fn a_model_compiles_under_a_limit_on_the_address_space() {
    if !Path::new("/bin/sh").exists() {
        return;
    }
    let scratch = Scratch::new("limits", "address-space");
    // Enough instances that the index and the allocator need memory after the tables have
    // their reservations: with a reservation of 64 GiB attempted per table, the tables took
    // the whole address space and the process aborted on the next large allocation.
    scratch.write("project/main.cf", &SMALL.replace("std::sequence(1000)", "std::sequence(20000)"));
    // `ulimit -v` is in KiB: 3 GiB, far above what the model needs, far below what eight
    // unlimited reservations take.
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"ulimit -v 3145728 && exec "$0" compile "$1""#)
        .arg(env!("CARGO_BIN_EXE_weft"))
        .arg(scratch.path("project"))
        .env_remove("VIRTUAL_ENV")
        .output()
        .expect("sh runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "5\n");
}
