//! The lexer.
//!
//! The reference lexer is a PLY lexer whose rules are tried in declaration order, the first
//! one that matches wins (not the longest). The order is
//! `REGEX, FSTRING, RSTRING, ID/CID/keywords, SEP, REL, CMP_OP, PEQ, COMMENT, MLS, FLOAT, INT,
//! STRING, +, -, /, **, newline`, then the one-character literals `: [ ] ( ) = , . { } ? * %`.
//! This lexer is hand-written so that it follows that order exactly; the quirks it must keep
//! are listed in `inmanta-semantics.md` §1.1 (the sign belongs to a number literal, identifiers
//! may contain `-`, `<-1` is a relation arrow followed by `1`, ...).
//!
//! Tokens carry only their kind and span; literal values are decoded by the parser, which
//! owns the arena they are stored in. Newlines and comments produce no tokens, but each token
//! records whether it is the first on its line, which the parser uses to recover from errors.

use weft_ir::diagnostic::codes;
use weft_ir::{Diagnostic, ErrorKind, FileId, Location, Span};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// `-?[0-9]+`
    Int,
    /// `-?[0-9]*\.[0-9]+`
    Float,
    /// An identifier whose first character is not an uppercase letter.
    Ident,
    /// An identifier whose first character is an uppercase letter (entity names).
    CIdent,
    /// `"..."` or `'...'` on one line.
    String,
    /// `"""..."""` (3 to 5 quotes), may span lines.
    Mls,
    /// `r"..."`
    RString,
    /// `f"..."`
    FString,
    /// `matching /.../`: one token that includes the keyword.
    Regex,
    /// `::`
    Sep,
    /// `--`, `->` or `<-`: all three mean the same.
    Rel,
    EqEq,
    NotEq,
    Lt,
    Gt,
    Le,
    Ge,
    /// `+=`
    PlusEq,
    Plus,
    Minus,
    Slash,
    DoubleStar,
    Star,
    Percent,
    Colon,
    LBracket,
    RBracket,
    LParen,
    RParen,
    Assign,
    Comma,
    Dot,
    LBrace,
    RBrace,
    Question,
    // Keywords.
    Typedef,
    As,
    Entity,
    Extends,
    End,
    In,
    Implementation,
    For,
    Matching,
    Index,
    Implement,
    Using,
    When,
    And,
    Or,
    Not,
    True,
    False,
    Import,
    Is,
    Defined,
    Dict,
    Null,
    Undef,
    Parents,
    If,
    Else,
    Elif,
    /// End of input.
    Eof,
}

impl TokenKind {
    pub fn is_keyword(self) -> bool {
        (self as u8) >= (TokenKind::Typedef as u8) && (self as u8) <= (TokenKind::Elif as u8)
    }

    /// How the token is named in "expected ..." messages.
    pub fn describe(self) -> &'static str {
        use TokenKind::*;
        match self {
            Int => "an integer",
            Float => "a float",
            Ident => "an identifier",
            CIdent => "an entity name",
            String | Mls | RString | FString => "a string",
            Regex => "a regex",
            Sep => "`::`",
            Rel => "`--`",
            EqEq => "`==`",
            NotEq => "`!=`",
            Lt => "`<`",
            Gt => "`>`",
            Le => "`<=`",
            Ge => "`>=`",
            PlusEq => "`+=`",
            Plus => "`+`",
            Minus => "`-`",
            Slash => "`/`",
            DoubleStar => "`**`",
            Star => "`*`",
            Percent => "`%`",
            Colon => "`:`",
            LBracket => "`[`",
            RBracket => "`]`",
            LParen => "`(`",
            RParen => "`)`",
            Assign => "`=`",
            Comma => "`,`",
            Dot => "`.`",
            LBrace => "`{`",
            RBrace => "`}`",
            Question => "`?`",
            Typedef => "`typedef`",
            As => "`as`",
            Entity => "`entity`",
            Extends => "`extends`",
            End => "`end`",
            In => "`in`",
            Implementation => "`implementation`",
            For => "`for`",
            Matching => "`matching`",
            Index => "`index`",
            Implement => "`implement`",
            Using => "`using`",
            When => "`when`",
            And => "`and`",
            Or => "`or`",
            Not => "`not`",
            True => "`true`",
            False => "`false`",
            Import => "`import`",
            Is => "`is`",
            Defined => "`defined`",
            Dict => "`dict`",
            Null => "`null`",
            Undef => "`undef`",
            Parents => "`parents`",
            If => "`if`",
            Else => "`else`",
            Elif => "`elif`",
            Eof => "end of file",
        }
    }
}

fn keyword(text: &[u8]) -> Option<TokenKind> {
    use TokenKind::*;
    Some(match text {
        b"typedef" => Typedef,
        b"as" => As,
        b"entity" => Entity,
        b"extends" => Extends,
        b"end" => End,
        b"in" => In,
        b"implementation" => Implementation,
        b"for" => For,
        b"matching" => Matching,
        b"index" => Index,
        b"implement" => Implement,
        b"using" => Using,
        b"when" => When,
        b"and" => And,
        b"or" => Or,
        b"not" => Not,
        b"true" => True,
        b"false" => False,
        b"import" => Import,
        b"is" => Is,
        b"defined" => Defined,
        b"dict" => Dict,
        b"null" => Null,
        b"undef" => Undef,
        b"parents" => Parents,
        b"if" => If,
        b"else" => Else,
        b"elif" => Elif,
        _ => return None,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
    /// Whether no other token precedes this one on its line.
    pub line_start: bool,
}

/// Turns source text into tokens. Lexical errors are collected as diagnostics and the lexer
/// recovers (an unterminated string ends at the end of its line, an illegal character is
/// skipped), so that the parser can go on and report further errors.
pub struct Lexer<'s> {
    src: &'s str,
    bytes: &'s [u8],
    pos: usize,
    file: FileId,
    at_line_start: bool,
    pub diagnostics: Vec<Diagnostic>,
}

#[inline]
pub(crate) fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

#[inline]
pub(crate) fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

impl<'s> Lexer<'s> {
    pub fn new(src: &'s str, file: FileId) -> Self {
        Lexer { src, bytes: src.as_bytes(), pos: 0, file, at_line_start: true, diagnostics: Vec::new() }
    }

    pub fn source(&self) -> &'s str {
        self.src
    }

    fn error(&mut self, code: weft_ir::Code, start: usize, end: usize, message: String, label: &str) {
        let loc = Location::new(self.file, Span::new(start as u32, end as u32));
        self.diagnostics.push(Diagnostic::error(ErrorKind::ParserException, code, message).at(loc, label));
    }

    #[inline]
    fn peek_at(&self, offset: usize) -> u8 {
        *self.bytes.get(self.pos + offset).unwrap_or(&0)
    }

    /// Skips spaces, tabs, newlines and comments; records whether a newline was crossed.
    fn skip_trivia(&mut self) {
        let bytes = self.bytes;
        while self.pos < bytes.len() {
            match bytes[self.pos] {
                b' ' | b'\t' => self.pos += 1,
                b'\n' | b'\r' => {
                    self.pos += 1;
                    self.at_line_start = true;
                }
                b'#' => {
                    // A comment runs to the end of the line; the newline itself is left for the
                    // loop so that it marks the next token as the first on its line.
                    while self.pos < bytes.len() && !matches!(bytes[self.pos], b'\n' | b'\r') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    #[inline(always)]
    pub fn next_token(&mut self) -> Token {
        loop {
            self.skip_trivia();
            let start = self.pos;
            if start >= self.bytes.len() {
                return self.make(TokenKind::Eof, start);
            }
            if let Some(kind) = self.lex_one() {
                return self.make(kind, start);
            }
            // `lex_one` reported an error and consumed the offending input; try again.
        }
    }

    fn make(&mut self, kind: TokenKind, start: usize) -> Token {
        let line_start = std::mem::replace(&mut self.at_line_start, false);
        Token { kind, span: Span::new(start as u32, self.pos as u32), line_start }
    }

    /// Lexes one token starting at `self.pos`, which is not trivia. Returns `None` after
    /// reporting an error for input that no rule matches.
    fn lex_one(&mut self) -> Option<TokenKind> {
        use TokenKind::*;
        let b = self.bytes[self.pos];
        // Rules in the reference's order: REGEX, FSTRING, RSTRING, ID.
        if is_ident_start(b) {
            if b == b'm' && self.try_regex() {
                return Some(Regex);
            }
            if (b == b'f' || b == b'r') && matches!(self.peek_at(1), b'"' | b'\'') {
                let quote = self.peek_at(1);
                if let Some(end) = self.scan_quoted(self.pos + 1, quote) {
                    self.pos = end;
                    return Some(if b == b'f' { FString } else { RString });
                }
                // An unterminated prefixed string: the reference falls back to the identifier
                // `f`/`r` and then fails on the quote; report the string as unterminated.
                return Some(self.unterminated_string(self.pos, if b == b'f' { FString } else { RString }));
            }
            let start = self.pos;
            let mut end = start + 1;
            while end < self.bytes.len() && is_ident_continue(self.bytes[end]) {
                end += 1;
            }
            self.pos = end;
            let text = &self.bytes[start..end];
            if let Some(kw) = keyword(text) {
                return Some(kw);
            }
            return Some(if b.is_ascii_uppercase() { CIdent } else { Ident });
        }
        let next = self.peek_at(1);
        match b {
            b':' if next == b':' => return Some(self.advance(2, Sep)),
            b'-' if next == b'-' || next == b'>' => return Some(self.advance(2, Rel)),
            b'<' if next == b'-' => return Some(self.advance(2, Rel)),
            b'!' if next == b'=' => return Some(self.advance(2, NotEq)),
            b'=' if next == b'=' => return Some(self.advance(2, EqEq)),
            b'>' if next == b'=' => return Some(self.advance(2, Ge)),
            b'<' if next == b'=' => return Some(self.advance(2, Le)),
            b'<' => return Some(self.advance(1, Lt)),
            b'>' => return Some(self.advance(1, Gt)),
            b'+' if next == b'=' => return Some(self.advance(2, PlusEq)),
            b'"' => {
                if let Some(end) = self.scan_mls() {
                    self.pos = end;
                    return Some(Mls);
                }
            }
            _ => {}
        }
        // FLOAT before INT, both before MINUS.
        if (b.is_ascii_digit() || b == b'-' || b == b'.')
            && let Some(kind) = self.try_number()
        {
            return Some(kind);
        }
        match b {
            b'"' | b'\'' => {
                if let Some(end) = self.scan_quoted(self.pos, b) {
                    self.pos = end;
                    return Some(String);
                }
                Some(self.unterminated_string(self.pos, String))
            }
            b'+' => Some(self.advance(1, Plus)),
            b'-' => Some(self.advance(1, Minus)),
            b'/' => Some(self.advance(1, Slash)),
            b'*' if next == b'*' => Some(self.advance(2, DoubleStar)),
            b':' => Some(self.advance(1, Colon)),
            b'[' => Some(self.advance(1, LBracket)),
            b']' => Some(self.advance(1, RBracket)),
            b'(' => Some(self.advance(1, LParen)),
            b')' => Some(self.advance(1, RParen)),
            b'=' => Some(self.advance(1, Assign)),
            b',' => Some(self.advance(1, Comma)),
            b'.' => Some(self.advance(1, Dot)),
            b'{' => Some(self.advance(1, LBrace)),
            b'}' => Some(self.advance(1, RBrace)),
            b'?' => Some(self.advance(1, Question)),
            b'*' => Some(self.advance(1, Star)),
            b'%' => Some(self.advance(1, Percent)),
            _ => {
                let start = self.pos;
                let ch = self.src[start..].chars().next().expect("not at end of input");
                self.pos += ch.len_utf8();
                let shown = if ch == '\u{feff}' { "byte order mark (U+FEFF)".to_string() } else { format!("{ch:?}") };
                self.error(
                    codes::ILLEGAL_CHARACTER,
                    start,
                    self.pos,
                    format!("Syntax error: Illegal character {shown}"),
                    "this character cannot start a token",
                );
                None
            }
        }
    }

    #[inline]
    fn advance(&mut self, n: usize, kind: TokenKind) -> TokenKind {
        self.pos += n;
        kind
    }

    /// `matching[\s]+/([^/\\\n]|\\.)+/`: the regex of a typedef, as one token.
    fn try_regex(&mut self) -> bool {
        let bytes = self.bytes;
        let start = self.pos;
        if !bytes[start..].starts_with(b"matching") {
            return false;
        }
        let mut i = start + 8;
        let ws_start = i;
        while i < bytes.len() && is_python_space(bytes[i]) {
            i += 1;
        }
        if i == ws_start || i >= bytes.len() || bytes[i] != b'/' {
            return false;
        }
        i += 1;
        let body_start = i;
        while i < bytes.len() {
            match bytes[i] {
                b'/' => break,
                b'\n' | b'\r' => return false,
                b'\\' => {
                    // `\\.`: any character but a newline.
                    if i + 1 >= bytes.len() || matches!(bytes[i + 1], b'\n' | b'\r') {
                        return false;
                    }
                    i += 1 + utf8_len(bytes[i + 1]);
                }
                c => i += utf8_len(c),
            }
        }
        if i >= bytes.len() || i == body_start {
            return false;
        }
        self.pos = i + 1;
        true
    }

    /// A one-line quoted string starting at `open` (the quote): `q([^\\q\n]|\\.)*q`.
    /// Returns the offset after the closing quote.
    fn scan_quoted(&self, open: usize, quote: u8) -> Option<usize> {
        let bytes = self.bytes;
        let mut i = open + 1;
        while i < bytes.len() {
            let c = bytes[i];
            if c == quote {
                return Some(i + 1);
            }
            match c {
                b'\n' | b'\r' => return None,
                b'\\' => {
                    if i + 1 >= bytes.len() || matches!(bytes[i + 1], b'\n' | b'\r') {
                        return None;
                    }
                    i += 1 + utf8_len(bytes[i + 1]);
                }
                _ => i += 1,
            }
        }
        None
    }

    fn unterminated_string(&mut self, start: usize, kind: TokenKind) -> TokenKind {
        let mut end = start;
        while end < self.bytes.len() && !matches!(self.bytes[end], b'\n' | b'\r') {
            end += 1;
        }
        self.pos = end;
        self.error(
            codes::UNTERMINATED_STRING,
            start,
            end,
            "Syntax error: unterminated string literal".to_string(),
            "this string has no closing quote on its line",
        );
        kind
    }

    /// `"{3,5}([\s\S]*?)"{3,5}` with the reference's backtracking: as many opening quotes as
    /// possible (at most five), the shortest body, then as many closing quotes as possible.
    fn scan_mls(&self) -> Option<usize> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut quotes = 0;
        while quotes < 5 && bytes.get(start + quotes) == Some(&b'"') {
            quotes += 1;
        }
        if quotes < 3 {
            return None;
        }
        for open in (3..=quotes).rev() {
            let mut i = start + open;
            while i + 3 <= bytes.len() {
                if bytes[i] == b'"' && bytes[i + 1] == b'"' && bytes[i + 2] == b'"' {
                    let mut close = 3;
                    while close < 5 && bytes.get(i + close) == Some(&b'"') {
                        close += 1;
                    }
                    return Some(i + close);
                }
                i += 1;
            }
        }
        None
    }

    /// FLOAT `-?[0-9]*\.[0-9]+` then INT `-?[0-9]+`.
    fn try_number(&mut self) -> Option<TokenKind> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut i = start;
        if bytes[i] == b'-' {
            i += 1;
        }
        let digits_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_end = i;
        if i < bytes.len() && bytes[i] == b'.' && i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            self.pos = i;
            return Some(TokenKind::Float);
        }
        if int_end > digits_start {
            self.pos = int_end;
            return Some(TokenKind::Int);
        }
        None
    }
}

/// Python's `\s` on ASCII input (the regex rule runs on text, but the characters it can meet
/// between `matching` and `/` are ASCII in any file the reference accepts).
#[inline]
fn is_python_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

#[inline]
fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xff => 4,
        // A continuation byte cannot start a character in valid UTF-8; step over it.
        _ => 1,
    }
}

/// Lexes a whole text; handy for tests and benchmarks.
pub fn tokenize(src: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lexer = Lexer::new(src, FileId(0));
    let mut out = Vec::new();
    loop {
        let t = lexer.next_token();
        out.push(t);
        if t.kind == TokenKind::Eof {
            break;
        }
    }
    (out, lexer.diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokenKind, &str)> {
        let (tokens, diags) = tokenize(src);
        assert!(diags.is_empty(), "unexpected lexer errors: {diags:?}");
        tokens
            .iter()
            .filter(|t| t.kind != TokenKind::Eof)
            .map(|t| (t.kind, &src[t.span.start as usize..t.span.end as usize]))
            .collect()
    }

    #[test]
    fn the_sign_belongs_to_the_number() {
        use TokenKind::*;
        assert_eq!(kinds("x = 5 -1"), vec![(Ident, "x"), (Assign, "="), (Int, "5"), (Int, "-1")]);
        assert_eq!(kinds("3-1"), vec![(Int, "3"), (Int, "-1")]);
        assert_eq!(kinds("a - 1"), vec![(Ident, "a"), (Minus, "-"), (Int, "1")]);
        assert_eq!(kinds("a-b -c"), vec![(Ident, "a-b"), (Minus, "-"), (Ident, "c")]);
        assert_eq!(kinds("-.5 1.5e3"), vec![(Float, "-.5"), (Float, "1.5"), (Ident, "e3")]);
        assert_eq!(kinds("1."), vec![(Int, "1"), (Dot, ".")]);
    }

    #[test]
    fn arrows_win_over_numbers_and_comparisons() {
        use TokenKind::*;
        assert_eq!(kinds("a<-1"), vec![(Ident, "a"), (Rel, "<-"), (Int, "1")]);
        assert_eq!(kinds("--1"), vec![(Rel, "--"), (Int, "1")]);
        assert_eq!(kinds("<= < ->"), vec![(Le, "<="), (Lt, "<"), (Rel, "->")]);
    }

    #[test]
    fn strings_and_regexes() {
        use TokenKind::*;
        assert_eq!(kinds(r#"f"x" r'y' "z""#), vec![(FString, "f\"x\""), (RString, "r'y'"), (String, "\"z\"")]);
        assert_eq!(kinds("\"\"\"\"\"x\"\"\"\"\""), vec![(Mls, "\"\"\"\"\"x\"\"\"\"\"")]);
        assert_eq!(kinds("\"\""), vec![(String, "\"\"")]);
        assert_eq!(kinds("matching /a\\/b/ x"), vec![(Regex, "matching /a\\/b/"), (Ident, "x")]);
        assert_eq!(kinds("matching x"), vec![(Matching, "matching"), (Ident, "x")]);
        assert_eq!(kinds("Foo foo"), vec![(CIdent, "Foo"), (Ident, "foo")]);
    }

    #[test]
    fn line_starts_are_marked() {
        let (tokens, _) = tokenize("a b # c\n  d");
        let flags: Vec<bool> = tokens.iter().map(|t| t.line_start).collect();
        assert_eq!(flags, vec![true, false, true, false]);
    }

    #[test]
    fn errors_are_reported_and_skipped() {
        let (tokens, diags) = tokenize("x = 1 é\ny = \"abc\nz");
        assert_eq!(diags.len(), 2);
        assert!(diags[0].message.contains("Illegal character"));
        assert!(diags[1].message.contains("unterminated"));
        assert_eq!(tokens.last().unwrap().kind, TokenKind::Eof);
    }
}
