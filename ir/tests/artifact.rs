//! Property tests of the artifact container through its public API: whatever the bytes, parsing
//! never panics, and whatever it accepts is safe to use; whatever the builder writes, parsing
//! gives back.
//!
//! Three generators: arbitrary bytes (which mostly stop at the magic), arbitrary bytes behind a
//! valid header prefix with the length and checksum fixed up (which reach the section table), and
//! random overwrites of a real artifact, resealed (which reach the sections and the codec). The
//! unit tests in `artifact/mod.rs` name each check's error; these look for panics and for
//! accepted artifacts that break the promises `Artifact` makes. The `artifact` cargo-fuzz target
//! explores the same properties for as long as one lets it run.

use proptest::prelude::*;
use weft_ir::artifact::{Artifact, ArtifactBuilder, HEADER_LEN, SECTION_ALIGN, SectionKind, codec, reseal};
use weft_ir::program::Program;

/// What every successfully parsed artifact must satisfy, and the codec must survive.
fn check_accepted(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(artifact) = Artifact::parse(bytes) else { return Ok(()) };
    prop_assert_eq!(artifact.header().total_len, bytes.len() as u64);
    let mut seen = Vec::new();
    for info in artifact.sections() {
        prop_assert!(!seen.contains(&info.kind), "{:?} twice", info.kind);
        seen.push(info.kind);
        prop_assert_eq!(info.offset % SECTION_ALIGN as u64, 0);
        prop_assert!(info.offset.checked_add(info.len).is_some_and(|end| end <= bytes.len() as u64));
        let range = artifact.section_range(info.kind).expect("a listed section has a range");
        prop_assert_eq!(artifact.section(info.kind), bytes.get(range));
        // Decoding garbage must fail cleanly, never panic or exhaust memory.
        let _ = codec::decode::<Program>(artifact.section(info.kind).unwrap_or_default());
    }
    Ok(())
}

/// The first bytes of a valid artifact: magic, version, flags and target as this host writes them.
fn valid_header() -> Vec<u8> {
    ArtifactBuilder::new("0.1.0").finish()[..HEADER_LEN].to_vec()
}

/// A small artifact with every kind of section.
fn sample() -> Vec<u8> {
    ArtifactBuilder::new("0.1.0")
        .section(SectionKind::Metadata, codec::encode(&(vec!["a", "b"], 7u64)))
        .section(SectionKind::Code, (0..40).collect())
        .section(SectionKind::Files, Vec::new())
        .section(SectionKind::Native, vec![0xc3; 5])
        .finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_accepted(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_behind_a_header(
        count in 0u32..6,
        table in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut bytes = valid_header();
        bytes[16..20].copy_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&table);
        reseal(&mut bytes);
        check_accepted(&bytes)?;
    }

    #[test]
    fn resealed_overwrites(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = sample();
        for (at, value) in edits {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        reseal(&mut bytes);
        check_accepted(&bytes)?;
    }

    #[test]
    fn builder_round_trip(
        sections in proptest::collection::btree_map(0usize..4, proptest::collection::vec(any::<u8>(), 0..70), 0..=4),
        flags in any::<u32>(),
    ) {
        let mut builder = ArtifactBuilder::new("2.0.0");
        builder.flags(flags);
        for (kind, bytes) in &sections {
            builder.section(SectionKind::ALL[*kind], bytes.clone());
        }
        let bytes = builder.finish();
        let artifact = Artifact::parse(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(artifact.header().flags, flags);
        prop_assert_eq!(artifact.header().weft_version.as_str(), "2.0.0");
        for (i, kind) in SectionKind::ALL.into_iter().enumerate() {
            prop_assert_eq!(artifact.section(kind), sections.get(&i).map(Vec::as_slice));
        }
    }
}
