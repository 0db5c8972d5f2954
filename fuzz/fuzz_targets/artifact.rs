//! Fuzzes the artifact container and the metadata codec: any input must be rejected or accepted
//! without panicking, aborting or allocating without bound, and whatever is accepted must keep
//! `Artifact`'s promises (sections in bounds, aligned, each kind once).
//!
//! Random bytes almost never carry a valid checksum, so each input is tried twice: as it is (the
//! checks up to the checksum) and resealed, with its length and checksum fields rewritten as the
//! builder writes them (the section table, then the codec on every section). The input is also
//! decoded directly as metadata, so the codec is exercised even when no artifact structure
//! survives. The metadata type is the IR's `Program`, the type the metadata section carries.
//!
//! Run from the repository root with `cargo fuzz run artifact` (the toolchain is stable, so add
//! `RUSTC_BOOTSTRAP=1` in front for the sanitizer flags cargo-fuzz passes). Seeding the corpus
//! with a few real artifacts gets past the table quickly.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_ir::artifact::{Artifact, SECTION_ALIGN, codec, reseal};
use weft_ir::program::Program;

fn check(bytes: &[u8]) {
    let Ok(artifact) = Artifact::parse(bytes) else { return };
    assert_eq!(artifact.header().total_len, bytes.len() as u64);
    let mut seen = Vec::new();
    for info in artifact.sections() {
        assert!(!seen.contains(&info.kind), "{} twice", info.kind);
        seen.push(info.kind);
        assert_eq!(info.offset % SECTION_ALIGN as u64, 0, "{info:?} misaligned");
        let range = artifact.section_range(info.kind).expect("a listed section has a range");
        assert!(range.end <= bytes.len(), "{info:?} out of bounds");
        let section = artifact.section(info.kind).expect("a listed section has bytes");
        assert_eq!(section.len() as u64, info.len);
        let _ = codec::decode::<Program>(section);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal(&mut resealed);
    check(&resealed);
    let _ = codec::decode::<Program>(data);
});
