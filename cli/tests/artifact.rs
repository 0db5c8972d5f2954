//! Artifacts as operators use them: `weft build` on one machine, `weft run`, `weft export`,
//! `weft apply` and `weft inspect` of the file elsewhere, without the sources, with the host's
//! own inputs; and damaged files refused with one clear line.
//!
//! The model is `tests/fixtures/artifact/inputs/`: a module with a template and a resource
//! type, two declared parameters, an environment variable and a fact.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use weft_tests::scratch::{Scratch, copy_tree};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/artifact/inputs")
}

/// Runs `weft <args>` in `cwd`, with a clean environment for the model's inputs.
fn weft(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
    command.current_dir(cwd).args(args).env_remove("WEFT_TEST_TIER").env_remove("VIRTUAL_ENV");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("weft runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeded(output: &Output) -> String {
    assert!(output.status.success(), "weft failed: {}\n{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

/// A project copied to `dir` and built into `artifact`.
fn build(scratch: &Scratch, dir: &str, artifact: &str) -> PathBuf {
    copy_tree(&fixture(), &scratch.path(dir));
    let out = weft(&scratch.0, &["build", dir, "-o", artifact], &[]);
    succeeded(&out);
    scratch.path(artifact)
}

#[test]
fn an_artifact_runs_without_its_sources_and_does_not_depend_on_where_it_was_built() {
    let scratch = Scratch::new("artifact", "portable");
    let first = build(&scratch, "first/checkout", "first.weft");
    let second = build(&scratch, "elsewhere", "second.weft");
    let bytes = std::fs::read(&first).expect("the artifact exists");
    assert_eq!(bytes, std::fs::read(&second).expect("the artifact exists"), "the same sources build the same bytes");
    let scratch_path = scratch.0.to_string_lossy().into_owned();
    assert!(
        !bytes.windows(scratch_path.len()).any(|w| w == scratch_path.as_bytes()),
        "the artifact holds a path of the build machine"
    );

    let facts = fixture().join("facts.json");
    let facts = facts.to_str().expect("a UTF-8 path");
    let compiled = succeeded(&weft(&scratch.0, &["compile", "first/checkout", "--facts", facts], &[]));
    std::fs::remove_dir_all(scratch.path("first")).expect("remove the sources");
    std::fs::remove_dir_all(scratch.path("elsewhere")).expect("remove the sources");
    let host = scratch.path("host");
    std::fs::create_dir_all(&host).expect("a working directory");
    std::fs::rename(&first, host.join("model.weft")).expect("ship the artifact");
    let ran = succeeded(&weft(&host, &["run", "model.weft", "--facts", facts], &[]));
    assert_eq!(ran, compiled);
    assert!(ran.contains("welcome to eu (dev)"), "the embedded template renders: {ran}");
}

#[test]
fn export_and_apply_take_an_artifact() {
    let scratch = Scratch::new("artifact", "export");
    let artifact = build(&scratch, "project", "model.weft");
    let artifact = artifact.to_str().expect("a UTF-8 path");
    let facts = fixture().join("facts.json");
    let facts = facts.to_str().expect("a UTF-8 path");
    succeeded(&weft(&scratch.0, &["export", "project", "--facts", facts, "-o", "from-sources.json"], &[]));
    succeeded(&weft(&scratch.0, &["export", artifact, "--facts", facts, "-o", "from-artifact.json"], &[]));
    let read = |name: &str| std::fs::read_to_string(scratch.path(name)).expect("the export exists");
    assert_eq!(read("from-artifact.json"), read("from-sources.json"));
    assert!(read("from-artifact.json").contains("std::testing::NullResource[agent-eu,name=web-1],v=0"));

    std::fs::create_dir_all(scratch.path("root")).expect("a root");
    let root = scratch.path("root");
    let applied = succeeded(&weft(
        &scratch.0,
        &["apply", artifact, "--facts", facts, "--root", root.to_str().expect("UTF-8")],
        &[],
    ));
    // Null resources change nothing; what matters is that both were deployed from the artifact.
    assert!(applied.contains("2 resources already up to date"), "{applied}");
}

#[test]
fn inputs_are_read_on_the_host_each_time_the_artifact_runs() {
    let scratch = Scratch::new("artifact", "inputs");
    let artifact = build(&scratch, "project", "model.weft");
    let artifact = artifact.to_str().expect("a UTF-8 path");
    let facts = fixture().join("facts.json");
    let facts = facts.to_str().expect("a UTF-8 path");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["run", artifact, "--facts", facts];
        all.extend_from_slice(args);
        succeeded(&weft(&scratch.0, &all, env))
    };
    assert_eq!(run(&[], &[]), "welcome to eu (dev)\nweb-0 ip=unknown\nweb-1 ip=10.0.0.2\n");
    assert_eq!(run(&[], &[("WEFT_TEST_TIER", "prod")]), "welcome to eu (prod)\nweb-0 ip=unknown\nweb-1 ip=10.0.0.2\n");
    assert_eq!(
        run(&["--set", "region=us", "--set", "replicas=3"], &[]),
        "welcome to us (dev)\nweb-0 ip=10.1.0.1\nweb-1 ip=unknown\nweb-2 ip=unknown\n"
    );

    // A bad value or an undeclared parameter is a usage error, named in one line.
    for (set, expected) in [
        ("replicas=many", "parameter replicas is an int (default 2): \"many\" is not an int"),
        ("zones=3", "no such parameter; the model declares replicas, region"),
        ("replicas", "expected NAME=VALUE"),
    ] {
        let out = weft(&scratch.0, &["run", artifact, "--set", set], &[]);
        assert_eq!(out.status.code(), Some(2), "--set {set}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "--set {set}: {stderr}");
    }
}

#[test]
fn inspect_describes_the_artifact_and_its_inputs() {
    let scratch = Scratch::new("artifact", "inspect");
    let artifact = build(&scratch, "project", "model.weft");
    let artifact = artifact.to_str().expect("a UTF-8 path");
    let human = succeeded(&weft(&scratch.0, &["inspect", artifact], &[]));
    let format = format!("artifact format {}, built by weft", weft_ir::artifact::FORMAT_VERSION);
    for expected in [
        format.as_str(),
        "project: artifact_inputs",
        "source digest: sha256:",
        "replicas: int = 2  (./main.cf:4)  how many web servers",
        "region: string = \"eu\"",
        "WEFT_TEST_TIER  (std::get_env at ./main.cf:8)",
        "ip  (std::getfact at ./main.cf:13)",
        "web (1 files)",
    ] {
        assert!(human.contains(expected), "missing {expected:?} in:\n{human}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&succeeded(&weft(&scratch.0, &["inspect", artifact, "--format", "json"], &[])))
            .expect("JSON");
    let digest = json["source_digest"].as_str().expect("a digest");
    assert_eq!(digest.len(), 64);
    let sections: Vec<&str> =
        json["sections"].as_array().expect("sections").iter().map(|s| s["name"].as_str().expect("a name")).collect();
    assert_eq!(sections, ["metadata", "code", "files"]);
}

/// Every kind of damage gives exit code 2 and one line on stderr that says which check failed.
#[test]
fn damaged_and_foreign_files_are_refused_with_one_line() {
    let scratch = Scratch::new("artifact", "damaged");
    let artifact = build(&scratch, "project", "model.weft");
    let good = std::fs::read(&artifact).expect("the artifact exists");
    let resealed = |patch: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = good.clone();
        patch(&mut bytes);
        weft_ir::artifact::reseal(&mut bytes);
        bytes
    };
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x10;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "truncated"),
        ("header only", good[..50].to_vec(), "truncated"),
        ("half", good[..good.len() / 2].to_vec(), "truncated"),
        ("one byte short", good[..good.len() - 1].to_vec(), "truncated"),
        ("bit flip", flipped, "checksum"),
        ("json", b"[{\"id\": \"x\"}]\n".to_vec(), "not a weft artifact"),
        ("elf", std::fs::read(env!("CARGO_BIN_EXE_weft")).expect("the binary"), "not a weft artifact"),
        ("format version", resealed(&|b| b[8] = 7), "format version 7"),
        ("target", resealed(&|b| b[64..80].copy_from_slice(b"riscv64-linux-le")), "riscv64"),
        ("weft version", resealed(&|b| b[40..45].copy_from_slice(b"0.0.9")), "built by weft 0.0.9"),
        (
            "metadata",
            resealed(&|b| {
                // Garbage in the metadata section, past the container's checks.
                let start = 96 + 24 * 3;
                for byte in &mut b[start + 16..start + 64] {
                    *byte = 0xff;
                }
            }),
            "metadata section",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = scratch.path(&format!("{}.weft", name.replace(' ', "-")));
        std::fs::write(&path, &bytes).expect("write the damaged file");
        for command in ["run", "inspect", "export"] {
            let out = weft(&scratch.0, &[command, path.to_str().expect("UTF-8")], &[]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} ({command}): {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{name} ({command}): {stderr}");
            assert!(stderr.starts_with("error: "), "{name} ({command}): {stderr}");
            assert!(stderr.contains(expected), "{name} ({command}): expected {expected:?} in {stderr}");
        }
    }
}

/// An artifact streamed through a pipe (`weft run <(ssh host cat model.weft)`) runs as the
/// file does; a stream of something else (`/dev/zero`) is refused after its first bytes.
#[test]
fn an_artifact_can_come_through_a_pipe() {
    let scratch = Scratch::new("artifact", "pipe");
    let artifact = build(&scratch, "project", "model.weft");
    let facts = fixture().join("facts.json");
    let facts = facts.to_str().expect("a UTF-8 path");
    let from_file = succeeded(&weft(&scratch.0, &["run", "model.weft", "--facts", facts], &[]));
    let pipe = scratch.path("model.pipe");
    let status = Command::new("mkfifo").arg(&pipe).status().expect("mkfifo runs");
    assert!(status.success());
    let writer = {
        let pipe = pipe.clone();
        std::thread::spawn(move || {
            let bytes = std::fs::read(artifact).expect("the artifact exists");
            std::fs::write(pipe, bytes).expect("the pipe takes the artifact");
        })
    };
    let from_pipe = succeeded(&weft(&scratch.0, &["run", "model.pipe", "--facts", facts], &[]));
    writer.join().expect("the writer ends");
    assert_eq!(from_pipe, from_file);
    let zero = weft(&scratch.0, &["run", "/dev/zero"], &[]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(text(&zero.stderr).contains("not a weft artifact"), "{}", text(&zero.stderr));
}

/// `-o` names where the bytes go, not a file to replace: a named pipe (as `/dev/null` or
/// `/dev/stdout` would be) is written to and stays a pipe, and a symbolic link keeps pointing
/// at the file that now holds the output.
#[test]
fn outputs_that_are_not_regular_files_are_written_to_not_replaced() {
    let scratch = Scratch::new("artifact", "outputs");
    let artifact = build(&scratch, "project", "model.weft");
    let expected = std::fs::read(&artifact).expect("the artifact exists");
    let pipe = scratch.path("out.pipe");
    let status = Command::new("mkfifo").arg(&pipe).status().expect("mkfifo runs");
    assert!(status.success());
    let reader = {
        let pipe = pipe.clone();
        std::thread::spawn(move || std::fs::read(pipe).expect("the pipe can be read"))
    };
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "out.pipe"], &[]));
    assert_eq!(reader.join().expect("the reader ends"), expected);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&pipe).expect("the pipe exists").file_type().is_fifo());

    std::fs::write(scratch.path("real.weft"), b"old").expect("write a file");
    std::os::unix::fs::symlink("real.weft", scratch.path("link.weft")).expect("make a link");
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "link.weft"], &[]));
    assert!(std::fs::symlink_metadata(scratch.path("link.weft")).expect("the link exists").is_symlink());
    assert_eq!(std::fs::read(scratch.path("real.weft")).expect("the file exists"), expected);

    let into_directory = weft(&scratch.0, &["build", "project", "-o", "project"], &[]);
    assert_eq!(into_directory.status.code(), Some(2));
    assert!(text(&into_directory.stderr).contains("it is a directory"), "{}", text(&into_directory.stderr));
}

#[test]
fn python_plugins_unpacked_for_a_run_are_removed_when_it_ends() {
    // A model whose plugin runs in Python: the artifact carries the module's Python code,
    // which `weft run` unpacks into a private temporary directory for the plugin bridge.
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/dataclasses/dataclass_passed_to_plugin");
    let scratch = Scratch::new("artifact", "python-cleanup");
    copy_tree(&case, &scratch.path("project"));
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "model.weft"], &[]));
    let temp = scratch.path("tmp");
    std::fs::create_dir_all(&temp).expect("a temporary directory");
    let temp_text = temp.to_str().expect("a UTF-8 path");
    for command in ["run", "export"] {
        let mut args = vec![command, "model.weft"];
        if command == "export" {
            args.extend(["-o", "model.json"]);
        }
        let out = succeeded(&weft(&scratch.0, &args, &[("TMPDIR", temp_text)]));
        assert!(out.contains("two:2"), "{command}: the plugin ran: {out}");
        let left: Vec<_> = std::fs::read_dir(&temp).expect("read the temporary directory").collect();
        assert!(left.is_empty(), "{command} left {} entries in its temporary directory", left.len());
    }
}

#[test]
fn an_artifact_carries_the_packages_its_plugins_import_from_modules_the_model_does_not_load() {
    // `pa`'s plugin imports `pb`'s package, a module on the module path that main.cf does not
    // import: the artifact carries it, `weft inspect` lists it, and a run without the sources
    // imports it.
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/conformance/plugins/python_plugin_imports_unloaded_path_module");
    let scratch = Scratch::new("artifact", "path-packages");
    copy_tree(&case, &scratch.path("project"));
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "model.weft"], &[]));
    std::fs::remove_dir_all(scratch.path("project")).expect("the sources can be removed");
    let human = succeeded(&weft(&scratch.0, &["inspect", "model.weft"], &[]));
    assert!(human.contains("plugin packages of modules the model does not load:\n  pb (1 Python files)\n"), "{human}");
    assert_eq!(succeeded(&weft(&scratch.0, &["run", "model.weft"], &[])), "4 8\n");
}

#[test]
fn resources_mapped_by_their_python_classes_export_from_an_artifact() {
    // The export case's module registers a resource class whose getters and dependency
    // manager are its own Python code: an artifact carries it, and exports without the sources
    // what the sources export (which the export cases compare with the reference).
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/export/python_resource_dependency_manager");
    let scratch = Scratch::new("artifact", "python-resources");
    copy_tree(&case, &scratch.path("project"));
    succeeded(&weft(&scratch.0, &["export", "project", "-o", "from-sources.json"], &[]));
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "model.weft"], &[]));
    std::fs::remove_dir_all(scratch.path("project")).expect("the sources can be removed");
    let human = succeeded(&weft(&scratch.0, &["inspect", "model.weft"], &[]));
    assert!(human.contains("needs Python on the host to export: pyres::Dir, pyres::File\n"), "{human}");
    succeeded(&weft(&scratch.0, &["export", "model.weft", "-o", "from-artifact.json"], &[]));
    let read = |name: &str| std::fs::read_to_string(scratch.path(name)).expect("the export exists");
    assert_eq!(read("from-artifact.json"), read("from-sources.json"));
    assert!(
        read("from-artifact.json")
            .contains(r#""requires":["pyres::Dir[web,path=/etc]","pyres::Dir[web,path=/etc/app]"]"#),
        "the dependency manager's edges: {}",
        read("from-artifact.json")
    );
}

/// A project `project/` in `scratch` whose `main.cf` is `main_cf` and whose module `pm` has
/// the Python plugins `plugins_py`.
fn python_plugin_project(scratch: &Scratch, plugins_py: &str, main_cf: &str) {
    let module = scratch.path("project/libs/pm");
    std::fs::create_dir_all(module.join("model")).expect("the module's directories");
    std::fs::create_dir_all(module.join("plugins")).expect("the module's directories");
    std::fs::write(module.join("module.yml"), "name: pm\nversion: 0.1.0\nlicense: ASL 2.0\n").expect("writable");
    std::fs::write(module.join("model/_init.cf"), "").expect("writable");
    std::fs::write(module.join("plugins/__init__.py"), plugins_py).expect("writable");
    std::fs::write(scratch.path("project/main.cf"), main_cf).expect("writable");
}

#[test]
fn python_plugins_ask_std_for_facts_of_the_host_running_the_artifact() {
    // `inmanta_plugins.std.getfact` from a plugin answers as `std::getfact` does: from the
    // host's `--facts` file, else the default or an unknown value once an environment is
    // configured (the reference's compile without a reachable orchestrator answers so too).
    let scratch = Scratch::new("artifact", "python-getfact");
    python_plugin_project(
        &scratch,
        "import inmanta_plugins.std\nfrom inmanta.plugins import Context, plugin\n\n@plugin\ndef fact(ctx: Context, \
         resource: \"any\", name: \"string\") -> \"any\":\n    return inmanta_plugins.std.getfact(ctx, resource, name)\n\n\
         @plugin\ndef fact_or(ctx: Context, resource: \"any\", name: \"string\") -> \"string\":\n    return \
         str(inmanta_plugins.std.getfact(ctx, resource, name, default_value=\"dflt\"))\n",
        "import pm\nimport std::testing\nr = std::testing::NullResource(name=\"r1\")\nstd::print(pm::fact_or(r, \
         \"ip\"))\nstd::print(std::is_unknown(pm::fact(r, \"ip\")))\n",
    );
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "model.weft"], &[]));
    std::fs::write(
        scratch.path("facts.json"),
        r#"{"std::testing::NullResource[internal,name=r1]": {"ip": "10.0.0.9"}}"#,
    )
    .expect("writable");
    let environment = [("INMANTA_CONFIG_ENVIRONMENT", "6d2c7e4e-1b1f-4f0e-9d55-3b3c6b3b1a11")];
    assert_eq!(
        succeeded(&weft(&scratch.0, &["run", "model.weft", "--facts", "facts.json"], &environment)),
        "10.0.0.9\nFalse\n"
    );
    assert_eq!(succeeded(&weft(&scratch.0, &["run", "model.weft"], &environment)), "dflt\nTrue\n");
}

#[test]
fn python_plugins_run_with_the_python_environments_interpreter() {
    // The environment's `bin/python3` marks the plugins it runs; `python3` from `PATH` does not.
    let scratch = Scratch::new("artifact", "python-interpreter");
    python_plugin_project(
        &scratch,
        "import os\nfrom inmanta.plugins import plugin\n\n@plugin\ndef interpreter() -> \"string\":\n    return \
         os.environ.get(\"WEFT_TEST_INTERPRETER\", \"python3 from PATH\")\n",
        "import pm\nstd::print(pm::interpreter())\n",
    );
    let bin = scratch.path("venv/bin");
    std::fs::create_dir_all(&bin).expect("the environment's bin");
    std::fs::write(bin.join("python3"), "#!/bin/sh\nWEFT_TEST_INTERPRETER=environment exec python3 \"$@\"\n")
        .expect("writable");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("python3"), std::fs::Permissions::from_mode(0o755)).expect("executable");
    }
    succeeded(&weft(&scratch.0, &["build", "project", "-o", "model.weft"], &[]));
    for target in ["project", "model.weft"] {
        let plain = succeeded(&weft(&scratch.0, &["compile", target], &[]));
        assert_eq!(plain, "python3 from PATH\n", "{target}");
        let in_environment = succeeded(&weft(&scratch.0, &["compile", target, "--python-env", "venv"], &[]));
        assert_eq!(in_environment, "environment\n", "{target}");
        let through_variable = succeeded(&weft(&scratch.0, &["compile", target], &[("VIRTUAL_ENV", "venv")]));
        assert_eq!(through_variable, "environment\n", "{target}");
    }
}

#[test]
fn python_plugins_run_in_the_projects_directory() {
    // As the reference, run in the project: a plugin reading a relative path reads the
    // project's file, wherever weft was started.
    let scratch = Scratch::new("artifact", "python-working-directory");
    python_plugin_project(
        &scratch,
        "from inmanta.plugins import plugin\n\n@plugin\ndef first_line() -> \"string\":\n    with open(\"main.cf\") as \
         f:\n        return f.readline().strip()\n",
        "# the project's main.cf\nimport pm\nstd::print(pm::first_line())\n",
    );
    std::fs::write(scratch.path("main.cf"), "# another main.cf\n").expect("writable");
    let out = succeeded(&weft(&scratch.0, &["compile", "project"], &[]));
    assert_eq!(out, "# the project's main.cf\n");
}
