//! Fuzzes the parser: any input must parse without panicking, every diagnostic span must lie
//! inside the file on character boundaries, and the AST dump must render.
//!
//! Run from the repository root with `cargo fuzz run parse`; seed the corpus with real programs
//! to get deep quickly: `cargo fuzz run parse fuzz/corpus/parse tests/conformance
//! tests/fixtures/parser/ok` (libFuzzer reads every file under the given directories).

#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_ir::{FileId, Interner};

fuzz_target!(|data: &[u8]| {
    // The compiler reads files lossily (with a diagnostic for invalid UTF-8), so the parser only
    // ever sees valid text.
    let src = String::from_utf8_lossy(data);
    let arena = bumpalo::Bump::new();
    let mut interner = Interner::new();
    let output = weft_frontend::parse_file(&arena, &src, FileId(0), &mut interner);
    for diagnostic in &output.diagnostics {
        for label in &diagnostic.labels {
            let (start, end) = (label.location.span.start as usize, label.location.span.end as usize);
            assert!(start <= end && end <= src.len(), "span {start}..{end} outside the file: {}", diagnostic.message);
            assert!(src.is_char_boundary(start) && src.is_char_boundary(end), "span {start}..{end} inside a character");
        }
    }
    let dump = weft_frontend::dump::dump_file(&output.file, &src, &interner);
    assert!(dump.starts_with("File"));
});
