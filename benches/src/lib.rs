//! Shared helpers for the benches.
//!
//! The benchmark inputs are generated, not checked in: `benches/gen_model.py` writes a
//! synthetic but realistic Inmanta project of any size, and its output is a pure function of
//! its arguments. [`generated_model`] runs it once per size and keeps the result under
//! `target/bench-models/`, so every stage's bench measures the same input.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the generated model's leaf entities turn into (`--flavor` of `gen_model.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// No exported resources: leaf entities are implemented with `std::none`.
    Pure,
    /// Every leaf becomes a `std::testing::NullResource`, wired with `requires` edges.
    Resources,
}

impl Flavor {
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Pure => "pure",
            Flavor::Resources => "resources",
        }
    }
}

/// A generated benchmark project, loaded.
#[derive(Debug)]
pub struct Model {
    /// A short name for bench ids, such as `hosts5000`.
    pub name: String,
    /// The project directory (`main.cf`, `project.yml`, and `expected_counts.txt` with what
    /// the generator says the reference compiler creates).
    pub dir: PathBuf,
    /// The text of `main.cf`.
    pub source: String,
    /// The number of lines of `main.cf`: the unit of the benches' throughput.
    pub lines: u64,
}

/// The workspace root, found from this crate's manifest directory at compile time.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("benches/ is inside the workspace").to_path_buf()
}

/// The directory the generated models are kept in: `bench-models/` in cargo's target dir.
pub fn models_dir() -> PathBuf {
    // Cargo passes its environment on to bench binaries, so a relocated target dir is seen here.
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"));
    target.join("bench-models")
}

/// Counts lines the way `wc -l` does, plus a last line that lacks its newline.
pub fn count_lines(text: &str) -> u64 {
    let newlines = text.bytes().filter(|&b| b == b'\n').count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Returns the model `gen_model.py --hosts <hosts> --flavor <flavor>`, generating it first if
/// it is missing or older than the generator.
///
/// Panics with instructions when the model cannot be generated: a bench without its input
/// has nothing to measure.
pub fn generated_model(hosts: u32, flavor: Flavor) -> Model {
    let name = format!("hosts{hosts}");
    let dir = models_dir().join(format!("hosts{hosts}-{}", flavor.as_str()));
    let generator = workspace_root().join("benches").join("gen_model.py");
    let main_cf = dir.join("main.cf");
    if !is_up_to_date(&main_cf, &generator) {
        generate(&generator, hosts, flavor, &dir);
    }
    let source = fs::read_to_string(&main_cf).unwrap_or_else(|e| panic!("cannot read {}: {e}", main_cf.display()));
    let lines = count_lines(&source);
    Model { name, dir, source, lines }
}

/// Whether `output` exists and is at least as new as `generator`.
fn is_up_to_date(output: &Path, generator: &Path) -> bool {
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(output), modified(generator)) {
        (Some(out), Some(generator)) => out >= generator,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn generate(generator: &Path, hosts: u32, flavor: Flavor, dir: &Path) {
    let parent = dir.parent().expect("the model directory has a parent");
    fs::create_dir_all(parent).unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
    // Generate next to the final place and rename, so that an interrupted run or a second
    // bench generating the same model never leaves a half-written main.cf behind.
    let staging =
        parent.join(format!(".staging-{}-{}", std::process::id(), dir.file_name().unwrap().to_string_lossy()));
    let _ = fs::remove_dir_all(&staging);
    let command =
        format!("python3 {} --hosts {hosts} --flavor {} {}", generator.display(), flavor.as_str(), dir.display());
    eprintln!("generating the benchmark model: {command}");
    let output = Command::new("python3")
        .arg(generator)
        .args(["--hosts", &hosts.to_string(), "--flavor", flavor.as_str()])
        .arg(&staging)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "python3 is needed to generate the benchmark model, but it could not be started: {e}\n\
                 Install Python 3 (the generator uses only its standard library) and make sure \
                 `python3` is on PATH, or run\n    {command}\nyourself."
            )
        });
    if !output.status.success() {
        let _ = fs::remove_dir_all(&staging);
        panic!(
            "generating the benchmark model failed ({}):\n    {command}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The generator prints the instance counts the reference compiler creates; keep them for
    // the benches of later stages, which can check their results against them.
    fs::write(staging.join("expected_counts.txt"), &output.stdout).expect("write expected_counts.txt");
    let _ = fs::remove_dir_all(dir);
    if let Err(e) = fs::rename(&staging, dir) {
        let _ = fs::remove_dir_all(&staging);
        // Another bench may have put the same (deterministic) model there in the meantime.
        if !dir.join("main.cf").is_file() {
            panic!("cannot move the generated model to {}: {e}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::count_lines;

    #[test]
    fn lines_are_counted_like_wc_plus_an_unterminated_last_line() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("\n\n"), 2);
    }
}
