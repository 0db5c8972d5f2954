//! The public Inmanta modules pinned in `realworld/modules.tsv`, downloaded once and presented
//! as v2 modules of a minimal Python environment.
//!
//! The modules are wheels on PyPI. `realworld/fetch.py` downloads them (once; they are cached
//! in `realworld/.cache/`, which git ignores) and unpacks their sources the way an installed
//! `inmanta_plugins/<module>/` package looks. The fetcher runs only when the cache does not
//! match the module list, so after the first run neither the network nor Python is needed.
//!
//! Set `WEFT_SKIP_NETWORK_TESTS=1` to skip what needs them where PyPI cannot be reached.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file `fetch.py` writes last; it holds a copy of the module list it fetched.
const STAMP: &str = "complete.stamp";

/// `tests/realworld/`: the module list, the fetcher and the cache.
pub fn realworld_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("realworld")
}

/// Whether `WEFT_SKIP_NETWORK_TESTS=1` asks to skip what needs the downloaded modules.
pub fn network_tests_skipped() -> bool {
    std::env::var_os("WEFT_SKIP_NETWORK_TESTS").is_some_and(|v| v == "1")
}

/// The root of a Python environment whose `lib/python3.12/site-packages/inmanta_plugins/`
/// holds the modules of `modules.tsv` (fetching them first if the cache is not current), or
/// `None` when `WEFT_SKIP_NETWORK_TESTS=1`. Panics with instructions when the fetch fails.
pub fn python_env() -> Option<PathBuf> {
    if network_tests_skipped() {
        return None;
    }
    let cache = ensure_cache();
    // The cache mirrors an installed `inmanta_plugins/` package: link it into the
    // site-packages of a minimal Python environment.
    let venv = cache.join("venv");
    let site = venv.join("lib").join("python3.12").join("site-packages");
    fs::create_dir_all(&site).expect("create the environment");
    let link = site.join("inmanta_plugins");
    if fs::symlink_metadata(&link).is_err() {
        let target = fs::canonicalize(&cache).expect("cache path");
        if let Err(e) = std::os::unix::fs::symlink(target, &link) {
            // Another test process may have created it in the meantime.
            if fs::symlink_metadata(&link).is_err() {
                panic!("cannot link the modules into {}: {e}", site.display());
            }
        }
    }
    Some(venv)
}

/// A project directory in the cache whose `main.cf` is `import <module>` (created if needed).
/// The file is written only when its text differs, so suites that run at the same time never
/// see it half-written.
pub fn import_project(module: &str) -> PathBuf {
    let project = ensure_cache().join("projects").join(module);
    fs::create_dir_all(&project).expect("create the project");
    let main = project.join("main.cf");
    let text = format!("import {module}\n");
    if fs::read_to_string(&main).ok().as_deref() != Some(text.as_str()) {
        fs::write(&main, text).expect("write main.cf");
    }
    project
}

/// The cache directory `realworld/.cache/` (fetched if needed; see [`python_env`]): one
/// directory per module, `cf_files.txt` and the stamp. Does not look at
/// `WEFT_SKIP_NETWORK_TESTS`.
pub fn ensure_cache() -> PathBuf {
    // Tests of one binary run in parallel, so the fetch happens once per process (and
    // `fetch.py` takes a file lock for separate processes).
    static FETCHED: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut fetched = FETCHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(cache) = fetched.as_ref() {
        return cache.clone();
    }
    let cache = fetch_if_needed(&realworld_dir());
    *fetched = Some(cache.clone());
    cache
}

/// Whether the cache was completely fetched from the current module list.
fn cache_is_current(list: &Path, cache: &Path) -> bool {
    let (Ok(expected), Ok(stamp)) = (fs::read(list), fs::read(cache.join(STAMP))) else {
        return false;
    };
    expected == stamp && cache.join("cf_files.txt").is_file()
}

/// Runs `fetch.py` unless the cache is current; panics with instructions when it fails.
fn fetch_if_needed(dir: &Path) -> PathBuf {
    let list = dir.join("modules.tsv");
    let cache = dir.join(".cache");
    if cache_is_current(&list, &cache) {
        return cache;
    }
    let fetcher = dir.join("fetch.py");
    let how_to_fix = format!(
        "To fix: make sure `python3 -m pip` works and https://pypi.org is reachable, then run\n    \
         python3 {fetcher}\nby hand to see the problem. Where the network is not available, set \
         WEFT_SKIP_NETWORK_TESTS=1 to skip this test.",
        fetcher = fetcher.display()
    );
    let output = match Command::new("python3").arg(&fetcher).arg("--cache").arg(&cache).output() {
        Ok(output) => output,
        Err(e) => panic!("could not run `python3` to fetch the real-world modules: {e}\n{how_to_fix}"),
    };
    if !output.status.success() {
        panic!(
            "fetching the real-world modules failed ({status}):\n{stdout}{stderr}\n{how_to_fix}",
            status = output.status,
            stdout = String::from_utf8_lossy(&output.stdout),
            stderr = String::from_utf8_lossy(&output.stderr),
        );
    }
    assert!(
        cache_is_current(&list, &cache),
        "fetch.py succeeded but did not leave {STAMP} and cf_files.txt in {}",
        cache.display()
    );
    cache
}
