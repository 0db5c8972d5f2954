//! The lowered program: what the evaluator runs.
//!
//! The frontend lowers a checked model into this form; the VM compiles it to bytecode and the
//! runtime evaluates it. Everything is addressed by typed indices into flat tables, and nothing
//! refers back to the syntax tree or to the interner: names are [`Symbol`]s whose text is in
//! [`Program::names`].
//!
//! Code is a table of *instructions* ([`Expr`]): each computes one value from the values of
//! the instructions it names as operands (always earlier in the table). An instruction whose
//! value may not exist yet when the statement is emitted is a *wait point*, and its
//! [`Expr::wait`] says which kind of wait it is:
//!
//! * [`WaitKind::Value`]: wait until a single-valued cell is set (a variable, a plain attribute,
//!   the result of a plugin call);
//! * [`WaitKind::Gradual`]: listen to a multi-valued cell and receive each element as it
//!   arrives (a `for` loop over a relation, a relation-to-relation assignment, `is defined`);
//! * [`WaitKind::Frozen`]: wait until a relation is complete (frozen), as a plugin argument
//!   or a plain read does.
//!
//! Statements that write relations declare their *set promises* by their shape (an attribute
//! assignment writes the attribute it names), and `if` and `for` statements carry the *eager
//! progression promises* of their bodies ([`Block::promises`]), computed at lowering time, so
//! the scheduler knows which relations may still grow.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::diagnostic::ErrorKind;
use crate::plugin::PluginSignature;
use crate::span::Location;
use crate::symbol::Symbol;
use crate::value::Value;

macro_rules! index_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[derive(zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::Immutable, zerocopy::KnownLayout)]
        #[repr(transparent)]
        pub struct $name(pub u32);

        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

index_type!(
    /// A namespace (one `.cf` file).
    NsId, "ns"
);
index_type!(EntityId, "E");
index_type!(AttrId, "A");
index_type!(TypedefId, "T");
index_type!(ImplId, "I");
index_type!(PluginId, "P");
index_type!(BlockId, "b");
index_type!(StmtId, "s");
index_type!(
    /// An instruction: the value it computes.
    ExprId, "%"
);
index_type!(CtorId, "ctor");

/// A source file, with what the evaluator needs to print locations without the source text.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileInfo {
    /// The path as messages show it, relative to the project: `./main.cf`.
    pub display: String,
    /// Byte offsets of line starts.
    pub line_starts: Vec<u32>,
    /// The characters of more than one byte: offset and extra bytes. Columns are counted in
    /// characters, as the reference counts them, and an artifact carries no source text to
    /// count them in.
    #[serde(default)]
    pub wide_chars: Vec<(u32, u8)>,
}

impl FileInfo {
    /// The line table of a source file.
    pub fn from_source(display: String, file: &crate::span::SourceFile) -> FileInfo {
        let wide_chars = file
            .text
            .char_indices()
            .filter(|(_, c)| c.len_utf8() > 1)
            .map(|(at, c)| (at as u32, (c.len_utf8() - 1) as u8))
            .collect();
        FileInfo { display, line_starts: file.line_starts().to_vec(), wide_chars }
    }

    /// The 1-based line and character column of a byte offset.
    pub fn line_col(&self, offset: u32) -> crate::span::LineCol {
        let line = self.line(offset).max(1);
        let start = self.line_starts.get(line as usize - 1).copied().unwrap_or(0).min(offset);
        let from = self.wide_chars.partition_point(|(at, _)| *at < start);
        let to = self.wide_chars.partition_point(|(at, _)| *at < offset);
        let extra: u32 = self.wide_chars[from..to.max(from)].iter().map(|(_, n)| u32::from(*n)).sum();
        crate::span::LineCol { line, column: (offset - start).saturating_sub(extra) + 1 }
    }

    /// The 1-based line of a byte offset.
    pub fn line(&self, offset: u32) -> u32 {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i as u32 + 1,
            Err(i) => i as u32,
        }
    }
}

/// The lowered program.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Program {
    /// The text of every symbol, indexed by [`Symbol::as_u32`].
    pub names: Vec<String>,
    pub files: Vec<FileInfo>,
    /// In emission order: `__config__` first, then modules in load order.
    pub namespaces: Vec<Namespace>,
    pub entities: Vec<Entity>,
    pub attributes: Vec<Attribute>,
    pub typedefs: Vec<Typedef>,
    pub implementations: Vec<Implementation>,
    pub plugins: Vec<PluginSignature>,
    pub blocks: Vec<Block>,
    pub stmts: Vec<Stmt>,
    pub exprs: Vec<Expr>,
    pub ctors: Vec<Ctor>,
    /// `std::Entity`.
    pub std_entity: EntityId,
    /// The parameters `project.yml` declares (`weft: parameters:`), in declaration order: the
    /// top-level variables of `main.cf` that a host may set at run time (`--set name=value`).
    #[serde(default)]
    pub parameters: Vec<Parameter>,
}

/// A declared parameter: a top-level variable of `main.cf`, assigned once with a constant that
/// is its default.
///
/// The constant lives in its own instruction, `value`, which nothing else in the program names,
/// so that a host can replace exactly that instruction's constant with the value it was given
/// and leave every other use of an equal constant alone.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Parameter {
    pub name: String,
    /// The description given in `project.yml`, when the mapping form was used.
    pub description: Option<String>,
    /// The [`ExprKind::Const`] instruction holding the default.
    pub value: ExprId,
    /// The assignment in `main.cf`.
    pub location: Location,
}

impl Parameter {
    /// The constant the instruction currently holds: the default, unless a host replaced it.
    pub fn default_value<'p>(&self, program: &'p Program) -> Option<&'p Value> {
        match &program.exprs.get(self.value.index())?.kind {
            ExprKind::Const(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Namespace {
    pub name: String,
    /// The top-level statements of the file.
    pub root: BlockId,
}

/// A primitive type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Primitive {
    String,
    Int,
    Float,
    Number,
    Bool,
    List,
    Dict,
}

impl Primitive {
    pub fn from_name(name: &str) -> Option<Primitive> {
        Some(match name {
            "string" => Primitive::String,
            "int" => Primitive::Int,
            "float" => Primitive::Float,
            "number" => Primitive::Number,
            "bool" => Primitive::Bool,
            "list" => Primitive::List,
            "dict" => Primitive::Dict,
            _ => return None,
        })
    }

    /// Whether a value has this type at the top level. The elements of a `list` or `dict`
    /// value are the caller's to check (they must be literals).
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            Primitive::String => matches!(value, Value::Str(_)),
            Primitive::Int => value.is_integral(),
            Primitive::Float => matches!(value, Value::Float(_)),
            Primitive::Number => value.is_number(),
            Primitive::Bool => matches!(value, Value::Bool(_)),
            Primitive::List => matches!(value, Value::List(_)),
            Primitive::Dict => matches!(value, Value::Dict(_)),
        }
    }

    /// The exception the reference raises for a value of the wrong type: its list types raise
    /// a `TypingException`, every other primitive (`dict` included) a `RuntimeException`.
    pub fn mismatch_kind(self) -> ErrorKind {
        match self {
            Primitive::List => ErrorKind::TypingException,
            _ => ErrorKind::RuntimeException,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Primitive::String => "string",
            Primitive::Int => "int",
            Primitive::Float => "float",
            Primitive::Number => "number",
            Primitive::Bool => "bool",
            Primitive::List => "list",
            Primitive::Dict => "dict",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BaseType {
    Primitive(Primitive),
    Typedef(TypedefId),
}

/// The type of a plain attribute: `base`, `base[]`, `base?`, `base[]?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueType {
    pub base: BaseType,
    pub list: bool,
    pub nullable: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Typedef {
    /// Fully qualified.
    pub name: String,
    pub base: BaseType,
    pub constraint: Constraint,
    pub location: Location,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Constraint {
    /// `matching /regex/`: Python's `re.match`, anchored at the start only. `python` is the
    /// pattern as written; `engine` the same pattern translated for the regex engine and
    /// anchored, ready to compile.
    Regex { python: Arc<str>, engine: Arc<str> },
    /// `matching <expr>`: evaluated directly with only `self` bound. `text` is the expression
    /// as the reference prints it when a value fails it (`(self > 0)`).
    Expr { expr: ExprId, text: Arc<str> },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entity {
    /// Fully qualified: `__config__::A`.
    pub name: String,
    pub location: Location,
    pub parents: Vec<EntityId>,
    /// Own attributes in definition order (body attributes, then relation ends).
    pub attributes: Vec<AttrId>,
    /// The attribute slots an instance gets, in the reference's order: own attributes, then
    /// the parents' depth first, left to right, skipping names already present.
    pub slots: Vec<(Symbol, AttrId)>,
    /// Effective defaults after inheritance: constants, with the default's location.
    pub defaults: Vec<(Symbol, ExprId)>,
    /// Own and inherited indexes, each a sorted list of attribute names.
    pub indexes: Vec<Vec<Symbol>>,
    /// One per applicable `implement` statement (including the parents' when the entity
    /// uses `parents`), in the reference's order.
    pub implements: Vec<Implement>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Implement {
    pub implementations: Vec<ImplId>,
    /// `None` is the constant `true`.
    pub condition: Option<ExprId>,
    /// The namespace of the `implement` statement: the condition resolves names there.
    pub ns: NsId,
    pub location: Location,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attribute {
    pub name: Symbol,
    pub entity: EntityId,
    pub location: Location,
    pub kind: AttributeKind,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum AttributeKind {
    Value(ValueType),
    Relation(RelationEnd),
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct RelationEnd {
    pub target: EntityId,
    pub lower: i64,
    pub upper: Option<i64>,
    pub inverse: Option<AttrId>,
}

impl RelationEnd {
    pub fn is_multi(&self) -> bool {
        self.upper != Some(1)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Implementation {
    /// Fully qualified.
    pub name: String,
    pub ns: NsId,
    pub body: BlockId,
}

/// A block of statements with its own variable scope.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Block {
    pub ns: NsId,
    /// Variables declared in the block (assignments, and a `for` body's loop variable), in
    /// declaration order.
    pub variables: Vec<Symbol>,
    /// In emission order: source order at the top level, reversed in nested blocks (as the
    /// reference's parser builds them).
    pub stmts: Vec<StmtId>,
    /// The eager progression promises of the block: the relation attributes its statements
    /// (or the statements of blocks nested in it) may write, rooted at variables declared
    /// outside the block. The `if` or `for` that owns the block acquires them on emission.
    pub promises: Vec<Promise>,
}

/// A promise to maybe write `instance.attribute`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Promise {
    /// The instance expression (a variable or an attribute chain).
    pub instance: ExprId,
    pub attribute: Symbol,
    pub location: Location,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stmt {
    pub kind: StmtKind,
    pub location: Location,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StmtKind {
    /// `x = value`
    Assign {
        var: Symbol,
        value: ExprId,
    },
    /// `instance.attribute = value` or `+=` (`extend`).
    SetAttr {
        instance: ExprId,
        attribute: Symbol,
        value: ExprId,
        extend: bool,
    },
    If {
        cond: ExprId,
        then: BlockId,
        otherwise: BlockId,
    },
    For {
        var: Symbol,
        iterable: ExprId,
        body: BlockId,
    },
    /// An expression evaluated for its effect (a plugin call, a constructor).
    Expr(ExprId),
}

/// An instruction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Expr {
    pub kind: ExprKind,
    pub location: Location,
}

/// How a variable is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VarRef {
    /// An unqualified name, resolved through the scopes at emission.
    Name(Symbol),
    /// `ns::name`: a top-level variable of another namespace.
    Qualified(NsId, Symbol),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    In,
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
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::Le => "<=",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Callee {
    Plugin(PluginId),
    /// A primitive type used as a cast: `int("1")`.
    Cast(Primitive),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ExprKind {
    Const(Value),
    Var(VarRef),
    /// `base.name`
    Attr {
        base: ExprId,
        name: Symbol,
    },
    /// `map[key]`
    Subscript {
        map: ExprId,
        key: ExprId,
    },
    Not(ExprId),
    Binary {
        op: BinOp,
        lhs: ExprId,
        rhs: ExprId,
    },
    /// Lazy: the right side is emitted only when the left side does not decide.
    And {
        lhs: ExprId,
        rhs: ExprId,
    },
    Or {
        lhs: ExprId,
        rhs: ExprId,
    },
    /// `cond ? then : otherwise`; only the chosen branch is emitted.
    Cond {
        cond: ExprId,
        then: ExprId,
        otherwise: ExprId,
    },
    /// A list literal; list values among the items are spliced in.
    List(Vec<ExprId>),
    Dict(Vec<(Arc<str>, ExprId)>),
    /// `"...{{ a.b }}..."`: each part is the reference and the text it replaces.
    Format {
        template: Arc<str>,
        parts: Vec<(ExprId, Arc<str>)>,
    },
    /// `f"..."`: each field is the reference and its key in the template.
    FString {
        template: Arc<str>,
        fields: Vec<(ExprId, Arc<str>)>,
    },
    Call {
        callee: Callee,
        name: Arc<str>,
        args: Vec<ExprId>,
        kwargs: Vec<(Symbol, ExprId)>,
        splats: Vec<ExprId>,
    },
    Construct(CtorId),
    /// `Entity[k=v, **d]`
    IndexLookup {
        entity: EntityId,
        query: Vec<(Symbol, ExprId)>,
        splats: Vec<ExprId>,
    },
    /// `base.relation[k=v]`
    SelectorLookup {
        base: ExprId,
        relation: Symbol,
        query: Vec<(Symbol, ExprId)>,
        splats: Vec<ExprId>,
    },
    /// `[element for var in iterable if guard]`; several `for`s nest, the first outermost.
    ListComp {
        element: ExprId,
        var: Symbol,
        iterable: ExprId,
        guard: Option<ExprId>,
    },
    /// `name is defined` or `base.name is defined`.
    IsDefined {
        base: Option<ExprId>,
        name: Symbol,
    },
}

/// A constructor call, with the reference's split of attributes into *direct* ones (index
/// attributes, evaluated before the instance is created) and *indirect* ones (set after).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ctor {
    pub entity: EntityId,
    /// The name as written, for messages.
    pub written: String,
    /// Explicit keyword arguments, as written.
    pub explicit: Vec<Symbol>,
    pub splats: Vec<ExprId>,
    pub direct: Vec<(Symbol, ExprId)>,
    pub indirect: Vec<(Symbol, ExprId)>,
    /// Index attributes that must come from a `**dict` or from the implicit inverse.
    pub required_dynamic: Vec<Symbol>,
    /// The instance this constructor is assigned to through a relation (for the implicit
    /// inverse), when some index attribute is missing.
    pub lhs: Option<(ExprId, Symbol)>,
    /// The name of the hidden variable that holds the new instance while its attribute
    /// values are emitted (nested constructors use it as their left-hand side).
    pub self_name: Symbol,
}

impl Program {
    pub fn name(&self, symbol: Symbol) -> &str {
        &self.names[symbol.as_u32() as usize]
    }

    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id.index()]
    }

    pub fn stmt(&self, id: StmtId) -> &Stmt {
        &self.stmts[id.index()]
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id.index()]
    }

    pub fn entity(&self, id: EntityId) -> &Entity {
        &self.entities[id.index()]
    }

    pub fn attribute(&self, id: AttrId) -> &Attribute {
        &self.attributes[id.index()]
    }

    /// The source instruction `expr` was lowered from, operands included (see
    /// [`source_extent`]).
    pub fn source_extent(&self, expr: ExprId) -> Location {
        source_extent(expr, &|e| self.expr(e).location, &|e| match self.expr(e).kind {
            ExprKind::Binary { lhs, rhs, .. } | ExprKind::And { lhs, rhs } | ExprKind::Or { lhs, rhs } => {
                Some((lhs, rhs))
            }
            ExprKind::Not(inner) => Some((inner, inner)),
            _ => None,
        })
    }

    /// `./main.cf:3`
    pub fn location_text(&self, location: Location) -> String {
        let file = &self.files[location.file.0 as usize];
        format!("{}:{}", file.display, file.line(location.span.start))
    }

    /// `./main.cf:3:10`, as the reference names where an attribute is declared.
    pub fn location_text_with_column(&self, location: Location) -> String {
        let file = &self.files[location.file.0 as usize];
        let at = file.line_col(location.span.start);
        format!("{}:{}:{}", file.display, at.line, at.column)
    }

    /// The 1-based line of a location.
    pub fn line(&self, location: Location) -> u32 {
        self.files[location.file.0 as usize].line(location.span.start)
    }

    /// The entity with this fully qualified name (`std::Dataclass`).
    pub fn entity_by_name(&self, name: &str) -> Option<EntityId> {
        self.entities.iter().position(|e| e.name == name).map(|i| EntityId(i as u32))
    }

    /// The typedef with this fully qualified name (`std::ipv4_address`).
    pub fn typedef_by_name(&self, name: &str) -> Option<TypedefId> {
        self.typedefs.iter().position(|t| t.name == name).map(|i| TypedefId(i as u32))
    }

    /// Whether `entity` is `other` or inherits from it.
    #[inline]
    pub fn is_subclass(&self, entity: EntityId, other: EntityId) -> bool {
        // The exact type and a direct parent are what almost every check meets.
        if entity == other {
            return true;
        }
        let parents = &self.entity(entity).parents;
        !parents.is_empty() && (parents.contains(&other) || self.is_ancestor(entity, other))
    }

    /// Whether `other` is among the ancestors of `entity`. Real hierarchies are a few levels
    /// of single or double inheritance, which a plain walk of the parents answers at once; the
    /// walk is given a budget of steps, beyond which the ancestors are walked again with each
    /// visited once: a walk along every path would take time exponential in the depth of a
    /// hierarchy of diamonds (`A extends B, C`, both extending `D`, and so on).
    fn is_ancestor(&self, entity: EntityId, other: EntityId) -> bool {
        let mut budget = 64;
        match self.is_ancestor_within(entity, other, &mut budget) {
            Some(found) => found,
            None => self.is_ancestor_visiting_once(entity, other),
        }
    }

    /// [`Self::is_ancestor`] along every path, or `None` once `budget` steps are spent.
    fn is_ancestor_within(&self, entity: EntityId, other: EntityId, budget: &mut u32) -> Option<bool> {
        for &parent in &self.entity(entity).parents {
            if parent == other {
                return Some(true);
            }
            *budget = budget.checked_sub(1)?;
            if self.is_ancestor_within(parent, other, budget)? {
                return Some(true);
            }
        }
        Some(false)
    }

    /// [`Self::is_ancestor`] with each ancestor visited once.
    fn is_ancestor_visiting_once(&self, entity: EntityId, other: EntityId) -> bool {
        self.lineage(entity).contains(&other)
    }

    /// An entity and its ancestors in the order of a depth-first walk of the parents, left to
    /// right, each at its first visit: the walk along every path would take time exponential
    /// in the depth of a hierarchy of diamonds.
    pub fn lineage(&self, entity: EntityId) -> Vec<EntityId> {
        let mut visited = vec![false; self.entities.len()];
        let mut lineage = Vec::new();
        let mut pending = vec![entity];
        while let Some(next) = pending.pop() {
            let Some(seen) = visited.get_mut(next.index()) else { continue };
            if std::mem::replace(seen, true) {
                continue;
            }
            lineage.push(next);
            pending.extend(self.entity(next).parents.iter().rev());
        }
        lineage
    }

    /// The wait kind of an instruction when it is read by a plain (non-gradual) consumer.
    pub fn wait_of(&self, id: ExprId) -> Option<WaitKind> {
        match self.expr(id).kind {
            ExprKind::Var(_)
            | ExprKind::Call { .. }
            | ExprKind::IndexLookup { .. }
            | ExprKind::SelectorLookup { .. } => Some(WaitKind::Value),
            ExprKind::Attr { .. } | ExprKind::ListComp { .. } => Some(WaitKind::Frozen),
            ExprKind::IsDefined { .. } => Some(WaitKind::Gradual),
            ExprKind::And { .. } | ExprKind::Or { .. } | ExprKind::Cond { .. } => Some(WaitKind::Value),
            _ => None,
        }
    }
}

/// The kinds of wait point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitKind {
    Value,
    Gradual,
    Frozen,
}

impl fmt::Display for WaitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WaitKind::Value => "wait.value",
            WaitKind::Gradual => "listen.gradual",
            WaitKind::Frozen => "wait.frozen",
        })
    }
}

/// The text form of the IR, every namespace included.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text(&|_| true))
    }
}

impl Program {
    /// The text form of the IR (`weft compile --emit=ir`), limited to the definitions and
    /// blocks of the namespaces `show` accepts (by full name).
    pub fn text(&self, show: &dyn Fn(&str) -> bool) -> String {
        let mut printer = Printer { program: self, out: String::new(), show };
        printer.program();
        printer.out
    }
}

/// The namespace part of a qualified name.
fn namespace_of(name: &str) -> &str {
    name.rsplit_once("::").map(|(ns, _)| ns).unwrap_or("")
}

struct Printer<'p> {
    program: &'p Program,
    out: String,
    show: &'p dyn Fn(&str) -> bool,
}

impl<'p> Printer<'p> {
    fn sym(&self, s: Symbol) -> &'p str {
        let program: &'p Program = self.program;
        program.name(s)
    }

    fn program(&mut self) {
        let p = self.program;
        for (i, e) in p.entities.iter().enumerate() {
            if !(self.show)(namespace_of(&e.name)) {
                continue;
            }
            let parents: Vec<&str> = e.parents.iter().map(|x| p.entity(*x).name.as_str()).collect();
            let _ = writeln!(self.out, "entity E{i} {} extends [{}]", e.name, parents.join(", "));
            for (name, attr) in &e.slots {
                let a = p.attribute(*attr);
                let ty = match a.kind {
                    AttributeKind::Value(t) => self.value_type(t),
                    AttributeKind::Relation(r) => format!(
                        "{} [{}:{}]{}",
                        p.entity(r.target).name,
                        r.lower,
                        r.upper.map(|u| u.to_string()).unwrap_or_default(),
                        r.inverse.map(|i| format!(" inverse {}", self.sym(p.attribute(i).name))).unwrap_or_default()
                    ),
                };
                let _ = writeln!(self.out, "  slot {} : {ty}", self.sym(*name));
            }
            for (name, value) in &e.defaults {
                let _ = writeln!(self.out, "  default {} = {}", self.sym(*name), self.inline(*value));
            }
            for index in &e.indexes {
                let names: Vec<&str> = index.iter().map(|s| self.sym(*s)).collect();
                let _ = writeln!(self.out, "  index ({})", names.join(", "));
            }
            for imp in &e.implements {
                let names: Vec<&str> =
                    imp.implementations.iter().map(|i| p.implementations[i.index()].name.as_str()).collect();
                let cond = imp.condition.map(|c| format!(" when {}", self.inline(c))).unwrap_or_default();
                let _ = writeln!(self.out, "  implement using [{}]{cond}", names.join(", "));
            }
        }
        for (i, t) in p.typedefs.iter().enumerate() {
            if !(self.show)(namespace_of(&t.name)) {
                continue;
            }
            let c = match &t.constraint {
                Constraint::Regex { python, .. } => format!("/{python}/"),
                Constraint::Expr { expr, .. } => self.inline(*expr),
            };
            let base = match t.base {
                BaseType::Primitive(pr) => pr.name().to_string(),
                BaseType::Typedef(td) => p.typedefs[td.index()].name.clone(),
            };
            let _ = writeln!(self.out, "typedef T{i} {} as {base} matching {c}", t.name);
        }
        for (i, imp) in p.implementations.iter().enumerate() {
            if !(self.show)(namespace_of(&imp.name)) {
                continue;
            }
            let _ = writeln!(self.out, "implementation I{i} {} body b{}", imp.name, imp.body.0);
        }
        for ns in p.namespaces.iter().filter(|n| (self.show)(&n.name)) {
            let _ = writeln!(self.out, "namespace {} root b{}", ns.name, ns.root.0);
        }
        // Parameters are variables of `__config__`; a program without any prints nothing here,
        // so the text of existing programs is unchanged.
        if (self.show)("__config__") {
            for param in &p.parameters {
                let line = p.line(param.location);
                let value = self.describe(&p.expr(param.value).kind);
                let _ = writeln!(self.out, "parameter {} {} = {value}  ; line {line}", param.name, param.value);
            }
        }
        for (i, b) in p.blocks.iter().enumerate() {
            if !(self.show)(&p.namespaces[b.ns.index()].name) {
                continue;
            }
            let vars: Vec<&str> = b.variables.iter().map(|s| self.sym(*s)).collect();
            let _ =
                writeln!(self.out, "\nblock b{i} in {} vars [{}]:", p.namespaces[b.ns.index()].name, vars.join(", "));
            for promise in &b.promises {
                let _ = writeln!(
                    self.out,
                    "  eager promise {}.{} (rooted at {})",
                    self.path_text(promise.instance),
                    self.sym(promise.attribute),
                    promise.instance
                );
            }
            for s in &b.stmts {
                self.stmt(*s);
            }
        }
    }

    fn value_type(&self, t: ValueType) -> String {
        let base = match t.base {
            BaseType::Primitive(p) => p.name().to_string(),
            BaseType::Typedef(td) => self.program.typedefs[td.index()].name.clone(),
        };
        format!("{base}{}{}", if t.list { "[]" } else { "" }, if t.nullable { "?" } else { "" })
    }

    /// Prints the instructions of an expression, operands first, one per line.
    fn code(&mut self, id: ExprId, seen: &mut Vec<ExprId>) {
        if seen.contains(&id) {
            return;
        }
        let p = self.program;
        let e = p.expr(id);
        for operand in operands(&e.kind, p) {
            self.code(operand, seen);
        }
        seen.push(id);
        let wait = p.wait_of(id).map(|w| format!("  [{w}]")).unwrap_or_default();
        let line = p.line(e.location);
        let text = self.describe(&e.kind);
        let _ = writeln!(self.out, "      {id} = {text}{wait}  ; line {line}");
    }

    fn describe(&self, kind: &ExprKind) -> String {
        let p = self.program;
        let list = |ids: &[ExprId]| ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
        let query = |q: &[(Symbol, ExprId)]| {
            q.iter().map(|(k, v)| format!("{}={v}", self.sym(*k))).collect::<Vec<_>>().join(", ")
        };
        match kind {
            ExprKind::Const(v) => format!("const {}", v.repr_with_null("null")),
            ExprKind::Var(VarRef::Name(n)) => format!("var {}", self.sym(*n)),
            ExprKind::Var(VarRef::Qualified(ns, n)) => {
                format!("var {}::{}", p.namespaces[ns.index()].name, self.sym(*n))
            }
            ExprKind::Attr { base, name } => format!("attr {base}.{}", self.sym(*name)),
            ExprKind::Subscript { map, key } => format!("subscript {map}[{key}]"),
            ExprKind::Not(e) => format!("not {e}"),
            ExprKind::Binary { op, lhs, rhs } => format!("{lhs} {} {rhs}", op.symbol()),
            ExprKind::And { lhs, rhs } => format!("and {lhs}, lazy {rhs}"),
            ExprKind::Or { lhs, rhs } => format!("or {lhs}, lazy {rhs}"),
            ExprKind::Cond { cond, then, otherwise } => format!("cond {cond} ? lazy {then} : lazy {otherwise}"),
            ExprKind::List(items) => format!("list [{}]", list(items)),
            ExprKind::Dict(entries) => format!(
                "dict {{{}}}",
                entries.iter().map(|(k, v)| format!("{k:?}: {v}")).collect::<Vec<_>>().join(", ")
            ),
            ExprKind::Format { template, parts } => {
                format!("format {template:?} with [{}]", list(&parts.iter().map(|p| p.0).collect::<Vec<_>>()))
            }
            ExprKind::FString { template, fields } => {
                format!("fstring {template:?} with [{}]", list(&fields.iter().map(|p| p.0).collect::<Vec<_>>()))
            }
            ExprKind::Call { name, args, kwargs, splats, .. } => {
                let mut parts = vec![list(args)];
                if !kwargs.is_empty() {
                    parts.push(query(kwargs));
                }
                if !splats.is_empty() {
                    parts.push(format!("**[{}]", list(splats)));
                }
                parts.retain(|s| !s.is_empty());
                format!("call {name}({}) [args: wait.frozen]", parts.join(", "))
            }
            ExprKind::Construct(c) => {
                let ctor = &p.ctors[c.index()];
                format!(
                    "construct {} direct({}) indirect({}){}",
                    p.entity(ctor.entity).name,
                    query(&ctor.direct),
                    query(&ctor.indirect),
                    ctor.lhs.map(|(i, a)| format!(" inverse-of {i}.{}", self.sym(a))).unwrap_or_default()
                )
            }
            ExprKind::IndexLookup { entity, query: q, splats } => {
                format!(
                    "lookup {}[{}]{}",
                    p.entity(*entity).name,
                    query(q),
                    if splats.is_empty() { String::new() } else { format!(" **[{}]", list(splats)) }
                )
            }
            ExprKind::SelectorLookup { base, relation, query: q, .. } => {
                format!("lookup {base}.{}[{}]", self.sym(*relation), query(q))
            }
            ExprKind::ListComp { element, var, iterable, guard } => format!(
                "comprehension lazy {element} for {} in {iterable}{}",
                self.sym(*var),
                guard.map(|g| format!(" if lazy {g}")).unwrap_or_default()
            ),
            ExprKind::IsDefined { base, name } => match base {
                Some(b) => format!("is_defined {b}.{}", self.sym(*name)),
                None => format!("is_defined {}", self.sym(*name)),
            },
        }
    }

    /// `a.b.c` for a reference chain.
    fn path_text(&self, id: ExprId) -> String {
        let p = self.program;
        match &p.expr(id).kind {
            ExprKind::Var(VarRef::Name(n)) => self.sym(*n).to_string(),
            ExprKind::Var(VarRef::Qualified(ns, n)) => format!("{}::{}", p.namespaces[ns.index()].name, self.sym(*n)),
            ExprKind::Attr { base, name } => format!("{}.{}", self.path_text(*base), self.sym(*name)),
            _ => id.to_string(),
        }
    }

    fn inline(&self, id: ExprId) -> String {
        let mut sub = Printer { program: self.program, out: String::new(), show: self.show };
        sub.code(id, &mut Vec::new());
        let lines: Vec<&str> = sub.out.lines().map(str::trim).collect();
        if lines.len() == 1 { lines[0].to_string() } else { format!("{{ {} }}", lines.join("; ")) }
    }

    fn stmt(&mut self, id: StmtId) {
        let p = self.program;
        let s = p.stmt(id);
        let line = p.line(s.location);
        let mut seen = Vec::new();
        match &s.kind {
            StmtKind::Assign { var, value } => {
                let _ = writeln!(self.out, "  {id} assign {} = {value}  ; line {line}", self.sym(*var));
                self.code(*value, &mut seen);
            }
            StmtKind::SetAttr { instance, attribute, value, extend } => {
                let op = if *extend { "+=" } else { "=" };
                let _ = writeln!(
                    self.out,
                    "  {id} set {instance}.{} {op} {value} [promise: set; value: gradual if multi]  ; line {line}",
                    self.sym(*attribute)
                );
                self.code(*instance, &mut seen);
                self.code(*value, &mut seen);
            }
            StmtKind::If { cond, then, otherwise } => {
                let _ = writeln!(
                    self.out,
                    "  {id} if {cond} then b{} else b{} [eager promises of b{} and b{}]  ; line {line}",
                    then.0, otherwise.0, then.0, otherwise.0
                );
                self.code(*cond, &mut seen);
            }
            StmtKind::For { var, iterable, body } => {
                let _ = writeln!(
                    self.out,
                    "  {id} for {} in {iterable} [listen.gradual] body b{} [eager promises of b{}]  ; line {line}",
                    self.sym(*var),
                    body.0,
                    body.0
                );
                self.code(*iterable, &mut seen);
            }
            StmtKind::Expr(e) => {
                let _ = writeln!(self.out, "  {id} eval {e}  ; line {line}");
                self.code(*e, &mut seen);
            }
        }
    }
}

/// The source an instruction was lowered from. Lowering locates an operator (`+`, `and`, `not`,
/// ...) at its operator token, where the reference reports the operator's errors; its extent
/// also covers its operands, recursively. `location` and `operator_operands` read whichever
/// instruction table is at hand (the IR's, or the bytecode's, which keeps no IR):
/// `operator_operands` gives an operator's two operands (`not`'s one operand twice) and `None`
/// for any other instruction.
pub fn source_extent<E: Copy>(
    expr: E,
    location: &dyn Fn(E) -> Location,
    operator_operands: &dyn Fn(E) -> Option<(E, E)>,
) -> Location {
    let own = location(expr);
    match operator_operands(expr) {
        Some((a, b)) => {
            let a = source_extent(a, location, operator_operands);
            let b = source_extent(b, location, operator_operands);
            Location::new(own.file, own.span.to(a.span).to(b.span))
        }
        None => own,
    }
}

/// The operands of an instruction that are evaluated as part of it (lazy operands included,
/// so the text form shows them).
pub fn operands(kind: &ExprKind, program: &Program) -> Vec<ExprId> {
    match kind {
        ExprKind::Const(_) | ExprKind::Var(_) => vec![],
        ExprKind::Attr { base, .. } => vec![*base],
        ExprKind::Subscript { map, key } => vec![*map, *key],
        ExprKind::Not(e) => vec![*e],
        ExprKind::Binary { lhs, rhs, .. } | ExprKind::And { lhs, rhs } | ExprKind::Or { lhs, rhs } => vec![*lhs, *rhs],
        ExprKind::Cond { cond, then, otherwise } => vec![*cond, *then, *otherwise],
        ExprKind::List(items) => items.clone(),
        ExprKind::Dict(entries) => entries.iter().map(|e| e.1).collect(),
        ExprKind::Format { parts, .. } => parts.iter().map(|p| p.0).collect(),
        ExprKind::FString { fields, .. } => fields.iter().map(|p| p.0).collect(),
        ExprKind::Call { args, kwargs, splats, .. } => {
            args.iter().copied().chain(kwargs.iter().map(|k| k.1)).chain(splats.iter().copied()).collect()
        }
        ExprKind::Construct(c) => {
            let ctor = &program.ctors[c.index()];
            ctor.direct
                .iter()
                .map(|d| d.1)
                .chain(ctor.indirect.iter().map(|d| d.1))
                .chain(ctor.splats.iter().copied())
                .chain(ctor.lhs.map(|l| l.0))
                .collect()
        }
        ExprKind::IndexLookup { query, splats, .. } => {
            query.iter().map(|q| q.1).chain(splats.iter().copied()).collect()
        }
        ExprKind::SelectorLookup { base, query, splats, .. } => {
            query.iter().map(|q| q.1).chain(std::iter::once(*base)).chain(splats.iter().copied()).collect()
        }
        ExprKind::ListComp { element, iterable, guard, .. } => {
            let mut v = vec![*iterable];
            v.extend(guard.iter().copied());
            v.push(*element);
            v
        }
        ExprKind::IsDefined { base, .. } => base.iter().copied().collect(),
    }
}
