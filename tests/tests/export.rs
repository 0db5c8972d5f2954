//! `weft export` against the reference's `inmanta export -j`, recorded by
//! `tools/export-oracle.py`:
//!
//! * `fixtures/export/<case>/` — small models, each with `expect-export.json` (status, error
//!   kind, the reference's warnings, the normalized resources);
//! * `fixtures/export-gen/hosts-N.expect.json` — the models `benches/gen_model.py --flavor
//!   resources --hosts N` generates, regenerated here;
//! * when the reference compiler is installed (`INMANTA_REF_VENV`, or the default venv of
//!   `reference-setup.sh`), a larger generated model is exported by both and compared live.
//!
//! Resources compare as sets: ordered by id, `requires` sorted, objects with identical fields.
//! Cases importing `fs`, `exec` or `mitogen` need those modules; they come from the real-world
//! module cache (fetched from PyPI once), and are skipped with `WEFT_SKIP_NETWORK_TESTS=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use weft_tests::export::{Exported, export, normalize};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Whether a case needs modules from the real-world cache.
fn needs_public_modules(case: &Path) -> bool {
    let main = std::fs::read_to_string(case.join("main.cf")).unwrap_or_default();
    main.lines().any(|l| {
        let l = l.trim();
        ["fs", "exec", "mitogen"].iter().any(|m| l == format!("import {m}") || l.starts_with(&format!("import {m}::")))
    })
}

/// Compares what weft exported with a recorded expectation; the difference as text.
fn compare(got: &Exported, expected: &Json) -> Result<(), String> {
    let want_status = expected["status"].as_str().unwrap_or("?");
    match (&got.error, want_status) {
        (None, "ok") => {}
        (Some((kind, _)), "error") => {
            let want_kind = expected["error"]["kind"].as_str().unwrap_or("?");
            return if kind.as_str() == want_kind {
                Ok(())
            } else {
                Err(format!("error kind {} (reference: {want_kind})", kind.as_str()))
            };
        }
        (Some((kind, message)), _) => return Err(format!("weft failed with {}: {message}", kind.as_str())),
        (None, other) => return Err(format!("weft succeeded, the reference ended with status {other}")),
    }
    let got = got.normalized_resources();
    let want = normalize(&expected["resources"]);
    if got == want {
        return Ok(());
    }
    Err(describe_difference(&got, &want))
}

fn describe_difference(got: &Json, want: &Json) -> String {
    let by_id = |json: &Json| -> std::collections::BTreeMap<String, Json> {
        json.as_array().into_iter().flatten().map(|r| (r["id"].as_str().unwrap_or("").to_string(), r.clone())).collect()
    };
    let (got, want) = (by_id(got), by_id(want));
    let mut lines = Vec::new();
    for (id, resource) in &want {
        match got.get(id) {
            None => lines.push(format!("missing: {id}")),
            Some(mine) if mine != resource => {
                let keys: std::collections::BTreeSet<&String> = mine
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.keys())
                    .chain(resource.as_object().into_iter().flat_map(|o| o.keys()))
                    .collect();
                for key in keys {
                    if mine.get(key) != resource.get(key) {
                        lines.push(format!(
                            "{id}: {key}: weft {} reference {}",
                            mine.get(key).unwrap_or(&Json::Null),
                            resource.get(key).unwrap_or(&Json::Null)
                        ));
                    }
                }
            }
            Some(_) => {}
        }
    }
    lines.extend(got.keys().filter(|id| !want.contains_key(*id)).map(|id| format!("extra: {id}")));
    lines.truncate(20);
    lines.join("\n")
}

fn read_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn export_cases_match_the_reference() {
    let cases = weft_tests::cases_in(&fixtures().join("export"));
    assert!(!cases.is_empty(), "no export cases found");
    let python_env =
        if cases.iter().any(|c| needs_public_modules(c)) { weft_tests::realworld::python_env() } else { None };
    let known = known_divergences();
    let mut failures = Vec::new();
    let mut skipped = 0;
    for case in &cases {
        let name = case.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if let Some(kind) = known.get(&name) {
            let got = export(case, None);
            let got_kind = got.error.as_ref().map(|(k, _)| k.as_str());
            if got_kind != Some(kind.as_str()) {
                failures.push(format!("{name}: listed as a known divergence ({kind}) but weft now gives {got_kind:?}"));
            }
            continue;
        }
        let expected = read_json(&case.join("expect-export.json"));
        let env = if needs_public_modules(case) {
            match &python_env {
                Some(env) => Some(env.as_path()),
                None => {
                    skipped += 1;
                    continue;
                }
            }
        } else {
            None
        };
        let got = export(case, env);
        if let Err(difference) = compare(&got, &expected) {
            let name = case.strip_prefix(fixtures()).unwrap_or(case).display().to_string();
            failures.push(format!("{name}:\n{difference}"));
        }
    }
    if skipped > 0 {
        eprintln!(
            "\n*** SKIPPED: {skipped} export cases need the public fs/exec modules (WEFT_SKIP_NETWORK_TESTS=1).\n"
        );
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}

/// `fixtures/export/known-divergences.tsv`: case name to the error kind weft gives.
fn known_divergences() -> std::collections::HashMap<String, String> {
    let text = std::fs::read_to_string(fixtures().join("export").join("known-divergences.tsv")).unwrap_or_default();
    weft_tests::table_rows(&text)
        .into_iter()
        .filter_map(|(case, columns)| Some((case, columns.into_iter().next()?)))
        .collect()
}

/// Generates the benchmark model with `hosts` servers into a fresh directory.
fn generate(hosts: usize, out: &Path) {
    // The generator the benches use: one copy in the repository.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/gen_model.py");
    let status = Command::new("python3")
        .arg(&script)
        .args(["--hosts", &hosts.to_string(), "--flavor", "resources"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs benches/gen_model.py");
    assert!(status.success(), "gen_model.py failed for {hosts} hosts");
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn generated_models_match_the_recorded_reference_export() {
    let dir = fixtures().join("export-gen");
    let mut recorded: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
        .expect("fixtures/export-gen")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let hosts = name.strip_prefix("hosts-")?.strip_suffix(".expect.json")?.parse().ok()?;
            Some((hosts, e.path()))
        })
        .collect();
    recorded.sort();
    assert!(recorded.len() >= 3, "expected recorded exports of several sizes in {}", dir.display());
    for (hosts, path) in recorded {
        let project = scratch(&format!("gen{hosts}"));
        generate(hosts, &project);
        let got = export(&project, None);
        let result = compare(&got, &read_json(&path));
        let _ = std::fs::remove_dir_all(&project);
        if let Err(difference) = result {
            panic!("--hosts {hosts}:\n{difference}");
        }
    }
}

/// The reference venv, when one is installed.
fn reference_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("INMANTA_REF_VENV").map(PathBuf::from).or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(cache.join("inmanta-ref").join("venv"))
    })?;
    venv.join("bin").join("inmanta").is_file().then_some(venv)
}

#[test]
fn a_larger_generated_model_matches_the_live_reference() {
    let Some(venv) = reference_venv() else {
        eprintln!("\n*** SKIPPED: the reference compiler is not installed (see tools/reference-setup.sh).\n");
        return;
    };
    let project = scratch("live");
    generate(60, &project);
    let output = project.join("reference.json");
    let status = Command::new(venv.join("bin").join("inmanta"))
        .args(["-q", "export", "-j"])
        .arg(&output)
        .current_dir(&project)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run the reference");
    assert!(status.success(), "the reference failed to export the generated model");
    let expected = serde_json::json!({"status": "ok", "resources": read_json(&output)});
    let got = export(&project, None);
    let result = compare(&got, &expected);
    let _ = std::fs::remove_dir_all(&project);
    if let Err(difference) = result {
        panic!("{difference}");
    }
}
