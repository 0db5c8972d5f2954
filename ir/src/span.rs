//! Source positions.
//!
//! Positions are byte offsets stored as `u32` so that AST and IR nodes stay small; a
//! [`SourceMap`] turns them into the 1-based line and character column that users (and the
//! reference compiler) speak in.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Index of a file in a [`SourceMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` inside one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub const fn new(start: u32, end: u32) -> Self {
        Span { start, end }
    }

    /// The smallest span that covers both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }

    pub fn len(self) -> u32 {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// A span together with the file it belongs to: what diagnostics and the IR carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Location {
    pub file: FileId,
    pub span: Span,
}

impl Location {
    pub const fn new(file: FileId, span: Span) -> Self {
        Location { file, span }
    }
}

/// A 1-based line and a 1-based column counted in characters, as the reference compiler
/// reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LineCol {
    pub line: u32,
    pub column: u32,
}

/// One loaded source file.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// The path shown to users: relative to the project directory where possible
    /// (`main.cf`, `libs/mymod/model/_init.cf`), or a `<weft>/...` path for embedded files.
    pub name: String,
    /// The file's text. Invalid UTF-8 is replaced before it gets here (with a diagnostic).
    /// Empty while the text is released (see [`SourceFile::release_text`]).
    pub text: Arc<str>,
    line_starts: Vec<u32>,
    /// The file the text was read from, when it was read from one.
    pub origin: Option<std::path::PathBuf>,
    /// While the text is released: its length and digest, which a text read again must have.
    released: Option<(usize, u64)>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<Arc<str>>) -> Self {
        let text: Arc<str> = text.into();
        let line_starts = compute_line_starts(&text);
        SourceFile { name: name.into(), text, line_starts, origin: None, released: None }
    }

    /// The same file, noting the path its text was read from.
    pub fn with_origin(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.origin = Some(path.into());
        self
    }

    fn digest(text: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        // `DefaultHasher::new` is the same function in every instance, so a digest taken
        // before the text was released compares with one taken after it was read again.
        let mut hasher = std::hash::DefaultHasher::new();
        text.hash(&mut hasher);
        hasher.finish()
    }

    /// Lets go of the text of a file read from disk, keeping what tells whether a text read
    /// again later is the same. Line and column lookups need the text, so a map with released
    /// files must not be used for them until [`SourceFile::restore_text`] succeeded.
    pub fn release_text(&mut self) {
        if self.origin.is_some() && self.released.is_none() {
            self.released = Some((self.text.len(), Self::digest(&self.text)));
            self.text = Arc::from("");
        }
    }

    /// Whether the text is released and not restored.
    pub fn is_released(&self) -> bool {
        self.released.is_some()
    }

    /// Gives a released file its text back, if `text` is the text it had; returns whether the
    /// file has its text now.
    pub fn restore_text(&mut self, text: String) -> bool {
        match self.released {
            Some((len, digest)) if text.len() == len && Self::digest(&text) == digest => {
                self.text = Arc::from(text);
                self.released = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Byte offsets of the starts of lines.
    pub fn line_starts(&self) -> &[u32] {
        &self.line_starts
    }

    /// Line and character column of a byte offset. Offsets past the end clamp to the end.
    pub fn line_col(&self, offset: u32) -> LineCol {
        let offset = offset.min(self.text.len() as u32);
        let line_index = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let line_start = self.line_starts[line_index] as usize;
        let mut end = offset as usize;
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let column = self.text[line_start..end].chars().count() as u32 + 1;
        LineCol { line: line_index as u32 + 1, column }
    }

    /// The byte range of a 1-based line, without its line terminator.
    pub fn line_range(&self, line: u32) -> Option<std::ops::Range<usize>> {
        let index = line.checked_sub(1)? as usize;
        let start = *self.line_starts.get(index)? as usize;
        let mut end = self.line_starts.get(index + 1).map_or(self.text.len(), |&e| e as usize);
        let bytes = self.text.as_bytes();
        while end > start && matches!(bytes[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        Some(start..end)
    }

    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }
}

/// Line starts after `\n`, `\r\n` and a lone `\r`: the reference reads sources with Python's
/// universal newlines, so all three end a line.
///
/// The line ends are found with `memchr2`, many bytes at a time: a loop over every byte took
/// a tenth of `weft check`'s instructions on a 770 KB file.
fn compute_line_starts(text: &str) -> Vec<u32> {
    let bytes = text.as_bytes();
    let mut starts = Vec::with_capacity(bytes.len() / 32 + 1);
    starts.push(0);
    // The `\n` of a `\r\n` pair, which its `\r` already ended the line for.
    let mut skip = None;
    for i in memchr::memchr2_iter(b'\n', b'\r', bytes) {
        if skip == Some(i) {
            continue;
        }
        if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            skip = Some(i + 1);
            starts.push(i as u32 + 2);
        } else {
            starts.push(i as u32 + 1);
        }
    }
    starts
}

/// All source files of one compilation.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> Self {
        SourceMap::default()
    }

    pub fn add(&mut self, file: SourceFile) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(file);
        id
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files.iter().enumerate().map(|(i, f)| (FileId(i as u32), f))
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn line_col(&self, loc: Location) -> LineCol {
        self.get(loc.file).line_col(loc.span.start)
    }

    pub fn files_mut(&mut self) -> impl Iterator<Item = &mut SourceFile> {
        self.files.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A released text comes back only as the same text; a file without an origin keeps its
    /// text.
    #[test]
    fn released_texts_come_back_only_unchanged() {
        let mut file = SourceFile::new("main.cf", "a = 1\n").with_origin("/p/main.cf");
        file.release_text();
        assert!(file.is_released() && file.text.is_empty());
        assert!(!file.restore_text("a = 2\n".into()));
        assert!(!file.restore_text("a = 1\n\n".into()));
        assert!(file.is_released());
        assert!(file.restore_text("a = 1\n".into()));
        assert_eq!((&*file.text, file.is_released()), ("a = 1\n", false));
        let mut embedded = SourceFile::new("<weft>/std/_init.cf", "x = 1\n");
        embedded.release_text();
        assert_eq!((&*embedded.text, embedded.is_released()), ("x = 1\n", false));
    }

    #[test]
    fn line_col_counts_characters_and_all_newline_styles() {
        let f = SourceFile::new("t.cf", "a = 1\r\nbé = 2\rc\n");
        assert_eq!(f.line_col(0), LineCol { line: 1, column: 1 });
        assert_eq!(f.line_col(7), LineCol { line: 2, column: 1 });
        // "bé = 2": the '=' is the 4th character but the 5th byte.
        assert_eq!(f.line_col(7 + 4), LineCol { line: 2, column: 4 });
        assert_eq!(f.line_col(15), LineCol { line: 3, column: 1 });
        assert_eq!(f.line_range(2), Some(7..14));
    }

    /// The line starts `memchr2` finds are those of the obvious scan, byte by byte, for every
    /// mix of line ends (a `\r\n` pair is one end; a lone `\r` is one too).
    #[test]
    fn line_starts_match_a_byte_by_byte_scan() {
        fn scan(bytes: &[u8]) -> Vec<u32> {
            let mut starts = vec![0];
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                if bytes[i] == b'\n' || bytes[i] == b'\r' {
                    starts.push(i as u32 + 1);
                }
                i += 1;
            }
            starts
        }
        let pieces = ["", "a", "\n", "\r", "\r\n", "é", "\n\r", "\r\r\n", "bc"];
        // Every text of up to four pieces, and one long enough for the vectorised search.
        let mut texts = vec![pieces.concat().repeat(40)];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for d in pieces {
                        texts.push(format!("{a}{b}{c}{d}"));
                    }
                }
            }
        }
        for text in &texts {
            assert_eq!(compute_line_starts(text), scan(text.as_bytes()), "{text:?}");
        }
    }
}
