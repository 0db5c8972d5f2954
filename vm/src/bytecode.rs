//! The bytecode: the program's instruction table as flat, fixed-size records that the machine
//! reads in place.
//!
//! [`Code::assemble`] turns the IR's instruction table ([`Program::exprs`]) into a byte
//! buffer; [`Code::new`] checks such a buffer once and then serves every instruction straight
//! from it, whether it was just assembled or is a section of a memory-mapped artifact. Nothing
//! is decoded per instruction when an artifact is loaded: a record is viewed as a typed struct
//! of the buffer ([`zerocopy`]), and operand lists are typed slices of it.
//!
//! Layout of a code buffer (native byte order; the artifact container refuses a file built
//! for another byte order, so the records can be read as they are):
//!
//! | part | size | contents |
//! |---|---|---|
//! | header | 16 bytes | magic `WBC1`, instruction count `n`, operand pool length `m` (u32s), 0 |
//! | instructions | `n` × 20 bytes | opcode u8, sub-opcode u8, 0 u16, operands `a b c d` (u32) |
//! | locations | `n` × 12 bytes | file, span start, span end (u32) |
//! | operand pool | `m` × 4 bytes | the operand lists of list-like instructions |
//!
//! Constants (values with strings, big integers, nested lists) and the texts of dictionary
//! keys, templates and plugin names do not fit fixed records: they live in [`CodeTables`],
//! which the artifact stores with its metadata, and instructions name them by index.
//!
//! The opcodes and their operands:
//!
//! | opcode | sub | a | b | c | d |
//! |---|---|---|---|---|---|
//! | `CONST` | | constant | | | |
//! | `VAR` | | name | | | |
//! | `VAR_QUALIFIED` | | namespace | name | | |
//! | `ATTR` | | base | name | | |
//! | `SUBSCRIPT` | | map | key | | |
//! | `NOT` | | operand | | | |
//! | `BINARY` | operator | lhs | rhs | | |
//! | `AND`, `OR` | | lhs | rhs | | |
//! | `COND` | | condition | then | otherwise | |
//! | `LIST` | | pool offset | count: expressions | | |
//! | `DICT` | | pool offset | count: (key text, expression) pairs | | |
//! | `FORMAT`, `FSTRING` | | template text | pool offset | count: (expression, text) pairs | |
//! | `CALL` | 0 plugin, 1 cast | plugin or primitive | name text | pool offset: `[args, kwargs, splats]` counts, then the lists | |
//! | `CONSTRUCT` | | constructor | | | |
//! | `INDEX_LOOKUP` | | entity | pool offset: `[query, splats]` counts, then the lists | | |
//! | `SELECTOR_LOOKUP` | | base | relation | pool offset, as `INDEX_LOOKUP` | |
//! | `LIST_COMP` | | element | variable | iterable | guard or `NONE` |
//! | `IS_DEFINED` | | base or `NONE` | name | | |
//!
//! Every expression operand names an *earlier* instruction, so the code is a DAG whose depth
//! [`Code::new`] bounds: the machine's recursive passes over an expression can not be driven
//! into a stack overflow by a crafted artifact.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_ir::program::{BinOp, Callee, CtorId, EntityId, ExprId, ExprKind, NsId, PluginId, Primitive, Program, VarRef};
use weft_ir::span::{FileId, Span};
use weft_ir::value::Value;
use weft_ir::{Location, Symbol};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The deepest expression the machine accepts from a code buffer. The frontend bounds the
/// syntax tree at 1000 levels, so compiled sources stay well below it.
pub const MAX_EXPR_DEPTH: u32 = 2000;

const MAGIC: [u8; 4] = *b"WBC1";
/// "No operand" in an optional operand slot.
const NONE: u32 = u32::MAX;

mod op {
    pub const CONST: u8 = 0;
    pub const VAR: u8 = 1;
    pub const VAR_QUALIFIED: u8 = 2;
    pub const ATTR: u8 = 3;
    pub const SUBSCRIPT: u8 = 4;
    pub const NOT: u8 = 5;
    pub const BINARY: u8 = 6;
    pub const AND: u8 = 7;
    pub const OR: u8 = 8;
    pub const COND: u8 = 9;
    pub const LIST: u8 = 10;
    pub const DICT: u8 = 11;
    pub const FORMAT: u8 = 12;
    pub const FSTRING: u8 = 13;
    pub const CALL: u8 = 14;
    pub const CONSTRUCT: u8 = 15;
    pub const INDEX_LOOKUP: u8 = 16;
    pub const SELECTOR_LOOKUP: u8 = 17;
    pub const LIST_COMP: u8 = 18;
    pub const IS_DEFINED: u8 = 19;
}

const BINOPS: [BinOp; 13] = [
    BinOp::Eq,
    BinOp::Ne,
    BinOp::Lt,
    BinOp::Gt,
    BinOp::Le,
    BinOp::Ge,
    BinOp::In,
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Mod,
    BinOp::Pow,
];

const PRIMITIVES: [Primitive; 7] = [
    Primitive::String,
    Primitive::Int,
    Primitive::Float,
    Primitive::Number,
    Primitive::Bool,
    Primitive::List,
    Primitive::Dict,
];

#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Header {
    magic: [u8; 4],
    instructions: u32,
    pool: u32,
    reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Insn {
    op: u8,
    sub: u8,
    reserved: u16,
    a: u32,
    b: u32,
    c: u32,
    d: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct RawLocation {
    file: u32,
    start: u32,
    end: u32,
}

/// A keyword operand: `name=expr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Named {
    pub name: Symbol,
    pub expr: ExprId,
}

/// A dictionary entry or an interpolation: an expression with a text of the tables.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Texted {
    text: u32,
    expr: ExprId,
}

/// What instructions refer to by index and that has no fixed size: constants and texts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CodeTables {
    pub consts: Vec<Value>,
    pub texts: Vec<Arc<str>>,
}

/// The storage a code buffer lives in: a vector, or a memory-mapped artifact.
///
/// # Safety
///
/// `bytes` returns the same slice (same address, same length, same contents) every time it is
/// called, for as long as the backing lives: [`Code`] reads the slice once and keeps it.
pub unsafe trait Backing: Send + Sync {
    fn bytes(&self) -> &[u8];
}

/// A heap buffer aligned for the records (a plain `Vec<u8>` may start at any address).
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    pub fn copy_from(bytes: &[u8]) -> AlignedBytes {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        words.as_mut_bytes()[..bytes.len()].copy_from_slice(bytes);
        AlignedBytes { words, len: bytes.len() }
    }
}

// SAFETY: an `AlignedBytes` has no method that changes it after `copy_from`, so its buffer
// is never reallocated or written while it lives.
unsafe impl Backing for AlignedBytes {
    fn bytes(&self) -> &[u8] {
        &self.words.as_bytes()[..self.len]
    }
}

/// Why a code buffer was refused. One line each, naming the check that failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    #[error("code section: {0}")]
    Malformed(String),
    #[error("code section: instruction %{index}: {message}")]
    Instruction { index: u32, message: String },
    #[error("program metadata: {0}")]
    Program(String),
}

fn malformed(message: impl Into<String>) -> CodeError {
    CodeError::Malformed(message.into())
}

/// A checked code buffer and its tables. Cloning shares the buffer.
#[derive(Clone)]
pub struct Code {
    /// Keeps `bytes` alive; never read otherwise. Never replaced after construction.
    _backing: Arc<dyn Backing>,
    /// `backing.bytes()`, read once in [`Code::new`]: reading an instruction is the
    /// evaluator's most frequent call, and asking the backing for its bytes there was a
    /// virtual call on every read. The lifetime is really that of `backing`; the slice is only
    /// handed out borrowed from `self` (see the safety comment in `new`).
    bytes: &'static [u8],
    /// Where the code buffer (header and tables) is in `bytes`.
    section: Range<usize>,
    /// The three tables of `bytes`, viewed once in [`Code::new`] (same lifetime argument):
    /// an instruction read is then one bounds check on a slice, not a range computation and
    /// two checks on every read.
    insn_records: &'static [Insn],
    location_records: &'static [RawLocation],
    pool_bytes: &'static [u8],
    count: u32,
    tables: CodeTables,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Code({} instructions, {} bytes)", self.count, self.byte_len())
    }
}

/// An instruction as the machine sees it.
#[derive(Clone, Copy, Debug)]
pub struct Instruction<'a> {
    pub kind: Op<'a>,
    id: ExprId,
    code: &'a Code,
}

impl Instruction<'_> {
    /// Where the instruction is in the source. Read when asked rather than with the operator:
    /// most instructions the machine decodes never need their place, and reading it with
    /// each was nearly one percent of the evaluation's instructions.
    #[inline]
    pub fn location(&self) -> Location {
        self.code.location(self.id)
    }
}

/// An instruction's opcode with its operands; lists are slices of the buffer.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    Const(&'a Value),
    Var(VarRef),
    Attr { base: ExprId, name: Symbol },
    Subscript { map: ExprId, key: ExprId },
    Not(ExprId),
    Binary { op: BinOp, lhs: ExprId, rhs: ExprId },
    And { lhs: ExprId, rhs: ExprId },
    Or { lhs: ExprId, rhs: ExprId },
    Cond { cond: ExprId, then: ExprId, otherwise: ExprId },
    List(&'a [ExprId]),
    Dict(Entries<'a>),
    Format { template: &'a Arc<str>, parts: Entries<'a> },
    FString { template: &'a Arc<str>, fields: Entries<'a> },
    Call { callee: Callee, name: &'a Arc<str>, args: &'a [ExprId], kwargs: &'a [Named], splats: &'a [ExprId] },
    Construct(CtorId),
    IndexLookup { entity: EntityId, query: &'a [Named], splats: &'a [ExprId] },
    SelectorLookup { base: ExprId, relation: Symbol, query: &'a [Named], splats: &'a [ExprId] },
    ListComp { element: ExprId, var: Symbol, iterable: ExprId, guard: Option<ExprId> },
    IsDefined { base: Option<ExprId>, name: Symbol },
}

/// Expressions paired with texts: a dictionary's entries, or a template's interpolations.
#[derive(Clone, Copy, Debug)]
pub struct Entries<'a> {
    entries: &'a [Texted],
    texts: &'a [Arc<str>],
}

impl<'a> Entries<'a> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Each entry's text and expression.
    pub fn iter(&self) -> impl Iterator<Item = (&'a Arc<str>, &'a ExprId)> + 'a {
        let texts = self.texts;
        self.entries.iter().map(move |e| (&texts[e.text as usize], &e.expr))
    }
}

impl Code {
    /// Encodes the program's instruction table. The result is checked by [`Code::new`] like
    /// any other buffer; the frontend's output always passes.
    pub fn assemble(program: &Program) -> (Vec<u8>, CodeTables) {
        let mut assembler = Assembler::default();
        for expr in &program.exprs {
            let insn = assembler.instruction(&expr.kind);
            assembler.insns.push(insn);
            let Location { file, span } = expr.location;
            assembler.locations.push(RawLocation { file: file.0, start: span.start, end: span.end });
        }
        let header = Header {
            magic: MAGIC,
            instructions: assembler.insns.len() as u32,
            pool: assembler.pool.len() as u32,
            reserved: 0,
        };
        let mut bytes = Vec::with_capacity(
            16 + assembler.insns.len() * (size_of::<Insn>() + size_of::<RawLocation>()) + assembler.pool.len() * 4,
        );
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(assembler.insns.as_bytes());
        bytes.extend_from_slice(assembler.locations.as_bytes());
        bytes.extend_from_slice(assembler.pool.as_bytes());
        (bytes, assembler.tables)
    }

    /// Checks the code buffer `backing[range]` against the program it belongs to (the
    /// program's tables bound the indices instructions may use), then serves it in place.
    /// A buffer that is not aligned for its records is copied once.
    pub fn new(
        backing: Arc<dyn Backing>,
        range: Range<usize>,
        tables: CodeTables,
        program: &Program,
    ) -> Result<Code, CodeError> {
        let Some(bytes) = backing.bytes().get(range.clone()) else {
            return Err(malformed(format!("range {range:?} is outside the buffer")));
        };
        if !(bytes.as_ptr() as usize).is_multiple_of(align_of::<Insn>()) {
            let len = bytes.len();
            return Code::new(Arc::new(AlignedBytes::copy_from(bytes)), 0..len, tables, program);
        }
        let Ok((header, _)) = Header::read_from_prefix(bytes) else {
            return Err(malformed(format!("{} bytes, the header needs 16", bytes.len())));
        };
        if header.magic != MAGIC {
            return Err(malformed(format!("bad magic {:02x?}, expected {:02x?}", header.magic, MAGIC)));
        }
        let count = header.instructions as usize;
        let insns_start = range.start + size_of::<Header>();
        let locations_start = insns_start + count * size_of::<Insn>();
        let pool_start = locations_start + count * size_of::<RawLocation>();
        let end = pool_start as u64 + u64::from(header.pool) * 4;
        if end != range.end as u64 {
            return Err(malformed(format!(
                "{} instructions and {} pool words need {} bytes, the section has {}",
                header.instructions,
                header.pool,
                end - range.start as u64,
                range.len()
            )));
        }
        // SAFETY: `Backing`'s contract keeps this slice valid and unchanged for as long as
        // `backing` lives, and the `Code` owns an `Arc` of it (clones of the `Code` own one
        // too) that is never replaced. The slice leaves the `Code` only through methods that
        // borrow it from `&self`, so no reference outlives the backing.
        let bytes: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(backing.bytes()) };
        let view_failed = |what: &str| malformed(format!("the {what} table is not aligned for its records"));
        let insn_records =
            <[Insn]>::ref_from_bytes(&bytes[insns_start..locations_start]).map_err(|_| view_failed("instruction"))?;
        let location_records = <[RawLocation]>::ref_from_bytes(&bytes[locations_start..pool_start])
            .map_err(|_| view_failed("location"))?;
        let code = Code {
            _backing: backing,
            bytes,
            section: range.clone(),
            insn_records,
            location_records,
            pool_bytes: &bytes[pool_start..range.end],
            count: header.instructions,
            tables,
        };
        code.verify(program)?;
        Ok(code)
    }

    /// The number of instructions.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The size of the buffer, tables excluded.
    pub fn byte_len(&self) -> usize {
        self.section.len()
    }

    /// The code buffer, as an artifact stores it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.section.clone()]
    }

    pub fn tables(&self) -> &CodeTables {
        &self.tables
    }

    /// Replaces a constant: how a `--set` parameter reaches the program. The instruction
    /// must be a `CONST`.
    pub fn set_const(&mut self, expr: ExprId, value: Value) -> Result<(), CodeError> {
        let insn = self.insn_checked(expr)?;
        if insn.op != op::CONST {
            return Err(CodeError::Instruction { index: expr.0, message: "is not a constant".into() });
        }
        self.tables.consts[insn.a as usize] = value;
        Ok(())
    }

    fn insn_checked(&self, expr: ExprId) -> Result<Insn, CodeError> {
        self.insn_records
            .get(expr.index())
            .copied()
            .ok_or_else(|| CodeError::Instruction { index: expr.0, message: "does not exist".into() })
    }

    #[inline]
    fn pool<T: FromBytes + Immutable + KnownLayout>(&self, start: u32, count: u32) -> &[T] {
        let words = size_of::<T>() / 4;
        let from = start as usize * 4;
        let to = from + count as usize * words * 4;
        // The verifier bounded every list within the pool, and the pool is aligned for the
        // records (`new`), so the view can not fail; an empty slice would only hide a bug.
        <[T]>::ref_from_bytes(&self.pool_bytes[from..to]).unwrap_or(&[])
    }

    /// The instruction `id`. `id` must be below [`Code::len`]: the machine only follows
    /// operands the check in [`Code::new`] bounded.
    #[inline(always)]
    pub fn expr(&self, id: ExprId) -> Instruction<'_> {
        let insn = self.insn_records[id.index()];
        Instruction { kind: self.op(insn), id, code: self }
    }

    /// The value of instruction `id` if it is a constant: [`Code::expr`] without decoding
    /// the other operators, for the paths that only answer constants.
    #[inline(always)]
    pub fn constant(&self, id: ExprId) -> Option<&Value> {
        let insn = self.insn_records[id.index()];
        (insn.op == op::CONST).then(|| &self.tables.consts[insn.a as usize])
    }

    /// The location of instruction `id`.
    #[inline]
    pub fn location(&self, id: ExprId) -> Location {
        let raw = self.location_records[id.index()];
        Location { file: FileId(raw.file), span: Span { start: raw.start, end: raw.end } }
    }

    #[inline(always)]
    fn op(&self, i: Insn) -> Op<'_> {
        let texts = &self.tables.texts[..];
        let optional = |v: u32| (v != NONE).then_some(ExprId(v));
        match i.op {
            op::CONST => Op::Const(&self.tables.consts[i.a as usize]),
            op::VAR => Op::Var(VarRef::Name(Symbol::from_u32(i.a))),
            op::VAR_QUALIFIED => Op::Var(VarRef::Qualified(NsId(i.a), Symbol::from_u32(i.b))),
            op::ATTR => Op::Attr { base: ExprId(i.a), name: Symbol::from_u32(i.b) },
            op::SUBSCRIPT => Op::Subscript { map: ExprId(i.a), key: ExprId(i.b) },
            op::NOT => Op::Not(ExprId(i.a)),
            op::BINARY => Op::Binary { op: BINOPS[i.sub as usize], lhs: ExprId(i.a), rhs: ExprId(i.b) },
            op::AND => Op::And { lhs: ExprId(i.a), rhs: ExprId(i.b) },
            op::OR => Op::Or { lhs: ExprId(i.a), rhs: ExprId(i.b) },
            op::COND => Op::Cond { cond: ExprId(i.a), then: ExprId(i.b), otherwise: ExprId(i.c) },
            op::LIST => Op::List(self.pool(i.a, i.b)),
            op::DICT => Op::Dict(Entries { entries: self.pool(i.a, i.b), texts }),
            op::FORMAT => {
                Op::Format { template: &texts[i.a as usize], parts: Entries { entries: self.pool(i.b, i.c), texts } }
            }
            op::FSTRING => {
                Op::FString { template: &texts[i.a as usize], fields: Entries { entries: self.pool(i.b, i.c), texts } }
            }
            op::CALL => {
                let counts: &[u32] = self.pool(i.c, 3);
                let (args, kwargs, splats) = (counts[0], counts[1], counts[2]);
                let callee = match i.sub {
                    0 => Callee::Plugin(PluginId(i.a)),
                    _ => Callee::Cast(PRIMITIVES[i.a as usize]),
                };
                Op::Call {
                    callee,
                    name: &texts[i.b as usize],
                    args: self.pool(i.c + 3, args),
                    kwargs: self.pool(i.c + 3 + args, kwargs),
                    splats: self.pool(i.c + 3 + args + 2 * kwargs, splats),
                }
            }
            op::CONSTRUCT => Op::Construct(CtorId(i.a)),
            op::INDEX_LOOKUP => {
                let (query, splats) = self.lookup_lists(i.b);
                Op::IndexLookup { entity: EntityId(i.a), query, splats }
            }
            op::SELECTOR_LOOKUP => {
                let (query, splats) = self.lookup_lists(i.c);
                Op::SelectorLookup { base: ExprId(i.a), relation: Symbol::from_u32(i.b), query, splats }
            }
            op::LIST_COMP => Op::ListComp {
                element: ExprId(i.a),
                var: Symbol::from_u32(i.b),
                iterable: ExprId(i.c),
                guard: optional(i.d),
            },
            _ => Op::IsDefined { base: optional(i.a), name: Symbol::from_u32(i.b) },
        }
    }

    fn lookup_lists(&self, at: u32) -> (&[Named], &[ExprId]) {
        let counts: &[u32] = self.pool(at, 2);
        let (query, splats) = (counts[0], counts[1]);
        (self.pool(at + 2, query), self.pool(at + 2 + 2 * query, splats))
    }

    /// Checks every record: opcodes, that operands name earlier instructions and existing
    /// entries of the program's tables, that pool ranges and locations are in bounds, and
    /// the depth of every expression. After this, [`Code::expr`] and the machine can index
    /// without checks.
    fn verify(&self, program: &Program) -> Result<(), CodeError> {
        let (insns, locations) = (self.insn_records, self.location_records);
        // The pool is aligned for its words (`new`), so the view can not fail; an empty pool
        // would only hide a bug, never read wrongly.
        let pool = <[u32]>::ref_from_bytes(self.pool_bytes).unwrap_or(&[]);
        let pool_len = pool.len() as u64;
        let mut depth = vec![0u32; insns.len()];
        for (index, insn) in insns.iter().enumerate() {
            let fail = |message: String| CodeError::Instruction { index: index as u32, message };
            let below = |what: &str, value: u32, limit: usize| {
                if (value as usize) < limit {
                    Ok(())
                } else {
                    Err(fail(format!("{what} {value} is out of range (there are {limit})")))
                }
            };
            let mut operands: Vec<u32> = Vec::new();
            let pool_range = |start: u32, words: u64| {
                if u64::from(start) + words <= pool_len {
                    Ok(start as usize..(u64::from(start) + words) as usize)
                } else {
                    Err(fail(format!("operand list {start}+{words} is outside the pool of {pool_len} words")))
                }
            };
            let names = program.names.len();
            let texts = self.tables.texts.len();
            match insn.op {
                op::CONST => below("constant", insn.a, self.tables.consts.len())?,
                op::VAR => below("name", insn.a, names)?,
                op::VAR_QUALIFIED => {
                    below("namespace", insn.a, program.namespaces.len())?;
                    below("name", insn.b, names)?;
                }
                op::ATTR => {
                    operands.push(insn.a);
                    below("name", insn.b, names)?;
                }
                op::SUBSCRIPT | op::AND | op::OR => operands.extend([insn.a, insn.b]),
                op::NOT => operands.push(insn.a),
                op::BINARY => {
                    below("operator", u32::from(insn.sub), BINOPS.len())?;
                    operands.extend([insn.a, insn.b]);
                }
                op::COND => operands.extend([insn.a, insn.b, insn.c]),
                op::LIST => operands.extend_from_slice(&pool[pool_range(insn.a, u64::from(insn.b))?]),
                op::DICT | op::FORMAT | op::FSTRING => {
                    let (start, count) = if insn.op == op::DICT { (insn.a, insn.b) } else { (insn.b, insn.c) };
                    if insn.op != op::DICT {
                        below("template text", insn.a, texts)?;
                    }
                    for pair in pool[pool_range(start, 2 * u64::from(count))?].chunks(2) {
                        below("text", pair[0], texts)?;
                        operands.push(pair[1]);
                    }
                }
                op::CALL => {
                    match insn.sub {
                        0 => below("plugin", insn.a, program.plugins.len())?,
                        1 => below("primitive type", insn.a, PRIMITIVES.len())?,
                        other => return Err(fail(format!("callee kind {other} is unknown"))),
                    }
                    below("name text", insn.b, texts)?;
                    let counts = &pool[pool_range(insn.c, 3)?];
                    let (args, kwargs, splats) = (u64::from(counts[0]), u64::from(counts[1]), u64::from(counts[2]));
                    let all = &pool[pool_range(insn.c + 3, args + 2 * kwargs + splats)?];
                    let (args, rest) = all.split_at(args as usize);
                    let (kwargs, splats) = rest.split_at(2 * kwargs as usize);
                    operands.extend_from_slice(args);
                    for pair in kwargs.chunks(2) {
                        below("name", pair[0], names)?;
                        operands.push(pair[1]);
                    }
                    operands.extend_from_slice(splats);
                }
                op::CONSTRUCT => {
                    // A constructor's arguments are evaluated as part of it, so they count
                    // for its depth like operands.
                    below("constructor", insn.a, program.ctors.len())?;
                    let ctor = &program.ctors[insn.a as usize];
                    operands.extend(ctor.splats.iter().map(|e| e.0));
                    operands.extend(ctor.direct.iter().chain(&ctor.indirect).map(|(_, e)| e.0));
                    operands.extend(ctor.lhs.iter().map(|(e, _)| e.0));
                }
                op::INDEX_LOOKUP | op::SELECTOR_LOOKUP => {
                    let at = if insn.op == op::INDEX_LOOKUP {
                        below("entity", insn.a, program.entities.len())?;
                        insn.b
                    } else {
                        operands.push(insn.a);
                        below("name", insn.b, names)?;
                        insn.c
                    };
                    let counts = &pool[pool_range(at, 2)?];
                    let (query, splats) = (u64::from(counts[0]), u64::from(counts[1]));
                    let all = &pool[pool_range(at + 2, 2 * query + splats)?];
                    let (query, splats) = all.split_at(2 * query as usize);
                    for pair in query.chunks(2) {
                        below("name", pair[0], names)?;
                        operands.push(pair[1]);
                    }
                    operands.extend_from_slice(splats);
                }
                op::LIST_COMP => {
                    operands.extend([insn.a, insn.c]);
                    below("name", insn.b, names)?;
                    if insn.d != NONE {
                        operands.push(insn.d);
                    }
                }
                op::IS_DEFINED => {
                    if insn.a != NONE {
                        operands.push(insn.a);
                    }
                    below("name", insn.b, names)?;
                }
                other => return Err(fail(format!("opcode {other} is unknown"))),
            }
            let mut deepest = 0;
            for &operand in &operands {
                if operand as usize >= index {
                    return Err(fail(format!("operand %{operand} is not an earlier instruction")));
                }
                deepest = deepest.max(depth[operand as usize]);
            }
            depth[index] = deepest + 1;
            if depth[index] > MAX_EXPR_DEPTH {
                return Err(fail(format!("expressions nest deeper than {MAX_EXPR_DEPTH} levels")));
            }
            let location = &locations[index];
            below("source file", location.file, program.files.len())?;
            if location.start > location.end {
                return Err(fail(format!("span {}..{} is reversed", location.start, location.end)));
            }
        }
        Ok(())
    }
}

/// The instruction count a code buffer declares (checked against its size by [`Code::new`]).
pub fn instruction_count(bytes: &[u8]) -> Result<usize, CodeError> {
    match Header::read_from_prefix(bytes) {
        Ok((header, _)) => Ok(header.instructions as usize),
        Err(_) => Err(malformed(format!("{} bytes, the header needs 16", bytes.len()))),
    }
}

#[derive(Default)]
struct Assembler {
    insns: Vec<Insn>,
    locations: Vec<RawLocation>,
    pool: Vec<u32>,
    tables: CodeTables,
}

impl Assembler {
    fn text(&mut self, text: &Arc<str>) -> u32 {
        self.tables.texts.push(text.clone());
        (self.tables.texts.len() - 1) as u32
    }

    fn list(&mut self, ids: impl IntoIterator<Item = u32>) -> u32 {
        let start = self.pool.len() as u32;
        self.pool.extend(ids);
        start
    }

    fn instruction(&mut self, kind: &ExprKind) -> Insn {
        let insn = |op: u8, a: u32, b: u32, c: u32| Insn { op, a, b, c, d: NONE, ..Insn::default() };
        match kind {
            ExprKind::Const(value) => {
                self.tables.consts.push(value.clone());
                insn(op::CONST, (self.tables.consts.len() - 1) as u32, 0, 0)
            }
            ExprKind::Var(VarRef::Name(name)) => insn(op::VAR, name.as_u32(), 0, 0),
            ExprKind::Var(VarRef::Qualified(ns, name)) => insn(op::VAR_QUALIFIED, ns.0, name.as_u32(), 0),
            ExprKind::Attr { base, name } => insn(op::ATTR, base.0, name.as_u32(), 0),
            ExprKind::Subscript { map, key } => insn(op::SUBSCRIPT, map.0, key.0, 0),
            ExprKind::Not(operand) => insn(op::NOT, operand.0, 0, 0),
            ExprKind::Binary { op: operator, lhs, rhs } => {
                let sub = BINOPS.iter().position(|o| o == operator).unwrap_or(0) as u8;
                Insn { sub, ..insn(op::BINARY, lhs.0, rhs.0, 0) }
            }
            ExprKind::And { lhs, rhs } => insn(op::AND, lhs.0, rhs.0, 0),
            ExprKind::Or { lhs, rhs } => insn(op::OR, lhs.0, rhs.0, 0),
            ExprKind::Cond { cond, then, otherwise } => insn(op::COND, cond.0, then.0, otherwise.0),
            ExprKind::List(items) => {
                let at = self.list(items.iter().map(|i| i.0));
                insn(op::LIST, at, items.len() as u32, 0)
            }
            ExprKind::Dict(entries) => {
                let pairs: Vec<u32> = entries.iter().flat_map(|(k, v)| [self.text(k), v.0]).collect();
                let at = self.list(pairs);
                insn(op::DICT, at, entries.len() as u32, 0)
            }
            ExprKind::Format { template, parts: entries } | ExprKind::FString { template, fields: entries } => {
                let opcode = if matches!(kind, ExprKind::Format { .. }) { op::FORMAT } else { op::FSTRING };
                let template = self.text(template);
                let pairs: Vec<u32> = entries.iter().flat_map(|(e, t)| [self.text(t), e.0]).collect();
                let at = self.list(pairs);
                insn(opcode, template, at, entries.len() as u32)
            }
            ExprKind::Call { callee, name, args, kwargs, splats } => {
                let (sub, a) = match callee {
                    Callee::Plugin(plugin) => (0, plugin.0),
                    Callee::Cast(primitive) => (1, PRIMITIVES.iter().position(|p| p == primitive).unwrap_or(0) as u32),
                };
                let name = self.text(name);
                let mut words = vec![args.len() as u32, kwargs.len() as u32, splats.len() as u32];
                words.extend(args.iter().map(|a| a.0));
                words.extend(kwargs.iter().flat_map(|(k, v)| [k.as_u32(), v.0]));
                words.extend(splats.iter().map(|s| s.0));
                let at = self.list(words);
                Insn { sub, ..insn(op::CALL, a, name, at) }
            }
            ExprKind::Construct(ctor) => insn(op::CONSTRUCT, ctor.0, 0, 0),
            ExprKind::IndexLookup { entity, query, splats } => {
                let at = self.lookup_lists(query, splats);
                insn(op::INDEX_LOOKUP, entity.0, at, 0)
            }
            ExprKind::SelectorLookup { base, relation, query, splats } => {
                let at = self.lookup_lists(query, splats);
                insn(op::SELECTOR_LOOKUP, base.0, relation.as_u32(), at)
            }
            ExprKind::ListComp { element, var, iterable, guard } => {
                Insn { d: guard.map_or(NONE, |g| g.0), ..insn(op::LIST_COMP, element.0, var.as_u32(), iterable.0) }
            }
            ExprKind::IsDefined { base, name } => insn(op::IS_DEFINED, base.map_or(NONE, |b| b.0), name.as_u32(), 0),
        }
    }

    fn lookup_lists(&mut self, query: &[(Symbol, ExprId)], splats: &[ExprId]) -> u32 {
        let mut words = vec![query.len() as u32, splats.len() as u32];
        words.extend(query.iter().flat_map(|(k, v)| [k.as_u32(), v.0]));
        words.extend(splats.iter().map(|s| s.0));
        self.list(words)
    }
}
