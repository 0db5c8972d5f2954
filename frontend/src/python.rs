//! Plugin signatures and dataclasses read out of a module's Python sources, without running
//! Python.
//!
//! Weft never imports a module's plugins, yet the frontend must know which plugins exist, what
//! they accept and which Python dataclasses back `std::Dataclass` entities. This module reads one
//! Python file as text and recovers exactly that.
//!
//! It does not parse Python. A tokenizer that follows Python's lexical rules closely enough to
//! stay in step with it (strings of every flavour including nested f-strings, comments,
//! brackets, backslash continuations) splits the file into logical lines with their indentation. Only logical lines
//! at column 0 are considered: decorators, `def` and `class` headers, and the module-level
//! bindings that an annotation may name (`Entity = Annotated[...]`, `type Entity = ...`). A decorated `class` also
//! has the statements of its body read, to find the annotated fields. Everything else (function
//! bodies, nested definitions, conditional blocks) is skipped by its indentation, so code the
//! extractor does not understand cannot disturb what it does.
//!
//! Text taken from the source (annotations, defaults) is normalised: tokens are rejoined with a
//! single space wherever the source had whitespace, comments or line continuations between
//! them, so `dict[str,\n    int]` becomes `dict[str, int]`. String literals are kept verbatim.
//!
//! Anything that looks relevant but does not have a recognised shape becomes a
//! [`PythonProblem`] and is skipped; extraction always continues with the rest of the file.

use weft_ir::plugin::{Deprecation, ParamKind, PluginParam, PluginSignature, PythonDataclass, TypeAnnotation};

use crate::strings::decode_unicode_escape;

/// Everything found in one Python file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonExtract {
    pub plugins: Vec<PluginSignature>,
    pub dataclasses: Vec<PythonDataclass>,
    /// Constructs that looked relevant but could not be understood, in source order.
    pub problems: Vec<PythonProblem>,
}

/// A construct the extractor skipped because it could not understand it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonProblem {
    /// 1-based line of the construct.
    pub line: u32,
    pub message: String,
}

/// Extracts the plugins and dataclasses defined at the top level of one Python file.
///
/// Never fails: whatever cannot be understood is skipped and reported in
/// [`PythonExtract::problems`], and the time taken grows linearly with the input.
///
/// `namespace` is the Inmanta namespace the file's definitions belong to (see
/// [`namespace_for`]); `file_label` is recorded as the `source_file` of everything found.
pub fn extract(source: &str, namespace: &str, file_label: &str) -> PythonExtract {
    // Python decodes source files as `utf-8-sig`: a byte order mark is not part of the text.
    // Removing it keeps the first line at column 0; it holds no newline, so lines keep their
    // numbers.
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut problems = Vec::new();
    let lines = tokenize(source, &mut problems);
    let mut extractor = Extractor {
        source,
        namespace,
        file_label,
        line_starts: line_starts(source),
        out: PythonExtract { problems, ..PythonExtract::default() },
        aliases: std::collections::HashMap::new(),
    };
    extractor.run(&lines);
    extractor.out.problems.sort_by_key(|problem| problem.line);
    extractor.out
}

/// The namespace of a plugin file, from its path relative to the module's Python package root
/// (the module's `plugins` directory, or `inmanta_plugins/<module>` for an installed module).
///
/// `__init__.py` belongs to the module itself, `sub.py` and `sub/__init__.py` to `module::sub`,
/// `a/b.py` to `module::a::b`. Files that are not `.py` files, and paths with a component that
/// is not a Python identifier (Python cannot import those as submodules), give `None`.
pub fn namespace_for(module: &str, relative_path: &str) -> Option<String> {
    let without_suffix = relative_path.strip_suffix(".py")?;
    let mut components: Vec<&str> =
        without_suffix.split('/').filter(|component| !component.is_empty() && *component != ".").collect();
    if components.last() == Some(&"__init__") {
        components.pop();
    }
    if !components.iter().all(|component| is_identifier(component)) {
        return None;
    }
    let mut namespace = module.to_string();
    for component in components {
        namespace.push_str("::");
        namespace.push_str(component);
    }
    Some(namespace)
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// The model types a Python annotation names with `ModelType["..."]`, in the order they are
/// written (`Annotated[Any, ModelType["mod::A"]]`, nested in `list[...]` or a union, or as
/// `plugins.ModelType[...]`): the reference resolves each one, as a string annotation, when it
/// loads the plugin. A subscript that is not one plain string literal is not a name.
pub fn model_type_names(annotation: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let tokens: Vec<Token> = tokenize(annotation, &mut problems).into_iter().flat_map(|line| line.tokens).collect();
    let mut names = Vec::new();
    for (at, token) in tokens.iter().enumerate() {
        if !is_name(Some(token), annotation, "ModelType") || !is_op(tokens.get(at + 1), annotation, "[") {
            continue;
        }
        let Some(close) = matching_close(&tokens, at + 1, annotation) else { continue };
        if let Some(Ok(name)) = string_value(&tokens[at + 2..close], annotation) {
            names.push(name);
        }
    }
    names
}

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenKind {
    Name,
    Number,
    String(StringToken),
    /// Operators and delimiters, including brackets and any stray character.
    Op,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StringToken {
    /// A `str` literal whose value is known without evaluation: no `b`, `f` or `t` prefix.
    plain_text: bool,
    raw: bool,
    /// Byte range of the text between the quotes.
    body_start: usize,
    body_end: usize,
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: TokenKind,
    start: usize,
    end: usize,
}

/// One logical line: the physical lines joined by open brackets or backslash continuations.
#[derive(Debug)]
struct LogicalLine {
    /// The indentation width of the line's first physical line, tabs counting to the next
    /// multiple of 8 as in Python.
    indent: u32,
    tokens: Vec<Token>,
}

/// Nested f-strings deeper than this are reported instead of followed, so hostile input cannot
/// exhaust the stack. Python itself rejects far shallower nesting in practice.
const MAX_STRING_NESTING: u32 = 64;

/// Operators longer than one character, longest first so the scan is greedy like Python's.
const LONG_OPERATORS: [&str; 23] = [
    "**=", "//=", ">>=", "<<=", "...", "->", "**", "//", ":=", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=",
    "/=", "%=", "&=", "|=", "^=",
];

/// A lexical error: where scanning stopped and why.
struct ScanError {
    stop: usize,
    message: &'static str,
}

struct Lexer<'s> {
    source: &'s str,
    bytes: &'s [u8],
}

fn tokenize(source: &str, problems: &mut Vec<PythonProblem>) -> Vec<LogicalLine> {
    let lexer = Lexer { source, bytes: source.as_bytes() };
    let starts = line_starts(source);
    let line_at = |offset: usize| line_of(&starts, offset);

    let mut lines = Vec::new();
    let mut current: Vec<Token> = Vec::new();
    // Open brackets with their byte offsets: a newline inside brackets does not end the line.
    let mut open_brackets: Vec<(u8, usize)> = Vec::new();
    let bytes = lexer.bytes;
    let mut pos = 0;
    while pos < bytes.len() {
        let byte = bytes[pos];
        match byte {
            b' ' | b'\t' | 0x0c => pos += 1,
            b'\n' | b'\r' => {
                pos += 1;
                if open_brackets.is_empty() && !current.is_empty() {
                    let indent = lexer.indent_at(current[0].start);
                    lines.push(LogicalLine { indent, tokens: std::mem::take(&mut current) });
                }
            }
            b'#' => pos = lexer.end_of_physical_line(pos),
            b'\\' => {
                let after = lexer.skip_newline(pos + 1);
                if after == pos + 1 {
                    problems.push(PythonProblem {
                        line: line_at(pos),
                        message: "a backslash outside a string must end the line".to_string(),
                    });
                }
                pos = after;
            }
            b'"' | b'\'' => {
                let (token, end) = lexer.scan_string(pos, pos, "", 0, &mut |error| {
                    problems.push(PythonProblem { line: line_at(error.stop), message: error.message.to_string() })
                });
                current.push(token);
                pos = end;
            }
            _ if is_name_start(byte) => {
                let end = lexer.name_end(pos);
                let word = source.get(pos..end).unwrap_or("");
                if is_string_prefix(word) && matches!(bytes.get(end), Some(b'"' | b'\'')) {
                    let (token, string_end) = lexer.scan_string(pos, end, word, 0, &mut |error| {
                        problems.push(PythonProblem { line: line_at(error.stop), message: error.message.to_string() })
                    });
                    current.push(token);
                    pos = string_end;
                } else {
                    current.push(Token { kind: TokenKind::Name, start: pos, end });
                    pos = end;
                }
            }
            _ if byte.is_ascii_digit() || (byte == b'.' && bytes.get(pos + 1).is_some_and(u8::is_ascii_digit)) => {
                let end = lexer.number_end(pos);
                current.push(Token { kind: TokenKind::Number, start: pos, end });
                pos = end;
            }
            _ => {
                let length = LONG_OPERATORS
                    .iter()
                    .find(|operator| bytes[pos..].starts_with(operator.as_bytes()))
                    .map_or(1, |operator| operator.len());
                match byte {
                    b'(' | b'[' | b'{' => open_brackets.push((byte, pos)),
                    b')' | b']' | b'}' => match open_brackets.pop() {
                        Some((open, _)) if closer_of(open) == byte => {}
                        Some((open, _)) => problems.push(PythonProblem {
                            line: line_at(pos),
                            message: format!(
                                "closing '{}' does not match opening '{}'",
                                char::from(byte),
                                char::from(open)
                            ),
                        }),
                        None => problems.push(PythonProblem {
                            line: line_at(pos),
                            message: format!("unmatched '{}'", char::from(byte)),
                        }),
                    },
                    _ => {}
                }
                current.push(Token { kind: TokenKind::Op, start: pos, end: pos + length });
                pos += length;
            }
        }
    }
    if let Some(&(open, offset)) = open_brackets.first() {
        problems
            .push(PythonProblem { line: line_at(offset), message: format!("'{}' is never closed", char::from(open)) });
    }
    if !current.is_empty() {
        let indent = lexer.indent_at(current[0].start);
        lines.push(LogicalLine { indent, tokens: current });
    }
    lines
}

fn closer_of(open: u8) -> u8 {
    match open {
        b'(' => b')',
        b'[' => b']',
        _ => b'}',
    }
}

/// Bytes of non-ASCII characters count as name characters: the tokenizer needs to keep them
/// together, not to validate identifiers.
fn is_name_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte >= 0x80
}

fn is_name_continue(byte: u8) -> bool {
    is_name_start(byte) || byte.is_ascii_digit()
}

/// The string prefixes Python accepts, in any case and order: `r`, `u`, `b`, `f`, `t` (3.14)
/// and the raw combinations of the last three.
fn is_string_prefix(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    matches!(lower.as_str(), "r" | "u" | "b" | "f" | "t" | "br" | "rb" | "fr" | "rf" | "tr" | "rt")
}

impl Lexer<'_> {
    fn name_end(&self, start: usize) -> usize {
        let mut end = start;
        while self.bytes.get(end).is_some_and(|&byte| is_name_continue(byte)) {
            end += 1;
        }
        end
    }

    /// Numbers only need to be kept in one piece; their value never matters here.
    fn number_end(&self, start: usize) -> usize {
        let is_hex = self.bytes.get(start) == Some(&b'0') && matches!(self.bytes.get(start + 1), Some(b'x' | b'X'));
        let mut end = start;
        while let Some(&byte) = self.bytes.get(end) {
            let exponent_sign = matches!(byte, b'+' | b'-')
                && !is_hex
                && end > start
                && matches!(self.bytes.get(end - 1), Some(b'e' | b'E'));
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'.' || exponent_sign {
                end += 1;
            } else {
                break;
            }
        }
        end
    }

    fn end_of_physical_line(&self, mut pos: usize) -> usize {
        while self.bytes.get(pos).is_some_and(|&byte| byte != b'\n' && byte != b'\r') {
            pos += 1;
        }
        pos
    }

    /// The position after a newline (`\n`, `\r\n` or `\r`) at `pos`, or `pos` itself when there is
    /// none.
    fn skip_newline(&self, pos: usize) -> usize {
        match self.bytes.get(pos) {
            Some(b'\r') if self.bytes.get(pos + 1) == Some(&b'\n') => pos + 2,
            Some(b'\n' | b'\r') => pos + 1,
            _ => pos,
        }
    }

    /// The position after a backslash escape starting at `pos`: the backslash and the character
    /// it protects, so that an escaped quote or newline never ends a string.
    fn skip_escape(&self, pos: usize) -> usize {
        let after_newline = self.skip_newline(pos + 1);
        if after_newline > pos + 1 { after_newline } else { (pos + 2).min(self.bytes.len()) }
    }

    fn indent_at(&self, offset: usize) -> u32 {
        let line_start =
            self.bytes[..offset].iter().rposition(|&byte| byte == b'\n' || byte == b'\r').map_or(0, |i| i + 1);
        let mut width: u32 = 0;
        for &byte in &self.bytes[line_start..offset] {
            width = match byte {
                b'\t' => (width / 8 + 1).saturating_mul(8),
                0x0c => 0,
                _ => width.saturating_add(1),
            };
        }
        width
    }

    /// Scans the string literal whose prefix starts at `start` and whose opening quote is at
    /// `quote_at`. Returns the token and the position after it; a lexical error is reported
    /// through `report` and the token then ends where scanning stopped.
    fn scan_string(
        &self,
        start: usize,
        quote_at: usize,
        prefix: &str,
        nesting: u32,
        report: &mut dyn FnMut(ScanError),
    ) -> (Token, usize) {
        let prefix = prefix.to_ascii_lowercase();
        let raw = prefix.contains('r');
        let interpolated = prefix.contains('f') || prefix.contains('t');
        let plain_text = !interpolated && !prefix.contains('b');
        let quote = self.bytes[quote_at];
        let triple = self.bytes.get(quote_at + 1) == Some(&quote) && self.bytes.get(quote_at + 2) == Some(&quote);
        let body_start = quote_at + if triple { 3 } else { 1 };
        let scanned = if interpolated {
            self.scan_interpolated_body(body_start, quote, triple, raw, nesting)
        } else {
            self.scan_plain_body(body_start, quote, triple)
        };
        let (end, body_end) = match scanned {
            Ok(end) => (end, end - if triple { 3 } else { 1 }),
            Err(error) => {
                let stop = error.stop;
                report(error);
                (stop, stop)
            }
        };
        let kind = TokenKind::String(StringToken { plain_text, raw, body_start, body_end: body_end.max(body_start) });
        (Token { kind, start, end }, end)
    }

    fn closes_string(&self, pos: usize, quote: u8, triple: bool) -> Option<usize> {
        if triple {
            self.bytes[pos..].starts_with(&[quote, quote, quote]).then_some(pos + 3)
        } else {
            (self.bytes.get(pos) == Some(&quote)).then_some(pos + 1)
        }
    }

    /// Scans to the end of a string without replacement fields. Returns the position after the
    /// closing quote(s).
    fn scan_plain_body(&self, mut pos: usize, quote: u8, triple: bool) -> Result<usize, ScanError> {
        loop {
            let Some(&byte) = self.bytes.get(pos) else {
                return Err(ScanError { stop: pos, message: "unterminated string literal" });
            };
            if byte == b'\\' {
                pos = self.skip_escape(pos);
            } else if let Some(end) = self.closes_string(pos, quote, triple) {
                return Ok(end);
            } else if !triple && (byte == b'\n' || byte == b'\r') {
                return Err(ScanError { stop: pos, message: "unterminated string literal" });
            } else {
                pos += 1;
            }
        }
    }

    /// Scans an f-string (or t-string) body. Replacement fields are followed properly because
    /// since Python 3.12 they may contain strings using the enclosing string's own quotes.
    fn scan_interpolated_body(
        &self,
        mut pos: usize,
        quote: u8,
        triple: bool,
        raw: bool,
        nesting: u32,
    ) -> Result<usize, ScanError> {
        loop {
            let Some(&byte) = self.bytes.get(pos) else {
                return Err(ScanError { stop: pos, message: "unterminated f-string" });
            };
            match byte {
                b'\\' => {
                    let next = self.bytes.get(pos + 1).copied();
                    if !raw && next == Some(b'N') && self.bytes.get(pos + 2) == Some(&b'{') {
                        // `\N{NAME}` is an escape, not a replacement field.
                        pos =
                            self.bytes[pos..].iter().position(|&b| b == b'}').map_or(self.bytes.len(), |i| pos + i + 1);
                    } else if matches!(next, Some(b'{' | b'}')) {
                        pos += 1;
                    } else {
                        pos = self.skip_escape(pos);
                    }
                }
                b'{' if self.bytes.get(pos + 1) == Some(&b'{') => pos += 2,
                b'{' => pos = self.scan_replacement_field(pos + 1, quote, triple, nesting)?,
                _ => {
                    if let Some(end) = self.closes_string(pos, quote, triple) {
                        return Ok(end);
                    }
                    if !triple && (byte == b'\n' || byte == b'\r') {
                        return Err(ScanError { stop: pos, message: "unterminated f-string" });
                    }
                    pos += 1;
                }
            }
        }
    }

    /// Scans a replacement field's expression, starting after its `{`. Returns the position after
    /// the field's closing `}`.
    fn scan_replacement_field(
        &self,
        mut pos: usize,
        quote: u8,
        triple: bool,
        nesting: u32,
    ) -> Result<usize, ScanError> {
        if nesting >= MAX_STRING_NESTING {
            return Err(ScanError { stop: pos, message: "f-strings are nested too deeply" });
        }
        let mut depth: u32 = 0;
        loop {
            let Some(&byte) = self.bytes.get(pos) else {
                return Err(ScanError { stop: pos, message: "unterminated f-string replacement field" });
            };
            match byte {
                b'#' => pos = self.end_of_physical_line(pos),
                b'"' | b'\'' => pos = self.scan_nested_string(pos, pos, "", nesting)?,
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    pos += 1;
                }
                b')' | b']' => {
                    depth = depth.saturating_sub(1);
                    pos += 1;
                }
                b'}' if depth == 0 => return Ok(pos + 1),
                b'}' => {
                    depth -= 1;
                    pos += 1;
                }
                b':' if depth == 0 => return self.scan_format_spec(pos + 1, quote, triple, nesting),
                b'\\' => pos = self.skip_escape(pos),
                _ if is_name_start(byte) => {
                    let end = self.name_end(pos);
                    let word = self.source.get(pos..end).unwrap_or("");
                    if is_string_prefix(word) && matches!(self.bytes.get(end), Some(b'"' | b'\'')) {
                        pos = self.scan_nested_string(pos, end, word, nesting)?;
                    } else {
                        pos = end;
                    }
                }
                _ => pos += 1,
            }
        }
    }

    /// Scans a format spec, starting after its `:`; it may hold nested replacement fields.
    /// Returns the position after the enclosing field's closing `}`.
    fn scan_format_spec(&self, mut pos: usize, quote: u8, triple: bool, nesting: u32) -> Result<usize, ScanError> {
        loop {
            let Some(&byte) = self.bytes.get(pos) else {
                return Err(ScanError { stop: pos, message: "unterminated f-string format spec" });
            };
            match byte {
                b'{' => pos = self.scan_replacement_field(pos + 1, quote, triple, nesting + 1)?,
                b'}' => return Ok(pos + 1),
                b'\\' => pos = self.skip_escape(pos),
                _ => {
                    if self.closes_string(pos, quote, triple).is_some() || (!triple && (byte == b'\n' || byte == b'\r'))
                    {
                        return Err(ScanError { stop: pos, message: "unterminated f-string format spec" });
                    }
                    pos += 1;
                }
            }
        }
    }

    fn scan_nested_string(
        &self,
        start: usize,
        quote_at: usize,
        prefix: &str,
        nesting: u32,
    ) -> Result<usize, ScanError> {
        let mut failure = None;
        let (_, end) = self.scan_string(start, quote_at, prefix, nesting + 1, &mut |error| failure = Some(error));
        match failure {
            Some(error) => Err(error),
            None => Ok(end),
        }
    }
}

/// Byte offsets where each line starts; `\n`, `\r\n` and a lone `\r` all end a line, as in
/// Python.
fn line_starts(source: &str) -> Vec<usize> {
    let bytes = source.as_bytes();
    let mut starts = vec![0];
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'\n' || (byte == b'\r' && bytes.get(i + 1) != Some(&b'\n')) {
            starts.push(i + 1);
        }
    }
    starts
}

fn line_of(starts: &[usize], offset: usize) -> u32 {
    u32::try_from(starts.partition_point(|&start| start <= offset)).unwrap_or(u32::MAX)
}

// ---------------------------------------------------------------------------------------------
// Token helpers
// ---------------------------------------------------------------------------------------------

fn opens(token: &Token, source: &str) -> bool {
    token.kind == TokenKind::Op && matches!(token_text(token, source), "(" | "[" | "{")
}

fn closes(token: &Token, source: &str) -> bool {
    token.kind == TokenKind::Op && matches!(token_text(token, source), ")" | "]" | "}")
}

fn token_text<'s>(token: &Token, source: &'s str) -> &'s str {
    source.get(token.start..token.end).unwrap_or("")
}

fn is_op(token: Option<&Token>, source: &str, op: &str) -> bool {
    token.is_some_and(|token| token.kind == TokenKind::Op && token_text(token, source) == op)
}

fn is_name(token: Option<&Token>, source: &str, name: &str) -> bool {
    token.is_some_and(|token| token.kind == TokenKind::Name && token_text(token, source) == name)
}

/// The tokens' source text, rejoined with one space wherever the source had anything between
/// two tokens (whitespace, a comment, a line continuation).
fn normalized_text(tokens: &[Token], source: &str) -> String {
    let mut text = String::new();
    let mut previous_end = None;
    for token in tokens {
        if previous_end.is_some_and(|end| token.start > end) {
            text.push(' ');
        }
        text.push_str(token_text(token, source));
        previous_end = Some(token.end);
    }
    text
}

/// The expression inside parentheses that enclose all of `tokens`, as Python's own syntax tree
/// sees it: `(A | B)` is the expression `A | B`, and `("string")` is a string annotation.
/// Parentheses that make a tuple or a generator, or that an assignment expression (`(x := 1)`)
/// needs, are kept.
fn without_enclosing_parens<'t>(mut tokens: &'t [Token], source: &str) -> &'t [Token] {
    // Each level costs a pass over the tokens, so the levels are bounded to keep hostile input
    // linear. Python's tokenizer itself refuses more than 200 nested brackets.
    for _ in 0..200 {
        if !(tokens.len() > 2
            && is_op(tokens.first(), source, "(")
            && matching_close(tokens, 0, source) == Some(tokens.len() - 1))
        {
            break;
        }
        let inside = &tokens[1..tokens.len() - 1];
        let mut depth = 0usize;
        let mut needed = is_name(inside.first(), source, "yield");
        for token in inside {
            if opens(token, source) {
                depth += 1;
            } else if closes(token, source) {
                depth = depth.saturating_sub(1);
            } else if depth == 0
                && (is_op(Some(token), source, ",")
                    || is_op(Some(token), source, ":=")
                    || is_name(Some(token), source, "for"))
            {
                needed = true;
            }
        }
        if needed {
            break;
        }
        tokens = inside;
    }
    tokens
}

/// The index of the bracket closing the one at `open`, if the tokens hold it.
fn matching_close(tokens: &[Token], open: usize, source: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if opens(token, source) {
            depth += 1;
        } else if closes(token, source) {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The index of the first `op` outside brackets (and outside a `lambda`'s parameters).
fn find_top_level(tokens: &[Token], op: &str, source: &str) -> Option<usize> {
    split_points(tokens, op, source).into_iter().next()
}

/// Splits tokens at every `separator` outside brackets. A `lambda`'s parameter list is treated
/// as bracketed, so `f=lambda a, b: a` stays in one piece.
fn split_top_level<'t>(tokens: &'t [Token], separator: &str, source: &str) -> Vec<&'t [Token]> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for point in split_points(tokens, separator, source) {
        pieces.push(&tokens[start..point]);
        start = point + 1;
    }
    pieces.push(&tokens[start..]);
    pieces
}

fn split_points(tokens: &[Token], separator: &str, source: &str) -> Vec<usize> {
    let mut points = Vec::new();
    let mut depth = 0usize;
    let mut open_lambdas = 0usize;
    for (i, token) in tokens.iter().enumerate() {
        if opens(token, source) {
            depth += 1;
        } else if closes(token, source) {
            depth = depth.saturating_sub(1);
        } else if depth == 0 {
            let text = token_text(token, source);
            if token.kind == TokenKind::Name && text == "lambda" {
                open_lambdas += 1;
            } else if token.kind == TokenKind::Op && text == ":" && open_lambdas > 0 {
                open_lambdas -= 1;
            } else if token.kind == TokenKind::Op && text == separator && open_lambdas == 0 {
                points.push(i);
            }
        }
    }
    points
}

/// The value of one or more adjacent plain string literals (Python concatenates them), or
/// `None` when the tokens are anything else.
fn string_value(tokens: &[Token], source: &str) -> Option<Result<String, &'static str>> {
    if tokens.is_empty() {
        return None;
    }
    let mut value = String::new();
    for token in tokens {
        let TokenKind::String(string) = token.kind else { return None };
        if !string.plain_text {
            return None;
        }
        let body = source.get(string.body_start..string.body_end).unwrap_or("");
        if string.raw || !body.contains('\\') {
            value.push_str(body);
        } else if decode_escapes(body, &mut value).is_err() {
            return Some(Err("the string literal has an invalid escape"));
        }
    }
    Some(Ok(value))
}

/// Decodes the escapes of a non-raw string literal's body onto `out`.
///
/// The `unicode_escape` codec agrees with Python's string literals on ASCII text and differs
/// only in reading other characters as Latin-1 bytes, so it is applied to the ASCII runs
/// between non-ASCII characters, which are copied as they are. Every escape is ASCII, except a
/// backslash before a non-ASCII character, which Python keeps verbatim like any unknown escape.
fn decode_escapes(body: &str, out: &mut String) -> Result<(), ()> {
    let mut run_start = 0;
    for (at, c) in body.char_indices().filter(|(_, c)| !c.is_ascii()).chain([(body.len(), ' ')]) {
        let run = body.get(run_start..at).unwrap_or("");
        let trailing_backslashes = run.bytes().rev().take_while(|&byte| byte == b'\\').count();
        let (escaped, lone_backslash) =
            if trailing_backslashes % 2 == 1 { (&run[..run.len() - 1], "\\") } else { (run, "") };
        out.push_str(&decode_unicode_escape(escaped).map_err(|_| ())?.value);
        out.push_str(lone_backslash);
        if at < body.len() {
            out.push(c);
        }
        run_start = at + c.len_utf8();
    }
    Ok(())
}

/// A dotted name (`a.b.c`) filling all of `tokens`, as its parts.
fn dotted_name<'s>(tokens: &[Token], source: &'s str) -> Option<Vec<&'s str>> {
    let mut parts = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if i % 2 == 0 {
            if token.kind != TokenKind::Name {
                return None;
            }
            parts.push(token_text(token, source));
        } else if !is_op(Some(token), source, ".") {
            return None;
        }
    }
    (tokens.len() % 2 == 1).then_some(parts)
}

// ---------------------------------------------------------------------------------------------
// Statements
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DecoratorRole {
    Plugin,
    Deprecated,
    Dataclass,
    Other,
}

struct Decorator<'t> {
    role: DecoratorRole,
    line: u32,
    /// The call's arguments, when the decorator is called: `@plugin("name")`.
    arguments: Option<Vec<Argument<'t>>>,
}

struct Argument<'t> {
    /// `Some` for `name=value`.
    keyword: Option<&'t str>,
    value: &'t [Token],
}

fn decorator_role(parts: &[&str]) -> DecoratorRole {
    match parts {
        ["plugin"] | ["plugins", "plugin"] | ["inmanta", "plugins", "plugin"] => DecoratorRole::Plugin,
        ["deprecated"] | ["plugins", "deprecated"] | ["inmanta", "plugins", "deprecated"] => DecoratorRole::Deprecated,
        ["dataclass"] | ["dataclasses", "dataclass"] => DecoratorRole::Dataclass,
        _ => DecoratorRole::Other,
    }
}

/// What the `@plugin` decorators on a function say.
struct PluginOptions {
    name: Option<String>,
    allow_unknown: bool,
    emits_statements: bool,
}

struct Extractor<'s> {
    source: &'s str,
    namespace: &'s str,
    file_label: &'s str,
    line_starts: Vec<usize>,
    out: PythonExtract,
    /// The module-level names bound to an expression so far (`Name = expr`, `type Name =
    /// expr`), by name: an annotation that is such a name is read as the expression, as Python
    /// evaluates it when the function is defined. A later binding replaces an earlier one.
    aliases: std::collections::HashMap<&'s str, &'s [Token]>,
}

/// How many aliases deep an annotation is followed (`A = B`, `B = "string"`): beyond it, or in
/// a cycle, the annotation is read as written.
const MAX_ALIAS_DEPTH: usize = 16;

impl<'s> Extractor<'s> {
    fn line(&self, token: &Token) -> u32 {
        line_of(&self.line_starts, token.start)
    }

    fn problem(&mut self, line: u32, message: impl Into<String>) {
        self.out.problems.push(PythonProblem { line, message: message.into() });
    }

    fn text(&self, token: &Token) -> &'s str {
        token_text(token, self.source)
    }

    fn run(&mut self, lines: &'s [LogicalLine]) {
        let mut decorators: Vec<Decorator<'s>> = Vec::new();
        let mut index = 0;
        while index < lines.len() {
            let line = &lines[index];
            index += 1;
            if line.indent > 0 {
                continue;
            }
            let Some(first) = line.tokens.first() else { continue };
            let first_line = self.line(first);
            let source = self.source;
            if is_op(Some(first), source, "@") {
                decorators.push(self.decorator(&line.tokens, first_line));
                continue;
            }
            let pending = std::mem::take(&mut decorators);
            self.binding(&line.tokens);
            let has = |role| pending.iter().any(|decorator| decorator.role == role);
            // `@deprecated` alone is not reported anywhere: plugin files may well use another
            // library's decorator of that name on their helpers.
            if is_name(Some(first), source, "def") {
                if has(DecoratorRole::Plugin) {
                    self.function(&line.tokens, first_line, &pending);
                }
            } else if is_name(Some(first), source, "class") {
                let body_end =
                    lines[index..].iter().position(|body| body.indent == 0).map_or(lines.len(), |i| index + i);
                if has(DecoratorRole::Plugin) || has(DecoratorRole::Dataclass) {
                    self.class(&line.tokens, first_line, &pending, &lines[index..body_end]);
                }
                index = body_end;
            } else if has(DecoratorRole::Plugin) || has(DecoratorRole::Dataclass) {
                let what = if is_name(Some(first), source, "async") { "an `async def`" } else { "this statement" };
                let decorator = if has(DecoratorRole::Plugin) { "@plugin" } else { "@dataclass" };
                self.problem(first_line, format!("{decorator} cannot be applied to {what}; it is skipped"));
            }
        }
        if decorators.iter().any(|decorator| matches!(decorator.role, DecoratorRole::Plugin | DecoratorRole::Dataclass))
        {
            let line = decorators.last().map_or(0, |decorator| decorator.line);
            self.problem(line, "the file ends after a decorator");
        }
    }

    /// Reads `@dotted.name` or `@dotted.name(arguments)`. Other decorator expressions are legal
    /// Python but cannot be ours, so they are returned as [`DecoratorRole::Other`].
    fn decorator(&mut self, tokens: &'s [Token], line: u32) -> Decorator<'s> {
        let source = self.source;
        let expression = &tokens[1..];
        let call_at = expression.iter().position(|token| is_op(Some(token), source, "("));
        let name_tokens = &expression[..call_at.unwrap_or(expression.len())];
        let role = dotted_name(name_tokens, source).map_or(DecoratorRole::Other, |parts| decorator_role(&parts));
        let Some(open) = call_at else {
            return Decorator { role, line, arguments: None };
        };
        if role == DecoratorRole::Other {
            return Decorator { role, line, arguments: None };
        }
        // Other libraries have a `deprecated` decorator too, so an odd one is not worth a problem.
        let report = role != DecoratorRole::Deprecated;
        if matching_close(expression, open, source) != Some(expression.len() - 1) {
            if report {
                self.problem(line, "the decorator's call is not understood; the decorator is ignored");
            }
            return Decorator { role: DecoratorRole::Other, line, arguments: None };
        }
        let inside = &expression[open + 1..expression.len() - 1];
        let mut arguments = Vec::new();
        for piece in split_top_level(inside, ",", source) {
            if piece.is_empty() {
                continue;
            }
            if is_op(piece.first(), source, "*") || is_op(piece.first(), source, "**") {
                if report {
                    self.problem(line, "unpacked decorator arguments cannot be read without running Python");
                }
                return Decorator { role: DecoratorRole::Other, line, arguments: None };
            }
            if piece.len() >= 2 && piece[0].kind == TokenKind::Name && is_op(piece.get(1), source, "=") {
                arguments.push(Argument { keyword: Some(token_text(&piece[0], source)), value: &piece[2..] });
            } else {
                arguments.push(Argument { keyword: None, value: piece });
            }
        }
        Decorator { role, line, arguments: Some(arguments) }
    }

    fn bool_argument(&mut self, argument: &Argument<'_>, line: u32) -> bool {
        match argument.value {
            [token] if is_name(Some(token), self.source, "True") => true,
            [token] if is_name(Some(token), self.source, "False") => false,
            _ => {
                let name = argument.keyword.unwrap_or("a flag");
                self.problem(line, format!("the value of {name} is not a literal True or False; False is assumed"));
                false
            }
        }
    }

    /// Reads a `@plugin` decorator's arguments, which follow `plugin(function, commands,
    /// emits_statements, allow_unknown)`. `None` when the plugin's name cannot be known.
    fn plugin_options(&mut self, decorator: &Decorator<'_>) -> Option<PluginOptions> {
        let mut options = PluginOptions { name: None, allow_unknown: false, emits_statements: false };
        let Some(arguments) = &decorator.arguments else { return Some(options) };
        const POSITIONS: [&str; 4] = ["function", "commands", "emits_statements", "allow_unknown"];
        for (position, argument) in arguments.iter().enumerate() {
            let parameter = match argument.keyword {
                Some(keyword) => keyword,
                None => match POSITIONS.get(position) {
                    Some(parameter) => parameter,
                    None => {
                        self.problem(decorator.line, "@plugin takes at most 4 arguments; the plugin is skipped");
                        return None;
                    }
                },
            };
            match parameter {
                "function" => {
                    if is_name(argument.value.first(), self.source, "None") && argument.value.len() == 1 {
                        continue;
                    }
                    match string_value(argument.value, self.source) {
                        Some(Ok(name)) => options.name = Some(name),
                        Some(Err(message)) => {
                            self.problem(decorator.line, format!("{message}; the plugin is skipped"));
                            return None;
                        }
                        None => {
                            self.problem(
                                decorator.line,
                                "the plugin's name is not a string literal; the plugin is skipped",
                            );
                            return None;
                        }
                    }
                }
                "commands" => {}
                "emits_statements" => options.emits_statements = self.bool_argument(argument, decorator.line),
                "allow_unknown" => options.allow_unknown = self.bool_argument(argument, decorator.line),
                other => {
                    self.problem(decorator.line, format!("@plugin has no parameter '{other}'; the plugin is skipped"));
                    return None;
                }
            }
        }
        Some(options)
    }

    /// Reads a `@deprecated` decorator: the replacement, if one is named.
    fn deprecation(&mut self, decorator: &Decorator<'_>) -> Option<String> {
        let arguments = decorator.arguments.as_deref().unwrap_or_default();
        for argument in arguments {
            match argument.keyword {
                Some("replaced_by") => {
                    if argument.value.len() == 1 && is_name(argument.value.first(), self.source, "None") {
                        continue;
                    }
                    match string_value(argument.value, self.source) {
                        Some(Ok(replacement)) => return Some(replacement),
                        Some(Err(message)) => self.problem(decorator.line, message),
                        None => self.problem(decorator.line, "replaced_by is not a string literal; it is ignored"),
                    }
                }
                // The reference accepts and ignores any other keyword.
                Some(_) => {}
                None => self.problem(decorator.line, "@deprecated takes no positional arguments here; it is ignored"),
            }
        }
        None
    }

    fn function(&mut self, tokens: &'s [Token], line: u32, decorators: &[Decorator<'s>]) {
        let source = self.source;
        let mut plugin_options = None;
        let mut plugin_decorators = 0;
        let mut deprecated = None;
        for decorator in decorators {
            match decorator.role {
                DecoratorRole::Plugin => {
                    plugin_decorators += 1;
                    if plugin_decorators > 1 {
                        self.problem(decorator.line, "a function has more than one @plugin decorator; it is skipped");
                        return;
                    }
                    match self.plugin_options(decorator) {
                        Some(options) => plugin_options = Some(options),
                        None => return,
                    }
                }
                DecoratorRole::Deprecated => {
                    deprecated = Some(Deprecation { replaced_by: self.deprecation(decorator) })
                }
                DecoratorRole::Dataclass | DecoratorRole::Other => {}
            }
        }
        let Some(options) = plugin_options else { return };

        // def NAME [type parameters] ( parameters ) [-> annotation] : ...
        let Some(name_token) = tokens.get(1).filter(|token| token.kind == TokenKind::Name) else {
            self.problem(line, "the function's header is not understood; the plugin is skipped");
            return;
        };
        let mut open = 2;
        if is_op(tokens.get(open), source, "[") {
            match matching_close(tokens, open, source) {
                Some(close) => open = close + 1,
                None => {
                    self.problem(line, "the function's type parameters are not understood; the plugin is skipped");
                    return;
                }
            }
        }
        let close = if is_op(tokens.get(open), source, "(") { matching_close(tokens, open, source) } else { None };
        let Some(close) = close else {
            self.problem(line, "the function's parameter list is not understood; the plugin is skipped");
            return;
        };
        let rest = &tokens[close + 1..];
        let Some(colon) = find_top_level(rest, ":", source) else {
            self.problem(line, "the function's header has no ':'; the plugin is skipped");
            return;
        };
        let returns = match &rest[..colon] {
            [] => None,
            [arrow, annotation @ ..] if is_op(Some(arrow), source, "->") && !annotation.is_empty() => {
                match self.annotation(annotation, line) {
                    Some(annotation) => Some(annotation),
                    None => return,
                }
            }
            _ => {
                self.problem(line, "the function's return annotation is not understood; the plugin is skipped");
                return;
            }
        };
        let Some(mut params) = self.parameters(&tokens[open + 1..close], line) else { return };

        // Like the reference, the context may be any positional parameter; the model never sees
        // it. A second one would be left without an argument at run time.
        let is_positional_context = |extractor: &Self, param: &PluginParam| {
            matches!(param.kind, ParamKind::PositionalOnly | ParamKind::PositionalOrKeyword)
                && extractor.is_context(param)
        };
        let context_position = params.iter().position(|param| is_positional_context(self, param));
        if let Some(position) = context_position {
            params.remove(position);
            if params.iter().any(|param| is_positional_context(self, param)) {
                self.problem(line, "only the first Context parameter receives the context; the plugin is skipped");
                return;
            }
        }

        let function_name = self.text(name_token);
        self.out.plugins.push(PluginSignature {
            name: options.name.unwrap_or_else(|| function_name.to_string()),
            namespace: self.namespace.to_string(),
            params,
            returns,
            takes_context: context_position.is_some(),
            context_position: context_position.and_then(|position| u32::try_from(position).ok()).unwrap_or(0),
            allow_unknown: options.allow_unknown,
            emits_statements: options.emits_statements,
            deprecated,
            source_file: self.file_label.to_string(),
            source_line: line,
        });
    }

    /// The reference recognises the context parameter by its annotation being the `Context`
    /// class itself, however it was imported.
    fn is_context(&self, param: &PluginParam) -> bool {
        let Some(TypeAnnotation::Python(text)) = &param.annotation else { return false };
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        compact.rsplit('.').next() == Some("Context") && compact.split('.').all(is_identifier)
    }

    /// Records a module-level `Name = expr` (one target, possibly annotated, as in
    /// `Name: TypeAlias = expr`) or `type Name = expr`, for annotations that name it; a
    /// `def`, `class` or import that binds the name again forgets it.
    fn binding(&mut self, tokens: &'s [Token]) {
        let source = self.source;
        if let [keyword, name, ..] = tokens
            && (is_name(Some(keyword), source, "def") || is_name(Some(keyword), source, "class"))
        {
            self.aliases.remove(self.text(name));
            return;
        }
        if is_name(tokens.first(), source, "import") || is_name(tokens.first(), source, "from") {
            let names = tokens.iter().position(|token| is_name(Some(token), source, "import")).map_or(&[][..], |at| {
                let names = &tokens[at + 1..];
                without_enclosing_parens(names, source)
            });
            for piece in split_top_level(names, ",", source) {
                // `import a.b` binds `a`; `import a.b as c` and `from m import b as c` bind `c`.
                let renamed = piece.len() >= 2 && is_name(piece.get(piece.len() - 2), source, "as");
                if let Some(bound) = if renamed { piece.last() } else { piece.first() } {
                    self.aliases.remove(self.text(bound));
                }
            }
            return;
        }
        let tokens = match tokens {
            [keyword, name, ..] if is_name(Some(keyword), source, "type") && name.kind == TokenKind::Name => {
                &tokens[1..]
            }
            _ => tokens,
        };
        let Some((name, rest)) = tokens.split_first() else { return };
        if name.kind != TokenKind::Name {
            return;
        }
        let Some(equals) = find_top_level(rest, "=", source) else { return };
        let value = &rest[equals + 1..];
        // `A = B = expr` binds two names, `A, B = ...` none that is an annotation: not aliases.
        let plain_target = equals == 0 || is_op(rest.first(), source, ":");
        if plain_target && !value.is_empty() && find_top_level(value, "=", source).is_none() {
            self.aliases.insert(self.text(name), value);
        } else {
            self.aliases.remove(self.text(name));
        }
    }

    /// The expression an annotation stands for: itself, or the expression bound to the name it
    /// is, followed through further names.
    fn resolve_alias<'t>(&self, mut tokens: &'t [Token]) -> &'t [Token]
    where
        's: 't,
    {
        for _ in 0..MAX_ALIAS_DEPTH {
            let inner = without_enclosing_parens(tokens, self.source);
            match inner {
                [name] if name.kind == TokenKind::Name => match self.aliases.get(self.text(name)) {
                    Some(value) => tokens = value,
                    None => return tokens,
                },
                _ => return tokens,
            }
        }
        tokens
    }

    fn annotation(&mut self, tokens: &[Token], line: u32) -> Option<TypeAnnotation> {
        let tokens = self.resolve_alias(tokens);
        let tokens = without_enclosing_parens(tokens, self.source);
        match string_value(tokens, self.source) {
            // As written: the reference looks the text up as it is, and ` int ` is no type.
            Some(Ok(text)) => Some(TypeAnnotation::Dsl(text.to_string())),
            Some(Err(message)) => {
                self.problem(line, format!("{message}; the plugin is skipped"));
                None
            }
            None => Some(TypeAnnotation::Python(normalized_text(tokens, self.source))),
        }
    }

    /// Reads a parameter list; `None` (with a problem recorded) when any part of it is not
    /// understood, since a partial signature would be wrong.
    fn parameters(&mut self, tokens: &[Token], line: u32) -> Option<Vec<PluginParam>> {
        let source = self.source;
        let mut params: Vec<PluginParam> = Vec::new();
        let mut keyword_only = false;
        let mut seen_slash = false;
        for piece in split_top_level(tokens, ",", source) {
            if piece.is_empty() {
                continue;
            }
            if let [slash] = piece
                && is_op(Some(slash), source, "/")
            {
                if seen_slash || keyword_only || params.is_empty() {
                    self.problem(line, "misplaced '/' in the parameter list; the plugin is skipped");
                    return None;
                }
                seen_slash = true;
                for param in &mut params {
                    param.kind = ParamKind::PositionalOnly;
                }
                continue;
            }
            if let [star] = piece
                && is_op(Some(star), source, "*")
            {
                if keyword_only {
                    self.problem(line, "misplaced '*' in the parameter list; the plugin is skipped");
                    return None;
                }
                keyword_only = true;
                continue;
            }
            let (kind, rest) = if is_op(piece.first(), source, "**") {
                (ParamKind::VarKeyword, &piece[1..])
            } else if is_op(piece.first(), source, "*") {
                if keyword_only {
                    self.problem(line, "misplaced '*' in the parameter list; the plugin is skipped");
                    return None;
                }
                keyword_only = true;
                (ParamKind::VarPositional, &piece[1..])
            } else if keyword_only {
                (ParamKind::KeywordOnly, piece)
            } else {
                (ParamKind::PositionalOrKeyword, piece)
            };
            let Some(name_token) = rest.first().filter(|token| token.kind == TokenKind::Name) else {
                self.problem(line, "a parameter is not understood; the plugin is skipped");
                return None;
            };
            let after_name = &rest[1..];
            let equals = find_top_level(after_name, "=", source);
            let (annotated, default) = match equals {
                Some(at) => (&after_name[..at], Some(&after_name[at + 1..])),
                None => (after_name, None),
            };
            let annotation = match annotated {
                [] => None,
                [colon, annotation @ ..] if is_op(Some(colon), source, ":") && !annotation.is_empty() => {
                    Some(self.annotation(annotation, line)?)
                }
                _ => {
                    self.problem(line, "a parameter is not understood; the plugin is skipped");
                    return None;
                }
            };
            let default = match default {
                Some([]) => {
                    self.problem(line, "a parameter's default is missing; the plugin is skipped");
                    return None;
                }
                Some(_) if matches!(kind, ParamKind::VarPositional | ParamKind::VarKeyword) => {
                    self.problem(line, "a variadic parameter cannot have a default; the plugin is skipped");
                    return None;
                }
                Some(default) => Some(normalized_text(without_enclosing_parens(default, source), source)),
                None => None,
            };
            if params.last().is_some_and(|last| last.kind == ParamKind::VarKeyword) {
                self.problem(line, "a parameter follows '**'; the plugin is skipped");
                return None;
            }
            params.push(PluginParam { name: self.text(name_token).to_string(), kind, annotation, default });
        }
        Some(params)
    }

    fn class(&mut self, tokens: &'s [Token], line: u32, decorators: &[Decorator<'s>], body: &'s [LogicalLine]) {
        let source = self.source;
        let mut dataclass = None;
        for decorator in decorators {
            match decorator.role {
                DecoratorRole::Dataclass => dataclass = Some(decorator),
                DecoratorRole::Plugin => {
                    self.problem(decorator.line, "@plugin applies to functions; the class is skipped");
                    return;
                }
                DecoratorRole::Deprecated | DecoratorRole::Other => {}
            }
        }
        let Some(dataclass) = dataclass else { return };
        let mut frozen = false;
        for argument in dataclass.arguments.as_deref().unwrap_or_default() {
            match argument.keyword {
                Some("frozen") => frozen = self.bool_argument(argument, dataclass.line),
                Some(_) => {}
                None => {
                    self.problem(dataclass.line, "@dataclass takes no positional arguments; the class is skipped");
                    return;
                }
            }
        }

        // class NAME [type parameters] [( bases )] : [statements]
        let Some(name_token) = tokens.get(1).filter(|token| token.kind == TokenKind::Name) else {
            self.problem(line, "the class header is not understood; the class is skipped");
            return;
        };
        let Some(colon) = find_top_level(&tokens[2..], ":", source).map(|at| at + 2) else {
            self.problem(line, "the class header has no ':'; the class is skipped");
            return;
        };

        let mut fields = Vec::new();
        // A body on the header's own line: `class A: x: int`.
        let inline_body = &tokens[colon + 1..];
        if !inline_body.is_empty() {
            self.collect_fields(inline_body, &mut fields);
        }
        let body_indent = body.first().map(|first| first.indent);
        for statement_line in body.iter().filter(|body_line| Some(body_line.indent) == body_indent) {
            self.collect_fields(&statement_line.tokens, &mut fields);
        }

        self.out.dataclasses.push(PythonDataclass {
            name: self.text(name_token).to_string(),
            namespace: self.namespace.to_string(),
            frozen,
            fields,
            source_file: self.file_label.to_string(),
            source_line: line,
        });
    }

    /// Adds the fields declared by one logical line of a class body. Simple statements may share
    /// a line, separated by `;`; a compound statement (`def`, `if`, ...) declares no field.
    fn collect_fields(&mut self, tokens: &[Token], fields: &mut Vec<(String, String)>) {
        let source = self.source;
        for statement in split_top_level(tokens, ";", source) {
            let [target, colon, rest @ ..] = statement else { continue };
            if target.kind != TokenKind::Name
                || PYTHON_KEYWORDS.contains(&token_text(target, source))
                || !is_op(Some(colon), source, ":")
            {
                continue;
            }
            let annotation = match find_top_level(rest, "=", source) {
                Some(at) => &rest[..at],
                None => rest,
            };
            let annotation = without_enclosing_parens(annotation, source);
            if annotation.is_empty() || is_pseudo_field(annotation, source) {
                continue;
            }
            fields.push((self.text(target).to_string(), normalized_text(annotation, source)));
        }
    }
}

/// Python's hard keywords: `else: x: int` starts a clause, it does not declare a field `else`.
const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Annotations the `dataclasses` module does not turn into fields: `ClassVar[...]`,
/// `InitVar[...]` and the `KW_ONLY` marker, however qualified, and their string forms.
fn is_pseudo_field(annotation: &[Token], source: &str) -> bool {
    const PSEUDO: [&str; 3] = ["ClassVar", "InitVar", "KW_ONLY"];
    if let Some(Ok(text)) = string_value(annotation, source) {
        let head: String =
            text.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.').collect();
        return head.rsplit('.').next().is_some_and(|last| PSEUDO.contains(&last));
    }
    let name_end = annotation.iter().position(|token| is_op(Some(token), source, "[")).unwrap_or(annotation.len());
    dotted_name(&annotation[..name_end], source)
        .and_then(|parts| parts.last().copied())
        .is_some_and(|last| PSEUDO.contains(&last))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders an extract compactly, one line per item, parameters in Python syntax: `"..."` is a
    /// DSL annotation, anything else a Python one.
    fn render(extract: &PythonExtract) -> String {
        fn annotation(annotation: &TypeAnnotation) -> String {
            match annotation {
                TypeAnnotation::Dsl(text) => format!("\"{text}\""),
                TypeAnnotation::Python(text) => text.clone(),
            }
        }
        let mut lines = Vec::new();
        for plugin in &extract.plugins {
            let mut params = Vec::new();
            let mut saw_star = false;
            for (i, param) in plugin.params.iter().enumerate() {
                if param.kind == ParamKind::KeywordOnly && !saw_star {
                    params.push("*".to_string());
                }
                saw_star |= matches!(param.kind, ParamKind::KeywordOnly | ParamKind::VarPositional);
                let mut text = match param.kind {
                    ParamKind::VarPositional => format!("*{}", param.name),
                    ParamKind::VarKeyword => format!("**{}", param.name),
                    _ => param.name.clone(),
                };
                if let Some(a) = &param.annotation {
                    text += &format!(": {}", annotation(a));
                }
                if let Some(default) = &param.default {
                    text += &format!(" = {default}");
                }
                params.push(text);
                let next_positional_only =
                    plugin.params.get(i + 1).is_some_and(|p| p.kind == ParamKind::PositionalOnly);
                if param.kind == ParamKind::PositionalOnly && !next_positional_only {
                    params.push("/".to_string());
                }
            }
            let mut line = format!("plugin {}({})", plugin.qualified_name(), params.join(", "));
            if let Some(returns) = &plugin.returns {
                line += &format!(" -> {}", annotation(returns));
            }
            if plugin.takes_context {
                line += &format!(" [context@{}]", plugin.context_position);
            }
            if plugin.allow_unknown {
                line += " [allow_unknown]";
            }
            if plugin.emits_statements {
                line += " [emits_statements]";
            }
            match &plugin.deprecated {
                Some(Deprecation { replaced_by: Some(replacement) }) => {
                    line += &format!(" [deprecated: {replacement}]")
                }
                Some(Deprecation { replaced_by: None }) => line += " [deprecated]",
                None => {}
            }
            line += &format!(" @{}", plugin.source_line);
            lines.push(line);
        }
        for dataclass in &extract.dataclasses {
            let fields: Vec<String> = dataclass.fields.iter().map(|(name, a)| format!("{name}: {a}")).collect();
            let frozen = if dataclass.frozen { " [frozen]" } else { "" };
            lines.push(format!(
                "dataclass {}::{}{frozen} @{} {{{}}}",
                dataclass.namespace,
                dataclass.name,
                dataclass.source_line,
                fields.join(", ")
            ));
        }
        for problem in &extract.problems {
            lines.push(format!("problem {}: {}", problem.line, problem.message));
        }
        lines.join("\n")
    }

    /// Checks each `(source, expected rendering)` case, reporting every mismatch at once.
    fn check(cases: &[(&str, &str)]) {
        let mut failures = Vec::new();
        for (source, expected) in cases {
            let extract = extract(source, "mod", "plugins/__init__.py");
            assert!(extract.plugins.iter().all(|p| p.source_file == "plugins/__init__.py"));
            let actual = render(&extract);
            let expected: Vec<&str> = expected.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
            if actual != expected.join("\n") {
                failures.push(format!(
                    "--- source:\n{source}\n--- expected:\n{}\n--- actual:\n{actual}",
                    expected.join("\n")
                ));
            }
        }
        assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n\n"));
    }

    #[test]
    fn plugin_decorator_forms() {
        check(&[
            ("@plugin\ndef f(): pass", "plugin mod::f() @2"),
            ("@plugin()\ndef f(): pass", "plugin mod::f() @2"),
            ("@plugin(\"print\")\ndef printf(m: object): pass", "plugin mod::print(m: object) @2"),
            ("@plugin('len')\ndef f(): pass", "plugin mod::len() @2"),
            ("@plugin(allow_unknown=True)\ndef f(): pass", "plugin mod::f() [allow_unknown] @2"),
            (
                "@plugin(\"n\", allow_unknown=True, emits_statements=True)\ndef f(): pass",
                "plugin mod::n() [allow_unknown] [emits_statements] @2",
            ),
            ("@plugin(None, None, True)\ndef f(): pass", "plugin mod::f() [emits_statements] @2"),
            ("@plugin(commands=['ls'], allow_unknown=False)\ndef f(): pass", "plugin mod::f() @2"),
            ("@inmanta.plugins.plugin\ndef f(): pass", "plugin mod::f() @2"),
            ("@plugins.plugin(\"g\")\ndef f(): pass", "plugin mod::g() @2"),
            ("@ plugin\ndef f(): pass", "plugin mod::f() @2"),
            (
                "@plugin(\n    \"multi\",\n    allow_unknown=True,\n)\ndef f(): pass",
                "plugin mod::multi() [allow_unknown] @5",
            ),
            ("@plugin(\"a\" \"b\")\ndef f(): pass", "plugin mod::ab() @2"),
            // Other decorators are not plugins, and do not stop a plugin from being one.
            ("@other\ndef f(): pass\n@other.plugin\ndef g(): pass", ""),
            ("@functools.cache\n@plugin\n@other(1)\ndef f(): pass", "plugin mod::f() @4"),
            // Comments and blank lines between decorators and the def do not matter.
            ("@plugin  # a plugin\n\n# more\ndef f(): pass", "plugin mod::f() @4"),
        ]);
    }

    #[test]
    fn deprecation() {
        check(&[
            ("@deprecated\n@plugin\ndef f(): pass", "plugin mod::f() [deprecated] @3"),
            ("@plugin\n@deprecated\ndef f(): pass", "plugin mod::f() [deprecated] @3"),
            ("@deprecated()\n@plugin\ndef f(): pass", "plugin mod::f() [deprecated] @3"),
            (
                "@deprecated(replaced_by=\"the `==` operator\")\n@plugin\ndef f(): pass",
                "plugin mod::f() [deprecated: the `==` operator] @3",
            ),
            (
                "@plugin\n@inmanta.plugins.deprecated(replaced_by=None)\ndef f(): pass",
                "plugin mod::f() [deprecated] @3",
            ),
            // Other libraries have a `deprecated` decorator too.
            ("@deprecated(\"use g\")\ndef f(): pass\n@deprecated\nclass A: pass", ""),
        ]);
    }

    #[test]
    fn parameters() {
        check(&[
            (
                "@plugin\ndef f(a: \"string[]\", b: 'int' = 0, c: dict[str, int] = {}, d=None) -> \"string\": pass",
                "plugin mod::f(a: \"string[]\", b: \"int\" = 0, c: dict[str, int] = {}, d = None) -> \"string\" @2",
            ),
            (
                "@plugin\ndef f(a, b, /, c, *, d: \"int\", **kw: \"any\"): pass",
                "plugin mod::f(a, b, /, c, *, d: \"int\", **kw: \"any\") @2",
            ),
            ("@plugin\ndef f(a, /): pass", "plugin mod::f(a, /) @2"),
            (
                "@plugin\ndef f(*args: \"string\", key: \"string\" = \"x, y\"): pass",
                "plugin mod::f(*args: \"string\", key: \"string\" = \"x, y\") @2",
            ),
            (
                "@plugin\ndef f(\n    a: Annotated[str, ModelType[\"std::Entity\"]],  # comment\n    b: \"string\",\n) -> None:\n    pass",
                "plugin mod::f(a: Annotated[str, ModelType[\"std::Entity\"]], b: \"string\") -> None @2",
            ),
            (
                "@plugin\ndef f(a: object   |\n   Reference, b: Sequence[\n  int\n]) -> object | Reference: pass",
                "plugin mod::f(a: object | Reference, b: Sequence[ int ]) -> object | Reference @2",
            ),
            ("@plugin\ndef f(a: \"  string  [] \"): pass", "plugin mod::f(a: \"  string  [] \") @2"),
            ("@plugin\ndef f(a: b\"x\", b: f\"{x}\"): pass", "plugin mod::f(a: b\"x\", b: f\"{x}\") @2"),
            (
                "@plugin\ndef f(a=lambda x, y: x, b=[1, (2, 3)]): pass",
                "plugin mod::f(a = lambda x, y: x, b = [1, (2, 3)]) @2",
            ),
            ("@plugin\ndef f(a: int=1==2): pass", "plugin mod::f(a: int = 1==2) @2"),
            (
                "@plugin\ndef f(a: (\"string\") = ((1)), b: (int | str) = (1, 2), c=(x for x in y)) -> (A): pass",
                "plugin mod::f(a: \"string\" = 1, b: int | str = (1, 2), c = (x for x in y)) -> A @2",
            ),
            ("@plugin\ndef f(a=((x := 1)), b=(yield)): pass", "plugin mod::f(a = (x := 1), b = (yield)) @2"),
            ("@plugin\ndef f[T](a: T) -> T: pass", "plugin mod::f(a: T) -> T @2"),
            ("@plugin\ndef f(a: \"str\\x69ng\"): pass", "plugin mod::f(a: \"string\") @2"),
            ("@plugin\ndef f(a: r\"\\d\"): pass", "plugin mod::f(a: \"\\d\") @2"),
            ("@plugin(\"é\\u00e9\\é\\\\\")\ndef f(): pass", "plugin mod::éé\\é\\() @2"),
            ("\u{feff}@plugin\ndef f(): pass", "plugin mod::f() @2"),
            ("@plugin\ndef f(a: \\\n  int) \\\n -> int: pass", "plugin mod::f(a: int) -> int @2"),
        ]);
    }

    #[test]
    fn context() {
        check(&[
            ("@plugin\ndef f(ctx: Context, a: \"string\"): pass", "plugin mod::f(a: \"string\") [context@0] @2"),
            ("@plugin\ndef f(ctx: plugins.Context): pass", "plugin mod::f() [context@0] @2"),
            ("@plugin\ndef f(ctx: \"Context\"): pass", "plugin mod::f(ctx: \"Context\") @2"),
            ("@plugin\ndef f(*, ctx: Context): pass", "plugin mod::f(*, ctx: Context) @2"),
            ("@plugin\ndef f(a: int, ctx: Context): pass", "plugin mod::f(a: int) [context@1] @2"),
            (
                "@plugin\ndef f(a: int, /, ctx: Context, b: int, c: Context): pass",
                "problem 2: only the first Context parameter receives the context; the plugin is skipped",
            ),
        ]);
    }

    /// An annotation that names a module-level alias is read as the aliased expression, as
    /// Python evaluates it when the function is defined: the binding before the `def` counts.
    #[test]
    fn aliases() {
        check(&[
            (
                "T = Annotated[Any, ModelType[\"mod::A\"]]\n@plugin\ndef f(a: T) -> T: pass",
                "plugin mod::f(a: Annotated[Any, ModelType[\"mod::A\"]]) -> Annotated[Any, ModelType[\"mod::A\"]] @3",
            ),
            ("type T = \"string\"\n@plugin\ndef f(a: (T)): pass", "plugin mod::f(a: \"string\") @3"),
            ("T: TypeAlias = \"int\"\nU = T\n@plugin\ndef f(a: U): pass", "plugin mod::f(a: \"int\") @4"),
            ("C = plugins.Context\n@plugin\ndef f(ctx: C): pass", "plugin mod::f() [context@0] @3"),
            ("T = \"int\"\nT = \"string\"\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: \"string\") @4"),
            ("@plugin\ndef f(a: T): pass\nT = \"string\"", "plugin mod::f(a: T) @2"),
            ("T = \"int\"\nclass T: pass\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: T) @4"),
            ("T = \"int\"\nfrom m import x as T\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: T) @4"),
            ("T = \"int\"\nimport T.x\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: T) @4"),
            ("T = U = \"int\"\n@plugin\ndef f(a: T, b: U): pass", "plugin mod::f(a: T, b: U) @3"),
            ("T = U\nU = T\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: T) @4"),
            ("if x:\n    T = \"int\"\n@plugin\ndef f(a: T): pass", "plugin mod::f(a: T) @4"),
        ]);
    }

    #[test]
    fn only_top_level_synchronous_functions() {
        check(&[
            ("@plugin\nasync def f(): pass", "problem 2: @plugin cannot be applied to an `async def`; it is skipped"),
            ("class A:\n    @plugin\n    def f(self): pass", ""),
            ("if True:\n    @plugin\n    def f(): pass", ""),
            (
                "@plugin\ndef outer(a: \"int\") -> \"int\":\n    @plugin\n    def inner(b): pass\n    class C:\n        pass\n    return 1\n\n@plugin\ndef g(): pass",
                "plugin mod::outer(a: \"int\") -> \"int\" @2\nplugin mod::g() @10",
            ),
            (
                "@plugin\ndef f():\n    x = '''\n@plugin\ndef fake(): pass\n'''\n    y = \"\"\"\ndef\n\"\"\"\n@plugin\ndef g(): pass",
                "plugin mod::f() @2\nplugin mod::g() @11",
            ),
            ("x = (\n@plugin\ndef fake(): pass\n)\n@plugin\ndef g(): pass", "plugin mod::g() @6"),
            ("s = 'a \\\n@plugin'\n@plugin\ndef g(): pass", "plugin mod::g() @4"),
            ("# @plugin\n# def fake(): pass\n@plugin\ndef g(): pass", "plugin mod::g() @4"),
        ]);
    }

    #[test]
    fn f_strings_do_not_confuse_the_tokenizer() {
        check(&[
            ("x = f\"{d[\"k\"]} ( {y:{w}} {{ \"\n@plugin\ndef g(): pass", "plugin mod::g() @3"),
            ("x = f'''{\n  a # comment\n}'''\n@plugin\ndef g(): pass", "plugin mod::g() @5"),
            ("x = f\"\\N{BULLET} {a!r:>10}\" + rf'\\{x}'\n@plugin\ndef g(): pass", "plugin mod::g() @3"),
            ("x = f\"{ {'a': 1}['a'] }\"\n@plugin\ndef g(): pass", "plugin mod::g() @3"),
        ]);
    }

    #[test]
    fn dataclasses() {
        check(&[
            (
                "@dataclass\nclass A:\n    \"\"\"Doc.\"\"\"\n    x: int\n    y: \"string\" = \"a\"\n    z: dict[str,\n        int] = field(default_factory=dict)\n",
                "dataclass mod::A @2 {x: int, y: \"string\", z: dict[str, int]}",
            ),
            (
                "@dataclasses.dataclass(frozen=True)\nclass B(Base):\n    n: ClassVar[int] = 0\n    m: typing.ClassVar[str]\n    s: \"ClassVar[int]\"\n    i: InitVar[int]\n    _: KW_ONLY\n    v = 3\n    w: int\n    def method(self) -> int:\n        q: int = 1\n        return q\n    class Inner:\n        r: int\n    t: str",
                "dataclass mod::B [frozen] @2 {w: int, t: str}",
            ),
            ("@dataclass(frozen=True)\nclass C: a: int; b: str", "dataclass mod::C [frozen] @2 {a: int, b: str}"),
            (
                "@dataclass(frozen=False, order=True)\nclass D:\n    a: int; b: str = 'x'\n",
                "dataclass mod::D @2 {a: int, b: str}",
            ),
            ("@dataclass\nclass E[T]:\n    a: T\n    if x:\n        b: int\n", "dataclass mod::E @2 {a: T}"),
            ("class F:\n    a: int\n@dataclass\nclass G:\n\tb: int\nx = 1", "dataclass mod::G @4 {b: int}"),
            ("@dataclass\nclass H:\n    pass\n", "dataclass mod::H @2 {}"),
            ("if True:\n    @dataclass\n    class I:\n        a: int\n", ""),
        ]);
    }

    #[test]
    fn problems_are_reported_and_skipped() {
        check(&[
            (
                "@plugin(name)\ndef f(): pass\n@plugin\ndef g(): pass",
                "plugin mod::g() @4\nproblem 1: the plugin's name is not a string literal; the plugin is skipped",
            ),
            (
                "@plugin(allow_unknown=maybe)\ndef f(): pass",
                "plugin mod::f() @2\nproblem 1: the value of allow_unknown is not a literal True or False; False is assumed",
            ),
            ("@plugin(bogus=1)\ndef f(): pass", "problem 1: @plugin has no parameter 'bogus'; the plugin is skipped"),
            (
                "@plugin(*xs)\ndef f(): pass",
                "problem 1: unpacked decorator arguments cannot be read without running Python",
            ),
            ("@plugin\nclass A: pass", "problem 1: @plugin applies to functions; the class is skipped"),
            (
                "@dataclass\n@deprecated\nasync def f(): pass",
                "problem 3: @dataclass cannot be applied to an `async def`; it is skipped",
            ),
            ("@plugin\nx = 1", "problem 2: @plugin cannot be applied to this statement; it is skipped"),
            ("@plugin\n", "problem 1: the file ends after a decorator"),
            ("@plugin\ndef f(a b): pass", "problem 2: a parameter is not understood; the plugin is skipped"),
            ("@plugin\ndef f(a, /, /): pass", "problem 2: misplaced '/' in the parameter list; the plugin is skipped"),
            ("@plugin\ndef f(*, *a): pass", "problem 2: misplaced '*' in the parameter list; the plugin is skipped"),
            (
                "@plugin\n@plugin\ndef f(): pass",
                "problem 2: a function has more than one @plugin decorator; it is skipped",
            ),
            ("x = 'open\n@plugin\ndef g(): pass", "plugin mod::g() @3\nproblem 1: unterminated string literal"),
            (
                "@plugin\ndef f(a: int:\n    pass\n",
                "problem 2: '(' is never closed\nproblem 2: the function's parameter list is not understood; the plugin is skipped",
            ),
            ("x = )\n@plugin\ndef g(): pass", "plugin mod::g() @3\nproblem 1: unmatched ')'"),
            (
                "x = \\ y\n@plugin\ndef g(): pass",
                "plugin mod::g() @3\nproblem 1: a backslash outside a string must end the line",
            ),
        ]);
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let fragments = [
            "@plugin",
            "def",
            "f",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            ":",
            ",",
            "\"",
            "'",
            "\"\"\"",
            "f\"{",
            "\\",
            "\n",
            "    ",
            "\t",
            "#",
            "=",
            "*",
            "**",
            "/",
            "->",
            "class",
            "@dataclass",
            "é",
            "\r",
            "rb'",
            "x: int",
            ";",
        ];
        // A deterministic pseudo-random walk over the fragments covers odd combinations
        // without a dependency on the property-testing crate's strategies.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            let mut source = String::new();
            for _ in 0..(state % 40) {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                source.push_str(fragments[(state >> 33) as usize % fragments.len()]);
            }
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let _ = extract(&source, "mod", "x.py");
        }
        let deep = "x = ".to_string() + &"f\"{".repeat(10_000);
        assert!(!extract(&deep, "mod", "x.py").problems.is_empty());
    }

    #[test]
    fn namespaces_follow_the_python_module_path() {
        let cases = [
            ("__init__.py", Some("mod")),
            ("sub.py", Some("mod::sub")),
            ("sub/__init__.py", Some("mod::sub")),
            ("a/b.py", Some("mod::a::b")),
            ("a/b/__init__.py", Some("mod::a::b")),
            ("README.md", None),
            ("a/b.pyc", None),
            ("my-file.py", None),
        ];
        for (path, expected) in cases {
            assert_eq!(namespace_for("mod", path).as_deref(), expected, "{path}");
        }
    }

    #[test]
    fn model_type_names_are_the_plain_string_subscripts_of_model_type() {
        for (annotation, expected) in [
            ("Annotated[Any, ModelType[\"mod::A\"]]", &["mod::A"][..]),
            ("list[Annotated[Any, ModelType['other::A[]']]] | None", &["other::A[]"]),
            (
                "Annotated[Any, plugins.ModelType[\"a::B\"]] | Annotated[Any, ModelType[ \"a::\" \"C?\" ]]",
                &["a::B", "a::C?"],
            ),
            ("Annotated[Any, ModelType[NAME]]", &[]),
            ("Annotated[Any, MyModelType[\"x::Y\"]]", &[]),
            ("Annotated[Any, ModelType[f\"x::{y}\"]]", &[]),
            ("Annotated[Any, ModelType[\"x::Y\"", &[]),
            ("str", &[]),
        ] {
            assert_eq!(model_type_names(annotation), expected, "{annotation}");
        }
    }
}
