//! Snapshots of the IR's text form (`weft compile --emit=ir`) for the spec demonstrations in
//! `tests/fixtures/eval/`: what lowering decides (wait kinds, eager promises, reversed nested
//! blocks, constructor attribute splits) is reviewed as text.

use std::path::Path;

use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::Diagnostic;

fn lowered_text(dir: &Path) -> String {
    let arena = bumpalo::Bump::new();
    let (mut program, diagnostics) = load_project(&arena, dir, &LoadOptions { python_env: None });
    assert!(!diagnostics.iter().any(Diagnostic::is_error), "{}: {diagnostics:?}", dir.display());
    let checked = weft_frontend::check::check(&mut program);
    assert!(!checked.diagnostics.iter().any(Diagnostic::is_error), "{}: {:?}", dir.display(), checked.diagnostics);
    let lowered = weft_frontend::lower::lower(&program, &checked.model);
    lowered.text(&|ns| !(ns == "std" || ns.starts_with("std::")))
}

#[test]
fn ir_text_of_the_spec_demonstrations() {
    insta::glob!("../fixtures/eval", "*/main.cf", |path| {
        let dir = path.parent().expect("a case directory");
        insta::assert_snapshot!(lowered_text(dir));
    });
}
