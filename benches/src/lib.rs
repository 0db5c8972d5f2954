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

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `target/` in the workspace.
pub fn target_dir() -> PathBuf {
    // Cargo passes its environment on to bench binaries, so a relocated target dir is seen here.
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// The directory the generated models are kept in: `bench-models/` in cargo's target dir.
pub fn models_dir() -> PathBuf {
    target_dir().join("bench-models")
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

impl Model {
    /// A count the generator printed for the model (`expected_counts.txt`, `key=value` lines):
    /// `instances` is the number of entity instances the reference compiler creates,
    /// `resources` the number of resources it exports.
    pub fn expected_count(&self, key: &str) -> Option<u64> {
        let text = fs::read_to_string(self.dir.join("expected_counts.txt")).ok()?;
        text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix('=')?.trim().parse().ok())
    }

    /// The model loaded, checked and lowered, as `weft compile` does before it evaluates.
    /// Panics with the diagnostics when the model does not compile: a bench input must.
    pub fn lower(&self) -> weft_ir::program::Program {
        let arena = bumpalo::Bump::new();
        let options = weft_frontend::project::LoadOptions { python_env: None };
        let compiled = weft_frontend::compile(&arena, &self.dir, &options);
        compiled.lowered.unwrap_or_else(|| panic!("{}: {:?}", self.name, compiled.diagnostics))
    }
}

/// The smallest useful project, for the start-up bench: a `project.yml` and a `main.cf` with one
/// entity, one instance and one print, so that `weft compile` of it loads and checks the
/// embedded `std`, evaluates something and writes to stdout, and nothing else. Written under
/// [`models_dir`] on first use. Its `project.yml` is the generated models' one, so that the
/// reference compiler accepts the project too.
pub fn trivial_project() -> PathBuf {
    const PROJECT_YML: &str = "name: trivial\nmodulepath: libs\ndownloadpath: libs\nrepo: []\ninstall_mode: release\n";
    const MAIN_CF: &str = "entity Greeting:\n    string text\nend\nimplement Greeting using std::none\n\
                           g = Greeting(text=\"hello\")\nstd::print(g.text)\n";
    let dir = models_dir().join("trivial");
    let up_to_date = |name: &str, text: &str| fs::read_to_string(dir.join(name)).is_ok_and(|t| t == text);
    if !(up_to_date("project.yml", PROJECT_YML) && up_to_date("main.cf", MAIN_CF)) {
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        for (name, text) in [("project.yml", PROJECT_YML), ("main.cf", MAIN_CF)] {
            fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("cannot write {name}: {e}"));
        }
    }
    dir
}

/// A project whose `instances` entities each call two Python plugins of its module `pm` (one
/// counting the calls in module state): the corpus case `plugins/python_plugin_called_per_instance`
/// at another size. Written under [`models_dir`] on first use (and when it differs).
pub fn python_plugin_project(instances: u32) -> PathBuf {
    const PLUGINS: &str = "from inmanta.plugins import plugin\n\n_counter = 0\n\n\n@plugin\ndef next_id() -> \"int\":\n    \
                           global _counter\n    _counter += 1\n    return _counter\n\n\n@plugin\ndef double(x: \"int\") -> \
                           \"int\":\n    return 2 * x\n";
    const MODULE_YML: &str = "name: pm\nversion: 0.1.0\nlicense: ASL 2.0\n";
    let main_cf = format!(
        "import pm\n\nentity Item:\n    int n\n    int id\nend\nindex Item(n)\nimplement Item using std::none\n\n\
         for i in std::sequence({instances}):\n    Item(n=pm::double(i), id=pm::next_id())\nend\n\
         first = pm::next_id()\nstd::print(\"first={{{{first}}}}\")\n"
    );
    let dir = models_dir().join(format!("python-calls-{instances}"));
    let files = [
        ("main.cf", main_cf.as_str()),
        ("libs/pm/module.yml", MODULE_YML),
        ("libs/pm/model/_init.cf", ""),
        ("libs/pm/plugins/__init__.py", PLUGINS),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        if fs::read_to_string(&path).is_ok_and(|t| t == text) {
            continue;
        }
        let parent = path.parent().expect("a file in the project");
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    dir
}

/// The `weft` binary of this workspace's release profile, built first if needed.
///
/// A bench of the binary must not time a stale build, so this runs
/// `cargo build --release -p weft-cli` (which does nothing when the binary is up to date)
/// with the cargo that runs the bench. `WEFT_BIN=/path/to/weft` skips the build and uses that
/// binary instead, for example to compare two builds.
pub fn weft_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WEFT_BIN") {
        return PathBuf::from(path);
    }
    // Cargo tells the programs it runs where it is; a bench binary started by hand falls back
    // to the `cargo` on PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The build is quiet and can take minutes after a change; say what is going on.
    eprintln!("building the weft binary: cargo build --release -p weft-cli");
    let status = Command::new(&cargo)
        .args(["build", "--release", "-q", "-p", "weft-cli", "--manifest-path"])
        .arg(workspace_root().join("Cargo.toml"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {} to build the weft binary: {e}", cargo.to_string_lossy()));
    assert!(
        status.success(),
        "`cargo build --release -p weft-cli` failed ({status}); set WEFT_BIN to use another binary"
    );
    let binary = target_dir().join("release").join("weft");
    assert!(binary.is_file(), "the build did not produce {}", binary.display());
    binary
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
