//! Snapshots of the IR's text form (`weft compile --emit=ir`) for the spec demonstrations in
//! `tests/fixtures/eval/`: what lowering decides (wait kinds, eager promises, reversed nested
//! blocks, constructor attribute splits) is reviewed as text.

use std::path::Path;

use weft_frontend::project::LoadOptions;

fn lowered_text(dir: &Path) -> String {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions { python_env: None });
    let Some(lowered) = compiled.lowered else { panic!("{}: {:?}", dir.display(), compiled.diagnostics) };
    lowered.text(&|ns| !(ns == "std" || ns.starts_with("std::")))
}

#[test]
fn ir_text_of_the_spec_demonstrations() {
    insta::glob!("../fixtures/eval", "*/main.cf", |path| {
        let dir = path.parent().expect("a case directory");
        insta::assert_snapshot!(lowered_text(dir));
    });
}
