//! Rendering diagnostics: rustc-style with source excerpts for people, one JSON object per
//! line for tools.

use std::io::Write;

use annotate_snippets::renderer::DecorStyle;
use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};
use serde::Serialize;
use weft_ir::{Diagnostic, LineCol, NoteKind, Severity, SourceMap};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ErrorFormat {
    /// rustc-style messages with source excerpts.
    Human,
    /// One JSON object per diagnostic, one per line.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to color output written to stderr.
    pub fn for_stderr(self) -> bool {
        use std::io::IsTerminal;
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal(),
        }
    }
}

pub struct Emitter<'m> {
    pub format: ErrorFormat,
    pub color: bool,
    pub sources: Sources<'m>,
}

/// What locations are resolved against: the loaded sources, or the line tables an artifact
/// carries instead of them (no excerpts then, but the same file, line and column).
#[derive(Clone, Copy)]
pub enum Sources<'m> {
    Text(&'m SourceMap),
    Lines(&'m [weft_ir::program::FileInfo]),
}

impl Sources<'_> {
    /// The file's name as diagnostics show it, and a location's line and column.
    fn resolve(&self, location: weft_ir::Location) -> (&str, LineCol, LineCol) {
        match self {
            Sources::Text(map) => {
                let file = map.get(location.file);
                (&file.name, file.line_col(location.span.start), file.line_col(location.span.end))
            }
            Sources::Lines(files) => match files.get(location.file.0 as usize) {
                Some(file) => (
                    file.display.strip_prefix("./").unwrap_or(&file.display),
                    file.line_col(location.span.start),
                    file.line_col(location.span.end),
                ),
                None => ("<unknown>", LineCol { line: 0, column: 0 }, LineCol { line: 0, column: 0 }),
            },
        }
    }
}

/// The JSON form of a diagnostic.
#[derive(Serialize)]
struct JsonDiagnostic<'d> {
    severity: Severity,
    code: &'d str,
    kind: &'d str,
    message: &'d str,
    file: Option<&'d str>,
    line: Option<u32>,
    column: Option<u32>,
    end_line: Option<u32>,
    end_column: Option<u32>,
    labels: Vec<JsonLabel<'d>>,
    notes: Vec<JsonNote<'d>>,
}

#[derive(Serialize)]
struct JsonLabel<'d> {
    file: &'d str,
    line: u32,
    column: u32,
    end_line: u32,
    end_column: u32,
    message: &'d str,
    primary: bool,
}

#[derive(Serialize)]
struct JsonNote<'d> {
    kind: NoteKind,
    message: &'d str,
}

impl Emitter<'_> {
    pub fn emit_all(&self, diagnostics: &[Diagnostic], out: &mut dyn Write) -> std::io::Result<()> {
        for d in diagnostics {
            self.emit(d, out)?;
        }
        Ok(())
    }

    pub fn emit(&self, d: &Diagnostic, out: &mut dyn Write) -> std::io::Result<()> {
        match self.format {
            ErrorFormat::Json => {
                let json = self.to_json(d);
                serde_json::to_writer(&mut *out, &json).map_err(std::io::Error::other)?;
                writeln!(out)
            }
            ErrorFormat::Human => {
                let text = self.to_human(d);
                writeln!(out, "{text}\n")
            }
        }
    }

    fn to_json<'d>(&'d self, d: &'d Diagnostic) -> JsonDiagnostic<'d> {
        let labels: Vec<JsonLabel<'d>> = d
            .labels
            .iter()
            .map(|l| {
                let (file, start, end) = self.sources.resolve(l.location);
                JsonLabel {
                    file,
                    line: start.line,
                    column: start.column,
                    end_line: end.line,
                    end_column: end.column,
                    message: &l.message,
                    primary: l.primary,
                }
            })
            .collect();
        let primary = labels.iter().find(|l| l.primary).or(labels.first());
        JsonDiagnostic {
            severity: d.severity,
            code: d.code.0,
            kind: d.kind.as_str(),
            message: &d.message,
            file: primary.map(|l| l.file),
            line: primary.map(|l| l.line),
            column: primary.map(|l| l.column),
            end_line: primary.map(|l| l.end_line),
            end_column: primary.map(|l| l.end_column),
            notes: d.notes.iter().map(|n| JsonNote { kind: n.kind, message: &n.message }).collect(),
            labels,
        }
    }

    fn to_human(&self, d: &Diagnostic) -> String {
        let level = match d.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let title = d.message.lines().next().unwrap_or("");
        let rest: Vec<&str> = d.message.lines().skip(1).collect();
        let mut group = Group::with_title(level.primary_title(title).id(d.code.0));
        // One snippet per file, holding every label in that file, primary file first.
        let mut files: Vec<weft_ir::FileId> = Vec::new();
        for l in d.labels.iter().filter(|l| l.primary).chain(d.labels.iter().filter(|l| !l.primary)) {
            if !files.contains(&l.location.file) {
                files.push(l.location.file);
            }
        }
        for file_id in files {
            let map = match self.sources {
                Sources::Text(map) => map,
                // Without the text there is no excerpt: the location is added below, as
                // rustc's `-->` line.
                Sources::Lines(_) => continue,
            };
            let file = map.get(file_id);
            let text: &str = &file.text;
            let mut snippet = Snippet::source(text).path(&file.name).line_start(1);
            for l in d.labels.iter().filter(|l| l.location.file == file_id) {
                let start = (l.location.span.start as usize).min(text.len());
                let end = (l.location.span.end as usize).clamp(start, text.len());
                let kind = if l.primary { AnnotationKind::Primary } else { AnnotationKind::Context };
                snippet = snippet.annotation(kind.span(start..end).label(&l.message));
            }
            group = group.element(snippet);
        }
        if !rest.is_empty() {
            let rest: Vec<&str> = rest.iter().map(|l| l.trim_start()).collect();
            group = group.element(Level::NOTE.message(rest.join("\n")));
        }
        for n in &d.notes {
            let level = match n.kind {
                NoteKind::Note => Level::NOTE,
                NoteKind::Help => Level::HELP,
            };
            group = group.element(level.message(&n.message));
        }
        let renderer = if self.color { Renderer::styled() } else { Renderer::plain() };
        let rendered = renderer.decor_style(DecorStyle::Ascii).render(&[group]);
        if !matches!(self.sources, Sources::Lines(_)) || d.labels.is_empty() {
            return rendered;
        }
        let (title, rest) = rendered.split_once('\n').unwrap_or((&rendered, ""));
        let mut out = title.to_string();
        for l in d.labels.iter().filter(|l| l.primary).chain(d.labels.iter().filter(|l| !l.primary)) {
            let (name, start, _) = self.sources.resolve(l.location);
            out.push_str(&format!("\n --> {name}:{}:{}", start.line, start.column));
            if !l.message.is_empty() {
                out.push_str(&format!(" ({})", l.message));
            }
        }
        if !rest.is_empty() {
            out.push('\n');
            out.push_str(rest);
        }
        out
    }
}
