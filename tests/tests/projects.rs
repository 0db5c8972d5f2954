//! Project and module loading, one fixture directory per situation.
//!
//! Each case of `tests/fixtures/projects/` holds a `project/` directory and, when v2 modules
//! are involved, a `venv/` Python environment (only its `site-packages` layout matters). The
//! snapshot shows what the loader found: modules and where they came from, namespaces in
//! execution order with their files, plugin signatures, and diagnostics.

use std::fmt::Write;
use std::path::Path;

use weft_frontend::project::{LoadOptions, ModuleOrigin, load_project};

fn describe(case: &Path) -> String {
    // Canonical, because the loader canonicalises editable-install paths.
    let case = &case.canonicalize().expect("the case exists");
    let venv = case.join("venv");
    let options = LoadOptions { python_env: venv.is_dir().then_some(venv) };
    let arena = bumpalo::Bump::new();
    let (program, diagnostics) = load_project(&arena, &case.join("project"), &options);
    // Paths outside the project are shown relative to the case, so snapshots do not depend
    // on where the repository is checked out.
    let relative =
        |p: &Path| p.strip_prefix(case).map(|r| r.display().to_string()).unwrap_or_else(|_| p.display().to_string());
    let mut out = String::new();
    writeln!(out, "project: {} (project.yml: {})", program.config.name, program.config.has_project_file).unwrap();
    for m in &program.modules {
        let origin = match &m.origin {
            ModuleOrigin::Embedded => "embedded".to_string(),
            ModuleOrigin::V1 { dir } => format!("v1 {}", relative(dir)),
            ModuleOrigin::V2 { package_dir } => format!("v2 {}", relative(package_dir)),
        };
        writeln!(out, "module {} {:?}: {origin}", m.name, m.version).unwrap();
    }
    for ns in &program.namespaces {
        let file = &program.sources.get(ns.file).name;
        let file = if file.starts_with('/') { relative(Path::new(file)) } else { file.clone() };
        writeln!(out, "namespace {}: {file}", ns.name).unwrap();
    }
    for p in program.plugins.iter().filter(|p| p.namespace != "std" && !p.namespace.starts_with("std::")) {
        let params: Vec<&str> = p.params.iter().map(|p| p.name.as_str()).collect();
        writeln!(out, "plugin {}({})", p.qualified_name(), params.join(", ")).unwrap();
    }
    for d in &diagnostics {
        let at = d.primary_location().map(|l| {
            let lc = program.sources.line_col(l);
            format!("{}:{}", program.sources.get(l.file).name, lc.line)
        });
        writeln!(
            out,
            "{:?} {} at {}: {}",
            d.severity,
            d.kind,
            at.unwrap_or_else(|| "-".into()),
            d.message.replace(&case.display().to_string(), "<case>")
        )
        .unwrap();
    }
    out
}

#[test]
fn projects_load_as_the_reference_loads_them() {
    insta::glob!("../fixtures/projects", "*/project", |project| {
        let case = project.parent().expect("the case directory");
        insta::assert_snapshot!(describe(case));
    });
}

/// Files that cannot live in a repository: a named pipe or a device where the loader expects a
/// source file. Reading one would block for ever or never end; the loader says what it found.
#[test]
fn special_files_are_refused_with_what_they_are() {
    use weft_tests::scratch::Scratch;
    let mkfifo = |path: &Path| {
        let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
        assert!(status.success());
    };
    let check = |name: &str, prepare: &dyn Fn(&Scratch), expected: &str| {
        let scratch = Scratch::new("projects", name);
        scratch.write("project/libs/mymod/module.yml", "name: mymod\nversion: 1.0.0\n");
        prepare(&scratch);
        let arena = bumpalo::Bump::new();
        let (_, diagnostics) = load_project(&arena, &scratch.path("project"), &LoadOptions { python_env: None });
        let said: Vec<String> = diagnostics
            .iter()
            .flat_map(|d| std::iter::once(d.message.clone()).chain(d.notes.iter().map(|n| n.message.clone())))
            .map(|m| m.replace(&scratch.0.display().to_string(), "<case>"))
            .collect();
        assert!(said.iter().any(|m| m == expected), "{name}: expected {expected:?} in {said:#?}");
    };
    check(
        "main-pipe",
        &|s| mkfifo(&s.path("project/main.cf")),
        "not an Inmanta project: cannot read <case>/project/main.cf: not a regular file but a named pipe",
    );
    check(
        "main-zero",
        &|s| std::os::unix::fs::symlink("/dev/zero", s.path("project/main.cf")).unwrap(),
        "not an Inmanta project: cannot read <case>/project/main.cf: not a regular file but a character device",
    );
    check(
        "module-pipe",
        &|s| {
            s.write("project/main.cf", "import mymod\n");
            std::fs::create_dir_all(s.path("project/libs/mymod/model")).unwrap();
            mkfifo(&s.path("project/libs/mymod/model/_init.cf"));
        },
        "cannot read libs/mymod/model/_init.cf: not a regular file but a named pipe",
    );
}
