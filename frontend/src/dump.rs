//! A readable text form of the syntax tree, for snapshot tests and `weft parse --emit=ast`.
//!
//! The dump is an indented outline: one node per line, children indented by two spaces under
//! their parent. A node line reads `Kind @line:col details`, where the position is the 1-based
//! line and character column of the node's first byte, and a child that fills a named field is
//! prefixed with the field name (`lhs: Name @1:1 a`). Literal values are shown after escape
//! decoding, quoted and escaped like Rust string literals so that invisible characters (such as
//! the C1 controls that the reference's Latin-1 decoding produces) stay visible.
//!
//! Names (identifiers, namespaced paths, entity references, attribute types and multiplicities)
//! are written inline as text, without positions: they are part of the line of the node that
//! owns them. An expression that stands at statement position is an expression statement; the
//! dump shows the expression itself rather than a wrapper line.
//!
//! The format is stable: a change to it changes every parser snapshot, so change it only on
//! purpose.

use std::fmt::Write as _;

use weft_ir::{Interner, SourceFile, Span};

use crate::ast::*;

/// Renders `file`, which was parsed from `src`, as an indented outline.
pub fn dump_file(file: &File<'_>, src: &str, interner: &Interner) -> String {
    let mut d = Dumper { out: String::new(), source: SourceFile::new("<dump>", src), interner, depth: 0 };
    d.line("", format_args!("File"));
    d.depth += 1;
    if let Some(doc) = &file.docstring {
        d.docstring(doc);
    }
    for item in file.items {
        d.item(item);
    }
    d.out
}

struct Dumper<'i> {
    out: String,
    source: SourceFile,
    interner: &'i Interner,
    depth: usize,
}

impl Dumper<'_> {
    /// Writes one line at the current depth: `label` (a field name with its colon, or empty)
    /// followed by the node text.
    fn line(&mut self, label: &str, text: std::fmt::Arguments<'_>) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(label);
        // Writing into a String cannot fail.
        let _ = self.out.write_fmt(text);
        self.out.push('\n');
    }

    /// Runs `f` with the depth one level deeper: for the children of the line just written.
    fn nested(&mut self, f: impl FnOnce(&mut Self)) {
        self.depth += 1;
        f(self);
        self.depth -= 1;
    }

    fn pos(&self, span: Span) -> String {
        let lc = self.source.line_col(span.start);
        format!("@{}:{}", lc.line, lc.column)
    }

    fn name(&self, ident: Ident) -> &str {
        self.interner.resolve(ident.name)
    }

    fn path(&self, parts: &[Ident]) -> String {
        parts.iter().map(|p| self.name(*p)).collect::<Vec<_>>().join("::")
    }

    /// A name path of an interpolation or f-string field, whose parts are joined by `.`.
    fn dotted(&self, parts: &[Ident]) -> String {
        parts.iter().map(|p| self.name(*p)).collect::<Vec<_>>().join(".")
    }

    fn class(&self, class: &ClassRef<'_>) -> String {
        let mut text = String::new();
        for part in class.namespace {
            text.push_str(self.name(*part));
            text.push_str("::");
        }
        text.push_str(self.name(class.name));
        text
    }

    fn ty(&self, ty: &TypeExpr<'_>) -> String {
        let mut text = match ty.base {
            TypeBase::Named(path) => self.path(path.parts),
            TypeBase::Dict => "dict".to_string(),
        };
        if ty.list {
            text.push_str("[]");
        }
        if ty.nullable {
            text.push('?');
        }
        text
    }

    fn multiplicity(m: &Multiplicity) -> String {
        match m.upper {
            Some(upper) => format!("[{}:{}]", m.lower, upper),
            None => format!("[{}:]", m.lower),
        }
    }

    fn relation_end(&self, class: &ClassRef<'_>, attr: Option<&RelationAttr>) -> String {
        match attr {
            Some(a) => format!("{}.{} {}", self.class(class), self.name(a.name), Self::multiplicity(&a.multiplicity)),
            None => self.class(class),
        }
    }

    fn docstring(&mut self, doc: &DocString<'_>) {
        let pos = self.pos(doc.span);
        self.line("", format_args!("docstring {pos} {:?}", doc.text));
    }

    // ------------------------------------------------------------------ definitions

    fn item(&mut self, item: &Item<'_>) {
        match item {
            Item::Import(i) => {
                let pos = self.pos(i.span);
                let path = self.path(i.path.parts);
                match i.alias {
                    Some(alias) => {
                        let alias = self.name(alias).to_string();
                        self.line("", format_args!("Import {pos} {path} as {alias}"));
                    }
                    None => self.line("", format_args!("Import {pos} {path}")),
                }
            }
            Item::Entity(e) => self.entity(e),
            Item::Implementation(i) => {
                let pos = self.pos(i.span);
                let (name, entity) = (self.name(i.name).to_string(), self.class(&i.entity));
                self.line("", format_args!("Implementation {pos} {name} for {entity}"));
                self.nested(|d| {
                    if let Some(doc) = &i.docstring {
                        d.docstring(doc);
                    }
                    d.block("body", &i.body);
                });
            }
            Item::Implement(i) => {
                let pos = self.pos(i.span);
                let entity = self.class(&i.entity);
                let using: Vec<String> = i
                    .items
                    .iter()
                    .map(|u| match u {
                        ImplementItem::Named(path) => self.path(path.parts),
                        ImplementItem::Parents(_) => "parents".to_string(),
                    })
                    .collect();
                self.line("", format_args!("Implement {pos} {entity} using {}", using.join(", ")));
                self.nested(|d| {
                    if let Some(when) = i.when {
                        d.expr("when: ", when);
                    }
                    if let Some(doc) = &i.docstring {
                        d.docstring(doc);
                    }
                });
            }
            Item::Relation(r) => {
                let pos = self.pos(r.span);
                self.line("", format_args!("Relation {pos}"));
                self.nested(|d| {
                    let left = d.relation_end(&r.left, Some(&r.left_attr));
                    d.line("", format_args!("left: {left}"));
                    for annotation in r.annotations {
                        d.expr("annotation: ", annotation);
                    }
                    let right = d.relation_end(&r.right, r.right_attr.as_ref());
                    d.line("", format_args!("right: {right}"));
                    if let Some(doc) = &r.docstring {
                        d.docstring(doc);
                    }
                });
            }
            Item::Typedef(t) => {
                let pos = self.pos(t.span);
                let (name, base) = (self.name(t.name).to_string(), self.path(t.base.parts));
                self.line("", format_args!("Typedef {pos} {name} as {base}"));
                self.nested(|d| {
                    d.expr("constraint: ", t.constraint);
                    if let Some(doc) = &t.docstring {
                        d.docstring(doc);
                    }
                });
            }
            Item::Index(i) => {
                let pos = self.pos(i.span);
                let entity = self.class(&i.entity);
                let attrs: Vec<&str> = i.attributes.iter().map(|a| self.name(*a)).collect();
                let attrs = attrs.join(", ");
                self.line("", format_args!("Index {pos} {entity}({attrs})"));
            }
            Item::Stmt(s) => self.stmt(s),
        }
    }

    fn entity(&mut self, e: &EntityDef<'_>) {
        let pos = self.pos(e.span);
        let name = self.name(e.name).to_string();
        if e.parents.is_empty() {
            self.line("", format_args!("Entity {pos} {name}"));
        } else {
            let parents: Vec<String> = e.parents.iter().map(|p| self.class(p)).collect();
            self.line("", format_args!("Entity {pos} {name} extends {}", parents.join(", ")));
        }
        self.nested(|d| {
            if let Some(doc) = &e.docstring {
                d.docstring(doc);
            }
            for attr in e.attributes {
                let pos = d.pos(attr.span);
                let (ty, name) = (d.ty(&attr.ty), d.name(attr.name).to_string());
                d.line("", format_args!("Attribute {pos} {ty} {name}"));
                d.nested(|d| match attr.default {
                    AttrDefault::None => {}
                    AttrDefault::Value(value) => d.expr("default: ", value),
                    AttrDefault::Undef(span) => {
                        let pos = d.pos(span);
                        d.line("default: ", format_args!("Undef {pos}"));
                    }
                });
            }
        });
    }

    // ------------------------------------------------------------------ statements

    fn block(&mut self, label: &str, block: &Block<'_>) {
        crate::with_stack(|| self.block_inner(label, block))
    }

    fn block_inner(&mut self, label: &str, block: &Block<'_>) {
        let pos = self.pos(block.span);
        if block.stmts.is_empty() {
            self.line("", format_args!("{label} {pos} (empty)"));
            return;
        }
        self.line("", format_args!("{label} {pos}"));
        self.nested(|d| {
            for stmt in block.stmts {
                d.stmt(stmt);
            }
        });
    }

    fn stmt(&mut self, stmt: &Stmt<'_>) {
        match stmt {
            Stmt::Assign(a) => {
                let pos = self.pos(a.span);
                let op = match a.op {
                    AssignOp::Set => "=",
                    AssignOp::Extend => "+=",
                };
                self.line("", format_args!("Assign {pos} {op}"));
                self.nested(|d| {
                    d.expr("target: ", a.target);
                    d.expr("value: ", a.value);
                });
            }
            Stmt::For(f) => {
                let pos = self.pos(f.span);
                let var = self.name(f.var).to_string();
                self.line("", format_args!("For {pos} {var}"));
                self.nested(|d| {
                    d.expr("in: ", f.iterable);
                    d.block("body", &f.body);
                });
            }
            Stmt::If(i) => self.if_stmt("", i),
            Stmt::Expr(e) => self.expr("", e),
        }
    }

    fn if_stmt(&mut self, label: &str, i: &If<'_>) {
        let pos = self.pos(i.span);
        self.line(label, format_args!("If {pos}"));
        self.nested(|d| {
            d.expr("cond: ", i.cond);
            d.block("then", &i.then);
            match &i.otherwise {
                Else::None => {}
                Else::Else(block) => d.block("else", block),
                Else::Elif(nested) => d.if_stmt("elif: ", nested),
            }
        });
    }

    // ------------------------------------------------------------------ expressions

    fn expr(&mut self, label: &str, e: &Expr<'_>) {
        crate::with_stack(|| self.expr_inner(label, e))
    }

    fn expr_inner(&mut self, label: &str, e: &Expr<'_>) {
        let pos = self.pos(e.span);
        match e.kind {
            ExprKind::Int(v) => self.line(label, format_args!("Int {pos} {v}")),
            ExprKind::BigInt(text) => self.line(label, format_args!("BigInt {pos} {text}")),
            ExprKind::Float(v) => self.line(label, format_args!("Float {pos} {v:?}")),
            ExprKind::Bool(v) => self.line(label, format_args!("Bool {pos} {v}")),
            ExprKind::Null => self.line(label, format_args!("Null {pos}")),
            ExprKind::Str(s) => {
                let kind = if s.multiline { "Str (multi-line)" } else { "Str" };
                self.line(label, format_args!("{kind} {pos} {:?}", s.value));
                self.nested(|d| {
                    for i in s.interpolations {
                        let (pos, path) = (d.pos(i.span), d.dotted(i.path));
                        d.line("", format_args!("Interpolation {pos} {:?} path={path}", i.matched));
                    }
                });
            }
            ExprKind::RawStr(text) => self.line(label, format_args!("RawStr {pos} {text:?}")),
            ExprKind::FStr(f) => {
                self.line(label, format_args!("FStr {pos} {:?}", f.value));
                self.nested(|d| {
                    for field in f.fields {
                        let (pos, path) = (d.pos(field.span), d.dotted(field.path));
                        d.line("", format_args!("Field {pos} {:?} path={path}", field.key));
                    }
                });
            }
            ExprKind::Regex(pattern) => self.line(label, format_args!("Regex {pos} /{pattern}/")),
            ExprKind::Name(path) => {
                let path = self.path(path.parts);
                self.line(label, format_args!("Name {pos} {path}"));
            }
            ExprKind::Attr { base, attr } => {
                let attr = self.name(attr).to_string();
                self.line(label, format_args!("Attr {pos} .{attr}"));
                self.nested(|d| d.expr("base: ", base));
            }
            ExprKind::Subscript { base, key } => {
                self.line(label, format_args!("Subscript {pos}"));
                self.nested(|d| {
                    d.expr("base: ", base);
                    d.expr("key: ", key);
                });
            }
            ExprKind::Call { func, args } => {
                let func = self.path(func.parts);
                self.line(label, format_args!("Call {pos} {func}"));
                self.nested(|d| {
                    for arg in args {
                        match arg {
                            Arg::Positional(value) => d.expr("arg: ", value),
                            Arg::Keyword(name, value) => d.keyword(*name, value),
                            Arg::Splat(value, span) => d.splat(*span, value),
                        }
                    }
                });
            }
            ExprKind::Construct { class, args } => {
                let class = self.class(&class);
                self.line(label, format_args!("Construct {pos} {class}"));
                self.nested(|d| d.kwargs(args));
            }
            ExprKind::IndexLookup { class, args } => {
                let class = self.class(&class);
                self.line(label, format_args!("IndexLookup {pos} {class}"));
                self.nested(|d| d.kwargs(args));
            }
            ExprKind::SelectorLookup { base, relation, args } => {
                let relation = self.name(relation).to_string();
                self.line(label, format_args!("SelectorLookup {pos} .{relation}"));
                self.nested(|d| {
                    d.expr("base: ", base);
                    d.kwargs(args);
                });
            }
            ExprKind::List(items) => {
                let suffix = if items.is_empty() { " (empty)" } else { "" };
                self.line(label, format_args!("List {pos}{suffix}"));
                self.nested(|d| {
                    for item in items {
                        d.expr("", item);
                    }
                });
            }
            ExprKind::ListComp { element, fors, guards } => {
                self.line(label, format_args!("ListComp {pos}"));
                self.nested(|d| {
                    d.expr("element: ", element);
                    for f in fors {
                        let var = d.name(f.var).to_string();
                        d.expr(&format!("for {var} in: "), f.iterable);
                    }
                    for guard in guards {
                        d.expr("if: ", guard);
                    }
                });
            }
            ExprKind::Dict(entries) => {
                let suffix = if entries.is_empty() { " (empty)" } else { "" };
                self.line(label, format_args!("Dict {pos}{suffix}"));
                self.nested(|d| {
                    for entry in entries {
                        let key_pos = d.pos(entry.key_span);
                        d.expr(&format!("key {key_pos} {:?}: ", entry.key), entry.value);
                    }
                });
            }
            ExprKind::Not(operand) => {
                self.line(label, format_args!("Not {pos}"));
                self.nested(|d| d.expr("", operand));
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                self.line(label, format_args!("Binary {pos} {}", op.symbol()));
                self.nested(|d| {
                    d.expr("lhs: ", lhs);
                    d.expr("rhs: ", rhs);
                });
            }
            ExprKind::Conditional { cond, then, otherwise } => {
                self.line(label, format_args!("Conditional {pos}"));
                self.nested(|d| {
                    d.expr("cond: ", cond);
                    d.expr("then: ", then);
                    d.expr("else: ", otherwise);
                });
            }
            ExprKind::IsDefined(target) => {
                self.line(label, format_args!("IsDefined {pos}"));
                self.nested(|d| d.expr("", target));
            }
        }
    }

    fn keyword(&mut self, name: Ident, value: &Expr<'_>) {
        let name = self.name(name).to_string();
        self.expr(&format!("{name}= "), value);
    }

    fn splat(&mut self, span: Span, value: &Expr<'_>) {
        let pos = self.pos(span);
        self.line("", format_args!("Splat {pos}"));
        self.nested(|d| d.expr("", value));
    }

    fn kwargs(&mut self, args: &[KwArg<'_>]) {
        for arg in args {
            match arg {
                KwArg::Keyword(name, value) => self.keyword(*name, value),
                KwArg::Splat(value, span) => self.splat(*span, value),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_ir::FileId;

    #[test]
    fn dump_shows_positions_operators_and_fields() {
        let arena = bumpalo::Bump::new();
        let mut interner = Interner::new();
        let src = "x = a + b in c\ny = f(1, k=v, **d)\n";
        let out = crate::parse_file(&arena, src, FileId(0), &mut interner);
        assert!(out.diagnostics.is_empty());
        let text = dump_file(&out.file, src, &interner);
        let expected = "\
File
  Assign @1:1 =
    target: Name @1:1 x
    value: Binary @1:5 +
      lhs: Name @1:5 a
      rhs: Binary @1:9 in
        lhs: Name @1:9 b
        rhs: Name @1:14 c
  Assign @2:1 =
    target: Name @2:1 y
    value: Call @2:5 f
      arg: Int @2:7 1
      k= Name @2:12 v
      Splat @2:15
        Name @2:17 d
";
        assert_eq!(text, expected);
    }
}
