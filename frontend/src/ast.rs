//! The syntax tree.
//!
//! Nodes live in a bump arena (`'a`) and refer to each other with plain references and
//! slices; nothing in the tree needs `Drop`, so an arena can be reset and reused. Names are
//! interned [`Symbol`]s and positions are byte [`Span`]s of the file the tree was parsed from.
//!
//! The tree is faithful to the source: statements keep source order (the reference emits
//! nested blocks in reverse order, which is the evaluator's concern), `x not in y` stays a
//! `NotIn` operator, and list and dict literals are not folded.

use weft_ir::{Span, Symbol};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: Symbol,
    pub span: Span,
}

/// A possibly namespaced name: `x`, `std::print`, `mod::sub::x`.
#[derive(Clone, Copy, Debug)]
pub struct NsRef<'a> {
    /// At least one part.
    pub parts: &'a [Ident],
    pub span: Span,
}

impl<'a> NsRef<'a> {
    pub fn last(&self) -> Ident {
        *self.parts.last().expect("an NsRef has at least one part")
    }

    /// The namespace part (everything but the last segment).
    pub fn namespace(&self) -> &'a [Ident] {
        &self.parts[..self.parts.len() - 1]
    }

    pub fn is_simple(&self) -> bool {
        self.parts.len() == 1
    }
}

/// A reference to an entity type: `Host` or `std::Host`.
#[derive(Clone, Copy, Debug)]
pub struct ClassRef<'a> {
    /// The namespace path; empty for an unqualified name.
    pub namespace: &'a [Ident],
    pub name: Ident,
    pub span: Span,
}

/// A parsed file: its optional module docstring and its top-level items in source order.
#[derive(Clone, Copy, Debug)]
pub struct File<'a> {
    pub docstring: Option<DocString<'a>>,
    pub items: &'a [Item<'a>],
}

/// A docstring: a multi-line string in a documentation position.
#[derive(Clone, Copy, Debug)]
pub struct DocString<'a> {
    pub text: &'a str,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    Import(&'a Import<'a>),
    Entity(&'a EntityDef<'a>),
    Implementation(&'a ImplementationDef<'a>),
    Implement(&'a ImplementDef<'a>),
    Relation(&'a RelationDef<'a>),
    Typedef(&'a TypedefDef<'a>),
    Index(&'a IndexDef<'a>),
    Stmt(Stmt<'a>),
}

#[derive(Clone, Copy, Debug)]
pub struct Import<'a> {
    pub path: NsRef<'a>,
    pub alias: Option<Ident>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct EntityDef<'a> {
    pub name: Ident,
    pub parents: &'a [ClassRef<'a>],
    pub docstring: Option<DocString<'a>>,
    pub attributes: &'a [AttributeDef<'a>],
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct AttributeDef<'a> {
    pub ty: TypeExpr<'a>,
    pub name: Ident,
    pub default: AttrDefault<'a>,
    pub span: Span,
}

/// An attribute type: `string`, `std::port[]?`, `dict?`.
#[derive(Clone, Copy, Debug)]
pub struct TypeExpr<'a> {
    pub base: TypeBase<'a>,
    pub list: bool,
    pub nullable: bool,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum TypeBase<'a> {
    Named(NsRef<'a>),
    /// `dict` is a keyword, so it gets its own variant.
    Dict,
}

#[derive(Clone, Copy, Debug)]
pub enum AttrDefault<'a> {
    None,
    /// `= constant`, `= [constants]` or, for dicts, `= {..}` / `= null`.
    Value(&'a Expr<'a>),
    /// `= undef`: removes an inherited default.
    Undef(Span),
}

#[derive(Clone, Copy, Debug)]
pub struct ImplementationDef<'a> {
    pub name: Ident,
    pub entity: ClassRef<'a>,
    pub docstring: Option<DocString<'a>>,
    pub body: Block<'a>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum ImplementItem<'a> {
    Named(NsRef<'a>),
    Parents(Span),
}

#[derive(Clone, Copy, Debug)]
pub struct ImplementDef<'a> {
    pub entity: ClassRef<'a>,
    pub items: &'a [ImplementItem<'a>],
    /// `None` means the constant condition `true`.
    pub when: Option<&'a Expr<'a>>,
    pub docstring: Option<DocString<'a>>,
    pub span: Span,
}

impl<'a> ImplementDef<'a> {
    pub fn uses_parents(&self) -> bool {
        self.items.iter().any(|i| matches!(i, ImplementItem::Parents(_)))
    }
}

/// `[lower]`, `[lower:]`, `[lower:upper]` or `[:upper]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Multiplicity {
    pub lower: i64,
    pub upper: Option<i64>,
    pub span: Span,
}

/// One end of a relation: the attribute `name` defined on the entity at the *other* end.
#[derive(Clone, Copy, Debug)]
pub struct RelationAttr {
    pub name: Ident,
    pub multiplicity: Multiplicity,
}

/// `A.b [m1] -- B.a [m2]`: `A` gets the attribute `b` (of type `B`, multiplicity `m1`) and,
/// when the relation is bidirectional, `B` gets `a` (of type `A`, multiplicity `m2`).
#[derive(Clone, Copy, Debug)]
pub struct RelationDef<'a> {
    pub left: ClassRef<'a>,
    pub left_attr: RelationAttr,
    /// The annotations written in place of the arrow; empty for `--`, `->`, `<-`.
    pub annotations: &'a [Expr<'a>],
    pub right: ClassRef<'a>,
    pub right_attr: Option<RelationAttr>,
    pub docstring: Option<DocString<'a>>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct TypedefDef<'a> {
    pub name: Ident,
    pub base: NsRef<'a>,
    /// An expression over `self`, or a [`ExprKind::Regex`].
    pub constraint: &'a Expr<'a>,
    pub docstring: Option<DocString<'a>>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct IndexDef<'a> {
    pub entity: ClassRef<'a>,
    pub attributes: &'a [Ident],
    pub span: Span,
}

/// A block of statements (`for`, `if` and implementation bodies), in source order.
#[derive(Clone, Copy, Debug)]
pub struct Block<'a> {
    pub stmts: &'a [Stmt<'a>],
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum Stmt<'a> {
    Assign(&'a Assign<'a>),
    For(&'a For<'a>),
    If(&'a If<'a>),
    Expr(&'a Expr<'a>),
}

impl<'a> Stmt<'a> {
    pub fn span(&self) -> Span {
        match self {
            Stmt::Assign(a) => a.span,
            Stmt::For(f) => f.span,
            Stmt::If(i) => i.span,
            Stmt::Expr(e) => e.span,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`: only on attribute references.
    Extend,
}

#[derive(Clone, Copy, Debug)]
pub struct Assign<'a> {
    /// An [`ExprKind::Name`] or an [`ExprKind::Attr`] chain.
    pub target: &'a Expr<'a>,
    pub op: AssignOp,
    pub op_span: Span,
    pub value: &'a Expr<'a>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct For<'a> {
    pub var: Ident,
    pub iterable: &'a Expr<'a>,
    pub body: Block<'a>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub struct If<'a> {
    pub cond: &'a Expr<'a>,
    pub then: Block<'a>,
    pub otherwise: Else<'a>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum Else<'a> {
    None,
    Else(Block<'a>),
    /// `elif`: the reference stores it as an else block holding a single `if`.
    Elif(&'a If<'a>),
}

#[derive(Clone, Copy, Debug)]
pub struct Expr<'a> {
    pub kind: ExprKind<'a>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Eq,
    NotEq,
    Lt,
    Gt,
    Le,
    Ge,
    In,
    NotIn,
    And,
    Or,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Eq => "==",
            BinOp::NotEq => "!=",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::Le => "<=",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::NotIn => "not in",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
        }
    }
}

/// A string literal after escape decoding, with its `{{ var }}` interpolations.
#[derive(Clone, Copy, Debug)]
pub struct StrLit<'a> {
    pub value: &'a str,
    pub interpolations: &'a [Interpolation<'a>],
    /// Whether this is a multi-line (triple-quoted) string.
    pub multiline: bool,
}

/// One `{{ a.b.c }}` in a string: the matched text (replaced by the value) and the name path.
#[derive(Clone, Copy, Debug)]
pub struct Interpolation<'a> {
    pub matched: &'a str,
    pub path: &'a [Ident],
    pub span: Span,
}

/// An f-string: the decoded text, formatted with Python's format language at run time, and
/// the variables it reads.
#[derive(Clone, Copy, Debug)]
pub struct FStringLit<'a> {
    pub value: &'a str,
    pub fields: &'a [FStringField<'a>],
}

/// A replacement field of an f-string: the key as written between the braces (`' a.b '`) and
/// the name path it refers to.
#[derive(Clone, Copy, Debug)]
pub struct FStringField<'a> {
    pub key: &'a str,
    pub path: &'a [Ident],
    pub span: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Positional(&'a Expr<'a>),
    Keyword(Ident, &'a Expr<'a>),
    /// `**dict`
    Splat(&'a Expr<'a>, Span),
}

#[derive(Clone, Copy, Debug)]
pub enum KwArg<'a> {
    Keyword(Ident, &'a Expr<'a>),
    /// `**dict`
    Splat(&'a Expr<'a>, Span),
}

#[derive(Clone, Copy, Debug)]
pub struct CompFor<'a> {
    pub var: Ident,
    pub iterable: &'a Expr<'a>,
}

#[derive(Clone, Copy, Debug)]
pub struct DictEntry<'a> {
    /// The key after decoding (dict keys are plain or raw strings).
    pub key: &'a str,
    pub key_span: Span,
    pub value: &'a Expr<'a>,
}

#[derive(Clone, Copy, Debug)]
pub enum ExprKind<'a> {
    Int(i64),
    /// An integer literal outside the `i64` range, as written (with its sign).
    BigInt(&'a str),
    Float(f64),
    Bool(bool),
    Null,
    Str(StrLit<'a>),
    RawStr(&'a str),
    FStr(FStringLit<'a>),
    /// `matching /pattern/` used as a value: the pattern text.
    Regex(&'a str),
    /// `x`, `mod::x`
    Name(NsRef<'a>),
    /// `a.b`
    Attr {
        base: &'a Expr<'a>,
        attr: Ident,
    },
    /// `d[k]`
    Subscript {
        base: &'a Expr<'a>,
        key: &'a Expr<'a>,
    },
    /// `f(args)`: a plugin call or a primitive type cast.
    Call {
        func: NsRef<'a>,
        args: &'a [Arg<'a>],
    },
    /// `T(k=v, **d)`
    Construct {
        class: ClassRef<'a>,
        args: &'a [KwArg<'a>],
    },
    /// `T[k=v]`
    IndexLookup {
        class: ClassRef<'a>,
        args: &'a [KwArg<'a>],
    },
    /// `x.rel[k=v]`
    SelectorLookup {
        base: &'a Expr<'a>,
        relation: Ident,
        args: &'a [KwArg<'a>],
    },
    List(&'a [Expr<'a>]),
    /// `[element for v in it ... if g ...]`: the first `for` is the outermost.
    ListComp {
        element: &'a Expr<'a>,
        fors: &'a [CompFor<'a>],
        guards: &'a [Expr<'a>],
    },
    Dict(&'a [DictEntry<'a>]),
    Not(&'a Expr<'a>),
    Binary {
        op: BinOp,
        op_span: Span,
        lhs: &'a Expr<'a>,
        rhs: &'a Expr<'a>,
    },
    /// `c ? a : b`
    Conditional {
        cond: &'a Expr<'a>,
        then: &'a Expr<'a>,
        otherwise: &'a Expr<'a>,
    },
    /// `x is defined`, `a.b is defined`, `d[k] is defined`.
    IsDefined(&'a Expr<'a>),
}

impl<'a> Expr<'a> {
    /// Whether this expression is a `var_ref` of the grammar: a name or an attribute chain on
    /// a name.
    pub fn is_var_ref(&self) -> bool {
        match self.kind {
            ExprKind::Name(_) => true,
            ExprKind::Attr { base, .. } => base.is_var_ref(),
            _ => false,
        }
    }
}

impl<'a> Expr<'a> {
    /// Calls `visit` on this expression and every expression nested in it, parents first.
    pub fn walk(&'a self, visit: &mut dyn FnMut(&'a Expr<'a>)) {
        crate::with_stack(|| self.walk_inner(visit))
    }

    fn walk_inner(&'a self, visit: &mut dyn FnMut(&'a Expr<'a>)) {
        visit(self);
        match &self.kind {
            ExprKind::Int(_)
            | ExprKind::BigInt(_)
            | ExprKind::Float(_)
            | ExprKind::Bool(_)
            | ExprKind::Null
            | ExprKind::Str(_)
            | ExprKind::RawStr(_)
            | ExprKind::FStr(_)
            | ExprKind::Regex(_)
            | ExprKind::Name(_) => {}
            ExprKind::Attr { base, .. } => base.walk(visit),
            ExprKind::Subscript { base, key } => {
                base.walk(visit);
                key.walk(visit);
            }
            ExprKind::Call { args, .. } => {
                for arg in *args {
                    match arg {
                        Arg::Positional(e) | Arg::Keyword(_, e) | Arg::Splat(e, _) => e.walk(visit),
                    }
                }
            }
            ExprKind::Construct { args, .. } | ExprKind::IndexLookup { args, .. } => {
                for arg in *args {
                    match arg {
                        KwArg::Keyword(_, e) | KwArg::Splat(e, _) => e.walk(visit),
                    }
                }
            }
            ExprKind::SelectorLookup { base, args, .. } => {
                base.walk(visit);
                for arg in *args {
                    match arg {
                        KwArg::Keyword(_, e) | KwArg::Splat(e, _) => e.walk(visit),
                    }
                }
            }
            ExprKind::List(items) => {
                for item in *items {
                    item.walk(visit);
                }
            }
            ExprKind::ListComp { element, fors, guards } => {
                element.walk(visit);
                for f in *fors {
                    f.iterable.walk(visit);
                }
                for g in *guards {
                    g.walk(visit);
                }
            }
            ExprKind::Dict(entries) => {
                for entry in *entries {
                    entry.value.walk(visit);
                }
            }
            ExprKind::Not(e) | ExprKind::IsDefined(e) => e.walk(visit),
            ExprKind::Binary { lhs, rhs, .. } => {
                lhs.walk(visit);
                rhs.walk(visit);
            }
            ExprKind::Conditional { cond, then, otherwise } => {
                cond.walk(visit);
                then.walk(visit);
                otherwise.walk(visit);
            }
        }
    }

    /// Whether the expression reads the variable `name` (an unqualified name), directly, in
    /// a string interpolation or f-string field, or through a regex constraint (which reads
    /// `self`). This is the reference's `requires()` test for typedef constraints.
    pub fn reads_variable(&'a self, name: Symbol, self_symbol: Symbol) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            let hit = match &e.kind {
                ExprKind::Name(path) => path.is_simple() && path.last().name == name,
                ExprKind::Str(lit) => lit.interpolations.iter().any(|i| i.path.first().is_some_and(|p| p.name == name)),
                ExprKind::FStr(lit) => lit.fields.iter().any(|f| f.path.first().is_some_and(|p| p.name == name)),
                ExprKind::Regex(_) => name == self_symbol,
                _ => false,
            };
            found |= hit;
        });
        found
    }
}
