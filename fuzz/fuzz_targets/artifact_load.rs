//! Fuzzes the whole loader of `weft run`: container, metadata and files decoding, the program
//! verifier and the bytecode verifier. Any input must load or be refused with an error; never
//! a panic, an abort or unbounded allocation.
//!
//! Each input is tried as it is and resealed (length and checksum rewritten), so that mutations
//! of a real artifact reach the checks behind the checksum. Seed the corpus with artifacts
//! built by `weft build` (for example from `tests/fixtures/artifact/inputs` and a few
//! conformance cases) and run from the repository root:
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run artifact_load`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weft_runtime::artifact::load_bytes(data, "fuzz.weft");
    let mut resealed = data.to_vec();
    weft_ir::artifact::reseal(&mut resealed);
    if let Ok(loaded) = weft_runtime::artifact::load_bytes(&resealed, "fuzz.weft") {
        // A loaded artifact must be fully walkable: every instruction decodes.
        let code = &loaded.executable.code;
        for i in 0..code.len() {
            let _ = code.expr(weft_ir::program::ExprId(i as u32));
        }
        let _ = weft_runtime::artifact::describe(&loaded);
    }
});
