//! `--jobs`: the number of threads changes nothing a user sees. Every command that does work
//! is run with one thread and with several on the same project, and its output (IR text,
//! prints, diagnostics, export JSON, artifact bytes, apply report) must be byte-identical.
//! Nothing here is timed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use weft_tests::scratch::Scratch;

/// The thread counts compared with one thread.
const SEVERAL: [&str; 2] = ["2", "4"];

/// Runs `weft <args>` in `cwd`, without a Python environment from the caller's shell.
fn weft(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(cwd)
        .args(args)
        .env_remove("VIRTUAL_ENV")
        .env_remove("RAYON_NUM_THREADS")
        .output()
        .expect("weft runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `weft <args> --jobs 1`, then with several threads, and checks that the exit code,
/// stdout and stderr are the same; returns the output with one thread.
fn same_with_any_jobs(cwd: &Path, args: &[&str]) -> Output {
    let one = weft(cwd, &[args, &["--jobs", "1"]].concat());
    for jobs in SEVERAL {
        let several = weft(cwd, &[args, &["--jobs", jobs]].concat());
        assert_eq!(several.status.code(), one.status.code(), "exit code of weft {args:?} --jobs {jobs}");
        assert!(
            several.stdout == one.stdout,
            "stdout of weft {args:?} --jobs {jobs} differs:\n{}",
            text(&several.stdout)
        );
        assert_eq!(text(&several.stderr), text(&one.stderr), "stderr of weft {args:?} --jobs {jobs}");
    }
    one
}

/// The benchmark generator's model with resources: 50 hosts, about 950 resources.
fn generated_model(scratch: &Scratch) -> PathBuf {
    let dir = scratch.path("model");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/gen_model.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["--hosts", "50", "--flavor", "resources"])
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    assert!(out.status.success(), "gen_model.py failed: {}", text(&out.stderr));
    dir
}

/// A project of several modules that import each other a few levels deep (so files are parsed
/// ahead in batches), with prints and resources, that compiles.
fn module_project(scratch: &Scratch) -> PathBuf {
    scratch.write("modules/project.yml", "name: modules\nmodulepath: libs\n");
    scratch.write(
        "modules/main.cf",
        "import alpha\nimport beta::deep::inner\nimport gamma\nimport std::testing\n\n\
         for i in [1, 2, 3]:\n    alpha::Thing(name=\"t{{i}}\", value=i * beta::deep::inner::factor)\nend\n\
         std::print(gamma::greeting)\n",
    );
    for module in ["alpha", "beta", "gamma", "delta"] {
        scratch.write(&format!("modules/libs/{module}/module.yml"), &format!("name: {module}\nversion: 1.0.0\n"));
    }
    scratch.write(
        "modules/libs/alpha/model/_init.cf",
        "import beta\nimport alpha::sub\nimport delta\nimport std::testing\n\n\
         entity Thing:\n    string name\n    int value\nend\n\
         implement Thing using make_resource\n\
         implementation make_resource for Thing:\n\
         \x20   std::testing::NullResource(agentname=\"a-{{self.value}}\", name=self.name)\n\
         \x20   unit = alpha::sub::unit\n\
         \x20   std::print(\"{{self.name}} = {{self.value}} ({{unit}})\")\nend\n",
    );
    scratch.write("modules/libs/alpha/model/sub.cf", "unit = \"units\"\n");
    scratch.write("modules/libs/beta/model/_init.cf", "entity Beta:\nend\nimplement Beta using std::none\n");
    scratch.write("modules/libs/beta/model/deep/_init.cf", "import delta::leaf\ndepth = 2\n");
    scratch.write("modules/libs/beta/model/deep/inner.cf", "factor = 10\n");
    scratch.write("modules/libs/gamma/model/_init.cf", "import delta\ngreeting = \"hello from gamma\"\n");
    scratch.write("modules/libs/delta/model/_init.cf", "base = std::len([1, 2])\n");
    scratch.write("modules/libs/delta/model/leaf.cf", "import alpha::sub\nleaf = alpha::sub::unit\n");
    scratch.path("modules")
}

#[test]
fn jobs_must_be_a_positive_number() {
    let cwd = std::env::temp_dir();
    for bad in ["0", "abc", "-1", ""] {
        for command in ["check", "compile", "export", "build", "run", "apply"] {
            let out = weft(&cwd, &[command, &format!("--jobs={bad}"), "."]);
            assert_eq!(out.status.code(), Some(2), "weft {command} --jobs {bad:?}");
            let stderr = text(&out.stderr);
            assert!(stderr.contains("--jobs"), "weft {command} --jobs {bad:?}: {stderr}");
        }
    }
    // The message says what is expected.
    let out = weft(&cwd, &["check", "-j", "0", "."]);
    assert!(text(&out.stderr).contains("at least 1"), "{}", text(&out.stderr));
}

#[test]
fn the_generated_model_compiles_and_exports_the_same_with_any_jobs() {
    let scratch = Scratch::new("jobs", "generated");
    let model = generated_model(&scratch);
    let ir = same_with_any_jobs(&model, &["compile", "--emit=ir", "--emit-std", "."]);
    assert!(ir.status.success() && !ir.stdout.is_empty(), "{}", text(&ir.stderr));
    let compiled = same_with_any_jobs(&model, &["compile", "."]);
    assert!(compiled.status.success(), "{}", text(&compiled.stderr));
    assert!(text(&compiled.stdout).contains("50 hosts"), "{}", text(&compiled.stdout));
    let exported = same_with_any_jobs(&model, &["export", "-o", "-", "."]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    // The model's prints come first, then the JSON on one line.
    let json = text(&exported.stdout).lines().last().unwrap_or_default().to_string();
    let resources: serde_json::Value = serde_json::from_str(&json).expect("the export is JSON");
    let count = resources.as_array().map_or(0, Vec::len);
    assert!(count > 900, "{count} resources");
    // The apply report says how long the apply took; everything else must be the same.
    let report = |jobs: &str| {
        let root = scratch.path("root");
        std::fs::create_dir_all(&root).expect("create the root");
        let root = root.to_str().expect("a UTF-8 path");
        let out = weft(&model, &["apply", "--dry-run", "--root", root, "--report-format=json", "--jobs", jobs, "."]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let json = stdout.find("\n{").map_or("", |at| &stdout[at + 1..]);
        let mut report: serde_json::Value = serde_json::from_str(json).expect("a JSON report");
        report.as_object_mut().expect("an object").remove("elapsed_seconds");
        (stdout[..stdout.len() - json.len()].to_string(), report, text(&out.stderr))
    };
    let one = report("1");
    assert_eq!(one.1["resources"].as_array().map(Vec::len), resources.as_array().map(Vec::len));
    for jobs in SEVERAL {
        assert!(report(jobs) == one, "the apply with --jobs {jobs} differs");
    }
}

#[test]
fn a_project_of_many_modules_is_the_same_with_any_jobs() {
    let scratch = Scratch::new("jobs", "modules");
    let project = module_project(&scratch);
    let ir = same_with_any_jobs(&project, &["compile", "--emit=ir", "--emit-std", "."]);
    assert!(ir.status.success(), "{}", text(&ir.stderr));
    let compiled = same_with_any_jobs(&project, &["compile", "."]);
    let mut lines: Vec<String> = text(&compiled.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["hello from gamma", "t1 = 10 (units)", "t2 = 20 (units)", "t3 = 30 (units)"],
        "{}",
        text(&compiled.stderr)
    );
    let exported = same_with_any_jobs(&project, &["export", "-o", "-", "."]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    same_with_any_jobs(&project, &["check", "."]);

    // An artifact holds the program's name table in symbol order: identical bytes mean the
    // symbols were numbered the same.
    let artifact = |jobs: &str| {
        let path = scratch.path(&format!("model-{jobs}.weft"));
        let out = weft(&project, &["build", "--jobs", jobs, "-o", path.to_str().expect("a UTF-8 path"), "."]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::read(&path).expect("the artifact")
    };
    let one = artifact("1");
    for jobs in SEVERAL {
        assert!(artifact(jobs) == one, "the artifact built with --jobs {jobs} differs");
    }
    let run = same_with_any_jobs(&project, &["run", scratch.path("model-1.weft").to_str().expect("a UTF-8 path")]);
    assert_eq!(run.stdout, compiled.stdout);
}

#[test]
fn diagnostics_of_many_files_are_the_same_with_any_jobs() {
    let scratch = Scratch::new("jobs", "diagnostics");
    let project = module_project(&scratch);
    // Problems in several files parsed ahead: a syntax error, a missing module, a missing
    // namespace and invalid UTF-8, then (in a second project state) type errors.
    scratch.write("modules/libs/beta/model/deep/inner.cf", "factor = (10 +\nentity lower:\nend\n");
    scratch.write("modules/libs/delta/model/leaf.cf", "import alpha\nimport nowhere\nimport gamma::nope\n");
    std::fs::write(scratch.path("modules/libs/gamma/model/_init.cf"), b"greeting = \"caf\xe9\"\n").expect("write");
    for format in ["--error-format=human", "--error-format=json"] {
        let checked = same_with_any_jobs(&project, &["check", "--color=never", format, "."]);
        assert_eq!(checked.status.code(), Some(1));
        let compiled = same_with_any_jobs(&project, &["compile", "--color=never", format, "."]);
        assert_eq!(compiled.status.code(), Some(1));
    }
    let human = weft(&project, &["check", "--color=never", "--jobs", "4", "."]);
    let stderr = text(&human.stderr);
    for expected in ["could not find module nowhere", "gamma::nope", "not valid UTF-8", "Syntax error"] {
        assert!(stderr.contains(expected), "missing `{expected}` in:\n{stderr}");
    }

    let scratch = Scratch::new("jobs", "type-errors");
    let project = module_project(&scratch);
    scratch.write("modules/libs/beta/model/deep/inner.cf", "factor = nosuch::thing\nx = beta::Nope()\n");
    scratch.write(
        "modules/libs/delta/model/leaf.cf",
        "import alpha\nentity Leaf:\n    int n = \"text\"\nend\nimplement Leaf using std::none\n",
    );
    let checked = same_with_any_jobs(&project, &["check", "--color=never", "."]);
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked.stderr));
}
