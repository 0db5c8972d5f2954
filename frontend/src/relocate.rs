//! Copying a syntax tree into another arena, renumbering its names.
//!
//! The loader parses files ahead of their turn on worker threads (see `project`), each into
//! an arena and an [`weft_ir::Interner`] of its own, because the project's arena and interner
//! can only be used by one thread at a time. When the import work list reaches such a file,
//! the tree is copied into the project's arena here, with every [`Symbol`] of the file's own
//! interner replaced by the project's symbol for the same text.
//!
//! The copy has the same shape as the original: every node is copied once, in the same
//! order, and nothing is shared that was not shared before (the parser never shares nodes;
//! the checker keys what it resolved by node address, so a copy must not merge or split
//! nodes). Every construction below names each field, so a field added to the tree is a
//! compile error here rather than a field silently left behind.

use bumpalo::Bump;
use weft_ir::Symbol;

use crate::ast::*;

/// Copies trees into `arena`, renumbering symbols through `symbols`.
pub(crate) struct Relocator<'a, 'm> {
    arena: &'a Bump,
    /// The project's symbol for each symbol of the file's interner, indexed by its number.
    symbols: &'m [Symbol],
}

impl<'a, 'm> Relocator<'a, 'm> {
    /// `symbols` must have an entry for every symbol of the interner the tree was parsed with.
    pub(crate) fn new(arena: &'a Bump, symbols: &'m [Symbol]) -> Self {
        Relocator { arena, symbols }
    }

    pub(crate) fn file(&self, file: &File<'_>) -> File<'a> {
        File {
            docstring: file.docstring.map(|d| self.docstring(d)),
            items: self.slice(file.items, |item| self.item(item)),
        }
    }

    fn slice<T, U>(&self, items: &[T], f: impl Fn(&T) -> U) -> &'a [U] {
        self.arena.alloc_slice_fill_iter(items.iter().map(f))
    }

    fn str(&self, text: &str) -> &'a str {
        self.arena.alloc_str(text)
    }

    fn symbol(&self, symbol: Symbol) -> Symbol {
        // Every symbol in the tree came from the file's interner, and `symbols` covers all of
        // them (see `new`), so the index is in bounds.
        self.symbols[symbol.as_u32() as usize]
    }

    fn ident(&self, ident: Ident) -> Ident {
        Ident { name: self.symbol(ident.name), span: ident.span }
    }

    fn idents(&self, idents: &[Ident]) -> &'a [Ident] {
        self.slice(idents, |i| self.ident(*i))
    }

    fn ns_ref(&self, r: NsRef<'_>) -> NsRef<'a> {
        NsRef { parts: self.idents(r.parts), span: r.span }
    }

    fn class_ref(&self, r: ClassRef<'_>) -> ClassRef<'a> {
        ClassRef { namespace: self.idents(r.namespace), name: self.ident(r.name), span: r.span }
    }

    fn docstring(&self, d: DocString<'_>) -> DocString<'a> {
        DocString { text: self.str(d.text), span: d.span }
    }

    fn item(&self, item: &Item<'_>) -> Item<'a> {
        match *item {
            Item::Import(i) => Item::Import(self.arena.alloc(Import {
                path: self.ns_ref(i.path),
                alias: i.alias.map(|a| self.ident(a)),
                span: i.span,
            })),
            Item::Entity(e) => Item::Entity(self.arena.alloc(EntityDef {
                name: self.ident(e.name),
                parents: self.slice(e.parents, |p| self.class_ref(*p)),
                docstring: e.docstring.map(|d| self.docstring(d)),
                attributes: self.slice(e.attributes, |a| self.attribute(a)),
                span: e.span,
            })),
            Item::Implementation(i) => Item::Implementation(self.arena.alloc(ImplementationDef {
                name: self.ident(i.name),
                entity: self.class_ref(i.entity),
                docstring: i.docstring.map(|d| self.docstring(d)),
                body: self.block(&i.body),
                span: i.span,
            })),
            Item::Implement(i) => Item::Implement(self.arena.alloc(ImplementDef {
                entity: self.class_ref(i.entity),
                items: self.slice(i.items, |item| match *item {
                    ImplementItem::Named(r) => ImplementItem::Named(self.ns_ref(r)),
                    ImplementItem::Parents(span) => ImplementItem::Parents(span),
                }),
                when: i.when.map(|w| self.expr_ref(w)),
                docstring: i.docstring.map(|d| self.docstring(d)),
                span: i.span,
            })),
            Item::Relation(r) => Item::Relation(self.arena.alloc(RelationDef {
                left: self.class_ref(r.left),
                left_attr: self.relation_attr(r.left_attr),
                annotations: self.slice(r.annotations, |e| self.expr(e)),
                right: self.class_ref(r.right),
                right_attr: r.right_attr.map(|a| self.relation_attr(a)),
                docstring: r.docstring.map(|d| self.docstring(d)),
                span: r.span,
            })),
            Item::Typedef(t) => Item::Typedef(self.arena.alloc(TypedefDef {
                name: self.ident(t.name),
                base: self.ns_ref(t.base),
                constraint: self.expr_ref(t.constraint),
                docstring: t.docstring.map(|d| self.docstring(d)),
                span: t.span,
            })),
            Item::Index(i) => Item::Index(self.arena.alloc(IndexDef {
                entity: self.class_ref(i.entity),
                attributes: self.idents(i.attributes),
                span: i.span,
            })),
            Item::Stmt(s) => Item::Stmt(self.stmt(&s)),
        }
    }

    fn attribute(&self, a: &AttributeDef<'_>) -> AttributeDef<'a> {
        AttributeDef {
            ty: TypeExpr {
                base: match a.ty.base {
                    TypeBase::Named(r) => TypeBase::Named(self.ns_ref(r)),
                    TypeBase::Dict => TypeBase::Dict,
                },
                list: a.ty.list,
                nullable: a.ty.nullable,
                span: a.ty.span,
            },
            name: self.ident(a.name),
            default: match a.default {
                AttrDefault::None => AttrDefault::None,
                AttrDefault::Value(e) => AttrDefault::Value(self.expr_ref(e)),
                AttrDefault::Undef(span) => AttrDefault::Undef(span),
            },
            span: a.span,
        }
    }

    fn relation_attr(&self, a: RelationAttr) -> RelationAttr {
        RelationAttr { name: self.ident(a.name), multiplicity: a.multiplicity }
    }

    fn block(&self, block: &Block<'_>) -> Block<'a> {
        // Blocks nest as deeply as the input does.
        crate::with_stack(|| Block { stmts: self.slice(block.stmts, |s| self.stmt(s)), span: block.span })
    }

    fn stmt(&self, stmt: &Stmt<'_>) -> Stmt<'a> {
        match *stmt {
            Stmt::Assign(a) => Stmt::Assign(self.arena.alloc(Assign {
                target: self.expr_ref(a.target),
                op: a.op,
                op_span: a.op_span,
                value: self.expr_ref(a.value),
                span: a.span,
            })),
            Stmt::For(f) => Stmt::For(self.arena.alloc(For {
                var: self.ident(f.var),
                iterable: self.expr_ref(f.iterable),
                body: self.block(&f.body),
                span: f.span,
            })),
            Stmt::If(i) => Stmt::If(self.if_ref(i)),
            Stmt::Expr(e) => Stmt::Expr(self.expr_ref(e)),
        }
    }

    fn if_ref(&self, i: &If<'_>) -> &'a If<'a> {
        // `elif` chains nest one level per branch.
        crate::with_stack(|| {
            let cond = self.expr_ref(i.cond);
            let then = self.block(&i.then);
            let otherwise = match i.otherwise {
                Else::None => Else::None,
                Else::Else(b) => Else::Else(self.block(&b)),
                Else::Elif(nested) => Else::Elif(self.if_ref(nested)),
            };
            self.arena.alloc(If { cond, then, otherwise, span: i.span })
        })
    }

    fn expr_ref(&self, e: &Expr<'_>) -> &'a Expr<'a> {
        self.arena.alloc(self.expr(e))
    }

    fn expr(&self, e: &Expr<'_>) -> Expr<'a> {
        // Expressions nest as deeply as the parser allows (1000 levels).
        crate::with_stack(|| Expr { kind: self.expr_kind(&e.kind), span: e.span })
    }

    fn kwargs(&self, args: &[KwArg<'_>]) -> &'a [KwArg<'a>] {
        self.slice(args, |a| match *a {
            KwArg::Keyword(name, e) => KwArg::Keyword(self.ident(name), self.expr_ref(e)),
            KwArg::Splat(e, span) => KwArg::Splat(self.expr_ref(e), span),
        })
    }

    fn expr_kind(&self, kind: &ExprKind<'_>) -> ExprKind<'a> {
        match *kind {
            ExprKind::Int(v) => ExprKind::Int(v),
            ExprKind::BigInt(text) => ExprKind::BigInt(self.str(text)),
            ExprKind::Float(v) => ExprKind::Float(v),
            ExprKind::Bool(v) => ExprKind::Bool(v),
            ExprKind::Null => ExprKind::Null,
            ExprKind::Str(lit) => ExprKind::Str(StrLit {
                value: self.str(lit.value),
                interpolations: self.slice(lit.interpolations, |i| Interpolation {
                    matched: self.str(i.matched),
                    path: self.idents(i.path),
                    span: i.span,
                }),
                multiline: lit.multiline,
            }),
            ExprKind::RawStr(text) => ExprKind::RawStr(self.str(text)),
            ExprKind::FStr(lit) => ExprKind::FStr(FStringLit {
                value: self.str(lit.value),
                fields: self.slice(lit.fields, |f| FStringField {
                    key: self.str(f.key),
                    path: self.idents(f.path),
                    span: f.span,
                }),
            }),
            ExprKind::Regex(text) => ExprKind::Regex(self.str(text)),
            ExprKind::Name(r) => ExprKind::Name(self.ns_ref(r)),
            ExprKind::Attr { base, attr } => ExprKind::Attr { base: self.expr_ref(base), attr: self.ident(attr) },
            ExprKind::Subscript { base, key } => {
                ExprKind::Subscript { base: self.expr_ref(base), key: self.expr_ref(key) }
            }
            ExprKind::Call { func, args } => ExprKind::Call {
                func: self.ns_ref(func),
                args: self.slice(args, |a| match *a {
                    Arg::Positional(e) => Arg::Positional(self.expr_ref(e)),
                    Arg::Keyword(name, e) => Arg::Keyword(self.ident(name), self.expr_ref(e)),
                    Arg::Splat(e, span) => Arg::Splat(self.expr_ref(e), span),
                }),
            },
            ExprKind::Construct { class, args } => {
                ExprKind::Construct { class: self.class_ref(class), args: self.kwargs(args) }
            }
            ExprKind::IndexLookup { class, args } => {
                ExprKind::IndexLookup { class: self.class_ref(class), args: self.kwargs(args) }
            }
            ExprKind::SelectorLookup { base, relation, args } => ExprKind::SelectorLookup {
                base: self.expr_ref(base),
                relation: self.ident(relation),
                args: self.kwargs(args),
            },
            ExprKind::List(items) => ExprKind::List(self.slice(items, |e| self.expr(e))),
            ExprKind::ListComp { element, fors, guards } => ExprKind::ListComp {
                element: self.expr_ref(element),
                fors: self.slice(fors, |f| CompFor { var: self.ident(f.var), iterable: self.expr_ref(f.iterable) }),
                guards: self.slice(guards, |g| self.expr(g)),
            },
            ExprKind::Dict(entries) => ExprKind::Dict(self.slice(entries, |entry| DictEntry {
                key: self.str(entry.key),
                key_span: entry.key_span,
                value: self.expr_ref(entry.value),
            })),
            ExprKind::Not(e) => ExprKind::Not(self.expr_ref(e)),
            ExprKind::Binary { op, op_span, lhs, rhs } => {
                ExprKind::Binary { op, op_span, lhs: self.expr_ref(lhs), rhs: self.expr_ref(rhs) }
            }
            ExprKind::Conditional { cond, then, otherwise } => ExprKind::Conditional {
                cond: self.expr_ref(cond),
                then: self.expr_ref(then),
                otherwise: self.expr_ref(otherwise),
            },
            ExprKind::IsDefined(e) => ExprKind::IsDefined(self.expr_ref(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::dump_file;
    use weft_ir::{FileId, Interner};

    /// Parses `src` into a scratch arena with an interner of its own, relocates the tree into
    /// a second arena with an interner that already holds other names, and checks that the
    /// copy reads exactly as a tree parsed straight into that interner. Returns whether the
    /// source has syntax errors.
    fn assert_relocates(src: &str) -> bool {
        let seed = ["zzz", "x", "Entity", "self", "std"];
        let direct_arena = Bump::new();
        let mut direct_interner = Interner::new();
        for s in seed {
            direct_interner.intern(s);
        }
        let direct = crate::parse_file(&direct_arena, src, FileId(0), &mut direct_interner);

        let scratch = Bump::new();
        let mut local = Interner::new();
        let ahead = crate::parse_file(&scratch, src, FileId(0), &mut local);
        let arena = Bump::new();
        let mut interner = Interner::new();
        for s in seed {
            interner.intern(s);
        }
        let symbols: Vec<Symbol> =
            (0..local.len() as u32).map(|i| interner.intern(local.resolve(Symbol::from_u32(i)))).collect();
        let copy = Relocator::new(&arena, &symbols).file(&ahead.file);
        let ahead_diagnostics = ahead.diagnostics.len();
        // The copy must not borrow from the arena it was parsed into.
        drop(scratch);

        assert_eq!(dump_file(&copy, src, &interner), dump_file(&direct.file, src, &direct_interner));
        // Interning the file's names in the order it met them numbers them as parsing here
        // would have.
        assert_eq!(interner.len(), direct_interner.len());
        for i in 0..interner.len() as u32 {
            assert_eq!(interner.resolve(Symbol::from_u32(i)), direct_interner.resolve(Symbol::from_u32(i)));
        }
        assert_eq!(ahead_diagnostics, direct.diagnostics.len());
        direct.has_errors()
    }

    #[test]
    fn every_construct_survives_relocation() {
        let errors = assert_relocates(
            r#""""module doc"""
import std
import mod::sub as alias
typedef port as int matching self > 0 and self < 65536
typedef name_t as string matching /^[a-z]+$/
entity Base extends std::Entity, Other:
    """entity doc"""
    string name = "n"
    int[]? ports = [1, 2]
    dict d = {"k": 1}
    string u = undef
    bool b = null
end
Base.peers [0:] -- Other.base [1]
Base.x [1] foo Other
index Base(name, ports)
implementation impl for Base:
    """impl doc"""
    for p in self.ports:
        if p > 10:
            x = p
        elif p < 0:
            y = not p
        else:
            z = p ** 2 - 1 / 3 % 4
        end
    end
end
implement Base using impl, parents
implement Other using std::none when self.name == "n"
a = Base(name="a", **extra)
b = Base[name="a"]
c = a.peers[name="b"]
d = [v.name for v in a.peers for w in v.ports if v.name != "x"]
e = {"key": a.name, "other": [1.5, 12345678901234567890123, true, null]}
f = "interpolated {{ a.name }} text"
g = f"formatted {a.name:>10} {b}"
h = r"raw\n"
i = a.name is defined ? std::len(a.peers, key=1) : d["key"]
j = 'x' in d and "y" not in d or (1 < 2)
k = """multi
line"""
a.peers += b
std::print(k)
"#,
        );
        assert!(!errors, "the sample must parse, or part of it is not relocated");
    }

    #[test]
    fn files_with_syntax_errors_relocate_too() {
        assert!(assert_relocates("entity A:\n  string x = \nend\nb = (1 +\nc = A(x=1)\n"));
    }
}
