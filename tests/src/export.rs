//! Exporting a project end to end, as `weft export` does, for the export suites.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value as Json;
use weft_frontend::project::LoadOptions;
use weft_ir::{Diagnostic, ErrorKind};
use weft_runtime::graph::ResourceGraph;

/// What an export observably did.
#[derive(Debug)]
pub struct Exported {
    /// The graph, when the export succeeded.
    pub graph: Option<ResourceGraph>,
    /// The reported error: its kind and message.
    pub error: Option<(ErrorKind, String)>,
    /// The export's warnings, as text.
    pub warnings: Vec<String>,
}

impl Exported {
    /// The export JSON in the normalized form of the recorded expectations: resources sorted
    /// by id, `requires` sorted (object keys are sorted by `serde_json`'s map).
    pub fn normalized_resources(&self) -> Json {
        self.graph.as_ref().map_or(Json::Array(Vec::new()), |g| normalize(&g.to_json()))
    }
}

/// Sorts an export JSON's resources by id and each `requires` list.
pub fn normalize(json: &Json) -> Json {
    let mut resources: Vec<Json> = json.as_array().cloned().unwrap_or_default();
    // The reference's order of `requires`, and of `references` and `mutators` when several
    // fields hold references, comes from Python sets and hash-seeded walks.
    for resource in &mut resources {
        if let Some(Json::Array(requires)) = resource.get_mut("requires") {
            requires.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
        if let Some(Json::Array(references)) = resource.get_mut("references") {
            references.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        }
        if let Some(Json::Array(mutators)) = resource.get_mut("mutators") {
            mutators.sort_by_cached_key(|m| m.to_string());
        }
    }
    resources.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Json::Array(resources)
}

/// Loads, checks, lowers, evaluates and exports the project in `dir`.
pub fn export(dir: &Path, python_env: Option<&Path>) -> Exported {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions { python_env: python_env.map(Path::to_path_buf) });
    let first_error =
        |diagnostics: &[Diagnostic]| diagnostics.iter().find(|d| d.is_error()).map(|d| (d.kind, d.message.clone()));
    if let Some(error) = first_error(&compiled.diagnostics) {
        return Exported { graph: None, error: Some(error), warnings: Vec::new() };
    }
    let Some(lowered) = compiled.lowered else {
        return Exported {
            graph: None,
            error: Some((ErrorKind::CompilerException, "not lowered".into())),
            warnings: vec![],
        };
    };
    let modules = weft_runtime::modules::Modules::for_project(
        compiled.project.module_dirs(),
        compiled.project.path_plugin_packages.clone(),
    );
    let options = weft_runtime::Options { modules: modules.clone(), ..weft_runtime::Options::default() };
    let (outcome, model) = weft_runtime::evaluate_model(Arc::new(lowered), &options);
    if let Some(error) = first_error(&outcome.errors) {
        return Exported { graph: None, error: Some(error), warnings: Vec::new() };
    }
    let Some(model) = model else {
        return Exported {
            graph: None,
            error: Some((ErrorKind::CompilerException, "no model".into())),
            warnings: vec![],
        };
    };
    let text = |diagnostics: &[Diagnostic]| {
        diagnostics.iter().filter(|d| !d.is_error()).map(|d| d.message.clone()).collect::<Vec<_>>()
    };
    match weft_runtime::export::export(&model, &modules) {
        Ok(export) => Exported { graph: Some(export.graph), error: None, warnings: text(&export.warnings) },
        Err(failure) => {
            Exported { graph: None, error: first_error(&failure.diagnostics), warnings: text(&failure.diagnostics) }
        }
    }
}
