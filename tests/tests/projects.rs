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
