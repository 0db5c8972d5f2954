//! Compiling a project end to end, as `weft compile` does, for the conformance suites.

use std::path::Path;
use std::sync::Arc;

use weft_frontend::project::LoadOptions;
use weft_ir::ErrorKind;

/// What a compile observably did: the fields the conformance corpus records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    /// `std::print` lines, sorted.
    pub prints: Vec<String>,
    /// The reported error: its kind, and its line and file (relative to the project) when it
    /// has a location.
    pub error: Option<(ErrorKind, Option<u32>, Option<String>)>,
    /// The first cause of the reported error, as the corpus records it first in `causes`: the
    /// kind of the wrapped compiler error, or the class of the Python exception a plugin
    /// raised (`TypeError` for `caused by ExternalException: TypeError: ...`).
    pub cause: Option<String>,
    /// The first cause's message, without its kind and without the place the note gives after
    /// it (`Invalid value 'ab', does not match constraint `(std::length(self) > 3)``).
    pub cause_message: Option<String>,
    /// The first line of the reported error's message.
    pub message: Option<String>,
}

/// The first cause of a diagnostic (see [`Outcome::cause`]), read from its first note.
fn first_cause(diagnostic: &weft_ir::Diagnostic) -> Option<String> {
    let note = diagnostic.notes.first()?.message.strip_prefix("caused by ")?;
    let (kind, message) = note.split_once(": ").unwrap_or((note, ""));
    if kind == ErrorKind::ExternalException.as_str() {
        return message.split_once(':').map(|(class, _)| class.to_string());
    }
    Some(kind.to_string())
}

/// The message of a diagnostic's first cause (see [`Outcome::cause_message`]).
fn first_cause_message(diagnostic: &weft_ir::Diagnostic) -> Option<String> {
    let note = diagnostic.notes.first()?.message.strip_prefix("caused by ")?;
    let (_, message) = note.split_once(": ")?;
    // The note ends with the cause's place, ` (./main.cf:7)`, when it has one.
    let message = match message.rsplit_once(" (") {
        Some((text, place)) if place.ends_with(')') && place.contains(':') => text,
        _ => message,
    };
    Some(message.to_string())
}

/// The first line of a diagnostic's message, as the corpus records the reference's.
fn first_line(diagnostic: &weft_ir::Diagnostic) -> String {
    diagnostic.message.lines().next().unwrap_or_default().to_string()
}

/// Loads, checks, lowers and evaluates the project in `dir`.
pub fn compile(dir: &Path) -> Outcome {
    compile_with(dir, &LoadOptions { python_env: None })
}

/// Loads, checks, lowers and evaluates the project in `dir` with the given load options (a
/// Python environment that holds v2 modules, as `weft compile --python-env` takes).
pub fn compile_with(dir: &Path, load: &LoadOptions) -> Outcome {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, load);
    let (program, mut diagnostics) = (compiled.project, compiled.diagnostics);
    let mut prints = Vec::new();
    if let Some(lowered) = compiled.lowered {
        let modules =
            weft_runtime::modules::Modules::for_project(program.module_dirs(), program.path_plugin_packages.clone());
        let options = weft_runtime::Options {
            modules,
            data_dir: Some(dir.join("data")),
            plugin_dir: Some(dir.to_path_buf()),
            ..weft_runtime::Options::default()
        };
        let outcome = weft_runtime::evaluate(Arc::new(lowered), &options);
        prints = outcome.prints;
        diagnostics.extend(outcome.errors.into_iter().take(1));
    }
    prints.sort();
    let reported = diagnostics.iter().find(|d| d.is_error());
    let error = reported.map(|d| {
        let location = d.primary_location();
        let line = location.map(|l| crate::parser::reference_line(d, program.sources.line_col(l).line));
        let file = location.map(|l| program.sources.get(l.file).name.clone());
        (d.kind, line, file)
    });
    let cause = reported.and_then(first_cause);
    let cause_message = reported.and_then(first_cause_message);
    let message = reported.map(first_line);
    Outcome { ok: error.is_none(), prints, error, cause, cause_message, message }
}

/// Builds the project in `dir` into an artifact in memory, as `weft build` does; `None` when
/// the project does not compile statically.
pub fn build_artifact(dir: &Path) -> Option<Vec<u8>> {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions { python_env: None });
    let lowered = compiled.lowered.as_ref()?;
    let executable =
        weft_vm::Executable::from_program(Arc::new(lowered.clone())).expect("the frontend's program assembles");
    let modules = weft_runtime::modules::Modules::for_project(
        compiled.project.module_dirs(),
        compiled.project.path_plugin_packages.clone(),
    );
    let files = modules.embed().expect("module files are readable");
    Some(weft_runtime::artifact::build(&weft_runtime::artifact::BuildInput {
        executable: &executable,
        provenance: weft_runtime::artifact::Provenance::default(),
        inputs: weft_ir::inputs::inputs(lowered),
        files: &files,
    }))
}

/// Builds the project in `dir` into an artifact in memory, then loads and runs the artifact
/// as a host without the sources does: only the artifact's own line tables and embedded
/// module files are used. A project that does not compile statically has no artifact; its
/// outcome is the static one, as `weft build` reports it.
pub fn build_and_run(dir: &Path) -> Outcome {
    let Some(bytes) = build_artifact(dir) else { return compile(dir) };
    let loaded = weft_runtime::artifact::load_bytes(&bytes, "model.weft").expect("a fresh artifact loads");
    let modules = weft_runtime::modules::Modules::from_embedded(loaded.files);
    let options =
        weft_runtime::Options { modules, data_dir: Some(dir.join("data")), ..weft_runtime::Options::default() };
    let (outcome, _) = weft_runtime::run(&loaded.executable, &options);
    let mut prints = outcome.prints;
    prints.sort();
    let files = &loaded.executable.program.files;
    let reported = outcome.errors.first();
    let error = reported.map(|d| {
        let location = d.primary_location();
        let file = location.and_then(|l| files.get(l.file.0 as usize));
        let line = location.zip(file).map(|(l, f)| crate::parser::reference_line(d, f.line_col(l.span.start).line));
        let name = file.map(|f| f.display.strip_prefix("./").unwrap_or(&f.display).to_string());
        (d.kind, line, name)
    });
    let cause = reported.and_then(first_cause);
    let cause_message = reported.and_then(first_cause_message);
    let message = reported.map(first_line);
    Outcome { ok: error.is_none(), prints, error, cause, cause_message, message }
}
