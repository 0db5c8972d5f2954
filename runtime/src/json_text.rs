//! JSON string literals written fast, byte for byte as `serde_json` writes them.
//!
//! The export writes every string of every resource (paths, file contents, ids and each id
//! again for every `requires` edge that names it) as a JSON string. `serde_json` escapes a
//! string one byte at a time through a table, some ten instructions per byte, which made
//! escaping the largest single cost of mapping a resource (about 1,900 instructions of its
//! 8,300 on the resources benchmark). Almost no byte of these strings needs escaping, so this
//! writer looks at eight bytes at a time for one that does and copies the clean runs whole.

/// Appends `text` as a JSON string literal: quoted, with `"`, `\` and the control characters
/// escaped exactly as `serde_json` escapes them (the short forms `\b \t \n \f \r`, `\u00XX`
/// with lowercase hex digits for the other controls), and every other byte as it is (DEL and
/// non-ASCII characters included).
pub(crate) fn write_json_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(offset) = first_to_escape(&bytes[start..]) {
        let at = start + offset;
        out.extend_from_slice(&bytes[start..at]);
        write_escape(out, bytes[at]);
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The position of the first byte of `bytes` that JSON needs escaped: a control character
/// (below 0x20), `"` or `\`.
#[inline]
fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of eight bytes"));
        // Each test sets the high bit of a byte that matches. Borrows only run towards the
        // more significant bytes, so the lowest flagged byte (the first, little-endian) is
        // always a true match, even where a higher one is a false positive.
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let flags =
            (below_space | (quote.wrapping_sub(ONES) & !quote) | (backslash.wrapping_sub(ONES) & !backslash)) & HIGHS;
        if flags != 0 {
            return Some(base + (flags.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks.remainder().iter().position(|&b| needs_escape(b)).map(|i| base + i)
}

#[inline]
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends the escape of one byte that [`needs_escape`].
#[cold]
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        b'\t' => out.extend_from_slice(b"\\t"),
        b'\n' => out.extend_from_slice(b"\\n"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\r' => out.extend_from_slice(b"\\r"),
        control => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(control >> 4)],
            HEX[usize::from(control & 0xf)],
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::write_json_str;

    /// Writes `text` with both writers and compares the bytes.
    fn check(text: &str) {
        let mut fast = Vec::new();
        write_json_str(&mut fast, text);
        let reference = serde_json::to_vec(text).expect("a string serializes");
        assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(&reference), "for {text:?}");
    }

    #[test]
    fn writes_what_serde_json_writes() {
        for text in [
            "",
            "plain",
            "exactly8",
            "sixteen bytes!!!",
            "\"",
            "\\",
            "a\"b\\c",
            "# managed by inmanta\n[web]\nhost=c0-web-3.c0.dc0.example.com\nindex=0\n",
            "tab\there, cr\r, ff\x0c, bs\x08, nul\0, unit sep\x1f, del\x7f",
            "ünïcödé, 日本語, emoji 🦀 and \u{2028}",
            "std::testing::NullResource[c0-db-0,name=file:/etc/app/conf.d/0-db.conf]",
        ] {
            check(text);
        }
    }

    /// Every byte value at every position of a chunk and of the tail, next to clean bytes,
    /// so that each lane of the eight-byte test and the remainder loop meet each class.
    #[test]
    fn every_ascii_byte_at_every_position() {
        for byte in 0u8..0x80 {
            for len in 1..=20 {
                for at in 0..len {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = byte;
                    // A second special byte later, to check that the search resumes.
                    if at + 2 < len {
                        bytes[at + 2] = b'"';
                    }
                    check(std::str::from_utf8(&bytes).expect("ASCII"));
                }
            }
        }
    }
}
