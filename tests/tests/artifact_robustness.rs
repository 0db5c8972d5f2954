//! Damaged artifacts that get past the checksum (crafted, or resealed after corruption) must be
//! refused by the loader with an error, never a panic: a deterministic mutation run over real
//! artifacts, in every section. The cargo-fuzz target `artifact_load` explores further.

use weft_tests::compile::build_artifact;
use weft_tests::{cases_in, corpus};

/// xorshift64*: a fixed sequence, so a failure names a reproducible seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn resealed_mutations_of_real_artifacts_are_refused_or_load_without_panicking() {
    let root = corpus();
    let cases: Vec<_> = cases_in(&root).into_iter().step_by(9).collect();
    let mut loaded = 0;
    let mut refused = 0;
    for (index, case) in cases.iter().enumerate() {
        let Some(good) = build_artifact(case) else { continue };
        weft_runtime::artifact::load_bytes(&good, "good.weft").expect("an intact artifact loads");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ index as u64);
        for round in 0..300 {
            let mut bytes = good.clone();
            // Past the header and table: the sections' bytes.
            let start = weft_ir::artifact::HEADER_LEN + 3 * weft_ir::artifact::SECTION_ENTRY_LEN;
            for _ in 0..1 + rng.below(4) {
                let at = start + rng.below(bytes.len() - start);
                match rng.below(3) {
                    0 => bytes[at] ^= 1 << rng.below(8),
                    1 => bytes[at] = 0xff,
                    _ => {
                        let end = (at + 4).min(bytes.len());
                        let value = (rng.next() as u32).to_le_bytes();
                        bytes[at..end].copy_from_slice(&value[..end - at]);
                    }
                }
            }
            weft_ir::artifact::reseal(&mut bytes);
            let result = std::panic::catch_unwind(|| match weft_runtime::artifact::load_bytes(&bytes, "m.weft") {
                Ok(artifact) => {
                    let code = &artifact.executable.code;
                    for i in 0..code.len() {
                        let _ = code.expr(weft_ir::program::ExprId(i as u32));
                    }
                    true
                }
                Err(error) => {
                    assert_eq!(error.to_string().lines().count(), 1, "{error}");
                    false
                }
            });
            match result {
                Ok(true) => loaded += 1,
                Ok(false) => refused += 1,
                Err(_) => panic!("{}: mutation round {round} panicked the loader", case.display()),
            }
        }
    }
    assert!(refused > 0, "no mutation was refused: the checks are not reached");
    eprintln!("{loaded} mutations loaded, {refused} refused");
}
