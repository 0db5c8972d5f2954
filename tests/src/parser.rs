//! Helpers for the parser suites: parsing a file on its own, rendering diagnostics as snapshot
//! text, and stating a parse result in the reference parser's terms so that it can be compared
//! with what `tools/parser-oracle.py` recorded.

use std::fmt::Write as _;

use weft_frontend::dump::dump_file;
use weft_ir::diagnostic::codes;
use weft_ir::{Diagnostic, FileId, Interner, SourceFile};

/// The file id every helper parses under: each input is parsed on its own.
const FILE: FileId = FileId(0);

/// Parses `src` and returns the AST dump together with the diagnostics.
pub fn parse_and_dump(src: &str) -> (String, Vec<Diagnostic>) {
    let arena = bumpalo::Bump::new();
    let mut interner = Interner::new();
    let output = weft_frontend::parse_file(&arena, src, FILE, &mut interner);
    (dump_file(&output.file, src, &interner), output.diagnostics)
}

/// Parses `src` and returns only the diagnostics.
pub fn parse_diagnostics(src: &str) -> Vec<Diagnostic> {
    let arena = bumpalo::Bump::new();
    let mut interner = Interner::new();
    weft_frontend::parse_file(&arena, src, FILE, &mut interner).diagnostics
}

/// Renders diagnostics for a snapshot: severity, code, kind and message on one line, then each
/// label with its `line:col` and each note.
pub fn render_diagnostics(src: &str, diagnostics: &[Diagnostic]) -> String {
    let source = SourceFile::new("<input>", src);
    let mut out = String::new();
    for d in diagnostics {
        let severity = if d.is_error() { "error" } else { "warning" };
        // Writing into a String cannot fail.
        let _ = writeln!(out, "{severity} {} {}: {}", d.code.0, d.kind, d.message);
        for label in &d.labels {
            let start = source.line_col(label.location.span.start);
            let end = source.line_col(label.location.span.end);
            let role = if label.primary { "primary" } else { "secondary" };
            let _ = writeln!(
                out,
                "  {role} {}:{}-{}:{}: {}",
                start.line, start.column, end.line, end.column, label.message
            );
        }
        for note in &d.notes {
            let kind = match note.kind {
                weft_ir::NoteKind::Note => "note",
                weft_ir::NoteKind::Help => "help",
            };
            let _ = writeln!(out, "  {kind}: {}", note.message);
        }
    }
    out
}

/// A parse result in the reference parser's terms: accepted, or rejected with the exception
/// kind and the line the reference reports (`None` when it reports no location).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefOutcome {
    Ok,
    Err { line: Option<u32>, kind: String },
}

impl std::fmt::Display for RefOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefOutcome::Ok => f.write_str("OK"),
            RefOutcome::Err { line: Some(line), kind } => write!(f, "ERR {line} {kind}"),
            RefOutcome::Err { line: None, kind } => write!(f, "ERR - {kind}"),
        }
    }
}

impl RefOutcome {
    /// Whether weft's outcome `weft` agrees with this outcome of the reference: both accept, or
    /// both reject with the same kind on the same line.
    ///
    /// A reference error without a location agrees with an error of the same kind anywhere. A
    /// raw Python exception that escaped the reference (such as `UnicodeDecodeError` for a bad
    /// `\x` escape) is a crash of the reference rather than a language error; weft reports its
    /// own kind there, so any weft error agrees with it.
    pub fn agrees_with(&self, weft: &RefOutcome) -> bool {
        match (self, weft) {
            (RefOutcome::Ok, RefOutcome::Ok) => true,
            (RefOutcome::Err { line: None, kind }, RefOutcome::Err { kind: weft_kind, .. }) => {
                kind == weft_kind || !is_compiler_error_kind(kind)
            }
            (RefOutcome::Err { line, kind }, RefOutcome::Err { line: weft_line, kind: weft_kind }) => {
                line == weft_line && kind == weft_kind
            }
            _ => false,
        }
    }

    /// Parses the verdict column of `tools/parser-oracle.py`: `OK` or `ERR <line|-> <kind>`.
    pub fn parse(text: &str) -> Option<RefOutcome> {
        let mut words = text.split_whitespace();
        match words.next()? {
            "OK" => Some(RefOutcome::Ok),
            "ERR" => {
                let line = match words.next()? {
                    "-" => None,
                    n => Some(n.parse().ok()?),
                };
                let kind = words.next()?.to_string();
                Some(RefOutcome::Err { line, kind })
            }
            _ => None,
        }
    }
}

/// Whether `kind` names one of the reference's compiler exceptions (weft's [`ErrorKind`]s) rather
/// than a raw Python exception.
///
/// [`ErrorKind`]: weft_ir::ErrorKind
fn is_compiler_error_kind(kind: &str) -> bool {
    weft_ir::ErrorKind::from_name(kind).is_some()
}

/// The line the reference reports for diagnostic `d`, which weft reports on `line`.
///
/// The reference appends a newline to every file before parsing and reports an unexpected end
/// of file on the line after the last one, whereas weft points at the end of the file itself;
/// the line is shifted by one for that diagnostic so that both speak about the same line.
pub fn reference_line(d: &Diagnostic, line: u32) -> u32 {
    if d.code == codes::UNEXPECTED_EOF { line + 1 } else { line }
}

/// What the reference would report for a file on which weft produced `diagnostics`: the first
/// error in source order decides, as the reference stops at its first error (its line as
/// [`reference_line`] gives it).
pub fn weft_outcome(src: &str, diagnostics: &[Diagnostic]) -> RefOutcome {
    let Some(first) = diagnostics.iter().find(|d| d.is_error()) else {
        return RefOutcome::Ok;
    };
    let source = SourceFile::new("<input>", src);
    let line = first.primary_location().map(|loc| reference_line(first, source.line_col(loc.span.start).line));
    RefOutcome::Err { line, kind: first.kind.as_str().to_string() }
}
