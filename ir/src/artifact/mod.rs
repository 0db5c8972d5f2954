//! The artifact container: the file (`model.weft`) that `weft build` writes once and hosts load
//! many times.
//!
//! An artifact is a fixed-size header, a table of sections, and the sections' bytes. The
//! container knows nothing about what the sections hold: the metadata section is encoded with
//! [`codec`], the code section is raw bytecode that the VM reads in place, and so on; the crates
//! that produce and consume them own their formats. What the container guarantees is that a
//! section handed out by [`Artifact::section`] comes from an intact file that this build of weft
//! can read, on the machine it was built for, and that it lies inside the file at an offset
//! aligned to [`SECTION_ALIGN`] bytes, so that consumers may view it as a slice of wider values.
//!
//! # Layout
//!
//! All integers are little-endian, whatever the target, so that a file can be inspected (and its
//! target reported) on any machine.
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 8 | [`MAGIC`] |
//! | 8 | 4 | format version ([`FORMAT_VERSION`]) |
//! | 12 | 4 | flags (the producer's; the container does not interpret them) |
//! | 16 | 4 | section count |
//! | 20 | 4 | reserved, zero |
//! | 24 | 8 | total file length in bytes |
//! | 32 | 8 | checksum: xxh3-64 of the whole file with these 8 bytes read as zero |
//! | 40 | 24 | weft version that wrote the file, UTF-8, NUL-padded |
//! | 64 | 32 | target (`x86_64-linux-le`: architecture, OS, byte order), ASCII, NUL-padded |
//! | 96 | 24 × count | section table: per section `kind u32, flags u32, offset u64, length u64` |
//! | | | section data, each section at an offset that is a multiple of 16, zero padding between |
//!
//! The numeric fields come first and are naturally aligned; the header is 96 bytes, a multiple of
//! 16, so that the table and the first section need no odd padding. The builder also pads the end
//! of the file to a multiple of 16, so that an empty last section still has an in-bounds offset.
//!
//! Section kinds are [`SectionKind`]'s numbers (metadata 1, code 2, files 3, native 4). A section
//! whose flags have [`SECTION_OPTIONAL`] set may be skipped by a reader that does not know its
//! kind: that is how a later weft can add a section that older readers can ignore without a new
//! format version. A section of unknown kind without that flag is an error, as is any other flag
//! bit, because a reader cannot know what an unknown flag would have asked of it.
//!
//! # Checks
//!
//! [`Artifact::parse`] checks, in this order, and stops at the first failure: that the file
//! starts with the magic (as far as it is long), that it is long enough for a header, the format
//! version, the target, the total length, the checksum, the reserved fields, and then the section
//! table. The order is chosen so that the message names the most useful cause: a file of another
//! format is reported as such and not as corrupted, an artifact of another version or target is
//! reported as such even though this weft cannot (or may not) check the rest of it, and a
//! truncated download is reported as truncated rather than as a checksum mismatch. The weft
//! version is not checked: whether an artifact written by another weft release may run is the
//! caller's policy, and the caller reads it from [`Header::weft_version`].
//!
//! Parsing never panics, never indexes out of bounds and never allocates in proportion to a
//! length field before that field has been checked against the length of the file.

use std::fmt;
use std::ops::Range;

use xxhash_rust::xxh3::Xxh3Default;

pub mod codec;

/// The first 8 bytes of every artifact.
///
/// Modelled on PNG's signature: the high-bit first byte catches transfers that strip the eighth
/// bit and makes text tools treat the file as binary, `WEFT` names the format to a human with a
/// hex dump, and the `\r\n` and the lone `\n` catch text-mode transfers, which convert line
/// endings in one direction or the other.
pub const MAGIC: [u8; 8] = *b"\x89WEFT\r\n\n";

/// The version of the container and section layout this weft writes and reads, and of the
/// encoding of what the sections hold. A reader accepts exactly its own version: an artifact is
/// cheap to rebuild, and a reader that guessed at an unknown layout could run garbage.
///
/// Version 2: a `null` carries its identity (`NullId`). Version 3: a typedef's constraint
/// carries its text for messages. Version 4: a string or dict constant that several places
/// share is written once (`codec::sharing`). Version 5: the files section carries the plugin
/// packages of modules on the module path that the model does not load.
pub const FORMAT_VERSION: u32 = 5;

/// The length of the fixed header, which the section table follows.
pub const HEADER_LEN: usize = 96;

/// The length of one section table entry.
pub const SECTION_ENTRY_LEN: usize = 24;

/// Every section starts at a multiple of this many bytes from the start of the file, so that a
/// consumer can view a section of a suitably aligned buffer as a slice of values up to 16 bytes
/// wide without copying it.
pub const SECTION_ALIGN: usize = 16;

/// Section flag: a reader that does not know the section's kind may skip the section instead of
/// rejecting the artifact.
pub const SECTION_OPTIONAL: u32 = 1;

/// Section flags this weft understands.
const KNOWN_SECTION_FLAGS: u32 = SECTION_OPTIONAL;

/// Field offsets in the header; see the module documentation for the table.
const CHECKSUM_AT: usize = 32;
const TOTAL_LEN_AT: usize = 24;
const WEFT_VERSION_LEN: usize = 24;
const TARGET_LEN: usize = 32;

/// The maximum length of a weft version string in the header.
pub const MAX_WEFT_VERSION_LEN: usize = WEFT_VERSION_LEN;

// The host target must fit its field; this fails to compile on a target whose names are too long,
// instead of writing artifacts that no host could match.
const _: () = assert!(std::env::consts::ARCH.len() + std::env::consts::OS.len() + 4 <= TARGET_LEN);

/// What a section holds. The numbers are the on-disk kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SectionKind {
    /// The program's tables, encoded with [`codec`].
    Metadata = 1,
    /// Raw bytecode, read in place.
    Code = 2,
    /// The module files the program needs at run time.
    Files = 3,
    /// Native code generated by Cranelift; may be absent, in which case the bytecode runs.
    Native = 4,
}

impl SectionKind {
    /// Every kind, in on-disk order.
    pub const ALL: [SectionKind; 4] =
        [SectionKind::Metadata, SectionKind::Code, SectionKind::Files, SectionKind::Native];

    /// The number that stands for this kind in the section table.
    pub const fn to_u32(self) -> u32 {
        self as u32
    }

    /// The kind a section table number stands for, if this weft knows it.
    pub const fn from_u32(kind: u32) -> Option<SectionKind> {
        match kind {
            1 => Some(SectionKind::Metadata),
            2 => Some(SectionKind::Code),
            3 => Some(SectionKind::Files),
            4 => Some(SectionKind::Native),
            _ => None,
        }
    }

    /// A lower-case name for messages and `weft inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            SectionKind::Metadata => "metadata",
            SectionKind::Code => "code",
            SectionKind::Files => "files",
            SectionKind::Native => "native",
        }
    }
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A section kind as found in a table, known or not, for messages.
struct KindLabel(u32);

impl fmt::Display for KindLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match SectionKind::from_u32(self.0) {
            Some(kind) => f.write_str(kind.name()),
            None => write!(f, "kind {}", self.0),
        }
    }
}

/// The machine an artifact runs on: architecture, operating system and byte order.
///
/// Bytecode is read in place as native-endian values and native code is machine code, so an
/// artifact only runs where it was built. The C library and ABI variant are not part of it: the
/// artifact calls the host only through the interface weft itself provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    arch: &'static str,
    os: &'static str,
    little_endian: bool,
}

impl Target {
    /// The machine this weft was compiled for.
    pub fn host() -> Target {
        Target { arch: std::env::consts::ARCH, os: std::env::consts::OS, little_endian: cfg!(target_endian = "little") }
    }

    /// The architecture, as `std::env::consts::ARCH` names it (`x86_64`, `aarch64`).
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The operating system, as `std::env::consts::OS` names it (`linux`, `macos`).
    pub fn os(&self) -> &'static str {
        self.os
    }

    pub fn is_little_endian(&self) -> bool {
        self.little_endian
    }

    /// The NUL-padded header field for this target.
    fn field(&self) -> [u8; TARGET_LEN] {
        let mut field = [0; TARGET_LEN];
        // The compile-time assertion above guarantees the name fits; `zip` would truncate rather
        // than panic if it did not.
        for (slot, byte) in field.iter_mut().zip(self.to_string().bytes()) {
            *slot = byte;
        }
        field
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.arch, self.os, if self.little_endian { "le" } else { "be" })
    }
}

/// Assembles an artifact from its sections.
#[derive(Clone, Debug)]
pub struct ArtifactBuilder {
    weft_version: String,
    flags: u32,
    /// Kind number, section flags and bytes, in the order they will be written.
    sections: Vec<(u32, u32, Vec<u8>)>,
}

impl ArtifactBuilder {
    /// Starts an artifact written by the given weft version (normally
    /// `env!("CARGO_PKG_VERSION")` of the producing crate).
    ///
    /// # Panics
    ///
    /// If `weft_version` is longer than [`MAX_WEFT_VERSION_LEN`] bytes or contains a NUL byte: the
    /// header field could not hold it, and the version is a constant of the producing program.
    pub fn new(weft_version: &str) -> Self {
        assert!(
            weft_version.len() <= WEFT_VERSION_LEN && !weft_version.contains('\0'),
            "weft version {weft_version:?} does not fit the artifact header ({WEFT_VERSION_LEN} bytes, no NUL)"
        );
        ArtifactBuilder { weft_version: weft_version.to_owned(), flags: 0, sections: Vec::new() }
    }

    /// Sets the header flags. They belong to the producer and consumer of the sections; the
    /// container stores them and does not interpret them.
    pub fn flags(&mut self, flags: u32) -> &mut Self {
        self.flags = flags;
        self
    }

    /// Adds a section. Sections are written in the order they are added; an empty section is
    /// allowed and is present (as opposed to a section never added, which is absent).
    ///
    /// # Panics
    ///
    /// If a section of this kind was already added: an artifact holds each kind at most once,
    /// and adding one twice is a bug in the producer.
    pub fn section(&mut self, kind: SectionKind, bytes: Vec<u8>) -> &mut Self {
        self.raw_section(kind.to_u32(), 0, bytes)
    }

    /// Adds a section by kind number and flags, for tests of sections this weft does not know.
    fn raw_section(&mut self, kind: u32, flags: u32, bytes: Vec<u8>) -> &mut Self {
        assert!(self.sections.iter().all(|(k, _, _)| *k != kind), "artifact section {} added twice", KindLabel(kind));
        self.sections.push((kind, flags, bytes));
        self
    }

    /// Lays out and returns the artifact's bytes, checksum included.
    ///
    /// The output depends only on the builder's contents, so that builds are reproducible.
    pub fn finish(&self) -> Vec<u8> {
        let table_end = HEADER_LEN + self.sections.len() * SECTION_ENTRY_LEN;
        let mut offsets = Vec::with_capacity(self.sections.len());
        let mut end = align_up(table_end);
        for (_, _, bytes) in &self.sections {
            offsets.push(end);
            end = align_up(end + bytes.len());
        }
        let total_len = end;

        let mut out = Vec::with_capacity(total_len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(total_len as u64).to_le_bytes());
        // The checksum, filled in by `reseal` once everything else is in place.
        out.extend_from_slice(&0u64.to_le_bytes());
        let mut version = [0; WEFT_VERSION_LEN];
        for (slot, byte) in version.iter_mut().zip(self.weft_version.bytes()) {
            *slot = byte;
        }
        out.extend_from_slice(&version);
        out.extend_from_slice(&Target::host().field());
        debug_assert_eq!(out.len(), HEADER_LEN);

        for ((kind, flags, bytes), offset) in self.sections.iter().zip(&offsets) {
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&flags.to_le_bytes());
            out.extend_from_slice(&(*offset as u64).to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
        for ((_, _, bytes), &offset) in self.sections.iter().zip(&offsets) {
            out.resize(offset, 0);
            out.extend_from_slice(bytes);
        }
        out.resize(total_len, 0);

        reseal(&mut out);
        out
    }
}

/// Rounds `n` up to a multiple of [`SECTION_ALIGN`].
fn align_up(n: usize) -> usize {
    n.next_multiple_of(SECTION_ALIGN)
}

/// Rewrites the header's total-length and checksum fields so that they match `bytes`, exactly as
/// [`ArtifactBuilder::finish`] writes them. Does nothing if `bytes` is shorter than a header.
///
/// This is a testing aid: fuzzers and tests use it to get a modified artifact past the length and
/// checksum checks, so that they exercise the checks and decoders behind them. Nothing that loads
/// artifacts should call it, since it defeats the corruption check.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_LEN {
        return;
    }
    let total_len = bytes.len() as u64;
    if let Some(field) = bytes.get_mut(TOTAL_LEN_AT..TOTAL_LEN_AT + 8) {
        field.copy_from_slice(&total_len.to_le_bytes());
    }
    let sum = checksum(bytes);
    if let Some(field) = bytes.get_mut(CHECKSUM_AT..CHECKSUM_AT + 8) {
        field.copy_from_slice(&sum.to_le_bytes());
    }
}

/// The xxh3-64 hash of `bytes` with the checksum field read as zeros (the whole of `bytes` if it
/// is too short to have the field). Hashing the pieces around the field avoids copying the file.
fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = Xxh3Default::new();
    match (bytes.get(..CHECKSUM_AT), bytes.get(CHECKSUM_AT + 8..)) {
        (Some(before), Some(after)) => {
            hasher.update(before);
            hasher.update(&[0; 8]);
            hasher.update(after);
        }
        _ => hasher.update(bytes),
    }
    hasher.digest()
}

/// The header of a parsed artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub format_version: u32,
    /// The producer's flags, uninterpreted.
    pub flags: u32,
    /// The version of weft that wrote the artifact. [`Artifact::parse`] does not compare it with
    /// anything; the caller decides which versions it accepts.
    pub weft_version: String,
    /// The target the artifact was built for; after a successful parse, always the host's.
    pub target: String,
    /// The length of the file, which a successful parse has checked.
    pub total_len: u64,
    /// The stored checksum, which a successful parse has checked.
    pub checksum: u64,
}

/// Where a section lies in the file. A successful parse guarantees `offset` is a multiple of
/// [`SECTION_ALIGN`] and `offset + len` is within the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    pub kind: SectionKind,
    pub flags: u32,
    pub offset: u64,
    pub len: u64,
}

/// A checked artifact: a view of the file's bytes with its header and section table decoded.
#[derive(Clone)]
pub struct Artifact<'a> {
    bytes: &'a [u8],
    header: Header,
    /// The sections of known kinds, in table order. Optional sections of unknown kinds were
    /// checked like the others and then left out.
    sections: Vec<SectionInfo>,
}

impl fmt::Debug for Artifact<'_> {
    // Not derived: the derived form would print every byte of the file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Artifact").field("header", &self.header).field("sections", &self.sections).finish()
    }
}

/// Reads little-endian fields front to back. Every read is checked, so a short input yields
/// `None` rather than a panic, without any index arithmetic at the call sites.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn bytes<const N: usize>(&mut self) -> Option<&'a [u8; N]> {
        let (first, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(first)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes().map(|b| u32::from_le_bytes(*b))
    }

    fn u64(&mut self) -> Option<u64> {
        self.bytes().map(|b| u64::from_le_bytes(*b))
    }
}

/// The header fields as stored, before any check.
struct RawHeader<'a> {
    magic: &'a [u8; 8],
    format_version: u32,
    flags: u32,
    section_count: u32,
    reserved: u32,
    total_len: u64,
    checksum: u64,
    weft_version: &'a [u8; WEFT_VERSION_LEN],
    target: &'a [u8; TARGET_LEN],
}

impl<'a> RawHeader<'a> {
    fn read(bytes: &'a [u8]) -> Option<RawHeader<'a>> {
        let mut f = Fields(bytes);
        Some(RawHeader {
            magic: f.bytes()?,
            format_version: f.u32()?,
            flags: f.u32()?,
            section_count: f.u32()?,
            reserved: f.u32()?,
            total_len: f.u64()?,
            checksum: f.u64()?,
            weft_version: f.bytes()?,
            target: f.bytes()?,
        })
    }
}

/// The text of a NUL-padded field: the bytes before the first NUL, provided every byte after it
/// is NUL too and the text is UTF-8.
fn padded_str(field: &[u8]) -> Option<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let (text, padding) = field.split_at(end);
    if padding.iter().any(|&b| b != 0) {
        return None;
    }
    std::str::from_utf8(text).ok()
}

impl<'a> Artifact<'a> {
    /// Checks that `bytes` is an intact artifact this weft can load on this host, and returns a
    /// view of it. See the module documentation for the checks and their order.
    ///
    /// Never panics, whatever `bytes` holds. The cost is one pass of xxh3 over the file (the
    /// checksum) plus work proportional to the number of sections.
    pub fn parse(bytes: &'a [u8]) -> Result<Artifact<'a>, ArtifactError> {
        // Compare the magic on whatever prefix there is first, so that a short file of another
        // kind (a few bytes of text) is named as such rather than as a truncated artifact.
        let prefix = bytes.get(..MAGIC.len()).unwrap_or(bytes);
        if MAGIC.get(..prefix.len()) != Some(prefix) {
            return Err(ArtifactError::NotAnArtifact { start: prefix.to_vec(), looks_like: sniff(bytes) });
        }
        let raw = match RawHeader::read(bytes) {
            Some(raw) if bytes.len() >= HEADER_LEN => raw,
            _ => return Err(ArtifactError::TooShort { len: bytes.len() }),
        };
        debug_assert_eq!(raw.magic, &MAGIC);
        if raw.format_version != FORMAT_VERSION {
            return Err(ArtifactError::FormatVersion { found: raw.format_version });
        }
        let host = Target::host();
        if *raw.target != host.field() {
            return Err(ArtifactError::WrongTarget { artifact: printable(raw.target), host: host.to_string() });
        }
        let file_len = bytes.len() as u64;
        if raw.total_len > file_len {
            return Err(ArtifactError::Truncated { expected: raw.total_len, found: file_len });
        }
        if raw.total_len < file_len {
            return Err(ArtifactError::TrailingData { expected: raw.total_len, found: file_len });
        }
        let computed = checksum(bytes);
        if computed != raw.checksum {
            return Err(ArtifactError::ChecksumMismatch { expected: raw.checksum, computed });
        }
        if raw.reserved != 0 {
            return Err(ArtifactError::ReservedField { value: raw.reserved });
        }
        let Some(weft_version) = padded_str(raw.weft_version) else {
            return Err(ArtifactError::WeftVersionField { found: printable(raw.weft_version) });
        };
        let sections = parse_table(bytes, raw.section_count)?;
        let header = Header {
            format_version: raw.format_version,
            flags: raw.flags,
            weft_version: weft_version.to_owned(),
            target: host.to_string(),
            total_len: raw.total_len,
            checksum: raw.checksum,
        };
        Ok(Artifact { bytes, header, sections })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The sections of kinds this weft knows, in table order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.sections
    }

    /// The bytes of the section of this kind, or `None` if the artifact has no such section. The
    /// slice starts at a multiple of [`SECTION_ALIGN`] from the start of the file.
    pub fn section(&self, kind: SectionKind) -> Option<&'a [u8]> {
        self.bytes.get(self.section_range(kind)?)
    }

    /// Where the section of this kind lies in the file, for callers that keep their own handle on
    /// the bytes (a memory map) rather than this view's borrow.
    pub fn section_range(&self, kind: SectionKind) -> Option<Range<usize>> {
        let info = self.sections.iter().find(|s| s.kind == kind)?;
        let start = usize::try_from(info.offset).ok()?;
        let end = usize::try_from(info.offset.checked_add(info.len)?).ok()?;
        Some(start..end)
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Checks the section table and returns the sections of known kinds.
fn parse_table(bytes: &[u8], count: u32) -> Result<Vec<SectionInfo>, ArtifactError> {
    let file_len = bytes.len() as u64;
    // Bound the count by the room the file has for table entries before using it for anything.
    let room = (bytes.len().saturating_sub(HEADER_LEN) / SECTION_ENTRY_LEN) as u64;
    if u64::from(count) > room {
        return Err(ArtifactError::TooManySections { count, file_len, room });
    }
    let table_end = HEADER_LEN + count as usize * SECTION_ENTRY_LEN;
    let mut table = Fields(bytes.get(HEADER_LEN..table_end).unwrap_or_default());

    let mut known: Vec<(usize, SectionInfo)> = Vec::new();
    // (start, end, index, kind) of every entry, for the overlap check.
    let mut spans: Vec<(u64, u64, usize, u32)> = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        let (Some(kind), Some(flags), Some(offset), Some(len)) = (table.u32(), table.u32(), table.u64(), table.u64())
        else {
            // Unreachable: the count was bounded by the table's room above.
            return Err(ArtifactError::TooManySections { count, file_len, room });
        };
        if flags & !KNOWN_SECTION_FLAGS != 0 {
            return Err(ArtifactError::UnknownSectionFlags { index, kind, flags });
        }
        let known_kind = SectionKind::from_u32(kind);
        if known_kind.is_none() && flags & SECTION_OPTIONAL == 0 {
            return Err(ArtifactError::UnknownSection { index, kind });
        }
        if !offset.is_multiple_of(SECTION_ALIGN as u64) {
            return Err(ArtifactError::MisalignedSection { index, kind, offset });
        }
        if offset < table_end as u64 {
            return Err(ArtifactError::SectionInTable { index, kind, offset, table_end });
        }
        let end = match offset.checked_add(len) {
            Some(end) if end <= file_len => end,
            _ => {
                let end = u128::from(offset) + u128::from(len);
                return Err(ArtifactError::SectionOutOfBounds { index, kind, offset, end, file_len });
            }
        };
        if let Some(kind) = known_kind {
            if let Some((first, _)) = known.iter().find(|(_, s)| s.kind == kind) {
                return Err(ArtifactError::DuplicateSection { kind, first: *first, second: index });
            }
            known.push((index, SectionInfo { kind, flags, offset, len }));
        }
        spans.push((offset, end, index, kind));
    }

    // Sorted by start (then end), sections are disjoint when each ends before the next starts.
    // Empty sections overlap nothing at their own offset, but may not sit inside another one.
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let [(a_start, a_end, a_index, a_kind), (b_start, b_end, b_index, b_kind)] = *pair else { continue };
        if a_end > b_start {
            return Err(ArtifactError::OverlappingSections {
                first: (a_index, a_kind, a_start, a_end),
                second: (b_index, b_kind, b_start, b_end),
            });
        }
    }
    Ok(known.into_iter().map(|(_, info)| info).collect())
}

/// A printable rendering of a header text field, for messages: the text before the padding,
/// with anything unusual escaped.
fn printable(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let text = field.get(..end).unwrap_or(field);
    String::from_utf8_lossy(text).escape_debug().to_string()
}

/// Space-separated hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

/// A guess at what a file that is not an artifact is, from its first bytes; cheap and only for
/// the message.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    let signatures: &[(&[u8], &str)] = &[
        (b"\x7fELF", "an ELF binary"),
        (b"\x1f\x8b", "gzip data"),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x28\xb5\x2f\xfd", "zstd data"),
        (b"\xfd7zXZ\x00", "xz data"),
        (b"BZh", "bzip2 data"),
        // The magic after a text-mode transfer (CRLF to LF; LF to CRLF, sparing or not an
        // existing CRLF), a transfer that clears the high bits, or a round trip through text.
        (b"\x89WEFT\n", "a weft artifact whose line endings were converted (copy it in binary mode)"),
        (b"\x89WEFT\r\n\r", "a weft artifact whose line endings were converted (copy it in binary mode)"),
        (b"\x89WEFT\r\r", "a weft artifact whose line endings were converted (copy it in binary mode)"),
        (b"\x09WEFT", "a weft artifact that lost its high bits in a 7-bit transfer"),
        (b"\xef\xbf\xbdWEFT", "a weft artifact that was decoded as text and saved again"),
    ];
    if let Some((_, name)) = signatures.iter().find(|(sig, _)| bytes.starts_with(sig)) {
        return Some(name);
    }
    let head = bytes.get(..256).unwrap_or(bytes);
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A character cut off by the 256-byte window still counts as text.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(head.get(..e.valid_up_to())?).ok()?,
        Err(_) => return None,
    };
    if text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
        return None;
    }
    match text.trim_start().chars().next() {
        Some('{' | '[') => Some("JSON or other text"),
        _ => Some("text"),
    }
}

/// Why an artifact was rejected. Each check has its own variant, and every message is one line
/// that says what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    #[error(
        "not a weft artifact (the file starts with {}{}, expected {})",
        hex(.start),
        .looks_like.map(|s| format!(", which looks like {s}")).unwrap_or_default(),
        hex(&MAGIC)
    )]
    NotAnArtifact { start: Vec<u8>, looks_like: Option<&'static str> },

    #[error("truncated artifact: {len} bytes, a header needs {HEADER_LEN}")]
    TooShort { len: usize },

    #[error(
        "artifact format version {found}, this weft reads version {FORMAT_VERSION} (rebuild the artifact with this weft)"
    )]
    FormatVersion { found: u32 },

    #[error("artifact built for {artifact}, this host is {host}")]
    WrongTarget { artifact: String, host: String },

    #[error("truncated artifact: the header says {expected} bytes, the file has {found}")]
    Truncated { expected: u64, found: u64 },

    #[error("trailing data after the artifact: the header says {expected} bytes, the file has {found}")]
    TrailingData { expected: u64, found: u64 },

    #[error("artifact checksum mismatch (expected {expected:#018x}, computed {computed:#018x}): the file is corrupted")]
    ChecksumMismatch { expected: u64, computed: u64 },

    #[error("malformed artifact header: the reserved field holds {value:#x}, expected 0")]
    ReservedField { value: u32 },

    #[error("malformed artifact header: the weft version field \"{found}\" is not UTF-8 text padded with NUL bytes")]
    WeftVersionField { found: String },

    #[error(
        "malformed artifact section table: it lists {count} sections, a file of {file_len} bytes has room for at most {room}"
    )]
    TooManySections { count: u32, file_len: u64, room: u64 },

    #[error(
        "malformed artifact section table: section #{index} ({}) has unknown flags {flags:#x}, this weft knows {KNOWN_SECTION_FLAGS:#x} (optional)",
        KindLabel(*.kind)
    )]
    UnknownSectionFlags { index: usize, kind: u32, flags: u32 },

    #[error(
        "malformed artifact section table: section #{index} has unknown kind {kind} and is not marked optional (this weft knows kinds 1 to 4)"
    )]
    UnknownSection { index: usize, kind: u32 },

    #[error(
        "malformed artifact section table: section #{index} ({}) starts at offset {offset}, expected a multiple of {SECTION_ALIGN}",
        KindLabel(*.kind)
    )]
    MisalignedSection { index: usize, kind: u32, offset: u64 },

    #[error(
        "malformed artifact section table: section #{index} ({}) starts at offset {offset}, inside the header and section table, which end at {table_end}",
        KindLabel(*.kind)
    )]
    SectionInTable { index: usize, kind: u32, offset: u64, table_end: usize },

    #[error(
        "malformed artifact section table: section #{index} ({}) spans bytes {offset}..{end}, past the end of the file at {file_len}",
        KindLabel(*.kind)
    )]
    SectionOutOfBounds { index: usize, kind: u32, offset: u64, end: u128, file_len: u64 },

    #[error("malformed artifact section table: sections #{first} and #{second} are both {kind} sections, expected one")]
    DuplicateSection { kind: SectionKind, first: usize, second: usize },

    #[error(
        "malformed artifact section table: section #{} ({}, bytes {}..{}) overlaps section #{} ({}, bytes {}..{})",
        .first.0, KindLabel(.first.1), .first.2, .first.3, .second.0, KindLabel(.second.1), .second.2, .second.3
    )]
    OverlappingSections {
        /// Index, kind, start and end of the section that starts first.
        first: (usize, u32, u64, u64),
        second: (usize, u32, u64, u64),
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small artifact with a metadata, a code and an empty files section (no native one).
    /// Layout: table 96..168, metadata 176..186, code 192..229, files 240..240, total 240.
    fn sample() -> Vec<u8> {
        ArtifactBuilder::new("0.1.0")
            .flags(0x5)
            .section(SectionKind::Metadata, codec::encode(&("metadata", 42u32)))
            .section(SectionKind::Code, (0..37).collect())
            .section(SectionKind::Files, Vec::new())
            .finish()
    }

    /// `bytes` with `value` written at `at`.
    fn with(bytes: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        out[at..at + value.len()].copy_from_slice(value);
        out
    }

    /// `bytes` with its length and checksum fixed, so that later checks are reached.
    fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
        reseal(&mut bytes);
        bytes
    }

    /// The offset of field `field_at` (0 kind, 4 flags, 8 offset, 16 length) of table entry `i`.
    fn entry(i: usize, field_at: usize) -> usize {
        HEADER_LEN + i * SECTION_ENTRY_LEN + field_at
    }

    /// Parses each case and compares the error message with the expected one.
    fn check(cases: &[(&str, Vec<u8>, String)]) {
        for (name, bytes, expected) in cases {
            match Artifact::parse(bytes) {
                Ok(a) => panic!("{name}: parsed, expected `{expected}`: {a:?}"),
                Err(e) => {
                    let message = e.to_string();
                    assert_eq!(&message, expected, "{name}");
                    assert!(!message.contains('\n'), "{name}: message spans lines");
                }
            }
        }
    }

    #[test]
    fn round_trip() {
        let metadata = codec::encode(&vec!["a".to_string(), "b".to_string()]);
        // Header flags and the sections to add, in order.
        type Case = (u32, Vec<(SectionKind, Vec<u8>)>);
        let cases: Vec<Case> = vec![
            (0, vec![]),
            (1, vec![(SectionKind::Metadata, metadata.clone())]),
            (
                0xdead_beef,
                vec![
                    (SectionKind::Metadata, metadata.clone()),
                    (SectionKind::Code, (0..=255).collect()),
                    (SectionKind::Files, Vec::new()),
                    (SectionKind::Native, vec![0xcc; 17]),
                ],
            ),
            // Out of kind order, empty sections first, last and together.
            (
                7,
                vec![
                    (SectionKind::Files, Vec::new()),
                    (SectionKind::Native, Vec::new()),
                    (SectionKind::Code, vec![1; 16]),
                    (SectionKind::Metadata, Vec::new()),
                ],
            ),
        ];
        for (flags, sections) in cases {
            let mut builder = ArtifactBuilder::new("1.2.3-rc.1");
            builder.flags(flags);
            for (kind, bytes) in &sections {
                builder.section(*kind, bytes.clone());
            }
            let bytes = builder.finish();
            assert_eq!(bytes.len() % SECTION_ALIGN, 0);
            let artifact = Artifact::parse(&bytes).unwrap_or_else(|e| panic!("{sections:?}: {e}"));
            let header = artifact.header();
            assert_eq!(
                header,
                &Header {
                    format_version: FORMAT_VERSION,
                    flags,
                    weft_version: "1.2.3-rc.1".into(),
                    target: Target::host().to_string(),
                    total_len: bytes.len() as u64,
                    checksum: checksum(&bytes),
                }
            );
            let kinds: Vec<SectionKind> = artifact.sections().iter().map(|s| s.kind).collect();
            assert_eq!(kinds, sections.iter().map(|(k, _)| *k).collect::<Vec<_>>());
            for kind in SectionKind::ALL {
                let expected = sections.iter().find(|(k, _)| *k == kind).map(|(_, b)| b.as_slice());
                assert_eq!(artifact.section(kind), expected, "{kind}");
                if let Some(range) = artifact.section_range(kind) {
                    assert_eq!(range.start % SECTION_ALIGN, 0, "{kind}");
                    assert_eq!(bytes.get(range), expected, "{kind}");
                }
            }
            for info in artifact.sections() {
                assert_eq!(info.offset % SECTION_ALIGN as u64, 0);
                assert_eq!(info.flags, 0);
            }
            // The same builder always produces the same bytes.
            assert_eq!(builder.finish(), bytes);
        }
    }

    /// The layout documented in the module documentation, byte by byte.
    #[test]
    fn layout() {
        let bytes = sample();
        let artifact = Artifact::parse(&bytes).unwrap();
        assert_eq!(bytes.len(), 240);
        assert_eq!(&bytes[0..8], b"\x89WEFT\r\n\n");
        assert_eq!(bytes[8..12], FORMAT_VERSION.to_le_bytes());
        assert_eq!(bytes[12..16], 5u32.to_le_bytes());
        assert_eq!(bytes[16..20], 3u32.to_le_bytes());
        assert_eq!(bytes[20..24], [0; 4]);
        assert_eq!(bytes[24..32], 240u64.to_le_bytes());
        assert_eq!(bytes[32..40], artifact.header().checksum.to_le_bytes());
        assert_eq!(&bytes[40..64], b"0.1.0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        let target = Target::host().to_string();
        assert_eq!(&bytes[64..64 + target.len()], target.as_bytes());
        assert!(bytes[64 + target.len()..96].iter().all(|&b| b == 0));
        let table: Vec<(u32, u32, u64, u64)> = bytes[96..168]
            .chunks(24)
            .map(|e| {
                (
                    u32::from_le_bytes(e[0..4].try_into().unwrap()),
                    u32::from_le_bytes(e[4..8].try_into().unwrap()),
                    u64::from_le_bytes(e[8..16].try_into().unwrap()),
                    u64::from_le_bytes(e[16..24].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(table, [(1, 0, 176, 10), (2, 0, 192, 37), (3, 0, 240, 0)]);
        // Padding is zero.
        assert!(bytes[168..176].iter().chain(&bytes[186..192]).chain(&bytes[229..240]).all(|&b| b == 0));
        assert_eq!(checksum(&bytes), xxhash_rust::xxh3::xxh3_64(&with(&bytes, 32, &[0; 8])));
        assert_eq!(Target::host().field().len(), TARGET_LEN);
    }

    #[test]
    fn every_check_has_its_error() {
        let good = sample();
        let host = Target::host().to_string();
        let stored = u64::from_le_bytes(good[32..40].try_into().unwrap());
        let corrupted = with(&good, 200, &[0xff]);
        let mut foreign_target = [0u8; TARGET_LEN];
        foreign_target[..18].copy_from_slice(b"sparc64-solaris-be");
        let mut elf = b"\x7fELF\x02\x01\x01\x00".to_vec();
        elf.resize(200, 0);
        let magic = "89 57 45 46 54 0d 0a 0a";
        let table = "malformed artifact section table";
        let cases: Vec<(&str, Vec<u8>, String)> = vec![
            ("empty", vec![], format!("truncated artifact: 0 bytes, a header needs {HEADER_LEN}")),
            ("short", good[..50].to_vec(), format!("truncated artifact: 50 bytes, a header needs {HEADER_LEN}")),
            ("elf", elf, format!("not a weft artifact (the file starts with 7f 45 4c 46 02 01 01 00, which looks like an ELF binary, expected {magic})")),
            ("gzip", b"\x1f\x8b\x08\x00".to_vec(), format!("not a weft artifact (the file starts with 1f 8b 08 00, which looks like gzip data, expected {magic})")),
            ("text", b"hello".to_vec(), format!("not a weft artifact (the file starts with 68 65 6c 6c 6f, which looks like text, expected {magic})")),
            ("json", b" {\"a\": 1}\n".to_vec(), format!("not a weft artifact (the file starts with 20 7b 22 61 22 3a 20 31, which looks like JSON or other text, expected {magic})")),
            ("binary", vec![0, 1, 2, 0xff], format!("not a weft artifact (the file starts with 00 01 02 ff, expected {magic})")),
            ("crlf to lf", [&good[..5], &good[6..]].concat(), format!("not a weft artifact (the file starts with 89 57 45 46 54 0a 0a {FORMAT_VERSION:02x}, which looks like a weft artifact whose line endings were converted (copy it in binary mode), expected {magic})")),
            ("lf to crlf", [&good[..7], b"\r", &good[7..]].concat(), format!("not a weft artifact (the file starts with 89 57 45 46 54 0d 0a 0d, which looks like a weft artifact whose line endings were converted (copy it in binary mode), expected {magic})")),
            ("version", with(&good, 8, &7u32.to_le_bytes()), format!("artifact format version 7, this weft reads version {FORMAT_VERSION} (rebuild the artifact with this weft)")),
            ("target", with(&good, 64, &foreign_target), format!("artifact built for sparc64-solaris-be, this host is {host}")),
            ("truncated", good[..200].to_vec(), "truncated artifact: the header says 240 bytes, the file has 200".into()),
            ("trailing", [&good[..], &[0; 16]].concat(), "trailing data after the artifact: the header says 240 bytes, the file has 256".into()),
            ("checksum", corrupted.clone(), format!("artifact checksum mismatch (expected {stored:#018x}, computed {:#018x}): the file is corrupted", checksum(&corrupted))),
            ("reserved", resealed(with(&good, 20, &[1, 0, 0, 0])), "malformed artifact header: the reserved field holds 0x1, expected 0".into()),
            ("weft version padding", resealed(with(&good, 40, b"0.1\0x")), "malformed artifact header: the weft version field \"0.1\" is not UTF-8 text padded with NUL bytes".into()),
            ("weft version utf-8", resealed(with(&good, 40, b"0.\xff")), "malformed artifact header: the weft version field \"0.\u{fffd}.0\" is not UTF-8 text padded with NUL bytes".into()),
            ("section count", resealed(with(&good, 16, &1000u32.to_le_bytes())), format!("{table}: it lists 1000 sections, a file of 240 bytes has room for at most 6")),
            ("section count overflow", resealed(with(&good, 16, &u32::MAX.to_le_bytes())), format!("{table}: it lists 4294967295 sections, a file of 240 bytes has room for at most 6")),
            ("section flags", resealed(with(&good, entry(0, 4), &2u32.to_le_bytes())), format!("{table}: section #0 (metadata) has unknown flags 0x2, this weft knows 0x1 (optional)")),
            ("unknown kind", resealed(with(&good, entry(1, 0), &9u32.to_le_bytes())), format!("{table}: section #1 has unknown kind 9 and is not marked optional (this weft knows kinds 1 to 4)")),
            ("unknown optional kind with bad flags", resealed(with(&good, entry(1, 0), &[9, 0, 0, 0, 3, 0, 0, 0])), format!("{table}: section #1 (kind 9) has unknown flags 0x3, this weft knows 0x1 (optional)")),
            ("misaligned", resealed(with(&good, entry(0, 8), &177u64.to_le_bytes())), format!("{table}: section #0 (metadata) starts at offset 177, expected a multiple of 16")),
            ("in table", resealed(with(&good, entry(0, 8), &160u64.to_le_bytes())), format!("{table}: section #0 (metadata) starts at offset 160, inside the header and section table, which end at 168")),
            ("at zero", resealed(with(&good, entry(2, 8), &0u64.to_le_bytes())), format!("{table}: section #2 (files) starts at offset 0, inside the header and section table, which end at 168")),
            ("out of bounds", resealed(with(&good, entry(1, 16), &1000u64.to_le_bytes())), format!("{table}: section #1 (code) spans bytes 192..1192, past the end of the file at 240")),
            ("empty out of bounds", resealed(with(&good, entry(2, 8), &256u64.to_le_bytes())), format!("{table}: section #2 (files) spans bytes 256..256, past the end of the file at 240")),
            ("end overflows", resealed(with(&good, entry(1, 8), &[0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 100, 0, 0, 0, 0, 0, 0, 0])), format!("{table}: section #1 (code) spans bytes 18446744073709551600..18446744073709551700, past the end of the file at 240")),
            ("duplicate", resealed(with(&good, entry(2, 0), &1u32.to_le_bytes())), format!("{table}: sections #0 and #2 are both metadata sections, expected one")),
            ("overlap", resealed(with(&good, entry(1, 8), &176u64.to_le_bytes())), format!("{table}: section #0 (metadata, bytes 176..186) overlaps section #1 (code, bytes 176..213)")),
            ("empty inside another", resealed(with(&good, entry(2, 8), &208u64.to_le_bytes())), format!("{table}: section #1 (code, bytes 192..229) overlaps section #2 (files, bytes 208..208)")),
        ];
        check(&cases);
    }

    #[test]
    fn optional_sections_of_unknown_kinds_are_skipped() {
        let mut builder = ArtifactBuilder::new("9.9.9");
        builder.section(SectionKind::Metadata, vec![1, 2, 3]);
        builder.raw_section(77, SECTION_OPTIONAL, vec![4; 40]);
        builder.section(SectionKind::Code, vec![5; 3]);
        let bytes = builder.finish();
        let artifact = Artifact::parse(&bytes).unwrap();
        let kinds: Vec<SectionKind> = artifact.sections().iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [SectionKind::Metadata, SectionKind::Code]);
        assert_eq!(artifact.section(SectionKind::Code), Some(&[5u8; 3][..]));
        // Skipped, but still checked.
        let out_of_bounds = resealed(with(&bytes, entry(1, 16), &4000u64.to_le_bytes()));
        assert!(matches!(
            Artifact::parse(&out_of_bounds),
            Err(ArtifactError::SectionOutOfBounds { index: 1, kind: 77, .. })
        ));
        // A known kind marked optional is still read.
        let optional_code = resealed(with(&bytes, entry(2, 4), &SECTION_OPTIONAL.to_le_bytes()));
        let artifact = Artifact::parse(&optional_code).unwrap();
        assert_eq!(artifact.sections()[1].flags, SECTION_OPTIONAL);
    }

    #[test]
    fn every_truncation_is_rejected() {
        let good = sample();
        for len in 0..good.len() {
            let expected = if len < HEADER_LEN {
                ArtifactError::TooShort { len }
            } else {
                ArtifactError::Truncated { expected: good.len() as u64, found: len as u64 }
            };
            assert_eq!(Artifact::parse(&good[..len]).unwrap_err(), expected, "length {len}");
        }
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let good = sample();
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                assert!(Artifact::parse(&bad).is_err(), "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "artifact section code added twice")]
    fn builder_rejects_a_kind_twice() {
        ArtifactBuilder::new("0.1.0").section(SectionKind::Code, vec![]).section(SectionKind::Code, vec![]);
    }

    #[test]
    #[should_panic(expected = "does not fit the artifact header")]
    fn builder_rejects_a_long_version() {
        ArtifactBuilder::new("0.1.0-a-very-long-prerelease-tag");
    }

    #[test]
    fn names() {
        let names: Vec<String> = SectionKind::ALL.iter().map(|k| format!("{k}={}", k.to_u32())).collect();
        assert_eq!(names, ["metadata=1", "code=2", "files=3", "native=4"]);
        for kind in SectionKind::ALL {
            assert_eq!(SectionKind::from_u32(kind.to_u32()), Some(kind));
        }
        assert_eq!(SectionKind::from_u32(0), None);
        let host = Target::host();
        assert_eq!(
            host.to_string(),
            format!("{}-{}-{}", host.arch(), host.os(), if host.is_little_endian() { "le" } else { "be" })
        );
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        assert_eq!(host.to_string(), "x86_64-linux-le");
    }
}
