//! The parser.
//!
//! A recursive-descent parser for statements and definitions with a Pratt parser for
//! expressions. It accepts what the reference's LALR grammar accepts (spec §1.2, verified
//! against the reference parser), including its greedy choices: newlines mean nothing, so an
//! expression is extended by any token that can continue it (`x = y` followed by `["k"]` on the
//! next line is one lookup) and a statement ends at the first token that cannot.
//!
//! Precedence, lowest first (spec §1.3): `?:`, `or`, `and`, comparisons, `+ -`, `* / %`, `**`
//! (left associative), prefix `not`, then `in` / `not in`.
//!
//! The parser does only parsing plus the checks the reference performs while building its
//! tree (hyphens in defined names, `+=` on a variable, interpolation in dict keys, duplicate
//! dict keys, conditional `parents`). After a syntax error it skips to the next line that
//! starts a top-level item and goes on, so one run reports every independent syntax error.

use bumpalo::Bump;
use bumpalo::collections::Vec as BVec;
use std::collections::VecDeque;
use weft_ir::diagnostic::codes;
use weft_ir::{Code, Diagnostic, ErrorKind, FileId, Interner, Location, Span};

use crate::ast::*;
use crate::lexer::{Lexer, Token, TokenKind};
use crate::strings;

/// The outcome of parsing one file: a tree (possibly partial) and the diagnostics.
#[derive(Debug)]
pub struct ParseOutput<'a> {
    pub file: File<'a>,
    pub diagnostics: Vec<Diagnostic>,
}

impl ParseOutput<'_> {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Parses one source file. `src` must be the text registered in the source map under `file`.
pub fn parse_file<'a>(arena: &'a Bump, src: &'a str, file: FileId, interner: &mut Interner) -> ParseOutput<'a> {
    let mut parser = Parser::new(arena, src, file, interner);
    let file = parser.parse_file();
    let mut diagnostics = std::mem::take(&mut parser.lexer.diagnostics);
    diagnostics.append(&mut parser.diagnostics);
    // Lexer and parser errors interleave; report them in source order.
    diagnostics.sort_by_key(|d| d.primary_location().map(|l| l.span.start).unwrap_or(u32::MAX));
    ParseOutput { file, diagnostics }
}

/// Marker for an error that has been reported already.
#[derive(Debug)]
struct Reported;

type PResult<T> = Result<T, Reported>;

/// How deep expressions and blocks may nest (and how long a chain of binary operators may be,
/// since it makes a tree just as deep). Every pass over the tree recurses, so the parser
/// bounds the depth once for all of them; 1000 levels take well under 1 MB of stack. The
/// reference fails below this depth too (Python's recursion limit is 1000), except on
/// parentheses alone, which make no node in its tree: weft counts them.
const MAX_DEPTH: u32 = 1000;

// Binding powers: left-associative operators bind their right operand one level tighter.
const BP_CONDITIONAL: u8 = 2;
const BP_OR: u8 = 4;
const BP_AND: u8 = 6;
const BP_CMP: u8 = 8;
const BP_ADD: u8 = 10;
const BP_MUL: u8 = 12;
const BP_POW: u8 = 14;
const BP_NOT: u8 = 16;
const BP_IN: u8 = 18;

struct Parser<'a, 'i> {
    arena: &'a Bump,
    src: &'a str,
    file: FileId,
    lexer: Lexer<'a>,
    interner: &'i mut Interner,
    tok: Token,
    ahead: VecDeque<Token>,
    prev: Token,
    diagnostics: Vec<Diagnostic>,
    /// Where the last syntax error was reported: recovery resumes after it, never at it.
    last_error_at: u32,
    /// How many blocks (`for`, `if`, implementation bodies) enclose the current position.
    block_depth: u32,
    /// The depth of the tree being built at the current position (see [`MAX_DEPTH`]).
    depth: u32,
    /// Set when the input nested too deeply: such a file is not worth reading further.
    gave_up: bool,
}

impl<'a, 'i> Parser<'a, 'i> {
    fn new(arena: &'a Bump, src: &'a str, file: FileId, interner: &'i mut Interner) -> Self {
        let mut lexer = Lexer::new(src, file);
        let tok = lexer.next_token();
        let start = Token { kind: TokenKind::Eof, span: Span::new(0, 0), line_start: true };
        Parser {
            arena,
            src,
            file,
            lexer,
            interner,
            tok,
            ahead: VecDeque::with_capacity(4),
            prev: start,
            diagnostics: Vec::new(),
            last_error_at: 0,
            block_depth: 0,
            depth: 0,
            gave_up: false,
        }
    }

    // ---------------------------------------------------------------- token plumbing

    // Kept out of line: inlined into every caller, the token copy it makes is split into
    // byte stores that the next read reloads as one word (a store-forwarding stall).
    #[inline(never)]
    fn bump(&mut self) -> Token {
        let next = match self.ahead.pop_front() {
            Some(t) => t,
            None => self.lexer.next_token(),
        };
        self.prev = std::mem::replace(&mut self.tok, next);
        self.prev
    }

    /// The token `n` positions after the current one (`peek(0)` is the current token).
    fn peek(&mut self, n: usize) -> Token {
        if n == 0 {
            return self.tok;
        }
        while self.ahead.len() < n {
            let t = self.lexer.next_token();
            self.ahead.push_back(t);
        }
        self.ahead[n - 1]
    }

    fn at(&self, kind: TokenKind) -> bool {
        self.tok.kind == kind
    }

    fn eat(&mut self, kind: TokenKind) -> bool {
        if self.at(kind) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn text(&self, span: Span) -> &'a str {
        &self.src[span.start as usize..span.end as usize]
    }

    /// The body of a literal token without its `prefix` opening and `suffix` closing bytes.
    /// A token recovered from an unterminated string may lack its closing quote, so the
    /// range is clamped rather than trusted.
    fn body(&self, tok: Token, prefix: u32, suffix: u32) -> &'a str {
        let start = (tok.span.start + prefix).min(tok.span.end);
        let end = tok.span.end.saturating_sub(suffix).max(start);
        self.src.get(start as usize..end as usize).unwrap_or("")
    }

    fn loc(&self, span: Span) -> Location {
        Location::new(self.file, span)
    }

    /// Span from `start` to the end of the last consumed token.
    fn span_from(&self, start: Span) -> Span {
        Span::new(start.start, self.prev.span.end.max(start.end))
    }

    fn ident(&mut self, tok: Token) -> Ident {
        let name = self.interner.intern(self.text(tok.span));
        Ident { name, span: tok.span }
    }

    fn slice<T: Copy>(&self, items: BVec<'a, T>) -> &'a [T] {
        items.into_bump_slice()
    }

    fn vec<T>(&self) -> BVec<'a, T> {
        BVec::new_in(self.arena)
    }

    // ---------------------------------------------------------------- errors

    fn report(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// How many errors the lexer and the parser have reported so far.
    fn error_count(&self) -> usize {
        self.lexer.diagnostics.iter().chain(&self.diagnostics).filter(|d| d.is_error()).count()
    }

    fn describe_token(&self, tok: Token) -> String {
        match tok.kind {
            TokenKind::Eof => "end of file".to_string(),
            _ => {
                let text = self.text(tok.span);
                let first_line = text.lines().next().unwrap_or("");
                if first_line.chars().count() > 40 || first_line.len() < text.len() {
                    let cut: String = first_line.chars().take(40).collect();
                    format!("`{cut}…`")
                } else {
                    format!("`{text}`")
                }
            }
        }
    }

    /// Reports the current token as unexpected. `expected` completes "expected ...".
    fn unexpected(&mut self, expected: &str) -> Reported {
        let tok = self.tok;
        self.last_error_at = self.last_error_at.max(tok.span.start);
        let diag = if tok.kind == TokenKind::Eof {
            // The reference appends a newline to every file and reports the end of input on
            // the line after it.
            let end = self.src.len() as u32;
            Diagnostic::error(ErrorKind::ParserException, codes::UNEXPECTED_EOF, "Syntax error: Unexpected end of file")
                .at(self.loc(Span::new(end, end)), format!("expected {expected}"))
        } else if tok.kind.is_keyword() {
            let word = self.text(tok.span);
            Diagnostic::error(
                ErrorKind::ParserException,
                codes::RESERVED_KEYWORD,
                format!("Syntax error: unexpected keyword `{word}`, expected {expected}"),
            )
            .at(self.loc(tok.span), format!("`{word}` is a reserved keyword"))
            .with_note(format!("`{word}` is a reserved keyword and cannot be used as an identifier"))
        } else if self.prev.kind.is_keyword()
            && (!matches!(self.prev.kind, TokenKind::True | TokenKind::False | TokenKind::Null | TokenKind::Defined)
                || matches!(
                    tok.kind,
                    TokenKind::Assign | TokenKind::PlusEq | TokenKind::Sep | TokenKind::Dot | TokenKind::Rel
                ))
            && self.prev.span.end > 0
        {
            // The reference reports an error that directly follows a keyword at that keyword
            // (it is still on its parser stack), so the primary location is the keyword.
            // `true`, `false`, `null` and `defined` are usually reduced to values before the
            // error is detected, so errors after them are reported at the offending token,
            // except before tokens that would continue a name (`=`, `+=`, `::`, `.`, arrows).
            let word = self.text(self.prev.span);
            let shown = self.describe_token(tok);
            Diagnostic::error(
                ErrorKind::ParserException,
                codes::UNEXPECTED_TOKEN,
                format!("Syntax error: unexpected {shown} after `{word}`, expected {expected}"),
            )
            .at(self.loc(self.prev.span), format!("expected {expected} after this"))
            .with_label(self.loc(tok.span), "unexpected token")
        } else {
            let shown = self.describe_token(tok);
            // The reference locates an error at a multi-line string on the string's last line.
            let span = if tok.kind == TokenKind::Mls { Span::new(tok.span.end - 3, tok.span.end) } else { tok.span };
            Diagnostic::error(
                ErrorKind::ParserException,
                codes::UNEXPECTED_TOKEN,
                format!("Syntax error: unexpected {shown}, expected {expected}"),
            )
            .at(self.loc(span), format!("expected {expected}"))
        };
        self.report(diag);
        Reported
    }

    /// Enters one more level of nesting, failing when the tree would get too deep.
    #[inline]
    fn descend(&mut self, levels: u32) -> PResult<()> {
        if self.depth + levels > MAX_DEPTH {
            return Err(self.too_deep());
        }
        self.depth += levels;
        Ok(())
    }

    #[cold]
    fn too_deep(&mut self) -> Reported {
        self.gave_up = true;
        let span = self.tok.span;
        self.error_at(
            ErrorKind::ParserException,
            codes::NESTED_TOO_DEEPLY,
            span,
            format!("Syntax error: the code is nested too deeply (more than {MAX_DEPTH} levels)"),
            "nested too deeply here",
        )
    }

    fn expect(&mut self, kind: TokenKind, expected: &str) -> PResult<Token> {
        if self.at(kind) { Ok(self.bump()) } else { Err(self.unexpected(expected)) }
    }

    fn error_at(&mut self, kind: ErrorKind, code: Code, span: Span, message: String, label: &str) -> Reported {
        self.last_error_at = self.last_error_at.max(span.start);
        let d = Diagnostic::error(kind, code, message).at(self.loc(span), label);
        self.report(d);
        Reported
    }

    /// The reference rejects definitions whose name contains `-` when it builds the tree node,
    /// that is once the whole construct has parsed: a syntax error inside the construct is
    /// reported instead. So this returns the diagnostic for the caller to report on completion.
    fn hyphen_error(&self, ident: Ident) -> Option<Diagnostic> {
        let text = self.text(ident.span);
        if text.contains('-') {
            let d = Diagnostic::error(
                ErrorKind::HyphenException,
                codes::HYPHEN_IN_NAME,
                format!("The use of '-' in identifiers is not allowed. please rename {text}."),
            )
            .at(self.loc(ident.span), "this name contains `-`")
            .with_help(format!("use an underscore: `{}`", text.replace('-', "_")));
            Some(d)
        } else {
            None
        }
    }

    /// Whether the current token can follow a complete statement or definition: the reference
    /// builds a node (and raises the errors deferred to that moment) only when it can.
    fn can_follow_item(&self) -> bool {
        use TokenKind::*;
        if matches!(self.tok.kind, Else | Elif | End) {
            // Only a block ends with these.
            return self.block_depth > 0;
        }
        matches!(
            self.tok.kind,
            Eof | Import
                | Entity
                | Implementation
                | Implement
                | Typedef
                | Index
                | For
                | If
                | Else
                | Elif
                | End
                | Ident
                | CIdent
                | Int
                | Float
                | String
                | Mls
                | RString
                | FString
                | Regex
                | True
                | False
                | Null
                | LParen
                | LBracket
                | LBrace
                | Not
        )
    }

    /// Whether the current token can follow a complete expression: the reference reduces an
    /// expression (and raises the errors deferred to that moment) only then.
    fn can_follow_expression(&self) -> bool {
        use TokenKind::*;
        self.can_follow_item()
            || matches!(
                self.tok.kind,
                Or | And
                    | EqEq
                    | NotEq
                    | Lt
                    | Gt
                    | Le
                    | Ge
                    | Plus
                    | Minus
                    | Star
                    | Slash
                    | Percent
                    | DoubleStar
                    | In
                    | Question
                    | Colon
                    | Comma
                    | RParen
                    | RBracket
                    | RBrace
                    | Assign
                    | PlusEq
            )
    }

    /// Whether the current token can follow a complete definition that may carry a trailing
    /// docstring (implement, relation, typedef).
    fn can_follow_documented_item(&self) -> bool {
        self.at(TokenKind::Mls) || self.can_follow_item()
    }

    /// Reports diagnostics that were deferred until their construct completed.
    fn report_pending(&mut self, pending: impl IntoIterator<Item = Option<Diagnostic>>) {
        for d in pending.into_iter().flatten() {
            self.report(d);
        }
    }

    /// After an error, skips to the next token that plausibly starts a top-level item: a
    /// definition keyword, or any token at the very start of a line other than `end`/`else`.
    fn recover_top_level(&mut self) {
        // Skip the offending token, or it would be reported again, unless it starts a
        // definition: the error came from reading it as part of the previous statement, and
        // it is the best place to resume.
        let starts_definition = |k: TokenKind| {
            matches!(
                k,
                TokenKind::Entity
                    | TokenKind::Implementation
                    | TokenKind::Implement
                    | TokenKind::Typedef
                    | TokenKind::Index
                    | TokenKind::Import
            )
        };
        while self.tok.kind != TokenKind::Eof
            && self.tok.span.start <= self.last_error_at
            && !(starts_definition(self.tok.kind) && self.tok.span.start > self.prev.span.start && self.tok.line_start)
        {
            self.bump();
        }
        loop {
            let t = self.tok;
            if t.kind == TokenKind::Eof {
                return;
            }
            if t.line_start && t.span.start > self.prev.span.start {
                let definition = matches!(
                    t.kind,
                    TokenKind::Entity
                        | TokenKind::Implementation
                        | TokenKind::Implement
                        | TokenKind::Typedef
                        | TokenKind::Index
                        | TokenKind::Import
                );
                let unindented =
                    t.span.start == 0 || matches!(self.src.as_bytes()[t.span.start as usize - 1], b'\n' | b'\r');
                let closer = matches!(t.kind, TokenKind::End | TokenKind::Else | TokenKind::Elif);
                if definition || (unindented && !closer) {
                    return;
                }
            }
            self.bump();
        }
    }

    // ---------------------------------------------------------------- file and definitions

    fn parse_file(&mut self) -> File<'a> {
        // A leading multi-line string is the module docstring (the grammar's `head : MLS`).
        let docstring = if self.at(TokenKind::Mls) { Some(self.docstring()) } else { None };
        let mut items = self.vec();
        while !self.at(TokenKind::Eof) && !self.gave_up {
            let before = self.tok.span.start;
            match self.parse_item() {
                Ok(item) => items.push(item),
                Err(Reported) => {
                    self.depth = 0;
                    self.block_depth = 0;
                    // Always make progress, then look for a place to resume.
                    if self.tok.span.start == before && !self.at(TokenKind::Eof) {
                        self.bump();
                    }
                    self.recover_top_level();
                }
            }
        }
        File { docstring, items: self.slice(items) }
    }

    fn docstring(&mut self) -> DocString<'a> {
        let tok = self.bump();
        let text = self.decode_mls(tok);
        DocString { text, span: tok.span }
    }

    fn opt_docstring(&mut self) -> Option<DocString<'a>> {
        if self.at(TokenKind::Mls) { Some(self.docstring()) } else { None }
    }

    fn parse_item(&mut self) -> PResult<Item<'a>> {
        if matches!(self.tok.kind, TokenKind::CIdent | TokenKind::Ident) && self.starts_relation() {
            return self.parse_relation().map(|r| Item::Relation(self.arena.alloc(r)));
        }
        match self.tok.kind {
            TokenKind::Import => self.parse_import().map(|i| Item::Import(self.arena.alloc(i))),
            TokenKind::Entity => self.parse_entity().map(|e| Item::Entity(self.arena.alloc(e))),
            TokenKind::Implementation => self.parse_implementation().map(|i| Item::Implementation(self.arena.alloc(i))),
            TokenKind::Implement => self.parse_implement().map(|i| Item::Implement(self.arena.alloc(i))),
            TokenKind::Typedef => self.parse_typedef().map(|t| Item::Typedef(self.arena.alloc(t))),
            TokenKind::Index => self.parse_index().map(|i| Item::Index(self.arena.alloc(i))),
            _ => self.parse_statement().map(Item::Stmt),
        }
    }

    /// Whether the tokens ahead are `class_ref '.' ID`: the start of a relation definition.
    fn starts_relation(&mut self) -> bool {
        let mut n = 0;
        // Skip `ns::` prefixes.
        while self.peek(n).kind == TokenKind::Ident && self.peek(n + 1).kind == TokenKind::Sep {
            n += 2;
        }
        self.peek(n).kind == TokenKind::CIdent && self.peek(n + 1).kind == TokenKind::Dot
    }

    fn parse_import(&mut self) -> PResult<Import<'a>> {
        let start = self.bump().span;
        let path = self.parse_ns_ref("a module name")?;
        for part in path.parts {
            if self.text(part.span).contains('-') {
                let name = self.text(path.span).to_string();
                return Err(self.error_at(
                    ErrorKind::CompilerException,
                    codes::HYPHEN_IN_NAME,
                    part.span,
                    format!(
                        "{name} is not a valid module name: hyphens are not allowed, please use underscores instead."
                    ),
                    "module names cannot contain `-`",
                ));
            }
        }
        let alias = if self.eat(TokenKind::As) {
            let t = self.expect(TokenKind::Ident, "an alias name after `as`")?;
            Some(self.ident(t))
        } else {
            None
        };
        if !self.can_follow_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        self.report_pending([alias.and_then(|a| self.hyphen_error(a))]);
        Ok(Import { path, alias, span: self.span_from(start) })
    }

    fn parse_entity(&mut self) -> PResult<EntityDef<'a>> {
        let start = self.bump().span;
        let (name_tok, mut pending) = match self.tok.kind {
            TokenKind::CIdent => (self.bump(), None),
            TokenKind::Ident => {
                let t = self.bump();
                let d = Diagnostic::error(
                    ErrorKind::ParserException,
                    codes::INVALID_IDENTIFIER,
                    "Syntax error: Invalid identifier: Entity names must start with a capital",
                )
                .at(self.loc(t.span), "entity names start with an uppercase letter");
                (t, Some(d))
            }
            _ => return Err(self.unexpected("an entity name")),
        };
        let name = self.ident(name_tok);
        let mut parents = self.vec();
        let mut parent_error = None;
        if self.eat(TokenKind::Extends) {
            loop {
                let (parent, error) = self.parse_parent_ref()?;
                parents.push(parent);
                parent_error = parent_error.or(error);
                if !self.eat(TokenKind::Comma) {
                    break;
                }
            }
        }
        self.expect(TokenKind::Colon, "`:` after the entity header")?;
        // The parent list is checked when it is complete, before the body.
        self.report_pending([parent_error]);
        let docstring = self.opt_docstring();
        let mut attributes = self.vec();
        while !self.at(TokenKind::End) {
            attributes.push(self.parse_attribute()?);
        }
        self.bump();
        if !self.can_follow_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        pending = pending.or_else(|| self.hyphen_error(name));
        self.report_pending([pending]);
        Ok(EntityDef {
            name,
            parents: self.slice(parents),
            docstring,
            attributes: self.slice(attributes),
            span: self.span_from(start),
        })
    }

    /// A parent in `extends`: a class reference, or a lowercase name, which the reference
    /// rejects once the parent list is complete (the returned diagnostic).
    fn parse_parent_ref(&mut self) -> PResult<(ClassRef<'a>, Option<Diagnostic>)> {
        if self.at(TokenKind::Ident) {
            let mut n = 0;
            while self.peek(n).kind == TokenKind::Ident && self.peek(n + 1).kind == TokenKind::Sep {
                n += 2;
            }
            if self.peek(n).kind != TokenKind::CIdent {
                let path = self.parse_ns_ref("a parent entity")?;
                let d = Diagnostic::error(
                    ErrorKind::ParserException,
                    codes::INVALID_IDENTIFIER,
                    "Syntax error: Invalid identifier: Entity names must start with a capital",
                )
                .at(self.loc(path.span), "entity names start with an uppercase letter");
                let class = ClassRef { namespace: path.namespace(), name: path.last(), span: path.span };
                return Ok((class, Some(d)));
            }
        }
        Ok((self.parse_class_ref("a parent entity")?, None))
    }

    fn parse_attribute(&mut self) -> PResult<AttributeDef<'a>> {
        let start = self.tok.span;
        if self.at(TokenKind::Dict) {
            return self.parse_dict_attribute();
        }
        if !self.at(TokenKind::Ident) {
            return Err(self.unexpected("an attribute type or `end`"));
        }
        let base = self.parse_ns_ref("an attribute type")?;
        let mut list = false;
        let mut nullable = false;
        if self.at(TokenKind::LBracket) {
            self.bump();
            self.expect(TokenKind::RBracket, "`]` in a list type")?;
            list = true;
        }
        if self.eat(TokenKind::Question) {
            nullable = true;
        }
        let ty = TypeExpr { base: TypeBase::Named(base), list, nullable, span: self.span_from(start) };
        let name = self.attribute_name()?;
        let default = if self.eat(TokenKind::Assign) {
            if self.at(TokenKind::Undef) {
                AttrDefault::Undef(self.bump().span)
            } else if self.at(TokenKind::LBracket) {
                AttrDefault::Value(self.parse_constant_list()?)
            } else {
                AttrDefault::Value(self.parse_constant("a constant default value")?)
            }
        } else {
            AttrDefault::None
        };
        self.finish_attribute(name)?;
        Ok(AttributeDef { ty, name, default, span: self.span_from(start) })
    }

    /// An attribute is complete (and its name checked) only when the next token can follow
    /// it; otherwise the reference reports that token.
    fn finish_attribute(&mut self, name: Ident) -> PResult<()> {
        if !matches!(self.tok.kind, TokenKind::End | TokenKind::Ident | TokenKind::Dict) {
            return Err(self.unexpected("another attribute or `end`"));
        }
        self.report_pending([self.hyphen_error(name)]);
        Ok(())
    }

    fn attribute_name(&mut self) -> PResult<Ident> {
        match self.tok.kind {
            TokenKind::Ident => {
                let t = self.bump();
                Ok(self.ident(t))
            }
            TokenKind::CIdent => {
                let t = self.tok;
                // The reference's error rule for a capitalised name only applies when what
                // follows could follow an attribute; otherwise the next token is the error.
                if !matches!(self.peek(1).kind, TokenKind::End | TokenKind::Ident | TokenKind::Dict | TokenKind::Assign)
                {
                    self.bump();
                    return Err(self.unexpected("`end` or another attribute"));
                }
                Err(self.error_at(
                    ErrorKind::ParserException,
                    codes::INVALID_IDENTIFIER,
                    t.span,
                    "Syntax error: Invalid identifier: attribute names must start with a lower case character".into(),
                    "attribute names start with a lowercase letter",
                ))
            }
            _ => Err(self.unexpected("an attribute name")),
        }
    }

    fn parse_dict_attribute(&mut self) -> PResult<AttributeDef<'a>> {
        let start = self.bump().span;
        let nullable = self.eat(TokenKind::Question);
        let ty = TypeExpr { base: TypeBase::Dict, list: false, nullable, span: self.span_from(start) };
        let name = self.attribute_name()?;
        let default = if self.eat(TokenKind::Assign) {
            match self.tok.kind {
                TokenKind::LBrace => AttrDefault::Value(self.parse_primary()?),
                TokenKind::Null if nullable => {
                    let t = self.bump();
                    AttrDefault::Value(self.arena.alloc(Expr { kind: ExprKind::Null, span: t.span }))
                }
                TokenKind::Null => {
                    let n = self.text(name.span).to_string();
                    return Err(self.error_at(
                        ErrorKind::ParserException,
                        codes::NULL_DICT_DEFAULT,
                        name.span,
                        format!("Syntax error: null can not be assigned to dict, did you mean \"dict? {n} = null\""),
                        "this dict is not nullable",
                    ));
                }
                _ => return Err(self.unexpected("a dict literal")),
            }
        } else {
            AttrDefault::None
        };
        self.finish_attribute(name)?;
        Ok(AttributeDef { ty, name, default, span: self.span_from(start) })
    }

    /// A `constant` of the grammar: a literal, `null`, `true`/`false` or a regex.
    fn parse_constant(&mut self, expected: &str) -> PResult<&'a Expr<'a>> {
        match self.tok.kind {
            TokenKind::Int
            | TokenKind::Float
            | TokenKind::String
            | TokenKind::Mls
            | TokenKind::RString
            | TokenKind::FString
            | TokenKind::Regex
            | TokenKind::True
            | TokenKind::False
            | TokenKind::Null => self.parse_primary(),
            _ => Err(self.unexpected(expected)),
        }
    }

    /// `[c1, c2, ...]` with constants only (attribute defaults).
    fn parse_constant_list(&mut self) -> PResult<&'a Expr<'a>> {
        let start = self.bump().span;
        let mut items = self.vec();
        while !self.at(TokenKind::RBracket) {
            let e = self.parse_constant("a constant or `]`")?;
            items.push(*e);
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RBracket, "`,` or `]`")?;
        let span = self.span_from(start);
        Ok(self.arena.alloc(Expr { kind: ExprKind::List(self.slice(items)), span }))
    }

    fn parse_implementation(&mut self) -> PResult<ImplementationDef<'a>> {
        let start = self.bump().span;
        let t = self.expect(TokenKind::Ident, "an implementation name")?;
        let name = self.ident(t);
        self.expect(TokenKind::For, "`for` and the entity it implements")?;
        let entity = self.parse_class_ref("an entity name")?;
        self.expect(TokenKind::Colon, "`:`")?;
        let docstring = self.opt_docstring();
        let body = self.parse_block_until_end()?;
        if !self.can_follow_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        self.report_pending([self.hyphen_error(name)]);
        Ok(ImplementationDef { name, entity, docstring, body, span: self.span_from(start) })
    }

    fn parse_implement(&mut self) -> PResult<ImplementDef<'a>> {
        let start = self.bump().span;
        let entity = self.parse_class_ref("an entity name")?;
        self.expect(TokenKind::Using, "`using`")?;
        let mut items = self.vec();
        loop {
            if self.at(TokenKind::Parents) {
                items.push(ImplementItem::Parents(self.bump().span));
            } else if self.at(TokenKind::Ident) {
                items.push(ImplementItem::Named(self.parse_ns_ref("an implementation name")?));
            } else {
                return Err(self.unexpected("an implementation name or `parents`"));
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        let items = self.slice(items);
        let when = if self.eat(TokenKind::When) { Some(self.parse_expr()?) } else { None };
        if !self.can_follow_documented_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        let docstring = self.opt_docstring();
        let def = ImplementDef { entity, items, when, docstring, span: self.span_from(start) };
        if def.uses_parents() && when.is_some_and(|w| !matches!(w.kind, ExprKind::Bool(true))) {
            let span = when.map(|w| w.span).unwrap_or(def.span);
            self.report(
                Diagnostic::error(
                    ErrorKind::RuntimeException,
                    codes::CONDITIONAL_PARENTS,
                    "Conditional implementation with parents not allowed",
                )
                .at(self.loc(def.span), "`using parents` cannot be conditional")
                .with_label(self.loc(span), "this condition"),
            );
        }
        Ok(def)
    }

    fn parse_typedef(&mut self) -> PResult<TypedefDef<'a>> {
        let start = self.bump().span;
        if self.at(TokenKind::CIdent) {
            // `typedef Name as Constructor(...)` was a "default constructor", removed long ago;
            // the reference rejects it once the constructor has parsed.
            let t = self.bump();
            self.expect(TokenKind::As, "`as`")?;
            let class = self.parse_class_ref("an entity name")?;
            self.expect(TokenKind::LParen, "`(`")?;
            self.parse_kwargs(TokenKind::RParen)?;
            let _ = class;
            return Err(self.error_at(
                ErrorKind::ParserException,
                codes::DEFAULT_CONSTRUCTOR,
                t.span,
                "Syntax error: The use of default constructors is no longer supported".into(),
                "typedef names start with a lowercase letter",
            ));
        }
        let t = self.expect(TokenKind::Ident, "a typedef name")?;
        let name = self.ident(t);
        self.expect(TokenKind::As, "`as`")?;
        let base = self.parse_ns_ref("a base type")?;
        let constraint = match self.tok.kind {
            TokenKind::Regex => self.parse_primary()?,
            TokenKind::Matching => {
                self.bump();
                self.parse_expr()?
            }
            _ => return Err(self.unexpected("`matching` and a constraint")),
        };
        if !self.can_follow_documented_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        let docstring = self.opt_docstring();
        let self_symbol = self.interner.intern("self");
        if !constraint.reads_variable(self_symbol, self_symbol) && !constraint.reads_variable(name.name, self_symbol) {
            let d = Diagnostic::error(
                ErrorKind::TypingException,
                codes::TYPEDEF_WITHOUT_SELF,
                "typedef expressions should reference the self variable",
            )
            .at(self.loc(name.span), "the constraint of this typedef does not mention `self`")
            .with_label(self.loc(constraint.span), "this constraint")
            .with_help("a constraint tests the value through `self`, e.g. `matching self > 0`");
            self.report(d);
        }
        let text = self.text(name.span);
        if matches!(text, "string" | "int" | "float" | "number" | "bool" | "list" | "dict") {
            self.report(
                Diagnostic::warning(
                    ErrorKind::CompilerRuntimeWarning,
                    codes::W_BUILTIN_OVERRIDE,
                    format!("Trying to override a built-in type: {text}"),
                )
                .at(self.loc(name.span), "this typedef is shadowed by the built-in type")
                .with_note("attributes declared with this name keep using the built-in type"),
            );
        }
        self.report_pending([self.hyphen_error(name)]);
        Ok(TypedefDef { name, base, constraint, docstring, span: self.span_from(start) })
    }

    fn parse_index(&mut self) -> PResult<IndexDef<'a>> {
        let start = self.bump().span;
        let entity = self.parse_class_ref("an entity name")?;
        self.expect(TokenKind::LParen, "`(`")?;
        let mut attributes = self.vec();
        loop {
            let t = self.expect(TokenKind::Ident, "an attribute name")?;
            attributes.push(self.ident(t));
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen, "`,` or `)`")?;
        Ok(IndexDef { entity, attributes: self.slice(attributes), span: self.span_from(start) })
    }

    fn parse_relation(&mut self) -> PResult<RelationDef<'a>> {
        let left = self.parse_class_ref("an entity name")?;
        let start = left.span;
        self.expect(TokenKind::Dot, "`.`")?;
        let left_attr = self.relation_attr()?;
        let mut annotations = self.vec();
        if !self.eat(TokenKind::Rel) {
            // Annotations replace the arrow. The reference's grammar lets the list be empty,
            // but then the entity name is taken as the start of an annotation expression, so an
            // empty list never parses; reading at least one expression reproduces that.
            loop {
                annotations.push(*self.parse_expr()?);
                if !self.eat(TokenKind::Comma) {
                    break;
                }
            }
        }
        let right = self.parse_class_ref("an entity name")?;
        let right_attr = if self.eat(TokenKind::Dot) { Some(self.relation_attr()?) } else { None };
        if !self.can_follow_documented_item() {
            return Err(self.unexpected("a statement or definition"));
        }
        let right_hyphen = right_attr.and_then(|a| self.hyphen_error(a.name));
        let left_hyphen = self.hyphen_error(left_attr.name);
        self.report_pending([right_hyphen, left_hyphen]);
        let docstring = self.opt_docstring();
        Ok(RelationDef {
            left,
            left_attr,
            annotations: self.slice(annotations),
            right,
            right_attr,
            docstring,
            span: self.span_from(start),
        })
    }

    fn relation_attr(&mut self) -> PResult<RelationAttr> {
        let t = self.expect(TokenKind::Ident, "a relation attribute name")?;
        let name = self.ident(t);
        let multiplicity = self.parse_multiplicity()?;
        Ok(RelationAttr { name, multiplicity })
    }

    fn parse_multiplicity(&mut self) -> PResult<Multiplicity> {
        let start = self.expect(TokenKind::LBracket, "a multiplicity such as `[0:]`")?.span;
        let (lower, upper) = if self.eat(TokenKind::Colon) {
            let upper = self.multiplicity_bound()?;
            (0, Some(upper))
        } else {
            let lower = self.multiplicity_bound()?;
            if self.eat(TokenKind::Colon) {
                if self.at(TokenKind::Int) { (lower, Some(self.multiplicity_bound()?)) } else { (lower, None) }
            } else {
                (lower, Some(lower))
            }
        };
        self.expect(TokenKind::RBracket, "`]`")?;
        Ok(Multiplicity { lower, upper, span: self.span_from(start) })
    }

    fn multiplicity_bound(&mut self) -> PResult<i64> {
        let t = self.expect(TokenKind::Int, "an integer bound")?;
        let text = self.text(t.span);
        // The reference has arbitrary-precision ints; a bound beyond 64 bits can never be
        // reached by a real model, so it saturates.
        Ok(text.parse::<i64>().unwrap_or(if text.starts_with('-') { i64::MIN } else { i64::MAX }))
    }

    // ---------------------------------------------------------------- statements

    fn parse_block_until_end(&mut self) -> PResult<Block<'a>> {
        self.descend(1)?;
        self.block_depth += 1;
        let result = crate::with_stack(|| self.parse_block_statements());
        self.block_depth -= 1;
        self.depth -= 1;
        let block = result?;
        self.bump();
        Ok(block)
    }

    fn parse_block_statements(&mut self) -> PResult<Block<'a>> {
        let start = self.tok.span;
        let mut stmts = self.vec();
        while !self.at(TokenKind::End) {
            if self.at(TokenKind::Eof) {
                return Err(self.unexpected("`end`"));
            }
            stmts.push(self.parse_block_statement()?);
        }
        let span = Span::new(start.start, self.tok.span.start);
        Ok(Block { stmts: self.slice(stmts), span })
    }

    /// Statements of an `if` branch, which end at `end`, `else` or `elif`.
    fn parse_if_branch(&mut self) -> PResult<Block<'a>> {
        self.descend(1)?;
        self.block_depth += 1;
        let result = crate::with_stack(|| self.parse_if_branch_statements());
        self.block_depth -= 1;
        self.depth -= 1;
        result
    }

    fn parse_if_branch_statements(&mut self) -> PResult<Block<'a>> {
        let start = self.tok.span;
        let mut stmts = self.vec();
        while !matches!(self.tok.kind, TokenKind::End | TokenKind::Else | TokenKind::Elif) {
            if self.at(TokenKind::Eof) {
                return Err(self.unexpected("`end`"));
            }
            stmts.push(self.parse_block_statement()?);
        }
        Ok(Block { stmts: self.slice(stmts), span: Span::new(start.start, self.tok.span.start) })
    }

    /// A statement inside a block: definitions are not allowed there.
    fn parse_block_statement(&mut self) -> PResult<Stmt<'a>> {
        self.parse_statement()
    }

    fn parse_statement(&mut self) -> PResult<Stmt<'a>> {
        match self.tok.kind {
            TokenKind::For => self.parse_for().map(|f| Stmt::For(self.arena.alloc(f))),
            TokenKind::If => {
                let start = self.bump().span;
                let stmt = self.parse_if_body(start)?;
                self.expect(TokenKind::End, "`end`")?;
                Ok(Stmt::If(self.arena.alloc(stmt)))
            }
            _ => {
                // A target starts with a name: `(x) = 1` is not an assignment.
                let starts_with_name = self.at(TokenKind::Ident);
                let expr = self.parse_expr()?;
                let op = match self.tok.kind {
                    TokenKind::Assign => AssignOp::Set,
                    TokenKind::PlusEq => AssignOp::Extend,
                    _ => return Ok(Stmt::Expr(expr)),
                };
                if !expr.is_var_ref() || !starts_with_name {
                    return Err(self.unexpected("an expression; only names and attributes can be assigned to"));
                }
                let op_tok = self.bump();
                let errors_before = self.error_count();
                let value = self.parse_expr()?;
                if !self.can_follow_item() {
                    return Err(self.unexpected("an operator or a new statement"));
                }
                // Both checks happen when the reference builds the assignment node, after the
                // value has parsed: an error it raised while building the value (a repeated
                // constructor argument) stopped it before them.
                let value_failed = self.error_count() > errors_before;
                if let ExprKind::Name(path) = expr.kind {
                    if op == AssignOp::Extend {
                        if value_failed {
                            return Err(Reported);
                        }
                        let name = self.text(path.span).to_string();
                        return Err(self.error_at(
                            ErrorKind::ParserException,
                            codes::PLUS_ASSIGN_ON_VARIABLE,
                            expr.span,
                            format!("Syntax error: Can not perform += on variable {name}"),
                            "`+=` only extends relation attributes",
                        ));
                    }
                    if path.is_simple() && !value_failed {
                        self.report_pending([self.hyphen_error(path.last())]);
                    }
                }
                let span = self.span_from(expr.span);
                Ok(Stmt::Assign(self.arena.alloc(Assign { target: expr, op, op_span: op_tok.span, value, span })))
            }
        }
    }

    fn parse_for(&mut self) -> PResult<For<'a>> {
        let start = self.bump().span;
        let t = self.expect(TokenKind::Ident, "a loop variable")?;
        let var = self.ident(t);
        self.expect(TokenKind::In, "`in`")?;
        let iterable = self.parse_expr()?;
        self.expect(TokenKind::Colon, "`:`")?;
        let body = self.parse_block_until_end()?;
        Ok(For { var, iterable, body, span: self.span_from(start) })
    }

    /// `cond ':' stmts [else ':' stmts | elif if_body]`, without the final `end`.
    fn parse_if_body(&mut self, start: Span) -> PResult<If<'a>> {
        let cond = self.parse_expr()?;
        self.expect(TokenKind::Colon, "`:`")?;
        let then = self.parse_if_branch()?;
        let otherwise = match self.tok.kind {
            TokenKind::Else => {
                self.bump();
                self.expect(TokenKind::Colon, "`:` after `else`")?;
                let block = self.parse_if_branch()?;
                if !self.at(TokenKind::End) {
                    return Err(self.unexpected("`end`"));
                }
                Else::Else(block)
            }
            TokenKind::Elif => {
                let elif_start = self.bump().span;
                self.descend(1)?;
                let nested = crate::with_stack(|| self.parse_if_body(elif_start));
                self.depth -= 1;
                Else::Elif(self.arena.alloc(nested?))
            }
            _ => Else::None,
        };
        Ok(If { cond, then, otherwise, span: Span::new(start.start, self.tok.span.end) })
    }

    // ---------------------------------------------------------------- names

    fn parse_ns_ref(&mut self, expected: &str) -> PResult<NsRef<'a>> {
        let first = self.expect(TokenKind::Ident, expected)?;
        let mut parts = self.vec();
        parts.push(self.ident(first));
        // `::` is always consumed: after a name it can only continue the path (or, where a
        // class reference is allowed, which callers check first, name an entity).
        while self.at(TokenKind::Sep) {
            self.bump();
            let t = self.expect(TokenKind::Ident, "a name after `::`")?;
            parts.push(self.ident(t));
        }
        Ok(NsRef { parts: self.slice(parts), span: self.span_from(first.span) })
    }

    /// `CID` or `ns::CID`.
    fn parse_class_ref(&mut self, expected: &str) -> PResult<ClassRef<'a>> {
        let start = self.tok.span;
        let mut namespace = self.vec();
        while self.at(TokenKind::Ident) {
            let t = self.bump();
            namespace.push(self.ident(t));
            self.expect(TokenKind::Sep, "`::`")?;
        }
        let t = self.expect(TokenKind::CIdent, expected)?;
        let name = self.ident(t);
        Ok(ClassRef { namespace: self.slice(namespace), name, span: self.span_from(start) })
    }

    // ---------------------------------------------------------------- expressions

    fn parse_expr(&mut self) -> PResult<&'a Expr<'a>> {
        self.parse_expr_bp(0)
    }

    fn alloc(&self, kind: ExprKind<'a>, span: Span) -> &'a Expr<'a> {
        self.arena.alloc(Expr { kind, span })
    }

    fn parse_expr_bp(&mut self, min_bp: u8) -> PResult<&'a Expr<'a>> {
        let depth_on_entry = self.depth;
        self.descend(1)?;
        // Checking the stack costs a thread-local lookup; once every 16 levels is enough, as a
        // level takes at most a few kilobytes even in unoptimised builds.
        let result = if self.depth.is_multiple_of(16) {
            crate::with_stack(|| self.parse_operators(min_bp))
        } else {
            self.parse_operators(min_bp)
        };
        // Each operator applied by `parse_operators` wrapped the tree one level deeper.
        self.depth = depth_on_entry;
        result
    }

    fn parse_operators(&mut self, min_bp: u8) -> PResult<&'a Expr<'a>> {
        let mut lhs = if self.at(TokenKind::Not) {
            let start = self.bump().span;
            let operand = self.parse_expr_bp(BP_NOT)?;
            self.alloc(ExprKind::Not(operand), self.span_from(start))
        } else {
            self.parse_postfix()?
        };
        loop {
            let (op, lbp) = match self.tok.kind {
                TokenKind::Question => {
                    if BP_CONDITIONAL < min_bp {
                        break;
                    }
                    self.bump();
                    self.descend(1)?;
                    let then = self.parse_expr_bp(0)?;
                    self.expect(TokenKind::Colon, "`:` in a conditional expression")?;
                    let otherwise = self.parse_expr_bp(BP_CONDITIONAL)?;
                    let span = self.span_from(lhs.span);
                    lhs = self.alloc(ExprKind::Conditional { cond: lhs, then, otherwise }, span);
                    continue;
                }
                TokenKind::Or => (BinOp::Or, BP_OR),
                TokenKind::And => (BinOp::And, BP_AND),
                TokenKind::EqEq => (BinOp::Eq, BP_CMP),
                TokenKind::NotEq => (BinOp::NotEq, BP_CMP),
                TokenKind::Lt => (BinOp::Lt, BP_CMP),
                TokenKind::Gt => (BinOp::Gt, BP_CMP),
                TokenKind::Le => (BinOp::Le, BP_CMP),
                TokenKind::Ge => (BinOp::Ge, BP_CMP),
                TokenKind::Plus => (BinOp::Add, BP_ADD),
                TokenKind::Minus => (BinOp::Sub, BP_ADD),
                TokenKind::Star => (BinOp::Mul, BP_MUL),
                TokenKind::Slash => (BinOp::Div, BP_MUL),
                TokenKind::Percent => (BinOp::Mod, BP_MUL),
                TokenKind::DoubleStar => (BinOp::Pow, BP_POW),
                TokenKind::In => (BinOp::In, BP_IN),
                // After an expression, `not` can only be the start of `not in`: the reference
                // always shifts it, so `x = a` followed by `not b` is a syntax error.
                TokenKind::Not => (BinOp::NotIn, BP_IN),
                _ => break,
            };
            if lbp < min_bp {
                break;
            }
            let op_tok = self.bump();
            let mut op_span = op_tok.span;
            if op == BinOp::NotIn {
                if !self.at(TokenKind::In) {
                    return Err(self.unexpected("`in` after `not`"));
                }
                op_span = op_span.to(self.bump().span);
            }
            self.descend(1)?;
            let rhs = self.parse_expr_bp(lbp + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = self.alloc(ExprKind::Binary { op, op_span, lhs, rhs }, span);
        }
        Ok(lhs)
    }

    /// A primary expression followed by what the grammar lets follow it: attribute access,
    /// lookups and `is defined` on references.
    fn parse_postfix(&mut self) -> PResult<&'a Expr<'a>> {
        match self.tok.kind {
            TokenKind::Ident => self.parse_name_expr(),
            TokenKind::CIdent => {
                let class = self.parse_class_ref("an entity name")?;
                self.class_ref_tail(class)
            }
            _ => self.parse_primary(),
        }
    }

    /// After a class reference: a constructor `T(...)` or an index lookup `T[...]`.
    fn class_ref_tail(&mut self, class: ClassRef<'a>) -> PResult<&'a Expr<'a>> {
        match self.tok.kind {
            TokenKind::LParen => {
                let paren = self.bump().span;
                let args = self.parse_kwargs(TokenKind::RParen)?;
                if !self.can_follow_expression() {
                    return Err(self.unexpected("an operator or a new statement"));
                }
                // The reference rejects a repeated attribute while building the constructor node,
                // and reports it where the node is: at the `(` (the constructor's location in
                // its grammar), which is on another line than the repeat in a call written
                // over several lines.
                let names = args.iter().filter_map(|a| match a {
                    KwArg::Keyword(name, _) => Some(*name),
                    KwArg::Splat(..) => None,
                });
                if let Some(name) = first_repeated(names) {
                    let attr = self.interner.resolve(name.name).to_string();
                    let class_name = self.text(class.span).to_string();
                    let d = Diagnostic::error(
                        ErrorKind::RuntimeException,
                        codes::DUPLICATE_ARGUMENT,
                        format!("The attribute {attr} in the constructor call of {class_name} is already set."),
                    )
                    .at(self.loc(paren), "in this constructor call")
                    .with_label(self.loc(name.span), "set again here");
                    self.report(d);
                }
                Ok(self.alloc(ExprKind::Construct { class, args }, self.span_from(class.span)))
            }
            TokenKind::LBracket => {
                self.bump();
                let args = self.parse_kwargs(TokenKind::RBracket)?;
                Ok(self.alloc(ExprKind::IndexLookup { class, args }, self.span_from(class.span)))
            }
            _ => Err(self.unexpected("`(` or `[` after an entity name")),
        }
    }

    /// Everything that starts with a lowercase name: references, attribute chains, calls,
    /// qualified constructors, lookups and `is defined`.
    fn parse_name_expr(&mut self) -> PResult<&'a Expr<'a>> {
        // Attribute and lookup chains nest the tree one level per link.
        let depth_on_entry = self.depth;
        let result = self.parse_name_chain();
        self.depth = depth_on_entry;
        result
    }

    fn parse_name_chain(&mut self) -> PResult<&'a Expr<'a>> {
        let start = self.tok.span;
        let first = self.bump();
        let mut parts = self.vec();
        parts.push(self.ident(first));
        while self.at(TokenKind::Sep) {
            match self.peek(1).kind {
                TokenKind::Ident => {
                    self.bump();
                    let t = self.bump();
                    parts.push(self.ident(t));
                }
                TokenKind::CIdent => {
                    self.bump();
                    let t = self.bump();
                    let name = self.ident(t);
                    let class = ClassRef { namespace: self.slice(parts), name, span: self.span_from(start) };
                    return self.class_ref_tail(class);
                }
                _ => {
                    self.bump();
                    return Err(self.unexpected("a name after `::`"));
                }
            }
        }
        let path = NsRef { parts: self.slice(parts), span: self.span_from(start) };
        match self.tok.kind {
            TokenKind::LParen => {
                self.bump();
                let args = self.parse_call_args()?;
                if !self.can_follow_expression() {
                    return Err(self.unexpected("an operator or a new statement"));
                }
                let names = args.iter().filter_map(|a| match a {
                    Arg::Keyword(name, _) => Some(*name),
                    _ => None,
                });
                if let Some(name) = first_repeated(names) {
                    let arg_name = self.interner.resolve(name.name).to_string();
                    let func = self.text(path.span).to_string();
                    let d = Diagnostic::error(
                        ErrorKind::RuntimeException,
                        codes::DUPLICATE_ARGUMENT,
                        format!("Keyword argument {arg_name} repeated in function call {func}()"),
                    )
                    .at(self.loc(name.span), "repeated here");
                    self.report(d);
                }
                return Ok(self.alloc(ExprKind::Call { func: path, args }, self.span_from(start)));
            }
            TokenKind::Is if path.is_simple() => {
                let name = self.alloc(ExprKind::Name(path), path.span);
                return self.is_defined(name);
            }
            _ => {}
        }
        let mut expr = self.alloc(ExprKind::Name(path), path.span);
        // Attribute chain.
        while self.at(TokenKind::Dot) {
            match self.peek(1).kind {
                TokenKind::Ident => {
                    self.descend(1)?;
                    self.bump();
                    let t = self.bump();
                    let attr = self.ident(t);
                    expr = self.alloc(ExprKind::Attr { base: expr, attr }, self.span_from(start));
                }
                TokenKind::CIdent => {
                    self.bump();
                    let t = self.bump();
                    // `class_ref : var_ref '.' CID` is an error rule of the reference that fires
                    // when a constructor or lookup follows; otherwise the next token is wrong.
                    let follows_class_ref = self.can_follow_item()
                        || matches!(
                            self.tok.kind,
                            TokenKind::Dot | TokenKind::Comma | TokenKind::Colon | TokenKind::Using | TokenKind::Mls
                        );
                    if !follows_class_ref {
                        return Err(self.unexpected("`(` or `[` after an entity name"));
                    }
                    return Err(self.invalid_namespace_access(Span::new(start.start, t.span.end)));
                }
                _ => {
                    self.bump();
                    return Err(self.unexpected("an attribute name after `.`"));
                }
            }
        }
        let is_attr = matches!(expr.kind, ExprKind::Attr { .. });
        match self.tok.kind {
            TokenKind::LParen if is_attr => {
                // `a.b(...)`: a plugin call written with `.` instead of `::`. The reference
                // rejects it once the arguments have parsed.
                let span = expr.span;
                self.bump();
                self.parse_call_args()?;
                if !self.can_follow_expression() {
                    return Err(self.unexpected("an operator or a new statement"));
                }
                Err(self.invalid_namespace_access(span))
            }
            TokenKind::Is if is_attr => self.is_defined(expr),
            TokenKind::LBracket => {
                if is_attr && self.bracket_holds_kwargs() {
                    let ExprKind::Attr { base, attr } = expr.kind else { unreachable!("checked is_attr") };
                    self.bump();
                    let args = self.parse_kwargs(TokenKind::RBracket)?;
                    return Ok(
                        self.alloc(ExprKind::SelectorLookup { base, relation: attr, args }, self.span_from(start))
                    );
                }
                while self.at(TokenKind::LBracket) {
                    self.descend(1)?;
                    self.bump();
                    let key = self.parse_expr()?;
                    self.expect(TokenKind::RBracket, "`]`")?;
                    expr = self.alloc(ExprKind::Subscript { base: expr, key }, self.span_from(start));
                }
                if self.at(TokenKind::Is) {
                    return self.is_defined(expr);
                }
                Ok(expr)
            }
            _ => Ok(expr),
        }
    }

    /// Whether the `[` at the current token opens keyword arguments (`[]`, `[k=...`, `[**...`)
    /// rather than a key expression.
    fn bracket_holds_kwargs(&mut self) -> bool {
        match self.peek(1).kind {
            TokenKind::RBracket | TokenKind::DoubleStar => true,
            TokenKind::Ident => self.peek(2).kind == TokenKind::Assign,
            _ => false,
        }
    }

    fn is_defined(&mut self, target: &'a Expr<'a>) -> PResult<&'a Expr<'a>> {
        self.bump();
        self.expect(TokenKind::Defined, "`defined` after `is`")?;
        Ok(self.alloc(ExprKind::IsDefined(target), self.span_from(target.span)))
    }

    fn invalid_namespace_access(&mut self, span: Span) -> Reported {
        let written = self.text(span).to_string();
        let suggestion = written.replace('.', "::");
        let d = Diagnostic::error(
            ErrorKind::InvalidNamespaceAccess,
            codes::INVALID_NAMESPACE_ACCESS,
            format!(
                "Syntax error: invalid namespace access `{written}`. Namespaces should be accessed with '::' rather than '.'. \
                 The '.' separator is reserved for attribute and relation access. Did you mean: `{suggestion}`"
            ),
        )
        .at(self.loc(span), "`.` is for attributes and relations")
        .with_help(format!("write `{suggestion}`"));
        self.report(d);
        Reported
    }

    /// Arguments of a plugin call: positional, `name=value` and `**dict`, in any order.
    fn parse_call_args(&mut self) -> PResult<&'a [Arg<'a>]> {
        let mut args = self.vec();
        while !self.at(TokenKind::RParen) {
            if self.at(TokenKind::DoubleStar) {
                let star = self.bump().span;
                let value = self.parse_expr()?;
                args.push(Arg::Splat(value, star.to(value.span)));
            } else if self.at(TokenKind::Ident) && self.peek(1).kind == TokenKind::Assign {
                let t = self.bump();
                let name = self.ident(t);
                self.bump();
                args.push(Arg::Keyword(name, self.parse_expr()?));
            } else {
                args.push(Arg::Positional(self.parse_expr()?));
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen, "`,` or `)`")?;
        Ok(self.slice(args))
    }

    /// Keyword arguments of constructors and index lookups: `name=value` and `**dict`.
    fn parse_kwargs(&mut self, close: TokenKind) -> PResult<&'a [KwArg<'a>]> {
        let mut args = self.vec();
        while !self.at(close) {
            if self.at(TokenKind::DoubleStar) {
                let star = self.bump().span;
                let value = self.parse_expr()?;
                args.push(KwArg::Splat(value, star.to(value.span)));
            } else if self.at(TokenKind::Ident) && self.peek(1).kind == TokenKind::Assign {
                let t = self.bump();
                let name = self.ident(t);
                self.bump();
                args.push(KwArg::Keyword(name, self.parse_expr()?));
            } else if self.at(TokenKind::Ident) {
                // Point at what follows the name: the reference fails there too.
                self.bump();
                return Err(self.unexpected("`=` (arguments are passed by keyword: `name=value`)"));
            } else {
                return Err(self.unexpected("a keyword argument `name=value` or `**dict`"));
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        let expected = if close == TokenKind::RParen { "`,` or `)`" } else { "`,` or `]`" };
        self.expect(close, expected)?;
        Ok(self.slice(args))
    }

    fn parse_primary(&mut self) -> PResult<&'a Expr<'a>> {
        let tok = self.tok;
        let kind = match tok.kind {
            TokenKind::Int => {
                self.bump();
                let text = self.text(tok.span);
                match text.parse::<i64>() {
                    Ok(v) => ExprKind::Int(v),
                    Err(_) => {
                        // The reference parses the literal with `int()`, which CPython refuses
                        // for more than 4,300 digits.
                        if text.len() > weft_ir::value::MAX_INT_STR_DIGITS {
                            let d = Diagnostic::error(
                                ErrorKind::ValueError,
                                codes::INT_TOO_LONG,
                                weft_ir::value::int_from_text_limit_message(text.len()),
                            )
                            .at(self.loc(tok.span), "an int literal of more digits than the reference reads");
                            self.report(d);
                        }
                        ExprKind::BigInt(text)
                    }
                }
            }
            TokenKind::Float => {
                self.bump();
                let text = self.text(tok.span);
                // `.5` and `-.5` are valid literals; Rust's parser wants a digit first.
                let value = match text.strip_prefix('-') {
                    Some(rest) => -parse_float(rest),
                    None => parse_float(text),
                };
                ExprKind::Float(value)
            }
            TokenKind::True => {
                self.bump();
                ExprKind::Bool(true)
            }
            TokenKind::False => {
                self.bump();
                ExprKind::Bool(false)
            }
            TokenKind::Null => {
                self.bump();
                ExprKind::Null
            }
            TokenKind::String => {
                self.bump();
                ExprKind::Str(self.string_literal(tok, false))
            }
            TokenKind::Mls => {
                self.bump();
                ExprKind::Str(self.string_literal(tok, true))
            }
            TokenKind::RString => {
                self.bump();
                let text = self.body(tok, 2, 1);
                ExprKind::RawStr(text)
            }
            TokenKind::FString => {
                self.bump();
                ExprKind::FStr(self.fstring_literal(tok)?)
            }
            TokenKind::Regex => {
                self.bump();
                ExprKind::Regex(self.regex_literal(tok))
            }
            TokenKind::LParen => {
                self.bump();
                let inner = self.parse_expr()?;
                self.expect(TokenKind::RParen, "`)`")?;
                // Parentheses only group; the reference keeps no node for them.
                return Ok(inner);
            }
            TokenKind::LBracket => return self.parse_list(),
            TokenKind::LBrace => return self.parse_dict(),
            TokenKind::Ident | TokenKind::CIdent => return self.parse_postfix(),
            _ => return Err(self.unexpected("an expression")),
        };
        Ok(self.alloc(kind, tok.span))
    }

    fn parse_list(&mut self) -> PResult<&'a Expr<'a>> {
        let start = self.bump().span;
        if self.eat(TokenKind::RBracket) {
            return Ok(self.alloc(ExprKind::List(&[]), self.span_from(start)));
        }
        let first = self.parse_expr()?;
        if self.at(TokenKind::For) {
            return self.parse_comprehension(start, first);
        }
        let mut items = self.vec();
        items.push(*first);
        while self.eat(TokenKind::Comma) {
            if self.at(TokenKind::RBracket) {
                break;
            }
            items.push(*self.parse_expr()?);
        }
        self.expect(TokenKind::RBracket, "`,` or `]`")?;
        Ok(self.alloc(ExprKind::List(self.slice(items)), self.span_from(start)))
    }

    fn parse_comprehension(&mut self, start: Span, element: &'a Expr<'a>) -> PResult<&'a Expr<'a>> {
        let mut fors = self.vec();
        while self.eat(TokenKind::For) {
            let t = self.expect(TokenKind::Ident, "a loop variable")?;
            let var = self.ident(t);
            self.expect(TokenKind::In, "`in`")?;
            let iterable = self.parse_expr()?;
            fors.push(CompFor { var, iterable });
        }
        let mut guards = self.vec();
        while self.eat(TokenKind::If) {
            guards.push(*self.parse_expr()?);
        }
        self.expect(TokenKind::RBracket, "`]`, `for` or `if`")?;
        Ok(self.alloc(
            ExprKind::ListComp { element, fors: self.slice(fors), guards: self.slice(guards) },
            self.span_from(start),
        ))
    }

    fn parse_dict(&mut self) -> PResult<&'a Expr<'a>> {
        let start = self.bump().span;
        let mut entries: BVec<'a, DictEntry<'a>> = self.vec();
        while !self.at(TokenKind::RBrace) {
            let tok = self.tok;
            let key = match tok.kind {
                TokenKind::String => {
                    self.bump();
                    let lit = self.string_literal(tok, false);
                    if !lit.interpolations.is_empty() {
                        return Err(self.error_at(
                            ErrorKind::ParserException,
                            codes::DICT_KEY_INTERPOLATION,
                            tok.span,
                            "Syntax error: String interpolation is not supported in dictionary keys. \
                             Use raw string to use a key containing double curly brackets"
                                .into(),
                            "this key contains `{{ }}`",
                        ));
                    }
                    lit.value
                }
                TokenKind::RString => {
                    self.bump();
                    self.body(tok, 2, 1)
                }
                _ => return Err(self.unexpected("a string key or `}`")),
            };
            self.expect(TokenKind::Colon, "`:` after the key")?;
            let value = self.parse_expr()?;
            entries.push(DictEntry { key, key_span: tok.span, value });
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RBrace, "`,` or `}`")?;
        let span = self.span_from(start);
        // The first key that appears earlier: by a set, since a scan of the earlier keys for
        // every key was quadratic in the size of a literal (9 s for 100,000 keys).
        let mut keys: std::collections::HashSet<&str> = std::collections::HashSet::with_capacity(entries.len());
        for entry in entries.iter() {
            if !keys.insert(entry.key) {
                let d = Diagnostic::error(
                    ErrorKind::DuplicateException,
                    codes::DUPLICATE_DICT_KEY,
                    format!("duplicate key in dict {}", entry.key),
                )
                .at(self.loc(entry.key_span), "this key appears earlier in the same dict");
                self.report(d);
                break;
            }
        }
        Ok(self.alloc(ExprKind::Dict(self.slice(entries)), span))
    }

    // ---------------------------------------------------------------- literals

    /// Decodes a string body, reporting escape problems at the literal.
    fn decode(&mut self, raw: &'a str, span: Span) -> &'a str {
        match strings::decode_unicode_escape(raw) {
            Ok(decoded) => {
                if decoded.invalid_escape {
                    let d = Diagnostic::warning(
                        ErrorKind::ParserWarning,
                        codes::W_INVALID_ESCAPE,
                        "Invalid escape sequence in string.",
                    )
                    .at(self.loc(span), "unknown escapes are kept as written")
                    .with_help("write `\\\\` for a literal backslash, or use a raw string `r\"...\"`");
                    self.report(d);
                }
                if decoded.lone_surrogate {
                    let d = Diagnostic::warning(
                        ErrorKind::ParserWarning,
                        codes::W_INVALID_ESCAPE,
                        "a surrogate code point escape was replaced by U+FFFD",
                    )
                    .at(self.loc(span), "lone surrogates cannot be represented");
                    self.report(d);
                }
                match decoded.value {
                    std::borrow::Cow::Borrowed(s) => s,
                    std::borrow::Cow::Owned(s) => self.arena.alloc_str(&s),
                }
            }
            Err(e) => {
                let at = Span::new(span.start, span.end);
                self.report(
                    Diagnostic::error(
                        ErrorKind::ParserException,
                        codes::INVALID_ESCAPE,
                        format!("Syntax error: {}", e.message),
                    )
                    .at(self.loc(at), "invalid escape sequence in this string"),
                );
                raw
            }
        }
    }

    /// The body of a multi-line string: the text between the first three and last three
    /// quotes, with newlines normalised as Python's universal newlines do.
    fn decode_mls(&mut self, tok: Token) -> &'a str {
        let raw = self.body(tok, 3, 3);
        let raw: &'a str = if raw.contains('\r') {
            let normalized = raw.replace("\r\n", "\n").replace('\r', "\n");
            self.arena.alloc_str(&normalized)
        } else {
            raw
        };
        self.decode(raw, tok.span)
    }

    fn string_literal(&mut self, tok: Token, multiline: bool) -> StrLit<'a> {
        let (prefix, suffix) = if multiline { (3, 3) } else { (1, 1) };
        let raw = self.body(tok, prefix, suffix);
        // Most literals are plain ASCII text: nothing to decode and nothing to interpolate.
        if !multiline && raw.bytes().all(|b| b < 0x80 && b != b'\\' && b != b'{') {
            return StrLit { value: raw, interpolations: &[], multiline };
        }
        let body_start = tok.span.start + prefix;
        let value = if multiline { self.decode_mls(tok) } else { self.decode(raw, tok.span) };
        let matches = strings::find_interpolations(value);
        if matches.is_empty() {
            return StrLit { value, interpolations: &[], multiline };
        }
        // Positions inside the decoded value map back onto the source exactly only when
        // decoding changed nothing; otherwise point at the whole literal.
        let exact = value.len() == raw.len();
        let mut interpolations = self.vec();
        for m in matches {
            let span = if exact {
                Span::new(body_start + m.name_start as u32, body_start + m.name_end as u32)
            } else {
                tok.span
            };
            let path = self.name_path(&value[m.name_start..m.name_end], span);
            interpolations.push(Interpolation { matched: &value[m.start..m.end], path, span });
        }
        StrLit { value, interpolations: self.slice(interpolations), multiline }
    }

    /// Splits `a.b.c` into interned parts, stripping the whitespace around each as the
    /// reference does.
    fn name_path(&mut self, text: &str, span: Span) -> &'a [Ident] {
        let mut parts = self.vec();
        for part in text.split('.') {
            let name = self.interner.intern(part.trim_matches(strings::is_python_space));
            parts.push(Ident { name, span });
        }
        self.slice(parts)
    }

    fn fstring_literal(&mut self, tok: Token) -> PResult<FStringLit<'a>> {
        let raw = self.body(tok, 2, 1);
        let value = self.decode(raw, tok.span);
        let chunks = match strings::parse_format_string(value) {
            Ok(c) => c,
            Err(e) => {
                return Err(self.error_at(
                    ErrorKind::ParserException,
                    codes::INVALID_FSTRING,
                    tok.span,
                    format!("Syntax error: Invalid f-string: {e}"),
                    "this f-string is malformed",
                ));
            }
        };
        // The reference registers fields until the first chunk without one (so a `{{`
        // escape hides every later field), including fields nested in format specs.
        let mut fields = self.vec();
        for chunk in &chunks {
            let Some(field) = &chunk.field else { break };
            if field.name.is_empty() {
                break;
            }
            let key = self.arena.alloc_str(field.name);
            let path = self.name_path(field.name, tok.span);
            fields.push(FStringField { key, path, span: tok.span });
            if !field.spec.is_empty() {
                let Ok(nested) = strings::parse_format_string(field.spec) else {
                    return Err(self.error_at(
                        ErrorKind::ParserException,
                        codes::INVALID_FSTRING,
                        tok.span,
                        "Syntax error: Invalid f-string: malformed format specification".into(),
                        "this f-string is malformed",
                    ));
                };
                for sub in &nested {
                    let Some(f) = &sub.field else { break };
                    if f.name.is_empty() {
                        break;
                    }
                    let key = self.arena.alloc_str(f.name);
                    let path = self.name_path(f.name, tok.span);
                    fields.push(FStringField { key, path, span: tok.span });
                }
            }
        }
        Ok(FStringLit { value, fields: self.slice(fields) })
    }

    /// The pattern of a `matching /.../` token, checked to compile as a Python regex.
    fn regex_literal(&mut self, tok: Token) -> &'a str {
        let text = self.text(tok.span);
        let slash = text.find('/').expect("a regex token contains a slash");
        let pattern = &text[slash + 1..text.len() - 1];
        if let Err(message) = crate::regex::check_python_regex(pattern) {
            let at = Span::new(tok.span.start + slash as u32, tok.span.end);
            self.report(
                Diagnostic::error(
                    ErrorKind::ParserException,
                    codes::INVALID_REGEX,
                    format!("Syntax error: Regex error in /{pattern}/: '{message}'"),
                )
                .at(self.loc(at), "this regular expression does not compile"),
            );
        }
        pattern
    }
}

/// The first name that occurs a second time.
fn first_repeated(names: impl Iterator<Item = Ident>) -> Option<Ident> {
    let mut seen: Vec<weft_ir::Symbol> = Vec::new();
    for name in names {
        if seen.contains(&name.name) {
            return Some(name);
        }
        seen.push(name.name);
    }
    None
}

fn parse_float(digits: &str) -> f64 {
    if digits.starts_with('.') {
        format!("0{digits}").parse().unwrap_or(f64::NAN)
    } else {
        digits.parse().unwrap_or(f64::NAN)
    }
}
