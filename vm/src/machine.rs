//! The machine: cells (the reference's result variables), waiters (its execution units),
//! gradual listeners, instances and indexes, and the interpretation of each instruction.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::ControlFlow;

// hashbrown's default hasher (foldhash) instead of SipHash: the index maps and `for` loops' seen sets
// are hashed on every constructor and element, and nothing here depends on iteration order.
use hashbrown::{HashMap, HashSet};
use std::sync::Arc;

use crate::bytecode::{Code, Op};
use crate::fifo::Fifo;
use crate::table::Table;
use num_bigint::BigInt;
use smallvec::{SmallVec, smallvec};
use weft_ir::program::{
    AttrId, AttributeKind, BaseType, BinOp, BlockId, Callee, Constraint, CtorId, EntityId, ExprId, NsId, Primitive,
    Program, StmtId, StmtKind, TypedefId, ValueType, VarRef,
};
use weft_ir::value::{self, ArithOp, Reference, Value, ValueError};
use weft_ir::{ErrorKind, Location, Symbol};

pub type CellId = u32;
pub type WaiterId = u32;
pub type ScopeId = u32;
pub type CollectorId = u32;
pub type PromiseId = u32;
pub type InstanceId = u32;

/// The place of a resolved hook in the run queue (see `Machine::resumptions`). No task slot
/// has this id: four billion live tasks would take 350 GB of task slots.
pub const RESUMPTION: WaiterId = WaiterId::MAX;

/// From how many elements on a list cell keeps a set of the instances it holds (see
/// `Machine::list_members`): below, a scan of the elements is as fast as a hash.
const MEMBER_SET_THRESHOLD: usize = 32;

/// The place of a task without requirements in the run queue (see `Machine::deferred`). Like
/// [`RESUMPTION`], it is never the id of a task slot.
pub const DEFERRED: WaiterId = WaiterId::MAX - 1;

/// Whether a run-queue entry names a task slot, rather than standing for the front of
/// `resumptions` or `deferred`: the two markers are the two largest ids.
fn is_task_slot(entry: WaiterId) -> bool {
    entry < DEFERRED
}

/// An evaluation error (see [`EvalErrorData`]), boxed: every evaluation step returns a
/// `Result` with it, and errors are rare, so the `Result` stays the size of its value
/// instead of carrying a 64-byte error through every return.
#[derive(Clone, Debug)]
pub struct EvalError(Box<EvalErrorData>);

impl std::ops::Deref for EvalError {
    type Target = EvalErrorData;

    fn deref(&self) -> &EvalErrorData {
        &self.0
    }
}

impl std::ops::DerefMut for EvalError {
    fn deref_mut(&mut self) -> &mut EvalErrorData {
        &mut self.0
    }
}

/// An evaluation error: the reference's exception kind, its message, where, and what it wraps.
#[derive(Clone, Debug)]
pub struct EvalErrorData {
    pub kind: ErrorKind,
    pub message: String,
    pub location: Option<Location>,
    pub cause: Option<Box<EvalError>>,
    /// For an unset-value error raised by a plugin: the cell to wait for before retrying.
    pub unset: Option<CellId>,
    /// Secondary places worth showing, with what to say there: the operands of an operator
    /// whose error is located at the operator token.
    pub labels: Vec<(Location, String)>,
    /// Whether `location` is only where the error arose, kept until something that reports
    /// errors at its own place takes it over. The reference raises "variable x not found"
    /// without a place; the innermost call, collection literal, operator, lookup or string
    /// around the name, or else the statement emitting it, gives it theirs. The name's own
    /// place is what is left when nothing does, and moves to `arose` when something does.
    provisional: bool,
    /// Where an error arose when something around it gave it its place (`location`): the
    /// unknown name in a call spread over lines, reported at the call's line as the reference
    /// does, is still shown.
    pub arose: Option<Location>,
    /// Where to show an error that the reference reports without a place (an incomplete
    /// instance: where it was constructed), with what to say there; a label when the error
    /// has a place after all (an empty optional relation read by a call). It takes no part in
    /// the order in which the reference sorts errors, which `location` decides.
    pub shown_at: Option<(Location, String)>,
}

impl EvalError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        EvalError(Box::new(EvalErrorData {
            kind,
            message: message.into(),
            location: None,
            cause: None,
            unset: None,
            labels: Vec::new(),
            provisional: false,
            arose: None,
            shown_at: None,
        }))
    }

    /// The error's parts, owned.
    pub fn into_data(self) -> EvalErrorData {
        *self.0
    }

    /// "Value not available": a value a plugin or an operation needed is not set yet; the
    /// task waits for `cell` and retries.
    fn unset(cell: CellId) -> Self {
        let mut e = rt("Value not available");
        e.unset = Some(cell);
        e
    }

    /// Locates the error at `location` unless it already has a place of its own (the
    /// reference's `set_statement(stmt, replace=False)`).
    pub fn at(mut self, location: Location) -> Self {
        if self.provisional {
            self.provisional = false;
            self.arose = self.location.take().filter(|&arose| arose != location);
        }
        if self.location.is_none() {
            self.location = Some(location);
        }
        self
    }

    /// Locates an error where it arose, for as long as nothing around it gives it a place
    /// (see [`EvalErrorData::provisional`]).
    fn arose_at(mut self, location: Location) -> Self {
        if self.location.is_none() {
            self.location = Some(location);
            self.provisional = true;
        }
        self
    }

    /// An error that wraps `cause` (the reference's chained exceptions).
    pub fn wrap(kind: ErrorKind, message: impl Into<String>, cause: EvalError) -> Self {
        let mut e = EvalError::new(kind, message);
        e.cause = Some(Box::new(cause));
        e
    }

    /// The reference's ordering weight for errors reported together.
    pub fn importance(&self) -> u32 {
        match self.kind {
            ErrorKind::TypingException | ErrorKind::IndexException => 10,
            ErrorKind::NotFoundException | ErrorKind::TypeNotFoundException => 20,
            ErrorKind::DuplicateException => 40,
            ErrorKind::ModifiedAfterFreezeException => 50,
            ErrorKind::DoubleSetException => 51,
            ErrorKind::ExternalException => 60,
            ErrorKind::OptionalValueException => 61,
            ErrorKind::KeyException => 70,
            ErrorKind::AttributeException | ErrorKind::WrappingRuntimeException => {
                self.cause.as_ref().map(|c| c.importance() + 1).unwrap_or(100)
            }
            _ => 100,
        }
    }
}

type R<T> = Result<T, EvalError>;

fn rt(message: impl Into<String>) -> EvalError {
    EvalError::new(ErrorKind::RuntimeException, message)
}

fn typing(message: impl Into<String>) -> EvalError {
    EvalError::new(ErrorKind::TypingException, message)
}

/// Why a plugin call failed, as the host reports it.
#[derive(Clone, Debug)]
pub enum PluginFailure {
    /// Read an unset cell: retry once it is ready.
    Unset(CellId),
    Error(EvalError),
}

/// What the VM needs from the runtime. A host is `Send + Sync` so that an evaluated machine
/// can be read from several threads (the export maps resources in parallel); the machine only
/// ever calls it through `&mut`.
pub trait Host: Send + Sync {
    /// Calls a plugin; `scope` is the calling statement's scope (for templates).
    fn call_plugin(
        &mut self,
        machine: &mut Machine,
        scope: ScopeId,
        plugin: weft_ir::program::PluginId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
    ) -> Result<Value, PluginFailure>;

    /// Whether a plugin's result is a function of its arguments alone and its call has no
    /// effect, so that a typedef constraint calling it may be memoized by value. `program`
    /// is the program `plugin` belongs to.
    fn plugin_is_pure(&mut self, _program: &Program, _plugin: weft_ir::program::PluginId) -> bool {
        false
    }

    /// The lines `std::print` wrote so far (the runtime's host collects them).
    fn take_prints(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The primitive type a reference resolves to (`Reference[T]`'s `T`), when the host knows
    /// its class: an attribute takes a reference to a value of its own type or of a subtype.
    fn reference_resolves_to(&self, _reference: &Reference) -> Option<Primitive> {
        None
    }
}

struct NoHost;

impl Host for NoHost {
    fn call_plugin(
        &mut self,
        _: &mut Machine,
        _: ScopeId,
        _: weft_ir::program::PluginId,
        _: Vec<Value>,
        _: Vec<(String, Value)>,
    ) -> Result<Value, PluginFailure> {
        Err(PluginFailure::Error(rt("no plugin host")))
    }
}

/// The type a plain cell checks on set.
#[derive(Clone, Copy, Debug)]
enum CellType {
    None,
    Value(ValueType),
    Entity(EntityId),
    Bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellKind {
    /// A variable, a plain attribute or a temporary (`ResultVariable`).
    Plain,
    /// A relation end `[1]` (`AttributeVariable`).
    Single,
    /// A relation end `[0:1]` (`OptionVariable`).
    Option,
    /// Any other relation end (`ListVariable`).
    List,
    /// A list literal evaluated gradually (`ListLiteral`).
    ListLiteral,
    /// A read of `a.b` before `a` is known (`ResultVariableProxy`).
    Proxy,
    /// Where statements that produce no value put their result: accepts anything, keeps nothing.
    Sink,
    /// A comprehension's loop variable, holding one element of its iterable
    /// (`ListElementVariable`): a plain cell that also reports its element to a gradual
    /// listener at once.
    Element,
}

impl CellKind {
    /// Every kind, indexed by its discriminant (how `Cell` stores it in three bits).
    const ALL: [CellKind; 8] = [
        CellKind::Plain,
        CellKind::Single,
        CellKind::Option,
        CellKind::List,
        CellKind::ListLiteral,
        CellKind::Proxy,
        CellKind::Sink,
        CellKind::Element,
    ];

    /// A relation end that takes elements gradually (`[0:1]` or multi-valued).
    fn is_relation(self) -> bool {
        matches!(self, CellKind::Option | CellKind::List)
    }

    /// A cell whose value is complete only when it freezes: its providers are counted.
    fn is_delayed(self) -> bool {
        matches!(self, CellKind::Option | CellKind::List | CellKind::ListLiteral)
    }
}

/// A cell, laid out compactly: a model has about sixteen per entity instance, so every byte
/// here is sixteen bytes per instance. Optional fields use sentinels instead of `Option`, the
/// small fields share one word (`packed`), and the waiter list lives in the machine's shared
/// node arena (`WaitNodes`).
pub struct Cell {
    /// The value's payload; its tag is in `location`'s high bits (see [`PackedValue`]).
    value: PackedValue,
    /// The cell's link until it has an extension, then one more than the extension's index in
    /// the machine's `exts` table (`Cell::HAS_EXT` tells which). The link is an attribute
    /// cell's owning instance, a proxy's target cell once connected, `NONE` where absent; a
    /// cell with an extension keeps it there (`CellExt::link`). Few cells have both, and
    /// sharing the word keeps a cell at 32 bytes, so that no cell straddles two cache lines.
    side: u32,
    /// The low 27 bits: where the value was set, an index in the machine's `LocationTable`
    /// (`Cell::NO_LOCATION` before). Bit 27: `Cell::HAS_EXT`. The high 4 bits: the value's tag
    /// (`TAG_EMPTY` without one).
    location: u32,
    waiters: WaitList,
    /// The low 24 bits: the attribute of an attribute cell, the `PackedType` of any other
    /// cell (an attribute cell's type is its attribute's). The high 8 bits: the kind and the
    /// flags (`Cell::KIND_SHIFT` and the `Cell::HAS_VALUE`, ... masks). The verifier keeps
    /// entity and attribute indices within 24 bits (`MAX_PACKED_INDEX`).
    packed: u32,
}

const NONE: u32 = u32::MAX;

/// How deep a list or dict may nest in an attribute's value: the parser's limit on nesting in
/// the source. The reference fails with a `RecursionError` somewhat before this depth.
const MAX_VALUE_DEPTH: usize = 1000;

/// The largest index a cell holds in its 24 bits: an attribute, or an entity's `PackedType`.
const MAX_PACKED_INDEX: u32 = (1 << 24) - 1;

/// How many entities and attributes a program may have for its indices to fit in a cell; the
/// verifier rejects programs with more.
pub(crate) const MAX_ENTITIES: usize = (MAX_PACKED_INDEX - PackedType::FIRST_ENTITY + 1) as usize;
pub(crate) const MAX_ATTRIBUTES: usize = MAX_PACKED_INDEX as usize + 1;

// A cell is 32 bytes: a million-instance model has sixteen million of them, and at 32 bytes
// none straddles two cache lines (at 36, half of them did). Growing it is a decision, not an
// accident.
const _: () = assert!(std::mem::size_of::<Cell>() == 32);

/// A cell's value without the enum's tag word: the payload of a [`Value`] in sixteen bytes,
/// with the tag kept in four spare bits of the cell's `location` word. A `Value` is 24 bytes
/// because its largest variants (a string, a list) are a pointer and a length and the tag
/// needs a word of its own; splitting the tag off made a cell 40 bytes instead of 48, 130 MB
/// less on a million-instance model, and four-byte words (with the extension an index instead
/// of a pointer) make it 36.
///
/// Owning: a slot whose tag is not `TAG_EMPTY` owns the shared allocation its payload points
/// to (one count of the `Arc`), exactly as the `Value` it was made of did. [`Cell`] releases it
/// on drop and when the value is replaced.
///
/// Stored as four 32-bit words, so that the cell's alignment is four bytes and a cell is 36
/// bytes rather than 40 (see [`Cell`]); the two 64-bit halves are put together when read.
#[derive(Clone, Copy)]
struct PackedValue([u32; 4]);

const TAG_EMPTY: u32 = 0;
const TAG_NULL: u32 = 1;
const TAG_BOOL: u32 = 2;
const TAG_INT: u32 = 3;
const TAG_BIGINT: u32 = 4;
const TAG_FLOAT: u32 = 5;
const TAG_STR: u32 = 6;
const TAG_LIST: u32 = 7;
const TAG_DICT: u32 = 8;
const TAG_INSTANCE: u32 = 9;
const TAG_UNKNOWN: u32 = 10;
const TAG_REFERENCE: u32 = 11;

impl PackedValue {
    const EMPTY: PackedValue = PackedValue([0; 4]);

    /// A payload of two 64-bit words.
    #[inline]
    fn from_words(a: u64, b: u64) -> PackedValue {
        PackedValue([a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32])
    }

    /// The payload's two 64-bit words.
    #[inline]
    fn words(self) -> [u64; 2] {
        let [a0, a1, b0, b1] = self.0;
        [u64::from(a0) | u64::from(a1) << 32, u64::from(b0) | u64::from(b1) << 32]
    }

    /// Takes a value apart: its tag and its payload, which now owns what the value owned.
    fn pack(value: Value) -> (u32, PackedValue) {
        let pointer = |p: *const u8| p as usize as u64;
        match value {
            Value::Null(id) => (TAG_NULL, PackedValue::from_words(id.0, 0)),
            Value::Bool(b) => (TAG_BOOL, PackedValue::from_words(b as u64, 0)),
            Value::Int(i) => (TAG_INT, PackedValue::from_words(i as u64, 0)),
            Value::BigInt(i) => (TAG_BIGINT, PackedValue::from_words(pointer(Arc::into_raw(i).cast()), 0)),
            Value::Float(f) => (TAG_FLOAT, PackedValue::from_words(f.to_bits(), 0)),
            Value::Str(s) => {
                let len = s.len() as u64;
                (TAG_STR, PackedValue::from_words(pointer(Arc::into_raw(s).cast()), len))
            }
            Value::List(items) => {
                let len = items.len() as u64;
                (TAG_LIST, PackedValue::from_words(pointer(Arc::into_raw(items).cast()), len))
            }
            Value::Dict(entries) => {
                let len = entries.len() as u64;
                (TAG_DICT, PackedValue::from_words(pointer(Arc::into_raw(entries).cast()), len))
            }
            Value::Instance(i) => (TAG_INSTANCE, PackedValue::from_words(u64::from(i), 0)),
            Value::Unknown => (TAG_UNKNOWN, Self::EMPTY),
            Value::Reference(r) => (TAG_REFERENCE, PackedValue::from_words(pointer(Arc::into_raw(r).cast()), 0)),
        }
    }

    /// Puts a value back together.
    ///
    /// # Safety
    /// `tag` and `self` must come from one [`PackedValue::pack`] (`tag` not `TAG_EMPTY`), and
    /// the result takes over what the payload owns: the caller either gives up the payload
    /// (takes the value out) or never drops the result (see [`ValueRef`]).
    unsafe fn unpack(tag: u32, payload: PackedValue) -> Value {
        let [a, b] = payload.words();
        let address = a as usize;
        // SAFETY: every `from_raw` below rebuilds an `Arc` from `address` (and `b`, the length
        // of the slice or string), which `pack` made with `Arc::into_raw` of an `Arc` of this
        // very type for this tag, and whose count the payload still holds, as the caller
        // guarantees.
        unsafe {
            match tag {
                TAG_NULL => Value::Null(value::NullId(a)),
                TAG_BOOL => Value::Bool(a != 0),
                TAG_INT => Value::Int(a as i64),
                TAG_BIGINT => Value::BigInt(Arc::from_raw(address as *const BigInt)),
                TAG_FLOAT => Value::Float(f64::from_bits(a)),
                TAG_STR => {
                    let bytes = std::ptr::slice_from_raw_parts(address as *const u8, b as usize);
                    Value::Str(Arc::from_raw(bytes as *const str))
                }
                TAG_LIST => {
                    let items = std::ptr::slice_from_raw_parts(address as *const Value, b as usize);
                    Value::List(Arc::from_raw(items))
                }
                TAG_DICT => {
                    let entries = std::ptr::slice_from_raw_parts(address as *const (Arc<str>, Value), b as usize);
                    Value::Dict(Arc::from_raw(entries))
                }
                TAG_INSTANCE => Value::Instance(a as u32),
                TAG_UNKNOWN => Value::Unknown,
                _ => Value::Reference(Arc::from_raw(address as *const Reference)),
            }
        }
    }
}

/// A cell's value, borrowed: a `Value` put together from the cell's payload that is never
/// dropped, so the counts the cell owns are untouched, and that lives no longer than the
/// borrow of the cell.
struct ValueRef<'a> {
    value: ManuallyDrop<Value>,
    _cell: PhantomData<&'a Cell>,
}

impl std::ops::Deref for ValueRef<'_> {
    type Target = Value;

    #[inline]
    fn deref(&self) -> &Value {
        &self.value
    }
}

/// A cell's type check, in four bytes: `CellType` for cells that are not attributes, or "the
/// owning attribute's type", looked up when a value is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedType(u32);

impl PackedType {
    const NONE: PackedType = PackedType(0);
    const BOOL: PackedType = PackedType(1);
    const FROM_OWNER: PackedType = PackedType(2);
    const FIRST_ENTITY: u32 = 3;

    fn entity(e: EntityId) -> PackedType {
        PackedType(Self::FIRST_ENTITY + e.0)
    }
}

/// A cell's waiters: a FIFO list of nodes in the machine's `WaitNodes` arena, kept as a
/// circular list of which only the last node is stored (its `next` is the first), so that
/// the list costs a cell four bytes. Delayed cells, whose waiters the scheduler counts,
/// keep the count in their `CellExt`.
#[derive(Clone, Copy, Debug)]
struct WaitList {
    tail: u32,
}

impl WaitList {
    const EMPTY: WaitList = WaitList { tail: NONE };
}

/// The nodes of every cell's waiter list, with a free list: a waiter registration costs no
/// allocation of its own and the nodes of released lists are reused.
struct WaitNodes {
    /// (waiter, next node). A free node's next node is the next free node.
    nodes: Table<(WaiterId, u32)>,
    /// The first free node, or `NONE`.
    free: u32,
}

impl Default for WaitNodes {
    fn default() -> Self {
        WaitNodes { nodes: Table::new(), free: NONE }
    }
}

impl WaitNodes {
    #[inline]
    fn push(&mut self, list: &mut WaitList, waiter: WaiterId) {
        let node = if self.free != NONE {
            let n = self.free;
            self.free = self.nodes[n as usize].1;
            self.nodes[n as usize] = (waiter, NONE);
            n
        } else {
            self.nodes.push((waiter, NONE)) as u32
        };
        if list.tail == NONE {
            // A list of one node is its own successor.
            self.nodes[node as usize].1 = node;
        } else {
            let first = self.nodes[list.tail as usize].1;
            self.nodes[node as usize].1 = first;
            self.nodes[list.tail as usize].1 = node;
        }
        list.tail = node;
    }

    /// Takes the first waiter of a detached list and recycles its node.
    #[inline]
    fn pop(&mut self, list: &mut WaitList) -> Option<WaiterId> {
        if list.tail == NONE {
            return None;
        }
        let first = self.nodes[list.tail as usize].1;
        let (waiter, next) = self.nodes[first as usize];
        if first == list.tail {
            list.tail = NONE;
        } else {
            self.nodes[list.tail as usize].1 = next;
        }
        self.nodes[first as usize].1 = self.free;
        self.free = first;
        Some(waiter)
    }
}

#[derive(Default)]
pub struct CellExt {
    /// Elements of list cells.
    pub items: Items,
    listeners: Option<Vec<CollectorId>>,
    /// The cell's link (see `Cell::side`), moved here when the extension was made.
    link: u32,
    nb_gradual_waiters: u32,
    /// Promises acquired on a delayed cell and not yet fulfilled, while `tracks_promises`.
    outstanding: u32,
    /// The length of a delayed cell's waiter list.
    waiting: u32,
}

// A cell's extension is 64 bytes on 64-bit targets: one in twenty cells of the 93k-instance
// benchmark has one (list relations that were filled, listened to or waited on).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<CellExt>() == 64);

/// The elements of a list cell: a vector while the list may grow, and shared once it is
/// complete and read as a whole. Every read of a relation's value (a plugin argument, an
/// attribute of an exported resource) used to copy its elements into a new list, so `n`
/// instances each reading a relation of `n` elements made `n²` copies; a shared list is
/// handed out by its reference count.
pub enum Items {
    Open(Vec<Value>),
    Shared(Arc<[Value]>),
}

impl Default for Items {
    fn default() -> Self {
        Items::Open(Vec::new())
    }
}

impl std::ops::Deref for Items {
    type Target = [Value];

    fn deref(&self) -> &[Value] {
        match self {
            Items::Open(items) => items,
            Items::Shared(items) => items,
        }
    }
}

impl Items {
    fn push(&mut self, value: Value) {
        match self {
            Items::Open(items) => items.push(value),
            // A complete list does not grow; should one, it becomes a vector again.
            Items::Shared(items) => {
                let mut open = items.to_vec();
                open.push(value);
                *self = Items::Open(open);
            }
        }
    }

    /// The elements as a shared list, sharing them from now on.
    fn share(&mut self) -> Arc<[Value]> {
        let shared: Arc<[Value]> = match self {
            Items::Open(items) => Arc::from(std::mem::take(items)),
            Items::Shared(items) => return items.clone(),
        };
        *self = Items::Shared(shared.clone());
        shared
    }

    /// The elements as a list value, without changing how they are kept.
    fn to_list(&self) -> Value {
        match self {
            Items::Open(items) => Value::List(Arc::from(&items[..])),
            Items::Shared(items) => Value::List(items.clone()),
        }
    }
}

static EMPTY_EXT: CellExt = CellExt {
    items: Items::Open(Vec::new()),
    listeners: None,
    link: NONE,
    nb_gradual_waiters: 0,
    outstanding: 0,
    waiting: 0,
};

impl Cell {
    const KIND_SHIFT: u32 = 24;
    const KIND_MASK: u32 = 0b111 << Self::KIND_SHIFT;
    const HAS_VALUE: u32 = 1 << 27;
    const QUEUED: u32 = 1 << 28;
    /// Whether `CellExt::outstanding` counts providers: delayed cells until they freeze.
    const TRACKS_PROMISES: u32 = 1 << 29;
    /// A proxy with an entry in `Machine::proxy_listeners`: proxies are read and connected
    /// often and few have a listener, so the flag spares the others a map lookup.
    const LISTENED: u32 = 1 << 30;
    /// A delayed cell in the scheduler's zerowaiters: its next waiter, or its freeze, is
    /// reported in `Machine::zerowaiter_events`.
    const WATCHED: u32 = 1 << 31;
    const INDEX_MASK: u32 = MAX_PACKED_INDEX;

    /// The location bits of a cell whose value has no recorded location.
    const NO_LOCATION: u32 = (1 << 27) - 1;
    /// In `location`: whether `side` holds an extension instead of the link.
    const HAS_EXT: u32 = 1 << 27;
    const TAG_SHIFT: u32 = 28;
    const TAG_MASK: u32 = 0xf << Self::TAG_SHIFT;

    fn new(kind: CellKind) -> Self {
        Cell {
            value: PackedValue::EMPTY,
            // No extension: one is made when first needed (`Machine::xm`), and a list that is
            // never filled, listened to, promised or waited on (a relation nobody sets) reads
            // as empty without one.
            side: NONE,
            location: Self::NO_LOCATION,
            waiters: WaitList::EMPTY,
            packed: PackedType::NONE.0
                | (kind as u32) << Self::KIND_SHIFT
                | if kind.is_delayed() { Self::TRACKS_PROMISES } else { 0 },
        }
    }

    /// An attribute cell of `instance`.
    fn attribute(kind: CellKind, instance: InstanceId, attr: AttrId) -> Self {
        debug_assert!(attr.0 <= Self::INDEX_MASK, "the verifier bounds attribute indices");
        let mut cell = Cell::new(kind);
        cell.side = instance;
        cell.set_index(attr.0);
        cell
    }

    #[inline]
    fn tag(&self) -> u32 {
        self.location >> Self::TAG_SHIFT
    }

    /// The value, borrowed.
    #[inline]
    fn value(&self) -> Option<ValueRef<'_>> {
        match self.tag() {
            TAG_EMPTY => None,
            tag => Some(ValueRef {
                // SAFETY: the tag and payload come from one `pack` (`set_value`), and the
                // value is never dropped (`ManuallyDrop`) nor outlives the borrow of `self`,
                // so the counts the cell owns stay the cell's.
                value: ManuallyDrop::new(unsafe { PackedValue::unpack(tag, self.value) }),
                _cell: PhantomData,
            }),
        }
    }

    #[inline]
    fn value_cloned(&self) -> Option<Value> {
        self.value().map(|v| Value::clone(&v))
    }

    /// Stores a value, releasing the previous one.
    #[inline]
    fn set_value(&mut self, value: Value) {
        let previous = self.take_value();
        let (tag, payload) = PackedValue::pack(value);
        self.value = payload;
        self.location = (self.location & !Self::TAG_MASK) | tag << Self::TAG_SHIFT;
        drop(previous);
    }

    /// Takes the value out, leaving none.
    fn take_value(&mut self) -> Option<Value> {
        let tag = self.tag();
        if tag == TAG_EMPTY {
            return None;
        }
        self.location &= !Self::TAG_MASK;
        let payload = std::mem::replace(&mut self.value, PackedValue::EMPTY);
        // SAFETY: the tag and payload come from one `pack`, and the cell gives the payload up
        // (its tag is now empty), so the value takes over what it owned.
        Some(unsafe { PackedValue::unpack(tag, payload) })
    }

    /// Where the value was set, as an index in the `LocationTable` (`NO_LOCATION` for none).
    #[inline]
    fn location_index(&self) -> u32 {
        self.location & Self::NO_LOCATION
    }

    #[inline]
    fn set_location_index(&mut self, index: u32) {
        self.location = (self.location & !Self::NO_LOCATION) | index.min(Self::NO_LOCATION);
    }

    /// Replaces the low 24 bits: the attribute or the type check.
    fn set_index(&mut self, index: u32) {
        self.packed = (self.packed & !Self::INDEX_MASK) | index;
    }

    #[inline]
    pub fn kind(&self) -> CellKind {
        CellKind::ALL[((self.packed & Self::KIND_MASK) >> Self::KIND_SHIFT) as usize]
    }

    #[inline]
    fn is_set(&self, flag: u32) -> bool {
        self.packed & flag != 0
    }

    #[inline]
    fn flag(&mut self, mask: u32, on: bool) {
        if on {
            self.packed |= mask;
        } else {
            self.packed &= !mask;
        }
    }

    #[inline]
    pub fn has_value(&self) -> bool {
        self.is_set(Self::HAS_VALUE)
    }

    #[inline]
    fn set_has_value(&mut self, on: bool) {
        self.flag(Self::HAS_VALUE, on);
    }

    #[inline]
    fn queued(&self) -> bool {
        self.is_set(Self::QUEUED)
    }

    #[inline]
    fn set_queued(&mut self, on: bool) {
        self.flag(Self::QUEUED, on);
    }

    #[inline]
    fn tracks_promises(&self) -> bool {
        self.is_set(Self::TRACKS_PROMISES)
    }

    #[inline]
    fn set_tracks_promises(&mut self, on: bool) {
        self.flag(Self::TRACKS_PROMISES, on);
    }

    /// The type a value set here is checked against.
    fn ty(&self, exts: &Table<CellExt>) -> PackedType {
        if self.owner(exts).is_some() { PackedType::FROM_OWNER } else { PackedType(self.packed & Self::INDEX_MASK) }
    }

    fn set_ty(&mut self, exts: &Table<CellExt>, ty: PackedType) {
        debug_assert!(self.owner(exts).is_none(), "an attribute cell's type is its attribute's");
        debug_assert!(ty.0 <= Self::INDEX_MASK, "the verifier bounds entity indices");
        self.set_index(ty.0);
    }

    /// A relation end that takes elements gradually (`[0:1]` or multi-valued).
    fn is_relation(&self) -> bool {
        self.kind().is_relation()
    }

    pub fn is_delayed(&self) -> bool {
        self.kind().is_delayed()
    }

    /// The index of the cell's extension in `exts`, if it has one. `side` holds one more
    /// than the index; this is the only place that reads it so.
    #[inline]
    fn ext_index(&self) -> Option<usize> {
        (self.location & Self::HAS_EXT != 0).then(|| self.side as usize - 1)
    }

    /// The owning instance, the target or `NONE` (see `side`).
    #[inline]
    fn link(&self, exts: &Table<CellExt>) -> u32 {
        match self.ext_index() {
            None => self.side,
            Some(ext) => exts[ext].link,
        }
    }

    fn set_link(&mut self, exts: &mut Table<CellExt>, link: u32) {
        match self.ext_index() {
            None => self.side = link,
            Some(ext) => exts[ext].link = link,
        }
    }

    /// The index of the cell's extension ([`Cell::ext_index`]), made first if it has none;
    /// the link moves there.
    fn ext_or_make(&mut self, exts: &mut Table<CellExt>) -> usize {
        if let Some(ext) = self.ext_index() {
            return ext;
        }
        let ext = exts.push(CellExt { link: self.side, ..CellExt::default() });
        self.side = ext as u32 + 1;
        self.location |= Self::HAS_EXT;
        ext
    }

    /// The attribute of a relation end's cell, read without the link: cells of the relation
    /// kinds are made only as attribute cells (`Machine::add_instance`).
    fn relation_attr(&self) -> Option<AttrId> {
        matches!(self.kind(), CellKind::Single | CellKind::Option | CellKind::List)
            .then_some(AttrId(self.packed & Self::INDEX_MASK))
    }

    /// For attribute cells: the instance and attribute.
    fn owner(&self, exts: &Table<CellExt>) -> Option<(InstanceId, AttrId)> {
        if self.kind() == CellKind::Proxy {
            return None;
        }
        let link = self.link(exts);
        (link != NONE).then_some((link, AttrId(self.packed & Self::INDEX_MASK)))
    }

    /// The cell a proxy was connected to.
    fn target(&self, exts: &Table<CellExt>) -> Option<CellId> {
        if self.kind() != CellKind::Proxy {
            return None;
        }
        let link = self.link(exts);
        (link != NONE).then_some(link)
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        drop(self.take_value());
    }
}

/// A collector listening to a proxy (`ResultVariableProxy.listener`), and whether it is to be
/// handed the value when the proxy is next read (its target took no listeners).
#[derive(Clone, Copy)]
struct ProxyListener {
    collector: CollectorId,
    location: Location,
    notify: bool,
}

/// A direct-mapped cache of variable lookups: (scope, name) to the cell found. The statements
/// of one block read the same few names (`self` above all) from the same scope, and each
/// lookup walked the chain of scopes, whose entries are spread over the table and mostly cold.
/// Scopes are never removed or changed once pushed, so a lookup's result never goes stale.
struct LookupCache {
    /// (scope, name, cell); an entry with the scope `NONE` is empty.
    entries: Box<[(ScopeId, Symbol, CellId); LookupCache::LEN]>,
}

impl Default for LookupCache {
    fn default() -> Self {
        LookupCache { entries: Box::new([(NONE, Symbol::from_u32(0), NONE); LookupCache::LEN]) }
    }
}

impl LookupCache {
    const LEN: usize = 1024;

    #[inline]
    fn slot(scope: ScopeId, name: Symbol) -> usize {
        let mixed = (scope ^ name.as_u32().rotate_left(16)).wrapping_mul(0x9E37_79B1);
        (mixed >> (32 - Self::LEN.trailing_zeros())) as usize
    }
}

/// The distinct locations cells were set at, so that a cell stores a four-byte index instead
/// of a twelve-byte location. There are as many as the program has statements and
/// expressions at most, so the table stays small and hot in the cache.
struct LocationTable {
    list: Vec<Location>,
    index: HashMap<Location, u32>,
    /// A direct-mapped cache in front of `index`: a value is set about once per cell, from a
    /// few hundred statements, and hashing a location for the map cost some seventy
    /// instructions of every set. Entries are indices in `list`, `NONE` when empty.
    recent: Box<[u32; LocationTable::RECENT]>,
}

impl Default for LocationTable {
    fn default() -> Self {
        LocationTable { list: Vec::new(), index: HashMap::new(), recent: Box::new([NONE; LocationTable::RECENT]) }
    }
}

impl LocationTable {
    const RECENT: usize = 1024;

    #[inline]
    fn recent_slot(location: &Location) -> usize {
        let mixed = (location.span.start ^ location.span.end.rotate_left(13) ^ location.file.0.rotate_left(26))
            .wrapping_mul(0x9E37_79B1);
        (mixed >> (32 - Self::RECENT.trailing_zeros())) as usize
    }

    #[inline]
    fn intern(&mut self, location: Location) -> u32 {
        let slot = Self::recent_slot(&location);
        let cached = self.recent[slot];
        if cached != NONE && self.list[cached as usize] == location {
            return cached;
        }
        let i = match self.index.get(&location) {
            Some(&i) => i,
            // A cell keeps 28 bits of location; past that many distinct locations (never, for
            // a program of any real size), values keep none.
            None if self.list.len() >= Cell::NO_LOCATION as usize => return Cell::NO_LOCATION,
            None => {
                let i = self.list.len() as u32;
                self.list.push(location);
                self.index.insert(location, i);
                i
            }
        };
        self.recent[slot] = i;
        i
    }

    fn get(&self, i: u32) -> Option<Location> {
        if i == Cell::NO_LOCATION {
            return None;
        }
        self.list.get(i as usize).copied()
    }
}

/// Where each attribute of an entity is among its instance's cells, by attribute name: an
/// open-addressed table of (symbol, position) with at most half its entries used. Finding a
/// slot by a linear search of the entity's slots cost some seventy instructions, over a
/// million times on a 93k-instance model.
struct SlotTable {
    shift: u32,
    entries: Box<[(u32, u32)]>,
}

impl SlotTable {
    fn new(slots: &[(Symbol, AttrId)]) -> SlotTable {
        let size = (slots.len() * 2).next_power_of_two().max(2);
        let mut table =
            SlotTable { shift: 32 - size.trailing_zeros(), entries: vec![(NONE, 0); size].into_boxed_slice() };
        for (position, (name, _)) in slots.iter().enumerate() {
            let mut k = table.home(*name);
            loop {
                match table.entries[k].0 {
                    NONE => {
                        table.entries[k] = (name.as_u32(), position as u32);
                        break;
                    }
                    // An entity's slot names are distinct; a repeat keeps the first, as
                    // the linear search did.
                    existing if existing == name.as_u32() => break,
                    _ => k = (k + 1) & (size - 1),
                }
            }
        }
        table
    }

    #[inline]
    fn home(&self, name: Symbol) -> usize {
        (name.as_u32().wrapping_mul(0x9E37_79B1) >> self.shift) as usize
    }

    #[inline]
    fn position(&self, name: Symbol) -> Option<u32> {
        let mask = self.entries.len() - 1;
        let mut k = self.home(name);
        loop {
            let (symbol, position) = self.entries[k];
            if symbol == name.as_u32() {
                return Some(position);
            }
            if symbol == NONE {
                return None;
            }
            k = (k + 1) & mask;
        }
    }
}

/// Starts loading the cache line at `ptr`; a hint with no effect on the program's meaning.
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees, whatever the
    // address; SSE, which it belongs to, is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// A key in a task's requirement table: one word besides its tag, so that a requirement is
/// 12 bytes and two fit in a task slot. A variable of another namespace (`ns::x`) is keyed by
/// its expression instead of by its two-word name: every read of it in one expression finds
/// the same cell, so one entry per read holds the same value that one entry per name would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Expr(ExprId),
    Name(Symbol),
    Collector(ExprId),
    Promises,
    Extra(u32),
    Index(u32),
}

/// A task's requirements: usually one or two, kept inline.
type Reqs = SmallVec<[(Key, CellId); 2]>;

/// The values of a task's requirements; a later key replaces an earlier one, as in the
/// reference's dict.
struct Values(SmallVec<[(Key, Value); 4]>);

impl Values {
    fn insert(&mut self, k: Key, v: Value) {
        match self.0.iter_mut().find(|(x, _)| *x == k) {
            Some(slot) => slot.1 = v,
            None => self.0.push((k, v)),
        }
    }

    fn get(&self, k: &Key) -> Option<&Value> {
        self.0.iter().find(|(x, _)| x == k).map(|(_, v)| v)
    }
}

/// What a task does when its requirements are ready.
enum Body {
    /// Evaluate an expression and store it (`ExecutionUnit`), optionally as an attribute
    /// assignment whose errors are wrapped (`SetAttributeHelper`).
    Exec { target: CellId, promise: OptPromise, what: Exec, scope: ScopeId, attr: Option<AttrCtx> },
    /// `x.a = e` after `x` is known.
    SetAttr { stmt: StmtId, scope: ScopeId },
    /// `a and b` / `a or b` after `a` is known.
    Lazy { expr: ExprId, scope: ScopeId, target: CellId },
    /// An index lookup once the query is known.
    Lookup { expr: ExprId, scope: ScopeId, target: CellId },
    /// `VariableReferenceHook`: resolve `base.name` and hand the cell to a resumer.
    Hook { base: ExprId, name: Symbol, scope: ScopeId, resumer: Resumer, propagate_unset: bool, location: Location },
    /// `is defined` waiting for the variable to be ready.
    IsDefinedWait { cell: CellId, target: CellId, location: Location },
    /// A conditional expression: first the condition, then the chosen branch.
    Cond { src: CondSrc, scope: ScopeId, result: CellId, lhs: Option<CollectorId>, chosen: Option<bool> },
    /// A list comprehension's iterable is complete.
    Comp { helper: u32, scope: ScopeId },
    /// All elements of a comprehension are computed.
    CompFinal { helper: u32 },
    /// A plugin call or cast (`FunctionUnit`).
    /// The arguments are boxed: they are only kept for a retry, and inline they would make
    /// every task slot 40 bytes larger.
    Call { expr: ExprId, scope: ScopeId, result: CellId, args: Option<Box<Arguments>> },
}

/// A task that waits for nothing, in the run queue's order (see `Machine::deferred`): the
/// bodies such tasks have, which are all plain data.
#[derive(Clone, Copy)]
enum Deferred {
    Exec { target: CellId, promise: OptPromise, what: Exec, scope: ScopeId, attr: Option<AttrCtx> },
    Cond { src: CondSrc, scope: ScopeId, result: CellId, lhs: Option<CollectorId>, chosen: Option<bool> },
}

impl Deferred {
    fn of(body: &Body) -> Option<Deferred> {
        match *body {
            Body::Exec { target, promise, what, scope, attr } => {
                Some(Deferred::Exec { target, promise, what, scope, attr })
            }
            Body::Cond { src, scope, result, lhs, chosen } => Some(Deferred::Cond { src, scope, result, lhs, chosen }),
            _ => None,
        }
    }

    fn body(self) -> Body {
        match self {
            Deferred::Exec { target, promise, what, scope, attr } => Body::Exec { target, promise, what, scope, attr },
            Deferred::Cond { src, scope, result, lhs, chosen } => Body::Cond { src, scope, result, lhs, chosen },
        }
    }
}

// A task body is 48 bytes on 64-bit targets, and with its requirements a task slot is 88; a
// million-instance model keeps four million slots.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<Option<Body>>() == 48
        && std::mem::size_of::<(Key, CellId)>() == 12
        && std::mem::size_of::<Waiter>() == 88
);

/// An optional promise in four bytes (`NONE` for none), to keep task bodies small.
#[derive(Clone, Copy)]
struct OptPromise(u32);

impl OptPromise {
    const NONE: OptPromise = OptPromise(NONE);

    fn get(self) -> Option<PromiseId> {
        (self.0 != NONE).then_some(self.0)
    }
}

impl From<Option<PromiseId>> for OptPromise {
    fn from(promise: Option<PromiseId>) -> Self {
        match promise {
            Some(id) => {
                debug_assert_ne!(id, NONE, "there are fewer than u32::MAX promises");
                OptPromise(id)
            }
            None => OptPromise::NONE,
        }
    }
}

/// What a conditional task decides on: a `?:` expression, or a comprehension element's guard
/// (whose else branch filters the element out).
#[derive(Clone, Copy)]
enum CondSrc {
    Expr(ExprId),
    Guard { helper: u32, unknown: bool },
}

/// Evaluated plugin arguments, kept when a call is retried.
type Arguments = (Vec<Value>, Vec<(String, Value)>);

#[derive(Clone, Copy)]
enum Exec {
    Expr(ExprId),
    /// A comprehension element: its value, or the result of its guard task.
    CompElement {
        helper: u32,
        unknown: bool,
        guarded: bool,
    },
    Stmt(StmtId),
    SubCtor {
        instance: InstanceId,
        index: u32,
    },
}

#[derive(Clone, Copy)]
struct AttrCtx {
    /// The instance's index plus one: the zero this leaves free lets `Option<AttrCtx>` (in
    /// every task body) take no more room than `AttrCtx`.
    instance_plus_one: std::num::NonZeroU32,
    attr: Symbol,
    location: Location,
}

impl AttrCtx {
    fn new(instance: InstanceId, attr: Symbol, location: Location) -> Self {
        let instance_plus_one =
            std::num::NonZeroU32::new(instance.wrapping_add(1)).expect("fewer than u32::MAX instances");
        AttrCtx { instance_plus_one, attr, location }
    }

    fn instance(&self) -> InstanceId {
        self.instance_plus_one.get() - 1
    }
}

#[derive(Clone, Copy)]
enum Resumer {
    /// A proxy that readers wait on (and may listen to) until it is connected.
    Reader(CellId),
    /// A proxy that only the requirement lists of the tasks waiting on it refer to: the
    /// proxy of one `a.b` read in an expression's requirements. Once connected it is not
    /// needed any more (see `Machine::connect_requirement`).
    Requirement(CellId),
    Eager(u32),
    IsDefined {
        target: CellId,
        location: Location,
    },
}

pub struct Waiter {
    waitcount: i32,
    /// Creation order (see `Machine::pending_tasks`); in a free slot, the next free slot.
    seq: u32,
    requires: Reqs,
    /// `None` while the task runs and once it finished.
    body: Option<Body>,
}

/// Gradual listeners (`ResultCollector`s).
enum Collector {
    For {
        stmt: StmtId,
        scope: ScopeId,
        seen: HashSet<IdentityKey>,
    },
    /// A list cell receiving elements (`ListLiteral` or a relation).
    Cell(CellId),
    SetAttr {
        instance: InstanceId,
        attr: Symbol,
        next: CellId,
        location: Location,
    },
    IsDefined {
        target: CellId,
        location: Location,
    },
    Comp(u32),
}

impl Collector {
    fn pure_gradual(&self) -> bool {
        !matches!(self, Collector::IsDefined { .. })
    }
}

/// What CPython's `id()` would consider the same object, as far as it matters for the `for`
/// loop of 18.0.1 (which skips an element it has already seen by identity). Booleans, small
/// ints, the empty string and one-character Latin-1 strings are shared objects in CPython. Any
/// other string is the object its origin made: each string literal in the source is an object
/// of its own, and a variable read twice gives the same object twice. weft's strings keep
/// that identity as their shared allocation (a literal is one allocation, copies of a value
/// share it), so they are compared by address. Other numbers are distinct objects.
///
/// `null` is the reference's `NoneValue`, one object per `null` in the source and per `None`
/// a plugin returns: `[null, null]` runs a loop twice, but a list holding one variable's
/// `null` twice runs it once. A null carries the identity of its object (`NullId`).
#[derive(Clone, PartialEq, Eq, Hash)]
enum IdentityKey {
    Null(value::NullId),
    Bool(bool),
    SmallInt(i64),
    SharedStr(Arc<str>),
    Str(StrIdentity),
    Instance(u32),
    Unique(u64),
}

/// A string compared by the address of its allocation: two values are the same object when
/// they share it. The key holds the string, so the address cannot be reused by another while
/// the key exists.
#[derive(Clone)]
struct StrIdentity(Arc<str>);

impl PartialEq for StrIdentity {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for StrIdentity {}

impl std::hash::Hash for StrIdentity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0) as *const u8, state);
    }
}

/// Whether CPython shares one object for every string equal to `s`: the empty string and the
/// strings of one Latin-1 character.
fn is_shared_python_str(s: &str) -> bool {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (None, _) => true,
        (Some(c), None) => (c as u32) < 256,
        _ => false,
    }
}

struct CompHelper {
    expr: ExprId,
    scope: ScopeId,
    lhs: Option<CollectorId>,
    results: Vec<CellId>,
    complete: bool,
    final_result: CellId,
}

struct EagerPromise {
    promise: Option<PromiseId>,
    fulfilled: bool,
}

struct Promise {
    owner: CellId,
    done: bool,
}

/// An execution context, 16 bytes: a model has about five per entity instance.
#[derive(Clone)]
enum Scope {
    /// A block's variables: the cell of its `i`-th distinct variable
    /// (`Machine::block_variables`) is `first + i`.
    Block {
        block: BlockId,
        first: CellId,
        parent: ScopeId,
    },
    Var {
        name: Symbol,
        cell: CellId,
        parent: ScopeId,
    },
    Ns {
        ns: NsId,
        parent: ScopeId,
    },
    /// An instance's attributes and `self`; names it lacks resolve in the namespace that the
    /// enclosing namespace scope (an implementation's, an `implement`'s) passes down.
    Instance {
        instance: InstanceId,
    },
    Root {
        ns: NsId,
    },
}

/// An entity instance, without a heap allocation of its own in the common case: its cells are
/// consecutive in the cell table, in the order of its entity's slots, followed by its `self`
/// cell.
pub struct Instance {
    pub entity: EntityId,
    first_cell: CellId,
    /// The constructor call that created it.
    location: Location,
    /// The constructor calls that matched it through an index afterwards (rare): an index in
    /// `Machine::more_locations`, or `NONE`.
    more_locations: u32,
    /// The instance as a scope once an implementation needed it, or `NONE`.
    scope: ScopeId,
    pub implementations: SmallVec<[weft_ir::program::ImplId; 4]>,
}

/// An instance in an entity's index: the hash of its key, and which of the entity's indexes
/// (`Entity::indexes`) the key is for.
#[derive(Clone, Copy)]
struct IndexEntry {
    hash: u64,
    instance: InstanceId,
    index: u32,
}

/// The lookups waiting for one index key: the order in which the key was first queued, and
/// each lookup's target cell and location.
type QueuedLookups = (u32, Vec<(CellId, Location)>);

pub struct EntityState {
    /// The indexed instances, found by the hash of their key (`Machine::key_hash`). The key
    /// itself is not kept: a candidate with the same hash is confirmed by comparing its
    /// attribute values, which never change once set, with the key's (`Machine::has_key`).
    /// On the million-instance model that is 16 bytes per entry instead of 24 plus a string
    /// of 40 to 80.
    index: hashbrown::HashTable<IndexEntry>,
    /// Lookups waiting for a key, with the order in which each key was first queued (the
    /// final checks report them in that order).
    index_queue: HashMap<String, QueuedLookups>,
    queued_keys: u32,
}

/// The evaluator's state.
pub struct Machine {
    /// Never replaced after construction: [`Shared`] relies on it.
    program: Arc<Program>,
    /// The program's instructions, in place in their buffer.
    /// Never replaced after construction: [`Shared`] relies on it.
    code: Arc<Code>,
    pub cells: Table<Cell>,
    /// The extensions of the cells that have one (`Cell::ext_index`).
    exts: Table<CellExt>,
    /// Task slots; a finished task's slot is reused (`free_waiter`), so the table holds the
    /// peak number of live tasks, not every task ever spawned.
    pub waiters: Table<Waiter>,
    /// The first free task slot, or `NONE`. A free slot's `seq` is the next free slot: the
    /// free list lives in the slots, instead of in a vector as long as the peak number of
    /// free slots (millions on large models).
    free_waiter: WaiterId,
    wait_nodes: WaitNodes,
    /// Tasks spawned so far: the creation sequence number of the next task.
    spawned: u32,
    collectors: Table<Collector>,
    scopes: Table<Scope>,
    promises: Table<Promise>,
    eager: Vec<EagerPromise>,
    comps: Vec<CompHelper>,
    pub instances: Table<Instance>,
    /// Where cells were set (see `Cell::location`).
    locations: LocationTable,
    /// Recent variable lookups (see [`Machine::lookup_var`]).
    lookups: LookupCache,
    /// Constructor locations after an instance's first (see `Instance::more_locations`).
    more_locations: Vec<Vec<Location>>,
    /// Per block, its distinct variables in declaration order (see `Scope::Block`).
    block_variables: Vec<Box<[Symbol]>>,
    pub entities: Vec<EntityState>,
    /// Per entity: where its attributes are among an instance's cells.
    slot_tables: Vec<SlotTable>,
    ns_scopes: Vec<ScopeId>,
    /// FIFO of ready tasks. [`RESUMPTION`] stands for the front of `resumptions`, [`DEFERRED`]
    /// for the front of `deferred`.
    pub run_queue: Fifo<WaiterId>,
    /// Hooks of `a.b` reads that could be resolved when they were scheduled, because `a`
    /// already held an instance: the reader to resume and the attribute cell to resume it
    /// with, in the order their places in `run_queue` come up. The reference runs such a
    /// hook as a task of its own once the tasks queued before it ran; a place in the run
    /// queue keeps that order without a task slot, a pending entry and a second evaluation
    /// of `a`. (About 380k of the 1.56M tasks of the 93k-instance benchmark.)
    resumptions: Fifo<(Resumer, CellId)>,
    /// The tasks that were spawned with no requirement, in the order their places
    /// ([`DEFERRED`]) in `run_queue` come up. Such a task is ready when it is spawned and
    /// nothing waits for it, so it needs no slot, no wait count and no free-list round trip:
    /// its body waits here for its turn. (Defaults, constant arguments, conditions on
    /// constants and unconditional implementations: 42% of the tasks of the 93k-instance
    /// benchmark.)
    deferred: Fifo<Deferred>,
    /// Delayed cells that may be complete, in the order they were queued.
    /// With each cell, whether it is a relation (the scheduler's queue puts relations first),
    /// read while the cell is at hand so the scheduler need not load it again.
    pub wait_queue: Fifo<(CellId, bool)>,
    /// The gradual listener of each proxy read by a `for` or a list literal, until the proxy
    /// is connected and its value delivered. Few proxies have one, so they are kept here
    /// rather than in every cell's `CellExt`.
    proxy_listeners: HashMap<CellId, ProxyListener>,
    /// The instances among the elements of each list cell with more than
    /// `MEMBER_SET_THRESHOLD` elements. Adding an element first asks whether the list holds
    /// it already; the reference asks Python's `value in list`, a scan, and with a scan a
    /// relation filled with n elements costs n²/2 comparisons (a relation of 200k elements
    /// took a minute). An instance equals only itself, so for an instance the set answers;
    /// other values, which lists of that length rarely hold, are still compared one by one.
    list_members: HashMap<CellId, HashSet<InstanceId>>,
    /// Requirement proxies that were connected and can be reused (see
    /// `Machine::connect_requirement`).
    free_proxies: Vec<CellId>,
    /// How many tasks were spawned and did not finish. Which ones, in creation order, is
    /// asked only when the run queue is empty and no freeze made progress (twice in a run of
    /// the 93k-instance benchmark), so it is found then by [`Machine::pending_tasks`] rather
    /// than kept up to date for each of the million tasks.
    live_tasks: usize,
    /// The pending tasks oldest first, as (creation sequence number, slot), from the first
    /// time a wait cycle is broken on (see [`Machine::visit_pending_tasks`]); `None` before,
    /// so that models that never break one pay nothing for it. Finished tasks stay in it
    /// until a visit drops them.
    pending_order: Option<VecDeque<(u32, WaiterId)>>,
    /// See [`Machine::watch_zerowaiter`].
    zerowaiter_events: Vec<CellId>,
    host: Option<Box<dyn Host>>,
    unique: u64,
    /// Hashes index keys (see `EntityState::index`).
    index_hasher: hashbrown::DefaultHashBuilder,
    /// Results of typedef constraints that are regexes or expressions without plugin calls,
    /// by typedef and value (strings, integers and booleans): such a constraint is a pure
    /// function of the value, and a model checks the same few values (`env_t`, ports, roles,
    /// names) over and over. Errors are not kept. Bounded by `CONSTRAINT_MEMO_LIMIT` entries.
    constraint_memo: HashMap<(u32, MemoValue), bool>,
    /// The identity of the last null a plugin's result brought (see [`Machine::fresh_nulls`]).
    fresh_null: u64,
    /// Per typedef: whether its constraint may be memoized (`None` before it is first needed).
    constraint_pure: Vec<Option<bool>>,
    symbols: Known,
    /// Names that appear only as keys of `**` dictionaries, after the program's own names.
    extra_names: Vec<String>,
    /// The shared target of statements without a value.
    sink: CellId,
    /// Symbols by their text, built the first time a name arrives as text.
    symbols_by_name: Option<HashMap<String, Symbol>>,
}

/// A read-only pointer to the machine's program or code that does not borrow the machine, so a
/// method can hold an instruction while it mutates cells and tasks. Cloning the `Arc` for that
/// cost two atomic operations on every expression node of every task (about a tenth of the
/// evaluation time).
///
/// A `Shared` is created only by [`Machine::prog`] and [`Machine::code`], from an `Arc` the
/// machine owns for its whole life and never replaces (both fields are private and assigned
/// only in [`Machine::new`]); it is neither `Send` nor stored anywhere, so it lives only in the
/// frame of a machine method, during which the machine, and so the `Arc`, is alive.
struct Shared<T>(std::ptr::NonNull<T>);

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the pointee is owned by an `Arc` field of the machine that created this
        // `Shared`; the field is never reassigned and the machine outlives the method frame
        // this value lives in (see the type's documentation), and nothing mutates a program or
        // code shared through an `Arc`.
        unsafe { self.0.as_ref() }
    }
}

struct Known {
    self_: Symbol,
}

impl Machine {
    pub fn new(program: Arc<Program>, code: Arc<Code>, host: Box<dyn Host>) -> Self {
        let self_ = program.names.iter().position(|n| n == "self").map(|i| Symbol::from_u32(i as u32));
        let entities = (0..program.entities.len())
            .map(|_| EntityState { index: hashbrown::HashTable::new(), index_queue: HashMap::new(), queued_keys: 0 })
            .collect();
        let slot_tables = program.entities.iter().map(|e| SlotTable::new(&e.slots)).collect();
        let block_variables = program
            .blocks
            .iter()
            .map(|b| {
                let mut distinct: Vec<Symbol> = Vec::with_capacity(b.variables.len());
                for &v in &b.variables {
                    if !distinct.contains(&v) {
                        distinct.push(v);
                    }
                }
                distinct.into_boxed_slice()
            })
            .collect();
        Machine {
            program,
            code,
            cells: Table::new(),
            exts: Table::new(),
            waiters: Table::new(),
            free_waiter: NONE,
            wait_nodes: WaitNodes::default(),
            spawned: 0,
            pending_order: None,
            zerowaiter_events: Vec::new(),
            collectors: Table::new(),
            scopes: Table::new(),
            promises: Table::new(),
            eager: Vec::new(),
            comps: Vec::new(),
            instances: Table::new(),
            more_locations: Vec::new(),
            slot_tables,
            locations: LocationTable::default(),
            lookups: LookupCache::default(),
            block_variables,
            entities,
            ns_scopes: Vec::new(),
            run_queue: Fifo::new(),
            free_proxies: Vec::new(),
            resumptions: Fifo::new(),
            deferred: Fifo::new(),
            wait_queue: Fifo::new(),
            proxy_listeners: HashMap::default(),
            list_members: HashMap::default(),
            live_tasks: 0,
            host: Some(host),
            unique: 0,
            index_hasher: hashbrown::DefaultHashBuilder::default(),
            constraint_memo: HashMap::default(),
            fresh_null: value::NullId::FIRST_FRESH,
            constraint_pure: Vec::new(),
            extra_names: Vec::new(),
            sink: 0,
            symbols_by_name: None,
            symbols: Known { self_: self_.unwrap_or(Symbol::from_u32(u32::MAX)) },
        }
    }

    /// Jobs that prepare the memory of the cell and task tables ahead of time (see
    /// [`Table::prefault_job`]), for the caller to run on threads of its own when a core is
    /// free; the machine creates no threads.
    pub fn prefault_jobs(&mut self) -> Vec<Box<dyn FnOnce() + Send>> {
        vec![
            self.cells.prefault_job(),
            self.exts.prefault_job(),
            self.waiters.prefault_job(),
            self.scopes.prefault_job(),
            self.instances.prefault_job(),
        ]
    }

    /// Frees what only evaluating needs, once the evaluation finished: the task slots and
    /// their wait lists, the scopes, the gradual listeners, the promises and the queues. What
    /// stays (instances, cells, locations, the program and the indexes) is what reading the
    /// model needs. The machine must not evaluate afterwards.
    ///
    /// The export allocates its resources next, and memory freed here is what those
    /// allocations reuse instead of fresh pages, each a page fault: on the 93k-instance
    /// resources benchmark, about 45 MB (the task slots alone are 32 MB).
    pub fn shed_evaluation_state(&mut self) {
        self.waiters = Table::new();
        self.free_waiter = NONE;
        self.pending_order = None;
        self.zerowaiter_events = Vec::new();
        self.wait_nodes = WaitNodes::default();
        self.collectors = Table::new();
        self.scopes = Table::new();
        self.ns_scopes = Vec::new();
        self.promises = Table::new();
        self.eager = Vec::new();
        self.comps = Vec::new();
        self.run_queue = Fifo::new();
        self.resumptions = Fifo::new();
        self.deferred = Fifo::new();
        self.wait_queue = Fifo::new();
        self.proxy_listeners = HashMap::default();
        self.list_members = HashMap::default();
        self.free_proxies = Vec::new();
        self.constraint_memo = HashMap::default();
    }

    /// Ends the machine without freeing its tables, for a process about to exit: they are
    /// millions of small allocations that the exit releases at once. The plugin host is
    /// dropped as usual, since it may own resources with effects outside the process
    /// (temporary directories it removes when dropped).
    pub fn release_without_freeing(mut self) {
        drop(self.host.take());
        std::mem::forget(self);
    }

    /// Sizes of the machine's tables, for `--stats`.
    pub fn table_sizes(&self) -> String {
        format!(
            "{} cells ({} B each; {} with an extension of {} B), {} task slots ({} B each) for {} tasks, {} scopes, {} collectors",
            self.cells.len(),
            std::mem::size_of::<Cell>(),
            self.exts.len(),
            std::mem::size_of::<CellExt>(),
            self.waiters.len(),
            std::mem::size_of::<Waiter>(),
            self.spawned,
            self.scopes.len(),
            self.collectors.len()
        )
    }

    /// Runs `f` with the host.
    pub fn with_host<T>(&mut self, f: impl FnOnce(&mut dyn Host) -> T) -> T {
        let mut host = self.host.take().unwrap_or_else(|| Box::new(NoHost));
        let r = f(host.as_mut());
        self.host = Some(host);
        r
    }

    /// The program, without borrowing the machine (see [`Shared`]).
    fn prog(&self) -> Shared<Program> {
        Shared(std::ptr::NonNull::from(&*self.program))
    }

    /// The code, without borrowing the machine (see [`Shared`]).
    fn code(&self) -> Shared<Code> {
        Shared(std::ptr::NonNull::from(&*self.code))
    }

    /// The program the machine runs.
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// The symbol of a name known only as text (a `**` dictionary's key, a template's
    /// variable). A name no code mentions gets a symbol of its own, which matches no slot or
    /// variable.
    fn symbol(&mut self, text: &str) -> Symbol {
        let program = &self.program;
        let by_name = self.symbols_by_name.get_or_insert_with(|| {
            program.names.iter().enumerate().map(|(i, n)| (n.clone(), Symbol::from_u32(i as u32))).collect()
        });
        if let Some(&s) = by_name.get(text) {
            return s;
        }
        let s = Symbol::from_u32((program.names.len() + self.extra_names.len()) as u32);
        self.extra_names.push(text.to_string());
        by_name.insert(text.to_string(), s);
        s
    }

    /// The text of a symbol, including names that only `**` dictionaries introduced.
    pub fn sym_name(&self, s: Symbol) -> &str {
        let i = s.as_u32() as usize;
        match self.program.names.get(i) {
            Some(n) => n,
            None => &self.extra_names[i - self.program.names.len()],
        }
    }

    // ----- cells -------------------------------------------------------------------------

    fn new_cell(&mut self, kind: CellKind) -> CellId {
        let id = self.cells.push(Cell::new(kind)) as CellId;
        if self.cells[id as usize].is_delayed() && self.can_get(id) {
            self.queue(id);
        }
        id
    }

    fn plain_with(&mut self, value: Value, location: Option<Location>) -> CellId {
        self.filled_cell(CellKind::Plain, value, location)
    }

    /// A new cell of a kind without providers (plain or element) that already has `value`.
    fn filled_cell(&mut self, kind: CellKind, value: Value, location: Option<Location>) -> CellId {
        debug_assert!(!kind.is_delayed());
        let id = self.new_cell(kind);
        let c = &mut self.cells[id as usize];
        c.set_value(value);
        c.set_has_value(true);
        if let Some(l) = location {
            c.set_location_index(self.locations.intern(l));
        }
        id
    }

    #[inline]
    pub fn is_ready(&self, cell: CellId) -> bool {
        let c = &self.cells[cell as usize];
        if c.kind() == CellKind::Proxy {
            return self.is_proxy_ready(c);
        }
        c.has_value()
    }

    /// [`Self::is_ready`] of a proxy: its target's, once it is connected.
    fn is_proxy_ready(&self, proxy: &Cell) -> bool {
        proxy.target(&self.exts).is_some_and(|t| self.is_ready(t))
    }

    /// A cell's extension, or an empty one for a cell without.
    #[inline]
    fn x(&self, cell: CellId) -> &CellExt {
        match self.cells[cell as usize].ext_index() {
            None => &EMPTY_EXT,
            Some(ext) => &self.exts[ext],
        }
    }

    /// A cell's extension if it has one, to change without making one.
    #[inline]
    fn existing_xm(&mut self, cell: CellId) -> Option<&mut CellExt> {
        self.cells[cell as usize].ext_index().map(|ext| &mut self.exts[ext])
    }

    /// A cell's extension, made when first needed.
    #[inline]
    fn xm(&mut self, cell: CellId) -> &mut CellExt {
        let ext = self.cells[cell as usize].ext_or_make(&mut self.exts);
        &mut self.exts[ext]
    }

    /// The elements of a list cell.
    pub fn items(&self, cell: CellId) -> &[Value] {
        &self.x(cell).items
    }

    /// Promises acquired on a delayed cell and not yet fulfilled.
    pub fn outstanding_providers(&self, cell: CellId) -> i64 {
        let c = &self.cells[cell as usize];
        if c.tracks_promises() { self.x(cell).outstanding as i64 } else { 0 }
    }

    /// For attribute cells: the instance and attribute.
    pub fn cell_owner(&self, cell: CellId) -> Option<(InstanceId, AttrId)> {
        self.cells[cell as usize].owner(&self.exts)
    }

    fn relation_bounds(&self, cell: CellId) -> Option<(i64, Option<i64>)> {
        let c = &self.cells[cell as usize];
        let attr = c.relation_attr()?;
        debug_assert_eq!(c.owner(&self.exts).map(|(_, a)| a), Some(attr), "relation cells are attribute cells");
        match self.program.attribute(attr).kind {
            AttributeKind::Relation(r) => Some((r.lower, r.upper)),
            _ => None,
        }
    }

    fn can_get(&self, cell: CellId) -> bool {
        let c = &self.cells[cell as usize];
        match c.kind() {
            CellKind::List => {
                let low = self.relation_bounds(cell).map(|b| b.0).unwrap_or(0);
                self.x(cell).items.len() as i64 >= low && self.outstanding_providers(cell) == 0
            }
            CellKind::Option | CellKind::ListLiteral => self.outstanding_providers(cell) == 0,
            _ => c.has_value(),
        }
    }

    /// Whether a delayed cell could be frozen now (no outstanding providers, enough elements).
    pub fn could_complete(&self, cell: CellId) -> bool {
        self.can_get(cell)
    }

    pub fn progress_potential(&self, cell: CellId) -> i64 {
        let c = &self.cells[cell as usize];
        debug_assert!(c.is_delayed(), "only delayed cells count their waiters");
        let x = self.x(cell);
        x.waiting as i64 - x.nb_gradual_waiters as i64
    }

    pub fn is_relation(&self, cell: CellId) -> bool {
        self.cells[cell as usize].is_relation()
    }

    fn queue(&mut self, cell: CellId) {
        let c = &mut self.cells[cell as usize];
        if c.queued() {
            return;
        }
        c.set_queued(true);
        self.wait_queue.push_back((cell, c.is_relation()));
    }

    pub fn unqueue(&mut self, cell: CellId) {
        self.cells[cell as usize].set_queued(false);
    }

    /// Freezes a delayed cell: it takes no more values and its waiters are released.
    pub fn freeze(&mut self, cell: CellId) {
        let c = &mut self.cells[cell as usize];
        if c.has_value() {
            return;
        }
        c.set_queued(true);
        c.set_has_value(true);
        c.set_tracks_promises(false);
        if c.is_set(Cell::WATCHED) {
            self.zerowaiter_events.push(cell);
        }
        if let Some(x) = self.existing_xm(cell) {
            x.listeners = None;
        }
        let mut waiters = self.take_waiters(cell);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            self.ready(w);
        }
    }

    /// Adds a waiter to a cell's list, counting it for a delayed cell (`progress_potential`).
    fn push_waiter(&mut self, cell: CellId, waiter: WaiterId) {
        let c = &mut self.cells[cell as usize];
        self.wait_nodes.push(&mut c.waiters, waiter);
        if c.is_delayed() {
            if c.is_set(Cell::WATCHED) {
                self.zerowaiter_events.push(cell);
            }
            self.xm(cell).waiting += 1;
        }
    }

    /// Has `freeze` and the next waiter of a delayed cell reported in
    /// [`Machine::take_zerowaiter_events`] (`on`), or stops that. The scheduler watches the
    /// cells it set aside for having no waiter: only those events can change whether they
    /// stay aside.
    pub fn watch_zerowaiter(&mut self, cell: CellId, on: bool) {
        self.cells[cell as usize].flag(Cell::WATCHED, on);
    }

    /// Whether [`Machine::watch_zerowaiter`] watches a cell.
    pub fn is_watched_zerowaiter(&self, cell: CellId) -> bool {
        self.cells[cell as usize].is_set(Cell::WATCHED)
    }

    /// The watched cells that were frozen or gained a waiter since the last call, in no
    /// particular order and possibly more than once.
    pub fn take_zerowaiter_events(&mut self) -> Vec<CellId> {
        std::mem::take(&mut self.zerowaiter_events)
    }

    /// Detaches a cell's waiter list, to be released with `WaitNodes::pop`. Inlined: it runs
    /// for every value set, and as a call it cost half a percent of the evaluation.
    #[inline(always)]
    fn take_waiters(&mut self, cell: CellId) -> WaitList {
        if let Some(x) = self.existing_xm(cell) {
            x.waiting = 0;
        }
        std::mem::replace(&mut self.cells[cell as usize].waiters, WaitList::EMPTY)
    }

    fn get_promise(&mut self, cell: CellId) -> Option<PromiseId> {
        let c = &mut self.cells[cell as usize];
        if !c.tracks_promises() {
            return None;
        }
        self.xm(cell).outstanding += 1;
        let id = self.promises.len() as PromiseId;
        self.promises.push(Promise { owner: cell, done: false });
        Some(id)
    }

    fn fulfill(&mut self, promise: PromiseId) {
        let p = &mut self.promises[promise as usize];
        if p.done {
            return;
        }
        p.done = true;
        let cell = p.owner;
        let kind = self.cells[cell as usize].kind();
        let c = &mut self.cells[cell as usize];
        if !c.tracks_promises() {
            return;
        }
        self.xm(cell).outstanding -= 1;
        if self.can_get(cell) {
            self.queue(cell);
        }
        if kind == CellKind::ListLiteral && self.outstanding_providers(cell) == 0 {
            self.freeze(cell);
        }
    }

    fn wait_for(&mut self, waiter: WaiterId, cell: CellId) {
        self.waiters[waiter as usize].waitcount += 1;
        self.register(cell, waiter);
    }

    fn register(&mut self, cell: CellId, waiter: WaiterId) {
        let c = &mut self.cells[cell as usize];
        if c.kind() == CellKind::Proxy {
            match c.target(&self.exts) {
                Some(t) => self.register(t, waiter),
                None => self.push_waiter(cell, waiter),
            }
            return;
        }
        if c.has_value() {
            self.ready(waiter);
        } else {
            self.push_waiter(cell, waiter);
        }
    }

    fn ready(&mut self, waiter: WaiterId) {
        let w = &mut self.waiters[waiter as usize];
        w.waitcount -= 1;
        if w.waitcount == 0 {
            self.run_queue.push_back(waiter);
        }
    }

    fn notify(&mut self, cell: CellId) {
        let mut waiters = self.take_waiters(cell);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            self.ready(w);
        }
    }

    fn spawn(&mut self, requires: Reqs, body: Body) {
        let seq = self.spawned;
        self.spawned += 1;
        if requires.is_empty()
            && let Some(deferred) = Deferred::of(&body)
        {
            // Ready at once, as a slot task with no requirement would be: it takes the same
            // place in the run queue.
            self.deferred.push_back(deferred);
            self.run_queue.push_back(DEFERRED);
            return;
        }
        let waiter = Waiter { waitcount: 1, seq, requires: Reqs::new(), body: Some(body) };
        let id = if self.free_waiter != NONE {
            let slot = self.free_waiter;
            self.free_waiter = self.waiters[slot as usize].seq;
            self.waiters[slot as usize] = waiter;
            slot
        } else {
            self.waiters.push(waiter) as WaiterId
        };
        self.live_tasks += 1;
        if let Some(order) = &mut self.pending_order {
            order.push_back((seq, id));
            // Finished tasks leave the order only when a visit passes them: past this size,
            // listing the pending tasks afresh at the next visit is cheaper than the order.
            if Self::pending_order_outgrown(order, self.live_tasks) {
                self.pending_order = None;
            }
        }
        for &(_, cell) in &requires {
            self.wait_for(id, cell);
        }
        self.waiters[id as usize].requires = requires;
        self.ready(id);
    }

    /// Whether some task was spawned and did not finish.
    pub fn has_pending_tasks(&self) -> bool {
        self.live_tasks > 0
    }

    /// The tasks that were spawned and did not finish, oldest first. Only the slots of those
    /// hold a body while no task runs: a finished task's slot is free until it is reused.
    pub fn pending_tasks(&self) -> Vec<WaiterId> {
        self.pending_task_order().into_iter().map(|(_, slot)| slot).collect()
    }

    /// [`Machine::pending_tasks`] with their creation sequence numbers.
    fn pending_task_order(&self) -> Vec<(u32, WaiterId)> {
        let mut pending: Vec<(u32, WaiterId)> = (0..self.waiters.len())
            .filter_map(|slot| {
                let w = &self.waiters[slot];
                w.body.is_some().then_some((w.seq, slot as WaiterId))
            })
            .collect();
        pending.sort_unstable();
        debug_assert_eq!(pending.len(), self.live_tasks);
        pending
    }

    /// Whether the task created `seq`-th is still pending in `slot`: a slot is reused once
    /// its task finished, and a free slot has no body.
    fn is_pending(&self, seq: u32, slot: WaiterId) -> bool {
        let w = &self.waiters[slot as usize];
        w.body.is_some() && w.seq == seq
    }

    /// Whether finished tasks make up more than half of `pending_order` (with some slack, so
    /// that a small order is not listed afresh for a few finished tasks).
    fn pending_order_outgrown(order: &VecDeque<(u32, WaiterId)>, live_tasks: usize) -> bool {
        order.len() > 2 * live_tasks + 1024
    }

    /// Calls `visit` on the pending tasks oldest first, as [`Machine::pending_tasks`] lists
    /// them, until it breaks, and returns what it broke with.
    ///
    /// Wait-cycle breaking asks for the pending tasks at every iteration that needs it, and a
    /// model can need one per instance (each waiting on a relation its own statement may
    /// still extend). Listing them afresh each time (every slot, sorted) made such models
    /// quadratic: 13.6 s for 16,000 instances. So the first call lists them and from then on
    /// `spawn` appends to that order; a visit drops the finished tasks it passes at the front,
    /// and the order is listed afresh when finished tasks make up more than half of it. A
    /// visit that breaks at the first tasks, as wait-cycle breaking usually does, costs little.
    pub fn visit_pending_tasks<B>(&mut self, mut visit: impl FnMut(&Machine, WaiterId) -> ControlFlow<B>) -> Option<B> {
        let mut order = match self.pending_order.take() {
            Some(order) if !Self::pending_order_outgrown(&order, self.live_tasks) => order,
            _ => self.pending_task_order().into(),
        };
        while let Some(&(seq, slot)) = order.front() {
            if self.is_pending(seq, slot) {
                break;
            }
            order.pop_front();
        }
        let mut result = None;
        for &(seq, slot) in &order {
            if self.is_pending(seq, slot)
                && let ControlFlow::Break(b) = visit(self, slot)
            {
                result = Some(b);
                break;
            }
        }
        self.pending_order = Some(order);
        result
    }

    /// Whether a pending task is what the reference runs as an `ExecutionUnit`: the
    /// evaluation of an expression or a statement into its target, as opposed to a plugin
    /// call, a hook, a lookup or a lazy operator, which wait in units of other kinds.
    pub fn is_execution_unit(&self, waiter: WaiterId) -> bool {
        matches!(self.waiters[waiter as usize].body, Some(Body::Exec { .. }))
    }

    /// Where a pending task's code is, for "not all statements executed".
    pub fn waiter_location(&self, waiter: WaiterId) -> Option<Location> {
        let p = &self.program;
        match self.waiters[waiter as usize].body.as_ref()? {
            Body::Exec { what: Exec::Expr(e), .. } => Some(self.code.location(*e)),
            Body::Exec { what: Exec::Stmt(s), .. } | Body::SetAttr { stmt: s, .. } => Some(p.stmt(*s).location),
            Body::Lazy { expr, .. } | Body::Lookup { expr, .. } | Body::Call { expr, .. } => {
                Some(self.code.location(*expr))
            }
            Body::Hook { location, .. } | Body::IsDefinedWait { location, .. } => Some(*location),
            _ => None,
        }
    }

    /// The requirement cells of a pending task (following proxies), for wait-cycle breaking.
    pub fn requirement_cells(&self, waiter: WaiterId) -> impl Iterator<Item = CellId> + '_ {
        self.waiters[waiter as usize].requires.iter().filter_map(|&(_, c)| {
            let mut c = c;
            loop {
                let cell = &self.cells[c as usize];
                if cell.kind() != CellKind::Proxy {
                    return Some(c);
                }
                c = cell.target(&self.exts)?;
            }
        })
    }

    /// Asks the processor to start loading what the next entries of the run queue will touch,
    /// while the current one runs. The evaluator's time goes mostly to cache misses: the
    /// task slots and cells of a large model are spread over hundreds of megabytes, and a
    /// task's first access to its slot and to its requirement cells each waits for memory.
    /// Three stages, as in software pipelining, each reading only what an earlier call asked
    /// for, two entries apart (one entry apart left many loads still waiting: resumptions
    /// and deferred tasks run in a fraction of a task's time):
    ///
    /// * the fifth entry after the current one: a task's slot; a resumption's cells (the
    ///   proxy it connects and the cell it connects it to); a deferred task's target cell;
    /// * the third: a task's requirement cells and target cell; the wait node of the
    ///   task that a resumption's requirement proxy holds;
    /// * the next entry: the shared values (their reference counts) held by a task's
    ///   requirement cells; the slot of the task that a requirement proxy holds, whose
    ///   requirement list the resumption rewrites.
    ///
    /// `current` is the entry just taken from the run queue, which has not run yet: when it
    /// is a resumption or a deferred task, it is still the front of its queue.
    pub fn prefetch_upcoming(&self, current: WaiterId) {
        // Near the end of the queue, or of its front block, nothing is prefetched: that is a
        // few entries in thousands.
        let upcoming = self.run_queue.front_block();
        let Some(&[next, first_gap, third, second_gap, fifth]) = upcoming.first_chunk::<5>() else { return };
        let resumptions = self.resumptions.front_block();
        // Where each upcoming resumption is in its own queue: after the current entry and the
        // entries before it that are one.
        let is_resumption = |entry: WaiterId| usize::from(entry == RESUMPTION);
        let mut resumption = is_resumption(current);
        self.prefetch_entry(0, next, resumptions, resumption);
        resumption += is_resumption(next) + is_resumption(first_gap);
        self.prefetch_entry(2, third, resumptions, resumption);
        resumption += is_resumption(third) + is_resumption(second_gap);
        if fifth == DEFERRED {
            let is_deferred = |entry: WaiterId| usize::from(entry == DEFERRED);
            let deferred = is_deferred(current)
                + is_deferred(next)
                + is_deferred(first_gap)
                + is_deferred(third)
                + is_deferred(second_gap);
            if let Some(Deferred::Exec { target: cell, .. } | Deferred::Cond { result: cell, .. }) =
                self.deferred.front_block().get(deferred)
                && let Some(cell) = self.cells.get(*cell as usize)
            {
                prefetch(cell);
            }
        } else {
            self.prefetch_entry(4, fifth, resumptions, resumption);
        }
    }

    /// One stage of [`Self::prefetch_upcoming`] for the entry `ahead` places after the
    /// current one, a task or a resumption (`resumptions[resumption]` if it is one).
    #[inline(always)]
    fn prefetch_entry(&self, ahead: usize, entry: WaiterId, resumptions: &[(Resumer, CellId)], resumption: usize) {
        if is_task_slot(entry) {
            self.prefetch_task(ahead, entry);
        } else if entry == RESUMPTION
            && let Some(&(resumer, cell)) = resumptions.get(resumption)
        {
            self.prefetch_resumption(ahead, resumer, cell);
        }
    }

    #[inline(always)]
    fn prefetch_task(&self, ahead: usize, task: WaiterId) {
        match ahead {
            4 => {
                let slot = &self.waiters[task as usize];
                prefetch(slot);
                prefetch((slot as *const Waiter).wrapping_byte_add(64));
            }
            2 => {
                let task = &self.waiters[task as usize];
                for &(_, cell) in task.requires.iter() {
                    prefetch(&self.cells[cell as usize]);
                }
                // The cell the task will set.
                if let Some(
                    Body::Exec { target: cell, .. }
                    | Body::Lazy { target: cell, .. }
                    | Body::Lookup { target: cell, .. }
                    | Body::Cond { result: cell, .. }
                    | Body::Call { result: cell, .. },
                ) = &task.body
                {
                    prefetch(&self.cells[*cell as usize]);
                }
            }
            0 => {
                for &(_, cell) in self.waiters[task as usize].requires.iter() {
                    // A clone of a shared value writes its reference count, which is at the
                    // address the payload holds.
                    let c = &self.cells[cell as usize];
                    if matches!(c.tag(), TAG_STR | TAG_LIST | TAG_DICT) {
                        prefetch(c.value.words()[0] as usize as *const u8);
                    }
                }
            }
            _ => {}
        }
    }

    #[inline(always)]
    fn prefetch_resumption(&self, ahead: usize, resumer: Resumer, cell: CellId) {
        // The wait node of a requirement proxy: one task holds such a proxy nearly always,
        // and a list of one node is its own successor, so the tail node names the task.
        let requirement_node = || match resumer {
            Resumer::Requirement(proxy) => self.wait_nodes.nodes.get(self.cells[proxy as usize].waiters.tail as usize),
            _ => None,
        };
        match ahead {
            4 => {
                prefetch(&self.cells[cell as usize]);
                if let Resumer::Reader(proxy) | Resumer::Requirement(proxy) = resumer {
                    prefetch(&self.cells[proxy as usize]);
                }
            }
            2 => {
                if let Some(node) = requirement_node() {
                    prefetch(node);
                }
            }
            0 => {
                if let Some(&(task, _)) = requirement_node()
                    && let Some(slot) = self.waiters.get(task as usize)
                {
                    prefetch(slot);
                }
            }
            _ => {}
        }
    }

    /// Where a cell's value was set.
    pub fn cell_location(&self, cell: CellId) -> Option<Location> {
        self.locations.get(self.cells[cell as usize].location_index())
    }

    pub fn has_value(&self, cell: CellId) -> bool {
        self.cells[cell as usize].has_value()
    }

    // ----- values of cells ----------------------------------------------------------------

    fn get_value(&mut self, cell: CellId) -> R<Value> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::Proxy => {
                let target = self.cells[cell as usize].target(&self.exts).ok_or_else(|| rt("proxy not connected"))?;
                let value = self.get_value(target)?;
                if self.cells[cell as usize].is_set(Cell::LISTENED)
                    && let Some(&ProxyListener { collector, location, notify: true }) = self.proxy_listeners.get(&cell)
                {
                    self.remove_proxy_listener(cell);
                    self.receive_flatten(collector, value.clone(), location)?;
                }
                Ok(value)
            }
            CellKind::List | CellKind::ListLiteral => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                if c.ext_index().is_none() {
                    return Ok(Value::List(Arc::from([])));
                }
                Ok(Value::List(self.xm(cell).items.share()))
            }
            CellKind::Option => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                match c.value() {
                    Some(v) if !matches!(*v, Value::Null(_)) => Ok(Value::clone(&v)),
                    _ => {
                        let (inst, attr) = c.owner(&self.exts).expect("relation cell");
                        let p = self.prog();
                        let a = p.attribute(attr);
                        let mut error = EvalError::new(
                            ErrorKind::OptionalValueException,
                            format!(
                                "Optional variable accessed that has no value (attribute `{}.{}` of `{}`)",
                                p.entity(a.entity).name,
                                p.name(a.name),
                                self.instance_display(inst)
                            ),
                        );
                        let relation = format!("the relation `{}` of this instance holds no value", p.name(a.name));
                        error.shown_at = Some((self.last_location(inst), relation));
                        Err(error)
                    }
                }
            }
            _ => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                Ok(c.value_cloned().unwrap_or(Value::NULL))
            }
        }
    }

    /// The value of a ready cell for the final checks and plugins (lists for relations).
    pub fn peek(&self, cell: CellId) -> Option<Value> {
        let c = &self.cells[cell as usize];
        match c.kind() {
            CellKind::List | CellKind::ListLiteral => Some(self.x(cell).items.to_list()),
            CellKind::Proxy => c.target(&self.exts).and_then(|t| self.peek(t)),
            _ => c.value_cloned(),
        }
    }

    // ----- listeners ----------------------------------------------------------------------

    /// Registers a gradual listener; false when the cell does not support listening.
    fn listen(&mut self, cell: CellId, collector: CollectorId, location: Location) -> R<bool> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::List | CellKind::ListLiteral => {
                let items = self.x(cell).items.to_vec();
                for v in items {
                    self.receive(collector, v, location)?;
                }
                let pure = self.collectors[collector as usize].pure_gradual();
                if !self.cells[cell as usize].has_value() {
                    let x = self.xm(cell);
                    let listeners = x.listeners.get_or_insert_with(Vec::new);
                    if listeners.contains(&collector) {
                        x.nb_gradual_waiters += 1;
                        return Ok(true);
                    }
                    listeners.push(collector);
                    if pure {
                        x.nb_gradual_waiters += 1;
                    }
                }
                Ok(true)
            }
            CellKind::Proxy => Ok(false),
            CellKind::Element => {
                // The element reaches the listener now, before the task that reads the loop
                // variable runs: the reference adds it to a relation in the same step that
                // the comprehension receives it, ahead of statements queued meanwhile.
                let value = self.cells[cell as usize].value_cloned().unwrap_or(Value::NULL);
                self.receive(collector, value, location)?;
                Ok(true)
            }
            CellKind::Plain | CellKind::Single | CellKind::Option | CellKind::Sink => Ok(false),
        }
    }

    fn receive_flatten(&mut self, collector: CollectorId, value: Value, location: Location) -> R<bool> {
        match value {
            Value::List(items) => {
                for v in items.iter() {
                    if self.receive(collector, v.clone(), location)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            other => self.receive(collector, other, location),
        }
    }

    /// Delivers one element to a collector; true when it needs no more.
    fn receive(&mut self, collector: CollectorId, value: Value, location: Location) -> R<bool> {
        match &mut self.collectors[collector as usize] {
            Collector::For { stmt, scope, seen } => {
                if matches!(value, Value::Unknown) {
                    return Ok(false);
                }
                let key = match &value {
                    Value::Null(id) => IdentityKey::Null(*id),
                    Value::Bool(b) => IdentityKey::Bool(*b),
                    Value::Int(i) if (-5..=256).contains(i) => IdentityKey::SmallInt(*i),
                    Value::Str(s) if is_shared_python_str(s) => IdentityKey::SharedStr(s.clone()),
                    Value::Str(s) => IdentityKey::Str(StrIdentity(s.clone())),
                    Value::Instance(i) => IdentityKey::Instance(*i),
                    _ => {
                        self.unique += 1;
                        IdentityKey::Unique(self.unique)
                    }
                };
                if !seen.insert(key) {
                    return Ok(false);
                }
                let (stmt, scope) = (*stmt, *scope);
                let p = self.prog();
                let StmtKind::For { var, body, .. } = p.stmt(stmt).kind else { unreachable!() };
                let ns = p.block(body).ns;
                let ns_scope = self.push_scope(Scope::Ns { ns, parent: scope });
                let ctx = self.block_context(body, ns_scope);
                let loop_cell = self.lookup_in(ctx, VarRef::Name(var), None).expect("loop variable");
                let stmt_location = p.stmt(stmt).location;
                self.set_cell(loop_cell, value, stmt_location, true)?;
                self.emit_block(body, ctx)?;
                Ok(false)
            }
            Collector::Cell(cell) => {
                let cell = *cell;
                self.set_cell(cell, value, location, true)?;
                Ok(false)
            }
            Collector::SetAttr { instance, attr, next, location: stmt_location } => {
                let (instance, attr, next, stmt_location) = (*instance, *attr, *next, *stmt_location);
                match self.set_cell(next, value, location, true) {
                    Ok(()) => Ok(false),
                    Err(e) if e.kind == ErrorKind::AttributeException => Err(e.at(stmt_location)),
                    Err(e) => Err(self.attribute_error(instance, attr, e.at(stmt_location), Some(stmt_location))),
                }
            }
            Collector::IsDefined { target, location: owner } => {
                if matches!(value, Value::Unknown) {
                    return Ok(false);
                }
                let (target, owner) = (*target, *owner);
                self.set_cell(target, Value::Bool(true), owner, true)?;
                Ok(true)
            }
            Collector::Comp(helper) => {
                let helper = *helper;
                self.comp_receive(helper, value, location)?;
                Ok(false)
            }
        }
    }

    fn notify_listeners(&mut self, cell: CellId, value: &Value, location: Location) -> R<()> {
        let Some(listeners) = self.x(cell).listeners.clone() else { return Ok(()) };
        for collector in listeners {
            let done = self.receive(collector, value.clone(), location)?;
            if done {
                let pure = self.collectors[collector as usize].pure_gradual();
                let x = self.xm(cell);
                if let Some(ls) = x.listeners.as_mut() {
                    ls.retain(|&c| c != collector);
                    if !pure {
                        x.nb_gradual_waiters += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn remove_proxy_listener(&mut self, proxy: CellId) {
        self.proxy_listeners.remove(&proxy);
        self.cells[proxy as usize].flag(Cell::LISTENED, false);
    }

    fn connect_proxy(&mut self, proxy: CellId, target: CellId) -> R<()> {
        self.cells[proxy as usize].set_link(&mut self.exts, target);
        if self.cells[proxy as usize].is_set(Cell::LISTENED)
            && let Some(&ProxyListener { collector, location, .. }) = self.proxy_listeners.get(&proxy)
        {
            if self.listen(target, collector, location)? {
                self.remove_proxy_listener(proxy);
            } else if let Some(listener) = self.proxy_listeners.get_mut(&proxy) {
                listener.notify = true;
            }
        }
        let mut waiters = self.take_waiters(proxy);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            self.register(target, w);
        }
        Ok(())
    }

    /// A proxy for [`Resumer::Requirement`], reusing one that was connected before.
    fn new_requirement_proxy(&mut self) -> CellId {
        match self.free_proxies.pop() {
            Some(proxy) => proxy,
            None => self.new_cell(CellKind::Proxy),
        }
    }

    /// Connects a requirement proxy. Every task that holds the proxy holds it in its
    /// requirement list and waits on it: the requirements an expression gets are handed to
    /// the task spawned with them before anything runs, and the hook that connects the proxy
    /// runs later, from the run queue. So pointing those lists at the attribute cell itself
    /// leaves no reference to the proxy, and its cell serves the next read. Those are a fifth
    /// of all cells otherwise (381k of 1.8M on the 93k-instance benchmark).
    fn connect_requirement(&mut self, proxy: CellId, target: CellId) {
        debug_assert!(!self.cells[proxy as usize].is_set(Cell::LISTENED), "requirement proxies have no listener");
        let mut waiters = self.take_waiters(proxy);
        while let Some(w) = self.wait_nodes.pop(&mut waiters) {
            for (_, cell) in self.waiters[w as usize].requires.iter_mut() {
                if *cell == proxy {
                    *cell = target;
                }
            }
            self.register(target, w);
        }
        self.cells[proxy as usize] = Cell::new(CellKind::Proxy);
        self.free_proxies.push(proxy);
    }

    // ----- setting values -----------------------------------------------------------------

    fn instance_of(&self, v: &Value) -> Option<InstanceId> {
        match v {
            Value::Instance(i) => Some(*i),
            _ => None,
        }
    }

    /// Sets a value into a cell (the reference's `set_value`), with type checks, double
    /// binding of relations and listener notification. `recur` sets the inverse end too.
    fn set_cell(&mut self, cell: CellId, value: Value, location: Location, recur: bool) -> R<()> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::Sink => Ok(()),
            CellKind::Plain | CellKind::Single | CellKind::Proxy | CellKind::Element => {
                if self.cells[cell as usize].has_value() {
                    let old = self.cells[cell as usize].value_cloned().unwrap_or(Value::NULL);
                    if !old.py_eq(&value) {
                        return Err(self.double_set(cell, &old, &value, location));
                    }
                    return Ok(());
                }
                if !matches!(value, Value::Unknown) {
                    self.validate_cell(cell, &value)?;
                }
                // Only a relation end needs the value afterwards, and its value is an
                // instance (or null), which copies without touching a reference count.
                let inverse = (kind == CellKind::Single && recur).then(|| value.clone());
                let c = &mut self.cells[cell as usize];
                c.set_value(value);
                c.set_location_index(self.locations.intern(location));
                c.set_has_value(true);
                if let Some(value) = inverse {
                    self.set_inverse(cell, &value, location)?;
                }
                self.notify(cell);
                Ok(())
            }
            CellKind::Option => {
                if self.cells[cell as usize].has_value() {
                    let old = self.cells[cell as usize].value_cloned();
                    match old {
                        None | Some(Value::Null(_)) => {
                            if matches!(value, Value::Null(_)) {
                                return Ok(());
                            }
                            return Err(self.modified_after_freeze(cell, &value, location));
                        }
                        Some(old) => {
                            if !old.py_eq(&value) {
                                return Err(self.double_set(cell, &old, &value, location));
                            }
                            // Equal value: the reference sets it again, which changes nothing.
                            return Ok(());
                        }
                    }
                }
                if !matches!(value, Value::Unknown | Value::Null(_)) {
                    self.validate_cell(cell, &value)?;
                }
                if recur && self.instance_of(&value).is_some() {
                    self.set_inverse(cell, &value, location)?;
                }
                let c = &mut self.cells[cell as usize];
                c.set_value(value);
                c.set_location_index(self.locations.intern(location));
                self.freeze(cell);
                Ok(())
            }
            CellKind::List | CellKind::ListLiteral => {
                if kind == CellKind::List && matches!(value, Value::Null(_)) {
                    if !self.x(cell).items.is_empty() {
                        let (inst, attr) = self.cells[cell as usize].owner(&self.exts).expect("relation");
                        let values: Vec<String> = self.x(cell).items.iter().map(|v| self.display_value(v)).collect();
                        return Err(rt(format!(
                            "Trying to set relation attribute `{}` of instance `{}` to null but it has values `{}` assigned already",
                            self.program.name(self.program.attribute(attr).name),
                            self.instance_display(inst),
                            values.join(", ")
                        ))
                        .at(location));
                    }
                    self.freeze(cell);
                    return Ok(());
                }
                if let Value::List(items) = &value {
                    if self.cells[cell as usize].has_value() {
                        if items.is_empty() {
                            return Ok(());
                        }
                        for v in items.iter() {
                            if !self.contains_item(cell, v) {
                                return Err(self.list_frozen_error(cell, v, location));
                            }
                        }
                    }
                    if items.is_empty() {
                        if self.can_get(cell) {
                            self.queue(cell);
                        }
                        return Ok(());
                    }
                    for v in items.iter() {
                        self.set_cell(cell, v.clone(), location, recur)?;
                    }
                    return Ok(());
                }
                if self.cells[cell as usize].has_value() {
                    if self.contains_item(cell, &value) {
                        return Ok(());
                    }
                    return Err(self.list_frozen_error(cell, &value, location));
                }
                self.validate_cell(cell, &value)?;
                if self.contains_item(cell, &value) {
                    if self.can_get(cell) {
                        self.queue(cell);
                    }
                    return Ok(());
                }
                self.push_item(cell, &value);
                self.notify_listeners(cell, &value, location)?;
                if kind == CellKind::List {
                    if recur {
                        self.set_inverse(cell, &value, location)?;
                    }
                    if let Some((_, Some(high))) = self.relation_bounds(cell)
                        && self.x(cell).items.len() as i64 >= high
                    {
                        self.freeze(cell);
                    }
                }
                if self.can_get(cell) {
                    self.queue(cell);
                }
                Ok(())
            }
        }
    }

    fn contains_item(&self, cell: CellId, v: &Value) -> bool {
        let items = &self.x(cell).items;
        if let Value::Instance(inst) = v
            && items.len() > MEMBER_SET_THRESHOLD
        {
            return self.list_members[&cell].contains(inst);
        }
        items.iter().any(|x| x.py_eq(v))
    }

    /// Appends an element the list cell does not hold yet, keeping `list_members`.
    fn push_item(&mut self, cell: CellId, value: &Value) {
        let items = &mut self.xm(cell).items;
        items.push(value.clone());
        let len = items.len();
        if len == MEMBER_SET_THRESHOLD + 1 {
            let members = self.x(cell).items.iter().filter_map(|v| self.instance_of(v)).collect();
            self.list_members.insert(cell, members);
        } else if len > MEMBER_SET_THRESHOLD
            && let Value::Instance(inst) = value
        {
            self.list_members.get_mut(&cell).expect("made when the list outgrew a scan").insert(*inst);
        }
    }

    fn list_frozen_error(&self, cell: CellId, value: &Value, location: Location) -> EvalError {
        if let Some((inst, attr)) = self.cells[cell as usize].owner(&self.exts)
            && let Some((_, Some(high))) = self.relation_bounds(cell)
            && self.x(cell).items.len() as i64 == high
        {
            return rt(format!(
                "Exceeded relation arity on attribute '{}' of instance '{}'",
                self.program.name(self.program.attribute(attr).name),
                self.instance_display(inst)
            ))
            .at(location);
        }
        self.modified_after_freeze(cell, value, location)
    }

    fn modified_after_freeze(&self, cell: CellId, value: &Value, location: Location) -> EvalError {
        let what = match self.cells[cell as usize].owner(&self.exts) {
            Some((inst, attr)) => format!(
                " The compiler guessed that the relation '{}' on {} would be complete, but the value {} was added at {}.",
                self.program.name(self.program.attribute(attr).name),
                self.instance_display(inst),
                self.display_value(value),
                self.program.location_text(location)
            ),
            None => String::new(),
        };
        EvalError::new(ErrorKind::ModifiedAfterFreezeException, format!("List modified after freeze.{what}"))
            .at(location)
    }

    fn double_set(&self, cell: CellId, old: &Value, new: &Value, location: Location) -> EvalError {
        let old_at = self.cell_location(cell).map(|l| self.program.location_text(l)).unwrap_or_default();
        EvalError::new(
            ErrorKind::DoubleSetException,
            format!(
                "value set twice:\n\told value: {}\n\t\tset at {}\n\tnew value: {}\n\t\tset at {}\n",
                self.display_value(old),
                old_at,
                self.display_value(new),
                self.program.location_text(location)
            ),
        )
        .at(location)
    }

    fn set_inverse(&mut self, cell: CellId, value: &Value, location: Location) -> R<()> {
        let Some((me, attr)) = self.cells[cell as usize].owner(&self.exts) else { return Ok(()) };
        let AttributeKind::Relation(end) = self.program.attribute(attr).kind else { return Ok(()) };
        let Some(inverse) = end.inverse else { return Ok(()) };
        let Some(other) = self.instance_of(value) else { return Ok(()) };
        let name = self.program.attribute(inverse).name;
        self.set_attribute(other, name, Value::Instance(me), location, false)
    }

    /// `instance.set_attribute`: failures are wrapped in an `AttributeException`.
    fn set_attribute(
        &mut self,
        inst: InstanceId,
        name: Symbol,
        value: Value,
        location: Location,
        recur: bool,
    ) -> R<()> {
        let Some(cell) = self.slot(inst, name) else {
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!(
                    "cannot set attribute with name {} on type {}",
                    self.program.name(name),
                    self.program.entity(self.instances[inst as usize].entity).name
                ),
            ));
        };
        match self.set_cell(cell, value, location, recur) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.attribute_error(inst, name, e, None)),
        }
    }

    /// Wraps a failure to set an attribute. The reference locates the wrapper at the statement
    /// that assigned (`location`), or at the instance when the instance itself raised it.
    fn attribute_error(
        &self,
        inst: InstanceId,
        name: Symbol,
        cause: EvalError,
        location: Option<Location>,
    ) -> EvalError {
        let location = location.unwrap_or_else(|| self.last_location(inst));
        // The reference wraps its own exceptions only; a raw Python error (a `RecursionError`)
        // escapes as it is. weft still says where.
        if !cause.kind.is_a(ErrorKind::CompilerException) {
            return cause.at(location);
        }
        let message = format!(
            "Could not set attribute `{}` on instance `{}`",
            self.program.name(name),
            self.instance_display(inst)
        );
        let mut e = EvalError::wrap(ErrorKind::AttributeException, message, cause);
        e.location = Some(location);
        e
    }

    #[inline]
    pub fn slot(&self, inst: InstanceId, name: Symbol) -> Option<CellId> {
        let i = &self.instances[inst as usize];
        let position = self.slot_tables[i.entity.index()].position(name)?;
        Some(i.first_cell + position as CellId)
    }

    /// An instance's attribute cells, in its entity's slot order.
    pub fn instance_slots(&self, inst: InstanceId) -> impl Iterator<Item = (Symbol, CellId)> + '_ {
        let i = &self.instances[inst as usize];
        let first = i.first_cell;
        self.program.entity(i.entity).slots.iter().enumerate().map(move |(n, (name, _))| (*name, first + n as CellId))
    }

    /// The cell holding the instance itself (`self`).
    pub fn self_cell(&self, inst: InstanceId) -> CellId {
        let i = &self.instances[inst as usize];
        i.first_cell + self.program.entity(i.entity).slots.len() as CellId
    }

    /// Every constructor call that created or matched the instance, in order.
    pub fn instance_locations(&self, inst: InstanceId) -> impl Iterator<Item = Location> + '_ {
        let i = &self.instances[inst as usize];
        let more: &[Location] = match i.more_locations {
            NONE => &[],
            n => &self.more_locations[n as usize],
        };
        std::iter::once(i.location).chain(more.iter().copied())
    }

    /// The last constructor call that created or matched the instance (the one the reference
    /// reports).
    pub fn last_location(&self, inst: InstanceId) -> Location {
        let i = &self.instances[inst as usize];
        match i.more_locations {
            NONE => i.location,
            n => *self.more_locations[n as usize].last().expect("a list of more locations is never empty"),
        }
    }

    fn add_location(&mut self, inst: InstanceId, location: Location) {
        match self.instances[inst as usize].more_locations {
            NONE => {
                self.instances[inst as usize].more_locations = self.more_locations.len() as u32;
                self.more_locations.push(vec![location]);
            }
            n => self.more_locations[n as usize].push(location),
        }
    }

    pub fn instance_display(&self, inst: InstanceId) -> String {
        let locations: Vec<String> = self.instance_locations(inst).map(|l| self.program.location_text(l)).collect();
        let entity = self.instances[inst as usize].entity;
        format!("{} (instantiated at {})", self.program.entity(entity).name, locations.join(","))
    }

    /// What an operand is, for the label under it in a diagnostic: its type as the language
    /// names it (`null`, an entity's name), not Python's.
    fn operand_type(&self, v: &Value) -> &str {
        match v {
            Value::Null(_) => "null",
            Value::Instance(i) => &self.program.entity(self.instances[*i as usize].entity).name,
            other => other.type_name(),
        }
    }

    /// Labels each operand of a failed operator with its type, under its whole source (an
    /// operand that is itself an operation spans both of its own operands).
    fn with_operand_labels(&self, mut error: EvalError, operands: &[(ExprId, &str)]) -> EvalError {
        let c = self.code();
        error.labels = operands.iter().map(|&(e, ty)| (operand_extent(&c, e), format!("`{ty}`"))).collect();
        error
    }

    /// Python `str()` of a value, instances as the reference prints them.
    pub fn display_value(&self, v: &Value) -> String {
        self.display_value_with_null(v, "null").into_owned()
    }

    /// Python `str()` of a value as the reference's exporter and plugins see it: through its
    /// proxies, which turn its `NoneValue` into Python's `None`.
    pub fn display_python_value(&self, v: &Value) -> String {
        self.display_value_with_null(v, "None").into_owned()
    }

    /// Python `str()` of a value with `null` for null; a string (and null) is lent, not
    /// copied.
    fn display_value_with_null<'v>(&self, v: &'v Value, null: &'static str) -> Cow<'v, str> {
        match v {
            Value::Null(_) => Cow::Borrowed(null),
            Value::Str(s) => Cow::Borrowed(s),
            Value::Instance(i) => Cow::Owned(self.instance_display(*i)),
            other => Cow::Owned(other.repr_with(null, &|i| self.instance_display(i))),
        }
    }

    // ----- types --------------------------------------------------------------------------

    fn validate_cell(&mut self, cell: CellId, value: &Value) -> R<()> {
        let c = &self.cells[cell as usize];
        let ty = match c.ty(&self.exts) {
            PackedType::NONE => CellType::None,
            PackedType::BOOL => CellType::Bool,
            PackedType::FROM_OWNER => match c.owner(&self.exts).map(|(_, attr)| self.program.attribute(attr).kind) {
                Some(AttributeKind::Value(t)) => CellType::Value(t),
                Some(AttributeKind::Relation(r)) => CellType::Entity(r.target),
                None => CellType::None,
            },
            PackedType(e) => CellType::Entity(EntityId(e - PackedType::FIRST_ENTITY)),
        };
        match ty {
            CellType::None => Ok(()),
            CellType::Bool => {
                if matches!(value, Value::Bool(_)) {
                    Ok(())
                } else {
                    Err(rt(format!("Invalid value '{}', expected bool", self.display_value(value))))
                }
            }
            CellType::Entity(e) => self.validate_entity(e, value),
            CellType::Value(t) => self.validate_value_type(t, value),
        }
    }

    fn validate_entity(&self, entity: EntityId, value: &Value) -> R<()> {
        let p = &self.program;
        match value {
            Value::Instance(i) => {
                let ty = self.instances[*i as usize].entity;
                if p.is_subclass(ty, entity) {
                    Ok(())
                } else {
                    Err(rt(format!(
                        "Invalid class type for {}, should be {}",
                        self.instance_display(*i),
                        p.entity(entity).name
                    )))
                }
            }
            other => Err(rt(format!(
                "Invalid type for value '{}', should be type {}",
                self.display_value(other),
                p.entity(entity).name
            ))),
        }
    }

    /// Validates a value against an attribute type (references allowed, as for attributes).
    pub fn validate_value_type(&mut self, t: ValueType, value: &Value) -> R<()> {
        if matches!(value, Value::Reference(_)) {
            return self.validate_reference(t.base, value);
        }
        if matches!(value, Value::Null(_)) {
            if t.nullable {
                return Ok(());
            }
            // The reference's typedef checks its base type first, so a null given to a
            // constrained type is refused by the primitive at the root of its chain; a typed
            // list refuses it as a whole.
            let mut base = t.base;
            while let (BaseType::Typedef(td), false) = (base, t.list) {
                base = self.program.typedefs[td.index()].base;
            }
            let name = self.type_name(ValueType { base, ..t });
            return Err(rt(format!("Invalid value 'null', expected {name}")));
        }
        if t.list {
            // `T[]` is the reference's typed list, whose check raises a `TypingException`.
            let Value::List(items) = value else {
                return Err(typing(format!("Invalid value '{}', expected list", self.display_value(value))));
            };
            for item in items.iter() {
                if matches!(item, Value::Unknown) {
                    continue;
                }
                if matches!(item, Value::Reference(_)) {
                    self.validate_reference(t.base, item)?;
                    continue;
                }
                self.validate_base(t.base, item)?;
            }
            return Ok(());
        }
        self.validate_base(t.base, value)
    }

    /// A reference stands for a value of a primitive type, which must be the attribute's or a
    /// subtype of it (an int for a `number`; the reference's `Reference[T] | T` check); a
    /// constrained type (a typedef) cannot be checked before the reference is resolved, so it
    /// is refused.
    fn validate_reference(&self, base: BaseType, value: &Value) -> R<()> {
        match base {
            BaseType::Primitive(expected) => {
                let Value::Reference(reference) = value else { return Ok(()) };
                let resolves_to = self.host.as_deref().and_then(|host| host.reference_resolves_to(reference));
                match resolves_to {
                    Some(actual)
                        if actual != expected
                            && !(expected == Primitive::Number
                                && matches!(actual, Primitive::Int | Primitive::Float)) =>
                    {
                        Err(typing(format!(
                            "Invalid value: {} is not a subtype of Reference[{}]: it refers to a value of type {}",
                            self.display_value(value),
                            expected.name(),
                            actual.name()
                        )))
                    }
                    _ => Ok(()),
                }
            }
            BaseType::Typedef(td) => Err(typing(format!(
                "Invalid value `{}`: references can not be used for values of the constrained type {}",
                self.display_value(value),
                self.program.typedefs[td.index()].name
            ))),
        }
    }

    fn type_name(&self, t: ValueType) -> String {
        let base = match t.base {
            BaseType::Primitive(p) => p.name().to_string(),
            BaseType::Typedef(td) => self.program.typedefs[td.index()].name.clone(),
        };
        format!("{base}{}", if t.list { "[]" } else { "" })
    }

    fn validate_base(&mut self, base: BaseType, value: &Value) -> R<()> {
        match base {
            BaseType::Primitive(p) => self.validate_primitive(p, value),
            BaseType::Typedef(td) => {
                let prog = self.prog();
                let typedef = &prog.typedefs[td.index()];
                self.validate_base(typedef.base, value)?;
                // A regex, and an expression without plugin calls, are functions of the value.
                let pure = match &typedef.constraint {
                    Constraint::Regex { .. } => true,
                    Constraint::Expr(e) => self.constraint_is_pure(td, *e),
                };
                let memo = if pure { MemoValue::of(value) } else { None };
                let known = memo.as_ref().and_then(|m| self.constraint_memo.get(&(td.0, m.clone())).copied());
                let ok = match known {
                    Some(ok) => ok,
                    None => {
                        let ok = match (&typedef.constraint, value) {
                            (Constraint::Regex { engine, .. }, Value::Str(s)) => regex_match(engine, s),
                            (Constraint::Regex { .. }, other) => {
                                return Err(typing(format!(
                                    "Regex can only be match with strings. {} is of type {}",
                                    self.display_value(other),
                                    other.type_name()
                                )));
                            }
                            (Constraint::Expr(e), _) => self.eval_direct(*e, value)?.truthy(),
                        };
                        if let Some(m) = memo
                            && self.constraint_memo.len() < CONSTRAINT_MEMO_LIMIT
                        {
                            self.constraint_memo.insert((td.0, m), ok);
                        }
                        ok
                    }
                };
                if ok {
                    Ok(())
                } else {
                    let constraint = match &typedef.constraint {
                        Constraint::Regex { python, .. } => format!("/{python}/"),
                        Constraint::Expr(_) => "expression".to_string(),
                    };
                    Err(rt(format!(
                        "Invalid value {}, does not match constraint `{constraint}`",
                        value.repr_with("null", &|i| self.instance_display(i))
                    )))
                }
            }
        }
    }

    fn validate_primitive(&self, p: Primitive, value: &Value) -> R<()> {
        if !p.accepts(value) {
            return Err(EvalError::new(
                p.mismatch_kind(),
                format!("Invalid value '{}', expected {}", self.display_value(value), p.name()),
            ));
        }
        match value {
            // The container itself is at depth 0; `p` accepted it, so it is no instance.
            Value::List(_) | Value::Dict(_) => self.validate_literal(value, 0),
            _ => Ok(()),
        }
    }

    /// Checks that a value holds no instance, at any depth. `depth` is how deep the value is
    /// in the attribute's value (its elements are one deeper): past [`MAX_VALUE_DEPTH`] the
    /// check stops with the reference's `RecursionError`. Without the bound, a chain of instances that each nest the previous
    /// value one level deeper costs a walk of the whole value per instance: quadratic, hours
    /// for 200,000 instances. The reference's own recursive checks give up between 400 and
    /// 800 levels.
    fn validate_literal(&self, v: &Value, depth: usize) -> R<()> {
        if depth > MAX_VALUE_DEPTH {
            return Err(EvalError::new(
                ErrorKind::RecursionError,
                format!("maximum recursion depth exceeded: a value nested more than {MAX_VALUE_DEPTH} levels deep"),
            ));
        }
        match v {
            Value::Instance(_) => Err(rt(format!("Invalid value '{}', expected Literal", self.display_value(v)))),
            Value::List(items) => items.iter().try_for_each(|i| self.validate_literal(i, depth + 1)),
            Value::Dict(items) => items.iter().try_for_each(|(_, i)| self.validate_literal(i, depth + 1)),
            _ => Ok(()),
        }
    }

    /// Whether a typedef's constraint `expr` calls no plugin but pure ones (the host says
    /// which: `Host::plugin_is_pure`), so that its result depends on the value alone (casts
    /// are pure; a variable other than `self` is an error, which is never memoized).
    fn constraint_is_pure(&mut self, td: TypedefId, expr: ExprId) -> bool {
        if self.constraint_pure.len() <= td.index() {
            self.constraint_pure.resize(td.index() + 1, None);
        }
        if let Some(pure) = self.constraint_pure[td.index()] {
            return pure;
        }
        let code = self.code();
        let mut pending = vec![expr];
        let mut pure = true;
        while let Some(e) = pending.pop() {
            match code.expr(e).kind {
                Op::Const(_) | Op::Var(_) => {}
                Op::Not(a) => pending.push(a),
                Op::Binary { lhs, rhs, .. } | Op::And { lhs, rhs } | Op::Or { lhs, rhs } => {
                    pending.extend([lhs, rhs]);
                }
                Op::List(items) => pending.extend(items.iter().copied()),
                Op::Dict(entries) => pending.extend(entries.iter().map(|(_, v)| *v)),
                Op::Cond { cond, then, otherwise } => pending.extend([cond, then, otherwise]),
                Op::Subscript { map, key } => pending.extend([map, key]),
                Op::Call { callee, args, kwargs, splats, .. }
                    if match callee {
                        Callee::Cast(_) => true,
                        Callee::Plugin(plugin) => match self.host.as_deref_mut() {
                            Some(host) => host.plugin_is_pure(&self.program, plugin),
                            // The host is out while a plugin runs: undecided, so not
                            // remembered either.
                            None => return false,
                        },
                    } =>
                {
                    pending.extend(args.iter().copied());
                    pending.extend(kwargs.iter().map(|n| n.expr));
                    pending.extend(splats.iter().copied());
                }
                _ => {
                    pure = false;
                    break;
                }
            }
        }
        self.constraint_pure[td.index()] = Some(pure);
        pure
    }

    /// Evaluates a typedef constraint with only `self` bound (the reference's direct execution).
    fn eval_direct(&mut self, expr: ExprId, self_value: &Value) -> R<Value> {
        let p = self.prog();
        let c = self.code();
        let e = c.expr(expr);
        let sub = |m: &mut Machine, id: ExprId| m.eval_direct(id, self_value);
        Ok(match &e.kind {
            Op::Const(v) => (*v).clone(),
            Op::Var(VarRef::Name(n)) if *n == self.symbols.self_ => self_value.clone(),
            Op::Var(_) => {
                return Err(EvalError::new(
                    ErrorKind::NotFoundException,
                    "Unable to resolve variable: a type constraint can not reference variables.",
                ));
            }
            Op::Not(a) => {
                let v = sub(self, *a)?;
                self.negate(v)?
            }
            Op::Binary { op, lhs, rhs } => {
                let a = sub(self, *lhs)?;
                let b = sub(self, *rhs)?;
                self.binary(*op, &a, &b)?
            }
            Op::And { lhs, rhs } | Op::Or { lhs, rhs } => {
                let is_and = matches!(e.kind, Op::And { .. });
                let a = sub(self, *lhs)?;
                let Value::Bool(av) = a else {
                    return Err(rt(format!(
                        "Invalid left hand value `{}`: `{}` expects a boolean",
                        self.display_value(&a),
                        if is_and { "and" } else { "or" }
                    )));
                };
                if av != is_and { Value::Bool(av) } else { sub(self, *rhs)? }
            }
            Op::List(items) => {
                let mut out = Vec::new();
                for i in items.iter() {
                    match sub(self, *i)? {
                        Value::List(inner) => out.extend(inner.iter().cloned()),
                        v => out.push(v),
                    }
                }
                Value::List(Arc::from(out))
            }
            Op::Dict(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries.iter() {
                    out.push((k.clone(), sub(self, *v)?));
                }
                Value::Dict(Arc::from(out))
            }
            Op::Cond { cond, then, otherwise } => match sub(self, *cond)? {
                Value::Bool(true) => sub(self, *then)?,
                Value::Bool(false) => sub(self, *otherwise)?,
                other => {
                    return Err(rt(format!(
                        "Invalid value `{}`: the condition for a conditional expression must be a boolean expression",
                        self.display_value(&other)
                    )));
                }
            },
            Op::Subscript { map, key } => {
                let m = sub(self, *map)?;
                let k = sub(self, *key)?;
                self.subscript(m, k)?
            }
            Op::Call { callee, args, kwargs, .. } => {
                let mut a = Vec::new();
                for x in args.iter() {
                    a.push(sub(self, *x)?);
                }
                let mut kw = Vec::new();
                for (k, x) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                    kw.push((p.name(*k).to_string(), sub(self, *x)?));
                }
                match callee {
                    Callee::Cast(prim) => cast(*prim, &a)?,
                    Callee::Plugin(plugin) => {
                        let mut host = self.host.take().unwrap_or_else(|| Box::new(NoHost));
                        let r = host.call_plugin(self, u32::MAX, *plugin, a, kw);
                        self.host = Some(host);
                        match r {
                            Ok(v) => v,
                            Err(PluginFailure::Error(e)) => return Err(e),
                            Err(PluginFailure::Unset(_)) => return Err(rt("unset value in a type constraint")),
                        }
                    }
                }
            }
            _ => return Err(rt("this expression can not be executed in a type constraint")),
        })
    }

    // ----- scopes -------------------------------------------------------------------------

    fn push_scope(&mut self, scope: Scope) -> ScopeId {
        self.scopes.push(scope) as ScopeId
    }

    /// A new execution context for a block: one fresh cell per declared variable.
    fn block_context(&mut self, block: BlockId, parent: ScopeId) -> ScopeId {
        let count = self.block_variables[block.index()].len();
        // A block that declares nothing resolves every name in its parent.
        if count == 0 {
            return parent;
        }
        let first = self.new_cell(CellKind::Plain);
        for _ in 1..count {
            self.new_cell(CellKind::Plain);
        }
        self.push_scope(Scope::Block { block, first, parent })
    }

    /// [`Self::lookup_in`] from the top of a scope; a plain name goes through
    /// [`LookupCache`].
    #[inline]
    fn lookup_var(&mut self, scope: ScopeId, name: VarRef) -> R<CellId> {
        let VarRef::Name(name) = name else { return self.lookup_in(scope, name, None) };
        let slot = LookupCache::slot(scope, name);
        let (s, n, cell) = self.lookups.entries[slot];
        if s == scope && n == name {
            return Ok(cell);
        }
        let cell = self.lookup_in(scope, VarRef::Name(name), None)?;
        self.lookups.entries[slot] = (scope, name, cell);
        Ok(cell)
    }

    /// Resolves a name as the reference's resolvers do.
    fn lookup_in(&self, scope: ScopeId, name: VarRef, root: Option<NsId>) -> R<CellId> {
        let name_sym = match name {
            VarRef::Qualified(ns, sym) => return self.ns_lookup(ns, sym, name),
            VarRef::Name(sym) => sym,
        };
        match &self.scopes[scope as usize] {
            Scope::Block { block, first, parent } => {
                match self.block_variables[block.index()].iter().position(|n| *n == name_sym) {
                    Some(i) => Ok(first + i as CellId),
                    None => self.lookup_in(*parent, name, root),
                }
            }
            Scope::Var { name: n, cell, parent } => {
                if root.is_none() && *n == name_sym {
                    Ok(*cell)
                } else {
                    self.lookup_in(*parent, name, root)
                }
            }
            Scope::Ns { ns, parent } => self.lookup_in(*parent, name, Some(root.unwrap_or(*ns))),
            Scope::Instance { instance } => {
                if name_sym == self.symbols.self_ {
                    return Ok(self.self_cell(*instance));
                }
                match (self.slot(*instance, name_sym), root) {
                    (Some(c), _) => Ok(c),
                    (None, Some(ns)) => self.ns_lookup(ns, name_sym, name),
                    // An instance scope is always entered through a namespace scope.
                    (None, None) => Err(EvalError::new(
                        ErrorKind::NotFoundException,
                        format!("variable {} not found", self.sym_name(name_sym)),
                    )),
                }
            }
            Scope::Root { ns } => self.ns_lookup(root.unwrap_or(*ns), name_sym, name),
        }
    }

    fn ns_lookup(&self, ns: NsId, sym: Symbol, name: VarRef) -> R<CellId> {
        let scope = self.ns_scopes[ns.index()];
        if let Scope::Block { block, first, .. } = &self.scopes[scope as usize]
            && let Some(i) = self.block_variables[block.index()].iter().position(|n| *n == sym)
        {
            return Ok(first + i as CellId);
        }
        let text = match name {
            VarRef::Qualified(ns, s) => {
                format!("{}::{}", self.program.namespaces[ns.index()].name, self.program.name(s))
            }
            VarRef::Name(s) => self.sym_name(s).to_string(),
        };
        Err(EvalError::new(ErrorKind::NotFoundException, format!("variable {text} not found")))
    }

    /// The namespace whose code a scope belongs to (for plugins that resolve `./` paths in the
    /// caller's module); `None` inside an instance's scope.
    pub fn scope_namespace(&self, scope: ScopeId) -> Option<NsId> {
        let mut scope = scope;
        loop {
            match self.scopes.get(scope as usize)? {
                Scope::Block { parent, .. } | Scope::Var { parent, .. } => scope = *parent,
                Scope::Ns { ns, .. } | Scope::Root { ns } => return Some(*ns),
                Scope::Instance { .. } => return None,
            }
        }
    }

    /// For plugins (templates): the value of a variable as seen from a scope.
    pub fn lookup_value(&mut self, scope: ScopeId, name: &str) -> R<Value> {
        let sym = self.symbol(name);
        let cell = self.lookup_in(scope, VarRef::Name(sym), None)?;
        if !self.is_ready(cell) {
            return Err(EvalError::unset(cell));
        }
        self.get_value(cell)
    }

    /// For plugins: an instance attribute, or the cell to wait for.
    pub fn attribute_value(&mut self, inst: InstanceId, name: &str) -> R<Value> {
        let Some(cell) = self.instance_slots(inst).find(|(n, _)| self.program.name(*n) == name).map(|s| s.1) else {
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!(
                    "could not find attribute with name: {name} in type {}",
                    self.program.entity(self.instances[inst as usize].entity).name
                ),
            ));
        };
        if !self.is_ready(cell) {
            return Err(EvalError::unset(cell));
        }
        self.get_value(cell)
    }

    // ----- emission -----------------------------------------------------------------------

    /// Creates the namespaces' execution contexts and emits every top-level block.
    pub fn start(&mut self) -> R<()> {
        let p = self.prog();
        self.sink = self.new_cell(CellKind::Sink);
        for (i, ns) in p.namespaces.iter().enumerate() {
            let root = self.push_scope(Scope::Root { ns: NsId(i as u32) });
            let ctx = self.block_context(ns.root, root);
            self.ns_scopes.push(ctx);
        }
        for (i, ns) in p.namespaces.iter().enumerate() {
            let ctx = self.ns_scopes[i];
            self.emit_block(ns.root, ctx)?;
        }
        Ok(())
    }

    fn emit_block(&mut self, block: BlockId, ctx: ScopeId) -> R<()> {
        let p = self.prog();
        for &s in &p.block(block).stmts {
            let location = p.stmt(s).location;
            self.emit_stmt(s, ctx).map_err(|e| e.at(location))?;
        }
        Ok(())
    }

    fn emit_stmt(&mut self, stmt: StmtId, scope: ScopeId) -> R<()> {
        let p = self.prog();
        match &p.stmt(stmt).kind {
            StmtKind::Assign { var, value } => {
                let target = self.lookup_var(scope, VarRef::Name(*var))?;
                let reqs = self.requires(*value, scope)?;
                self.spawn(
                    reqs,
                    Body::Exec { target, promise: OptPromise::NONE, what: Exec::Expr(*value), scope, attr: None },
                );
            }
            StmtKind::SetAttr { instance, .. } => {
                let reqs = self.requires(*instance, scope)?;
                self.spawn(reqs, Body::SetAttr { stmt, scope });
            }
            StmtKind::If { cond, then, otherwise } => {
                let mut reqs = self.schedule_promises(&[*then, *otherwise], scope)?;
                reqs.extend(self.requires(*cond, scope)?);
                let target = self.sink;
                self.spawn(
                    reqs,
                    Body::Exec { target, promise: OptPromise::NONE, what: Exec::Stmt(stmt), scope, attr: None },
                );
            }
            StmtKind::For { iterable, body, .. } => {
                let mut reqs = self.schedule_promises(&[*body], scope)?;
                let collector = self.add_collector(Collector::For { stmt, scope, seen: HashSet::new() });
                reqs.extend(self.requires_gradual(*iterable, scope, collector)?);
                let target = self.sink;
                self.spawn(
                    reqs,
                    Body::Exec { target, promise: OptPromise::NONE, what: Exec::Stmt(stmt), scope, attr: None },
                );
            }
            StmtKind::Expr(e) => {
                let reqs = self.requires(*e, scope)?;
                let target = self.sink;
                self.spawn(
                    reqs,
                    Body::Exec { target, promise: OptPromise::NONE, what: Exec::Expr(*e), scope, attr: None },
                );
            }
        }
        Ok(())
    }

    fn add_collector(&mut self, c: Collector) -> CollectorId {
        self.collectors.push(c) as CollectorId
    }

    /// Acquires the eager promises of the blocks an `if`/`for` owns.
    fn schedule_promises(&mut self, blocks: &[BlockId], scope: ScopeId) -> R<Reqs> {
        let p = self.prog();
        let mut ids = Vec::new();
        for b in blocks {
            for promise in &p.block(*b).promises {
                let id = self.eager.len() as u32;
                self.eager.push(EagerPromise { promise: None, fulfilled: false });
                let base = Some(promise.instance);
                self.schedule_hook(base, promise.attribute, scope, Resumer::Eager(id), true, promise.location)?;
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return Ok(Reqs::new());
        }
        let cell = self
            .plain_with(Value::List(Arc::from(ids.iter().map(|&i| Value::Int(i as i64)).collect::<Vec<_>>())), None);
        Ok(smallvec![(Key::Promises, cell)])
    }

    fn schedule_hook(
        &mut self,
        base: Option<ExprId>,
        name: Symbol,
        scope: ScopeId,
        resumer: Resumer,
        propagate_unset: bool,
        location: Location,
    ) -> R<()> {
        match base {
            None => {
                let cell = self.lookup_var(scope, VarRef::Name(name))?;
                self.resume_variable(resumer, cell)
            }
            Some(b) => {
                let reqs = self.requires(b, scope)?;
                if let Some(cell) = self.attribute_cell_now(b, name, &reqs) {
                    // The hook task would be ready at once, so it would take the next place
                    // in the run queue; the resumption takes that place instead.
                    self.resumptions.push_back((resumer, cell));
                    self.run_queue.push_back(RESUMPTION);
                    return Ok(());
                }
                self.spawn(reqs, Body::Hook { base: b, name, scope, resumer, propagate_unset, location });
                Ok(())
            }
        }
    }

    /// The cell a hook on `base.name` would resume with, when the hook would find it without
    /// waiting and without an error: `base` is a variable that already holds an instance, and
    /// the instance has the attribute. Such a value never changes once set, and neither do
    /// an instance's attribute cells, so the cell found now is the cell the hook would find.
    fn attribute_cell_now(&self, base: ExprId, name: Symbol, reqs: &Reqs) -> Option<CellId> {
        let [(_, cell)] = reqs.as_slice() else { return None };
        if !matches!(self.code().expr(base).kind, Op::Var(_)) {
            return None;
        }
        let c = &self.cells[*cell as usize];
        if matches!(c.kind(), CellKind::Proxy | CellKind::List | CellKind::ListLiteral) || !c.has_value() {
            return None;
        }
        match c.value().as_deref() {
            Some(Value::Instance(i)) => self.slot(*i, name),
            _ => None,
        }
    }

    fn resume_variable(&mut self, resumer: Resumer, cell: CellId) -> R<()> {
        match resumer {
            Resumer::Reader(proxy) => self.connect_proxy(proxy, cell),
            Resumer::Requirement(proxy) => {
                self.connect_requirement(proxy, cell);
                Ok(())
            }
            Resumer::Eager(id) => {
                if !self.eager[id as usize].fulfilled {
                    let target = self.resolve_proxy(cell);
                    let promise = self.get_promise(target);
                    self.eager[id as usize].promise = promise;
                }
                Ok(())
            }
            Resumer::IsDefined { target, location } => {
                if self.is_ready(cell) {
                    let v = self.is_defined_value(cell);
                    self.set_cell(target, v, location, true)
                } else {
                    let collector = self.add_collector(Collector::IsDefined { target, location });
                    self.listen(cell, collector, location)?;
                    self.spawn(smallvec![(Key::Extra(0), cell)], Body::IsDefinedWait { cell, target, location });
                    Ok(())
                }
            }
        }
    }

    fn resolve_proxy(&self, cell: CellId) -> CellId {
        let c = &self.cells[cell as usize];
        if c.kind() == CellKind::Proxy
            && let Some(t) = c.target(&self.exts)
        {
            return self.resolve_proxy(t);
        }
        cell
    }

    fn is_defined_value(&mut self, cell: CellId) -> Value {
        match self.get_value(cell) {
            Ok(Value::Unknown) => Value::Unknown,
            Ok(Value::List(items)) => {
                if items.is_empty() {
                    Value::Bool(false)
                } else if items.iter().all(|v| matches!(v, Value::Unknown)) {
                    Value::Unknown
                } else {
                    Value::Bool(true)
                }
            }
            Ok(Value::Null(_)) => Value::Bool(false),
            Ok(_) => Value::Bool(true),
            Err(_) => Value::Bool(false),
        }
    }

    /// `requires_emit`: the cells an expression waits for, spawning sub-tasks.
    fn requires(&mut self, expr: ExprId, scope: ScopeId) -> R<Reqs> {
        let mut reqs = Reqs::new();
        self.requires_into(expr, scope, &mut reqs)?;
        Ok(reqs)
    }

    /// [`Self::requires`], appending to `reqs` so that an expression tree builds one list.
    #[inline]
    fn requires_into(&mut self, expr: ExprId, scope: ScopeId, reqs: &mut Reqs) -> R<()> {
        match self.requires_of(expr, scope, reqs) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.locate_operand_error(expr, e)),
        }
    }

    /// The reference's `ReferenceStatement`s (a map lookup, operators, collection literals,
    /// strings, calls, index lookups) give an error from their operands their own place, when
    /// it has none yet; `and`, `or`, `is defined`, `?:`, constructors, comprehensions and
    /// attribute reads leave it to what is around them.
    #[cold]
    fn locate_operand_error(&self, expr: ExprId, error: EvalError) -> EvalError {
        let c = self.code();
        let e = c.expr(expr);
        match e.kind {
            Op::Subscript { .. }
            | Op::Not(_)
            | Op::Binary { .. }
            | Op::List(_)
            | Op::Dict(_)
            | Op::Format { .. }
            | Op::FString { .. }
            | Op::Call { .. }
            | Op::IndexLookup { .. }
            | Op::SelectorLookup { .. } => error.at(e.location),
            _ => error,
        }
    }

    /// The requirements of one instruction, its operands' through [`Self::requires_into`].
    fn requires_of(&mut self, expr: ExprId, scope: ScopeId, reqs: &mut Reqs) -> R<()> {
        let p = self.prog();
        let c = self.code();
        let e = c.expr(expr);
        let location = e.location;
        match &e.kind {
            Op::Const(_) => {}
            Op::Var(name) => {
                let cell = self.lookup_var(scope, *name).map_err(|err| err.arose_at(location))?;
                reqs.push((Self::var_key(expr, *name), cell));
            }
            Op::Attr { base, name } => {
                let proxy = self.new_requirement_proxy();
                self.schedule_hook(Some(*base), *name, scope, Resumer::Requirement(proxy), false, location)?;
                reqs.push((Key::Expr(expr), proxy));
            }
            Op::Subscript { map, key } => {
                self.requires_into(*map, scope, reqs)?;
                self.requires_into(*key, scope, reqs)?;
            }
            Op::Not(a) => reqs.extend(self.requires(*a, scope)?),
            Op::Binary { lhs, rhs, .. } => {
                self.requires_into(*lhs, scope, reqs)?;
                self.requires_into(*rhs, scope, reqs)?;
            }
            Op::And { lhs, .. } | Op::Or { lhs, .. } => {
                let target = self.new_cell(CellKind::Plain);
                self.cells[target as usize].set_ty(&self.exts, PackedType::BOOL);
                let sub = self.requires(*lhs, scope)?;
                self.spawn(sub, Body::Lazy { expr, scope, target });
                reqs.push((Key::Expr(expr), target));
            }
            Op::Cond { cond, .. } => {
                let result = self.new_cell(CellKind::Plain);
                let sub = self.requires(*cond, scope)?;
                self.spawn(sub, Body::Cond { src: CondSrc::Expr(expr), scope, result, lhs: None, chosen: None });
                reqs.push((Key::Expr(expr), result));
            }
            Op::List(items) => {
                for i in items.iter() {
                    self.requires_into(*i, scope, reqs)?;
                }
            }
            Op::Dict(entries) => {
                for (_, v) in entries.iter() {
                    self.requires_into(*v, scope, reqs)?;
                }
            }
            Op::Format { parts, .. } => {
                for (_, r) in parts.iter() {
                    self.requires_into(*r, scope, reqs)?;
                }
            }
            Op::FString { fields, .. } => {
                for (_, r) in fields.iter() {
                    self.requires_into(*r, scope, reqs)?;
                }
            }
            Op::Call { args, kwargs, splats, .. } => {
                let mut sub = Reqs::new();
                for a in args.iter() {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                for (_, a) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                for a in splats.iter() {
                    self.requires_into(*a, scope, &mut sub)?;
                }
                let result = self.new_cell(CellKind::Plain);
                self.spawn(sub, Body::Call { expr, scope, result, args: None });
                reqs.push((Key::Expr(expr), result));
            }
            Op::Construct(c) => {
                let ctor = &p.ctors[c.index()];
                for (_, v) in &ctor.direct {
                    self.requires_into(*v, scope, reqs)?;
                }
                for v in &ctor.splats {
                    self.requires_into(*v, scope, reqs)?;
                }
                if let Some((inst, _)) = ctor.lhs {
                    self.requires_into(inst, scope, reqs)?;
                }
            }
            Op::IndexLookup { entity, query, splats } => {
                let mut sub = Reqs::new();
                for (_, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                for v in splats.iter() {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                let target = self.new_cell(CellKind::Plain);
                self.cells[target as usize].set_ty(&self.exts, PackedType::entity(*entity));
                self.spawn(sub, Body::Lookup { expr, scope, target });
                reqs.push((Key::Expr(expr), target));
            }
            Op::SelectorLookup { base, query, splats, .. } => {
                let mut sub = Reqs::new();
                for (_, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                self.requires_into(*base, scope, &mut sub)?;
                for v in splats.iter() {
                    self.requires_into(*v, scope, &mut sub)?;
                }
                let target = self.new_cell(CellKind::Plain);
                self.spawn(sub, Body::Lookup { expr, scope, target });
                reqs.push((Key::Expr(expr), target));
            }
            Op::ListComp { .. } => {
                let result = self.list_comp(expr, scope, None)?;
                reqs.push((Key::Expr(expr), result));
            }
            Op::IsDefined { base, name } => {
                let target = self.new_cell(CellKind::Plain);
                self.schedule_hook(*base, *name, scope, Resumer::IsDefined { target, location }, false, location)?;
                reqs.push((Key::Expr(expr), target));
            }
        }
        Ok(())
    }

    /// `requires_emit_gradual`: like [`Self::requires`], delivering the value's elements to
    /// `collector` as they arrive where the expression allows it.
    fn requires_gradual(&mut self, expr: ExprId, scope: ScopeId, collector: CollectorId) -> R<Reqs> {
        let c = self.code();
        let e = c.expr(expr);
        let location = e.location;
        match &e.kind {
            Op::Var(_) => {
                let mut reqs = self.requires(expr, scope)?;
                let cell = reqs[0].1;
                if !self.listen(cell, collector, location)? {
                    let c = self.plain_with(Value::Int(collector as i64), None);
                    reqs.push((Key::Collector(expr), c));
                }
                Ok(reqs)
            }
            Op::Attr { base, name } => {
                let proxy = self.new_cell(CellKind::Proxy);
                self.proxy_listeners.insert(proxy, ProxyListener { collector, location, notify: false });
                self.cells[proxy as usize].flag(Cell::LISTENED, true);
                self.schedule_hook(Some(*base), *name, scope, Resumer::Reader(proxy), false, location)?;
                Ok(smallvec![(Key::Expr(expr), proxy)])
            }
            Op::List(items) => {
                let temp = self.new_cell(CellKind::ListLiteral);
                self.listen(temp, collector, location)?;
                let temp_collector = self.add_collector(Collector::Cell(temp));
                for item in items.iter() {
                    let promise = self.get_promise(temp);
                    let reqs = self.requires_gradual(*item, scope, temp_collector)?;
                    self.spawn(
                        reqs,
                        Body::Exec {
                            target: temp,
                            promise: promise.into(),
                            what: Exec::Expr(*item),
                            scope,
                            attr: None,
                        },
                    );
                }
                if items.is_empty() {
                    self.freeze(temp);
                }
                Ok(smallvec![(Key::Expr(expr), temp)])
            }
            Op::Cond { cond, .. } => {
                let result = self.new_cell(CellKind::Plain);
                let sub = self.requires(*cond, scope)?;
                self.spawn(
                    sub,
                    Body::Cond { src: CondSrc::Expr(expr), scope, result, lhs: Some(collector), chosen: None },
                );
                Ok(smallvec![(Key::Expr(expr), result)])
            }
            Op::ListComp { .. } => {
                let result = self.list_comp(expr, scope, Some(collector))?;
                Ok(smallvec![(Key::Expr(expr), result)])
            }
            _ => {
                let mut reqs = self.requires(expr, scope)?;
                let c = self.plain_with(Value::Int(collector as i64), None);
                reqs.push((Key::Collector(expr), c));
                Ok(reqs)
            }
        }
    }

    fn list_comp(&mut self, expr: ExprId, scope: ScopeId, lhs: Option<CollectorId>) -> R<CellId> {
        let c = self.code();
        let Op::ListComp { iterable, .. } = c.expr(expr).kind else { unreachable!() };
        let final_result = self.new_cell(CellKind::Plain);
        let helper = self.comps.len() as u32;
        self.comps.push(CompHelper { expr, scope, lhs, results: Vec::new(), complete: false, final_result });
        let reqs = match lhs {
            None => self.requires(iterable, scope)?,
            Some(_) => {
                let c = self.add_collector(Collector::Comp(helper));
                self.requires_gradual(iterable, scope, c)?
            }
        };
        self.spawn(reqs, Body::Comp { helper, scope });
        Ok(final_result)
    }

    fn comp_receive(&mut self, helper: u32, value: Value, _location: Location) -> R<()> {
        let c = self.code();
        let h = &self.comps[helper as usize];
        if h.complete {
            return Err(rt("list comprehension helper received gradual result after it was declared complete"));
        }
        let (expr, scope, lhs) = (h.expr, h.scope, h.lhs);
        let Op::ListComp { element, var, guard, .. } = c.expr(expr).kind else { unreachable!() };
        let location = c.location(expr);
        let element_cell = self.filled_cell(CellKind::Element, value.clone(), Some(location));
        let value_scope = self.push_scope(Scope::Var { name: var, cell: element_cell, parent: scope });
        let result = self.new_cell(CellKind::Plain);
        self.comps[helper as usize].results.push(result);
        let unknown = matches!(value, Value::Unknown);
        // The element task evaluates `guard ? element : <filtered>`; an Unknown element passes
        // through as is.
        let reqs = match (guard, unknown, lhs) {
            (Some(g), _, _) => {
                let cond_result = self.new_cell(CellKind::Plain);
                let sub = self.requires(g, value_scope)?;
                self.spawn(
                    sub,
                    Body::Cond {
                        src: CondSrc::Guard { helper, unknown },
                        scope: value_scope,
                        result: cond_result,
                        lhs,
                        chosen: None,
                    },
                );
                smallvec![(Key::Extra(1), cond_result)]
            }
            (None, true, _) => Reqs::new(),
            (None, false, None) => self.requires(element, value_scope)?,
            (None, false, Some(c)) => self.requires_gradual(element, value_scope, c)?,
        };
        self.spawn(
            reqs,
            Body::Exec {
                target: result,
                promise: OptPromise::NONE,
                what: Exec::CompElement { helper, unknown, guarded: guard.is_some() },
                scope: value_scope,
                attr: None,
            },
        );
        Ok(())
    }

    fn comp_complete(&mut self, helper: u32, all: Value) -> R<()> {
        let h = &self.comps[helper as usize];
        if h.results.is_empty() {
            let location = self.code.location(h.expr);
            let values: Vec<Value> = match all {
                Value::Unknown => vec![Value::Unknown],
                Value::List(items) => items.to_vec(),
                other => vec![other],
            };
            for v in values {
                self.comp_receive(helper, v, location)?;
            }
        }
        self.comps[helper as usize].complete = true;
        let reqs: Reqs = self.comps[helper as usize]
            .results
            .clone()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (Key::Index(i as u32), c))
            .collect();
        self.spawn(reqs, Body::CompFinal { helper });
        Ok(())
    }

    // ----- execution ----------------------------------------------------------------------

    /// Runs a ready task, or the resumption whose place in the run queue came up. `Ok(Some(cell))`
    /// asks the scheduler to requeue the task once `cell` is ready (a plugin read an unset value).
    pub fn execute(&mut self, waiter: WaiterId) -> R<Option<CellId>> {
        if waiter == RESUMPTION {
            let (resumer, cell) = self.resumptions.pop_front().expect("a resumption for each place in the run queue");
            return self.resume_variable(resumer, cell).map(|()| None);
        }
        if waiter == DEFERRED {
            let deferred = self.deferred.pop_front().expect("a deferred task for each place in the run queue");
            return self.run_body(&mut deferred.body(), &Reqs::new()).map(|()| None);
        }
        let mut body = self.waiters[waiter as usize].body.take().expect("a task runs once");
        let requires = std::mem::take(&mut self.waiters[waiter as usize].requires);
        let result = self.run_body(&mut body, &requires);
        self.waiters[waiter as usize].requires = requires;
        match result {
            Ok(()) => {
                // Nothing refers to a finished task any more: every cell it waited for has
                // released it (that is how it became ready), so its slot can be reused.
                let w = &mut self.waiters[waiter as usize];
                w.requires = Reqs::new();
                w.seq = self.free_waiter;
                self.free_waiter = waiter;
                self.live_tasks -= 1;
                Ok(None)
            }
            Err(e) if e.unset.is_some() && matches!(body, Body::Call { .. }) => {
                let cell = e.unset.expect("checked");
                self.waiters[waiter as usize].body = Some(body);
                let w = &mut self.waiters[waiter as usize];
                w.requires.push((Key::Extra(w.requires.len() as u32), cell));
                self.wait_for(waiter, cell);
                Ok(Some(cell))
            }
            Err(e) => Err(e),
        }
    }

    /// Adds the values of a task's requirements to `out`, in order (proxies deliver to their
    /// listener). The caller keeps the 136-byte `Values` in its own frame: returned, even
    /// inlined, it was copied with `memcpy` out of the `Result` for every task (1.8% of the
    /// instructions of the 9k-instance model).
    #[inline(always)]
    fn values_into(&mut self, requires: &Reqs, out: &mut Values) -> R<()> {
        for (k, c) in requires {
            let v = self.get_value(*c)?;
            out.insert(*k, v);
        }
        Ok(())
    }

    fn run_body(&mut self, body: &mut Body, requires: &Reqs) -> R<()> {
        let p = self.prog();
        let c = self.code();
        match *body {
            Body::Exec { target, promise, what, scope, attr } => {
                let result = (|| -> R<()> {
                    let mut values = Values(SmallVec::new());
                    self.values_into(requires, &mut values)?;
                    let (value, location) = match what {
                        Exec::CompElement { helper, unknown, guarded } => {
                            let v = self.comp_element_value(helper, unknown, guarded, &values, scope)?;
                            (v, c.location(self.comps[helper as usize].expr))
                        }
                        Exec::Expr(e) => (self.eval(e, &values, scope)?, c.location(e)),
                        Exec::Stmt(s) => {
                            self.exec_stmt(s, &values, scope)?;
                            return Ok(());
                        }
                        Exec::SubCtor { instance, index } => {
                            self.exec_subctor(instance, index, &values, scope)?;
                            return Ok(());
                        }
                    };
                    self.set_cell(target, value, location, true)?;
                    if let Some(pr) = promise.get() {
                        self.fulfill(pr);
                    }
                    Ok(())
                })();
                match (result, attr) {
                    (Ok(()), _) => Ok(()),
                    (Err(e), Some(ctx)) => {
                        if e.kind == ErrorKind::AttributeException {
                            Err(e.at(ctx.location))
                        } else {
                            let mut e = e;
                            if e.kind == ErrorKind::OptionalValueException {
                                e.location = Some(ctx.location);
                            }
                            Err(self.attribute_error(ctx.instance(), ctx.attr, e.at(ctx.location), Some(ctx.location)))
                        }
                    }
                    // The reference's `ExecutionUnit` gives an error its expression's place
                    // when nothing inside did (a constructor emitting an attribute's value).
                    (Err(e), None) => match what {
                        Exec::Expr(expr) => Err(e.at(c.location(expr))),
                        _ => Err(e),
                    },
                }
            }
            Body::SetAttr { stmt, scope } => {
                let StmtKind::SetAttr { instance, attribute, value, extend } = p.stmt(stmt).kind else {
                    unreachable!()
                };
                let location = p.stmt(stmt).location;
                let mut values = Values(SmallVec::new());
                self.values_into(requires, &mut values)?;
                let inst_value = self.eval(instance, &values, scope)?;
                let Value::Instance(inst) = inst_value else {
                    return Err(typing(format!(
                        "The object at {} is not an Entity but a {} with value {}",
                        self.expr_text(instance),
                        python_class(&inst_value),
                        self.display_value(&inst_value)
                    ))
                    .at(location));
                };
                let Some(cell) = self.slot(inst, attribute) else {
                    return Err(EvalError::new(
                        ErrorKind::NotFoundException,
                        format!(
                            "could not find attribute with name: {} in type {}",
                            p.name(attribute),
                            p.entity(self.instances[inst as usize].entity).name
                        ),
                    )
                    .at(location));
                };
                let multi = matches!(self.cells[cell as usize].kind(), CellKind::List);
                if extend && !multi {
                    return Err(typing("Can not use += on relations with multiplicity 1").at(location));
                }
                self.emit_attribute_value(inst, attribute, cell, value, scope, location)?;
                Ok(())
            }
            Body::Lazy { expr, scope, target } => {
                let (lhs, rhs, is_and) = match c.expr(expr).kind {
                    Op::And { lhs, rhs } => (lhs, rhs, true),
                    Op::Or { lhs, rhs } => (lhs, rhs, false),
                    _ => unreachable!(),
                };
                let location = c.location(expr);
                let mut values = Values(SmallVec::new());
                self.values_into(requires, &mut values)?;
                let result = self.eval(lhs, &values, scope)?;
                if matches!(result, Value::Unknown) {
                    return self.set_cell(target, result, location, true);
                }
                let Value::Bool(b) = result else {
                    let error = rt(format!(
                        "Invalid left hand value `{}`: `{}` expects a boolean",
                        self.display_value(&result),
                        if is_and { "and" } else { "or" }
                    ))
                    .at(location);
                    let operand_type = self.operand_type(&result);
                    return Err(self.with_operand_labels(error, &[(lhs, operand_type)]));
                };
                if b != is_and {
                    self.set_cell(target, Value::Bool(b), location, true)
                } else {
                    let reqs = self.requires(rhs, scope)?;
                    self.spawn(
                        reqs,
                        Body::Exec { target, promise: OptPromise::NONE, what: Exec::Expr(rhs), scope, attr: None },
                    );
                    Ok(())
                }
            }
            Body::Lookup { expr, scope, target } => {
                let mut values = Values(SmallVec::new());
                self.values_into(requires, &mut values)?;
                let location = c.location(expr);
                let (entity, params) = match &c.expr(expr).kind {
                    Op::IndexLookup { entity, query, splats } => {
                        let mut params = Vec::new();
                        for (k, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                            params.push((*k, self.eval(*v, &values, scope)?));
                        }
                        for s in splats.iter() {
                            params.extend(self.splat(*s, &values, scope)?);
                        }
                        (*entity, params)
                    }
                    Op::SelectorLookup { base, relation, query, splats } => {
                        let root = self.eval(*base, &values, scope)?;
                        let Value::Instance(inst) = root else {
                            return Err(typing(format!(
                                "short index lookup is only possible one objects, {} is not an object",
                                self.display_value(&root)
                            ))
                            .at(location));
                        };
                        let ent = self.instances[inst as usize].entity;
                        let Some(attr) = p.entity(ent).slots.iter().find(|s| s.0 == *relation).map(|s| s.1) else {
                            return Err(EvalError::new(
                                ErrorKind::NotFoundException,
                                format!(
                                    "could not find attribute with name: {} in type {}",
                                    p.name(*relation),
                                    p.entity(ent).name
                                ),
                            )
                            .at(location));
                        };
                        let AttributeKind::Relation(end) = p.attribute(attr).kind else {
                            return Err(typing(format!(
                                "short index lookup is only possible on relations, {} is an attribute",
                                p.name(*relation)
                            ))
                            .at(location));
                        };
                        let Some(inverse) = end.inverse else {
                            return Err(typing(format!(
                                "short index lookup is only possible on bi-drectional relations, {} is unidirectional",
                                p.name(*relation)
                            ))
                            .at(location));
                        };
                        let mut params = vec![(p.attribute(inverse).name, Value::Instance(inst))];
                        for (k, v) in query.iter().map(|n| (&n.name, &n.expr)) {
                            params.push((*k, self.eval(*v, &values, scope)?));
                        }
                        for s in splats.iter() {
                            params.extend(self.splat(*s, &values, scope)?);
                        }
                        self.cells[target as usize].set_ty(&self.exts, PackedType::entity(end.target));
                        (end.target, params)
                    }
                    _ => unreachable!(),
                };
                self.lookup_index(entity, &params, Some(target), location).map_err(|e| e.at(location))?;
                Ok(())
            }
            Body::Hook { base, name, scope, resumer, propagate_unset, location } => {
                let mut values = Values(SmallVec::new());
                let mut unset: Option<CellId> = None;
                for (k, c) in requires {
                    match self.get_value(*c) {
                        Ok(v) => {
                            values.insert(*k, v);
                        }
                        Err(e) if propagate_unset && e.kind == ErrorKind::OptionalValueException => {
                            unset = Some(*c);
                            break;
                        }
                        Err(e) => return Err(e.at(location)),
                    }
                }
                let cell = match unset {
                    Some(c) => c,
                    None => {
                        let inst = self.eval(base, &values, scope).map_err(|e| e.at(location))?;
                        match inst {
                            Value::Instance(i) => match self.slot(i, name) {
                                Some(c) => c,
                                None => {
                                    return Err(EvalError::new(
                                        ErrorKind::NotFoundException,
                                        format!(
                                            "could not find attribute with name: {} in type {}",
                                            p.name(name),
                                            p.entity(self.instances[i as usize].entity).name
                                        ),
                                    )
                                    .at(location));
                                }
                            },
                            Value::List(_) => {
                                return Err(rt(format!(
                                    "can not get attribute {}, {} is not an entity but a list",
                                    p.name(name),
                                    self.display_value(&inst)
                                ))
                                .at(location));
                            }
                            other => {
                                return Err(rt(format!(
                                    "can not get attribute {}, {} is not an entity but a {} with value '{}'",
                                    p.name(name),
                                    self.expr_text(base),
                                    python_type(&other),
                                    self.display_value(&other)
                                ))
                                .at(location));
                            }
                        }
                    }
                };
                self.resume_variable(resumer, cell)
            }
            Body::IsDefinedWait { cell, target, location } => {
                let v = self.is_defined_value(cell);
                self.set_cell(target, v, location, true)
            }
            Body::Cond { src, scope, result, lhs, chosen } => {
                // The branches: `None` is a branch with a fixed value (an Unknown element, or
                // the filtered marker).
                let (cond, then, otherwise, location) = match src {
                    CondSrc::Expr(expr) => match c.expr(expr).kind {
                        Op::Cond { cond, then, otherwise } => (cond, Ok(then), Ok(otherwise), c.location(expr)),
                        _ => unreachable!(),
                    },
                    CondSrc::Guard { helper, unknown } => {
                        let h = &self.comps[helper as usize];
                        let Op::ListComp { element, guard, .. } = c.expr(h.expr).kind else { unreachable!() };
                        let then = if unknown { Err(Value::Unknown) } else { Ok(element) };
                        (guard.expect("guarded"), then, Err(Value::str(FILTERED)), c.location(h.expr))
                    }
                };
                let mut values = Values(SmallVec::new());
                self.values_into(requires, &mut values)?;
                match chosen {
                    None => {
                        let c = self.eval(cond, &values, scope)?;
                        if matches!(c, Value::Unknown) {
                            return self.set_cell(result, Value::Unknown, location, true);
                        }
                        let Value::Bool(b) = c else {
                            let message = match src {
                                CondSrc::Expr(_) => format!(
                                    "Invalid value `{}`: the condition for a conditional expression must be a boolean expression",
                                    self.display_value(&c)
                                ),
                                CondSrc::Guard { .. } => format!(
                                    "Invalid value `{}`: the guard condition for a list comprehension must be a boolean expression",
                                    self.display_value(&c)
                                ),
                            };
                            return Err(rt(message).at(location));
                        };
                        let branch = if b { then } else { otherwise };
                        let reqs = match (branch, lhs) {
                            (Ok(e), None) => self.requires(e, scope)?,
                            (Ok(e), Some(col)) => self.requires_gradual(e, scope, col)?,
                            (Err(_), _) => Reqs::new(),
                        };
                        self.spawn(reqs, Body::Cond { src, scope, result, lhs, chosen: Some(b) });
                        Ok(())
                    }
                    Some(b) => {
                        let branch = if b { then } else { otherwise };
                        let v = match branch {
                            Ok(e) => self.eval(e, &values, scope)?,
                            Err(fixed) => {
                                if let (Some(col), Value::Unknown) = (lhs, &fixed) {
                                    self.receive_flatten(col, fixed.clone(), location)?;
                                }
                                fixed
                            }
                        };
                        self.set_cell(result, v, location, true)
                    }
                }
            }
            Body::Comp { helper, scope } => {
                let mut values = Values(SmallVec::new());
                self.values_into(requires, &mut values)?;
                let expr = self.comps[helper as usize].expr;
                let Op::ListComp { iterable, .. } = c.expr(expr).kind else { unreachable!() };
                let location = c.location(expr);
                let it = self.eval(iterable, &values, scope)?;
                if !matches!(it, Value::List(_) | Value::Unknown) {
                    return Err(typing(format!(
                        "A list comprehension can only be applied to lists and relations, got {}",
                        python_type(&it)
                    ))
                    .at(location));
                }
                self.comp_complete(helper, it)
            }
            Body::CompFinal { helper } => {
                let mut out = Vec::new();
                for (_, c) in requires {
                    let v = self.get_value(*c)?;
                    match v {
                        Value::Str(ref s) if s.as_ref() == FILTERED => {}
                        Value::List(items) => out.extend(items.iter().cloned()),
                        other => out.push(other),
                    }
                }
                let h = &self.comps[helper as usize];
                let (result, location) = (h.final_result, c.location(h.expr));
                self.set_cell(result, Value::List(Arc::from(out)), location, true)
            }
            Body::Call { expr, scope, result, args: ref mut saved } => {
                let location = c.location(expr);
                let Op::Call { callee, name, args: a, kwargs, splats } = &c.expr(expr).kind else { unreachable!() };
                let (args, kwargs) = match saved.take() {
                    Some(x) => *x,
                    None => {
                        let mut values = Values(SmallVec::new());
                        // Reading an argument's value can fail (an optional relation with no
                        // value); the call is the place to show, as for other reads.
                        self.values_into(requires, &mut values).map_err(|e| e.at(location))?;
                        let mut pos = Vec::new();
                        for x in a.iter() {
                            pos.push(self.eval(*x, &values, scope)?);
                        }
                        let mut kw: Vec<(String, Value)> = Vec::new();
                        for (k, x) in kwargs.iter().map(|n| (&n.name, &n.expr)) {
                            kw.push((p.name(*k).to_string(), self.eval(*x, &values, scope)?));
                        }
                        for s in splats.iter() {
                            for (k, v) in self.splat(*s, &values, scope)? {
                                let k = self.sym_name(k).to_string();
                                if kw.iter().any(|(x, _)| *x == k) {
                                    return Err(
                                        rt(format!("Keyword argument {k} repeated in function call")).at(location)
                                    );
                                }
                                kw.push((k, v));
                            }
                        }
                        (pos, kw)
                    }
                };
                let value = match callee {
                    Callee::Cast(prim) => {
                        if !kwargs.is_empty() {
                            return Err(rt("Only positional arguments allowed in type cast").at(location));
                        }
                        cast(*prim, &args).map_err(|e| e.at(location))?
                    }
                    Callee::Plugin(plugin) => {
                        let mut host = self.host.take().unwrap_or_else(|| Box::new(NoHost));
                        let r = host.call_plugin(self, scope, *plugin, args.clone(), kwargs.clone());
                        self.host = Some(host);
                        match r {
                            Ok(v) => self.fresh_nulls(v),
                            Err(PluginFailure::Unset(cell)) => {
                                // The arguments are kept for the retry, so that they are
                                // evaluated once, as the reference's FunctionUnit does.
                                *saved = Some(Box::new((args, kwargs)));
                                let mut e = rt(format!("plugin {name} read an unset value"));
                                e.unset = Some(cell);
                                return Err(e);
                            }
                            Err(PluginFailure::Error(e)) => return Err(e.at(location)),
                        }
                    }
                };
                self.set_cell(result, value, location, true)
            }
        }
    }

    /// A plugin's result with a new object for each `null` in it, as the reference's
    /// conversion of a plugin's `None`s (`DynamicProxy.unwrap`) makes: each is a `NoneValue`
    /// of its own, even inside a list (see `NullId`). A result without nulls comes back as it
    /// was, without a copy.
    fn fresh_nulls(&mut self, value: Value) -> Value {
        fn has_null(value: &Value) -> bool {
            match value {
                Value::Null(_) => true,
                Value::List(items) => items.iter().any(has_null),
                Value::Dict(entries) => entries.iter().any(|(_, v)| has_null(v)),
                _ => false,
            }
        }
        fn renumber(value: &Value, next: &mut u64) -> Value {
            match value {
                Value::Null(_) => {
                    *next += 1;
                    Value::Null(value::NullId(*next))
                }
                Value::List(items) => Value::List(items.iter().map(|v| renumber(v, next)).collect()),
                Value::Dict(entries) => {
                    Value::Dict(entries.iter().map(|(k, v)| (k.clone(), renumber(v, next))).collect())
                }
                other => other.clone(),
            }
        }
        if !has_null(&value) {
            return value;
        }
        renumber(&value, &mut self.fresh_null)
    }

    fn comp_element_value(
        &mut self,
        helper: u32,
        unknown: bool,
        guarded: bool,
        values: &Values,
        scope: ScopeId,
    ) -> R<Value> {
        let c = self.code();
        let (expr, lhs) = (self.comps[helper as usize].expr, self.comps[helper as usize].lhs);
        let Op::ListComp { element, .. } = c.expr(expr).kind else { unreachable!() };
        if guarded {
            return Ok(values.get(&Key::Extra(1)).cloned().unwrap_or(Value::NULL));
        }
        if unknown {
            if let Some(col) = lhs {
                self.receive_flatten(col, Value::Unknown, c.location(expr))?;
            }
            return Ok(Value::Unknown);
        }
        self.eval(element, values, scope)
    }

    fn splat(&mut self, expr: ExprId, values: &Values, scope: ScopeId) -> R<Vec<(Symbol, Value)>> {
        let v = self.eval(expr, values, scope)?;
        let Value::Dict(entries) = v else {
            return Err(typing("The ** operator can only be applied to dictionaries").at(self.code.location(expr)));
        };
        let mut out = Vec::new();
        for (k, v) in entries.iter() {
            out.push((self.symbol(k), v.clone()));
        }
        Ok(out)
    }

    /// Emits the value of an attribute assignment (`SetAttribute.resume` and constructors).
    fn emit_attribute_value(
        &mut self,
        inst: InstanceId,
        attribute: Symbol,
        cell: CellId,
        value: ExprId,
        scope: ScopeId,
        location: Location,
    ) -> R<()> {
        let multi = matches!(self.cells[cell as usize].kind(), CellKind::List);
        let promise = self.get_promise(cell);
        let reqs = if multi {
            let collector =
                self.add_collector(Collector::SetAttr { instance: inst, attr: attribute, next: cell, location });
            self.requires_gradual(value, scope, collector)?
        } else {
            self.requires(value, scope)?
        };
        self.spawn(
            reqs,
            Body::Exec {
                target: cell,
                promise: promise.into(),
                what: Exec::Expr(value),
                scope,
                attr: Some(AttrCtx::new(inst, attribute, location)),
            },
        );
        Ok(())
    }

    fn exec_stmt(&mut self, stmt: StmtId, values: &Values, scope: ScopeId) -> R<()> {
        let p = self.prog();
        let c = self.code();
        let location = p.stmt(stmt).location;
        if let Some(Value::List(ids)) = values.get(&Key::Promises) {
            for id in ids.iter() {
                if let Value::Int(i) = id {
                    let ep = &mut self.eager[*i as usize];
                    ep.fulfilled = true;
                    if let Some(pr) = ep.promise {
                        self.fulfill(pr);
                    }
                }
            }
        }
        match p.stmt(stmt).kind {
            StmtKind::If { cond, then, otherwise } => {
                let c = self.eval(cond, values, scope)?;
                if matches!(c, Value::Unknown) {
                    return Ok(());
                }
                let Value::Bool(b) = c else {
                    return Err(rt(format!(
                        "Invalid value `{}`: the condition for an if statement can only be a boolean expression",
                        self.display_value(&c)
                    ))
                    .at(location));
                };
                let branch = if b { then } else { otherwise };
                let ns = p.block(branch).ns;
                let ns_scope = self.push_scope(Scope::Ns { ns, parent: scope });
                let ctx = self.block_context(branch, ns_scope);
                self.emit_block(branch, ctx)
            }
            StmtKind::For { iterable, .. } => {
                let v = self.eval(iterable, values, scope)?;
                if !matches!(v, Value::List(_) | Value::Unknown) {
                    let hint = match c.expr(iterable).kind {
                        Op::Var(_) | Op::Attr { .. } => {
                            format!(" Hint: '{}' resolves to '{}'.", self.expr_text(iterable), self.display_value(&v))
                        }
                        _ => format!(" Hint: '{}' is not a list.", self.display_value(&v)),
                    };
                    return Err(
                        typing(format!("A for loop can only be applied to lists and relations.{hint}")).at(location)
                    );
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Runs an `implement` for an instance once its condition's inputs are ready; `scope` is
    /// the one the condition was emitted in.
    fn exec_subctor(&mut self, inst: InstanceId, index: u32, values: &Values, scope: ScopeId) -> R<()> {
        let p = self.prog();
        let entity = self.instances[inst as usize].entity;
        let implement = &p.entity(entity).implements[index as usize];
        let condition = match implement.condition {
            None => Value::Bool(true),
            Some(c) => self.eval(c, values, scope)?,
        };
        match condition {
            Value::Unknown | Value::Bool(false) => return Ok(()),
            Value::Bool(true) => {}
            other => {
                return Err(rt(format!(
                    "Invalid value `{}`: the condition for a conditional implementation can only be a boolean expression",
                    self.display_value(&other)
                ))
                .at(implement.location));
            }
        }
        let instance_scope = self.instance_scope(inst);
        for &imp in &implement.implementations {
            if !self.record_implementation(inst, imp) {
                continue;
            }
            let implementation = &p.implementations[imp.index()];
            let ns_scope = self.push_scope(Scope::Ns { ns: implementation.ns, parent: instance_scope });
            let ctx = self.block_context(implementation.body, ns_scope);
            self.emit_block(implementation.body, ctx)?;
        }
        Ok(())
    }

    /// Records that an implementation applies to an instance; false when it already did (an
    /// implementation runs once per instance, however many `implement`s select it).
    #[inline]
    fn record_implementation(&mut self, inst: InstanceId, imp: weft_ir::program::ImplId) -> bool {
        let recorded = &mut self.instances[inst as usize].implementations;
        if recorded.contains(&imp) {
            return false;
        }
        recorded.push(imp);
        true
    }

    fn instance_scope(&mut self, inst: InstanceId) -> ScopeId {
        let existing = self.instances[inst as usize].scope;
        if existing != NONE {
            return existing;
        }
        let s = self.push_scope(Scope::Instance { instance: inst });
        self.instances[inst as usize].scope = s;
        s
    }

    // ----- expression evaluation ----------------------------------------------------------

    /// The requirement key of a read of a variable (see [`Key`]).
    fn var_key(expr: ExprId, name: VarRef) -> Key {
        match name {
            VarRef::Name(symbol) => Key::Name(symbol),
            VarRef::Qualified(..) => Key::Expr(expr),
        }
    }

    fn eval(&mut self, expr: ExprId, values: &Values, scope: ScopeId) -> R<Value> {
        let c = self.code();
        let e = c.expr(expr);
        let location = e.location;
        let result = match &e.kind {
            Op::Const(v) => (*v).clone(),
            Op::Var(name) => values.get(&Self::var_key(expr, *name)).cloned().unwrap_or(Value::NULL),
            Op::Attr { .. }
            | Op::And { .. }
            | Op::Or { .. }
            | Op::Cond { .. }
            | Op::Call { .. }
            | Op::IndexLookup { .. }
            | Op::SelectorLookup { .. }
            | Op::ListComp { .. }
            | Op::IsDefined { .. } => values.get(&Key::Expr(expr)).cloned().unwrap_or(Value::NULL),
            Op::Subscript { map, key } => {
                let m = self.eval(*map, values, scope)?;
                let k = self.eval(*key, values, scope)?;
                self.subscript(m, k).map_err(|e| e.at(location))?
            }
            Op::Not(a) => {
                let v = self.eval(*a, values, scope)?;
                self.negate(v).map_err(|e| e.at(location))?
            }
            Op::Binary { op, lhs, rhs } => {
                let a = self.eval(*lhs, values, scope)?;
                let b = self.eval(*rhs, values, scope)?;
                self.binary(*op, &a, &b).map_err(|e| {
                    let e = e.at(location);
                    self.with_operand_labels(e, &[(*lhs, self.operand_type(&a)), (*rhs, self.operand_type(&b))])
                })?
            }
            Op::List(items) => {
                if let Some(v) = values.get(&Key::Expr(expr)) {
                    v.clone()
                } else {
                    let mut out = Vec::new();
                    for i in items.iter() {
                        match self.eval(*i, values, scope)? {
                            Value::List(inner) => out.extend(inner.iter().cloned()),
                            v => out.push(v),
                        }
                    }
                    Value::List(Arc::from(out))
                }
            }
            Op::Dict(entries) => {
                let mut out: Vec<(Arc<str>, Value)> = Vec::new();
                for (k, v) in entries.iter() {
                    let v = self.eval(*v, values, scope)?;
                    if let Some(slot) = out.iter_mut().find(|(x, _)| x == k) {
                        slot.1 = v;
                    } else {
                        out.push((k.clone(), v));
                    }
                }
                Value::Dict(Arc::from(out))
            }
            Op::Format { template, parts } => {
                // The reference replaces each part's matched text everywhere in the string,
                // one part after the other, so a replacement can create text that a later part
                // matches. The parts are evaluated in order first (the first Unknown makes the
                // string Unknown), then substituted in one pass where that gives the same text.
                let mut part_values: SmallVec<[Value; 4]> = SmallVec::new();
                let mut unknown = false;
                for (_, r) in parts.iter() {
                    let v = self.eval(*r, values, scope)?;
                    match self.interpolated(v, || self.expr_text(*r)).map_err(|e| e.at(location))? {
                        None => {
                            unknown = true;
                            break;
                        }
                        Some(v) => part_values.push(v),
                    }
                }
                if unknown {
                    Value::Unknown
                } else {
                    let rendered: SmallVec<[Cow<'_, str>; 4]> =
                        part_values.iter().map(|v| self.display_value_fmt(v)).collect();
                    let matched: SmallVec<[&str; 4]> = parts.iter().map(|(m, _)| m.as_ref()).collect();
                    let text = substitute_in_one_pass(template, &matched, &rendered).unwrap_or_else(|| {
                        let mut text = template.to_string();
                        for (m, v) in matched.iter().zip(&rendered) {
                            text = text.replace(m, v.as_ref());
                        }
                        text
                    });
                    Value::str(&text)
                }
            }
            Op::FString { template, fields } => {
                let mut kwargs: Vec<(String, Value)> = Vec::new();
                let mut unknown = false;
                for (key, r) in fields.iter() {
                    let v = self.eval(*r, values, scope)?;
                    let Some(v) = self.interpolated(v, || key.trim().to_string()).map_err(|e| e.at(location))? else {
                        unknown = true;
                        break;
                    };
                    kwargs.push((key.to_string(), v));
                }
                if unknown {
                    Value::Unknown
                } else {
                    let render = |v: &Value| self.display_value_fmt(v).into_owned();
                    Value::str(&pyformat::format(template, &kwargs, &render).map_err(|e| e.at(location))?)
                }
            }
            Op::Construct(c) => self.construct(*c, values, scope, location)?,
        };
        if let Some(Value::Int(collector)) = values.get(&Key::Collector(expr)) {
            self.receive_flatten(*collector as CollectorId, result.clone(), location)?;
        }
        Ok(result)
    }

    /// A value as string formatting shows it: as [`Self::display_value`] does, and a string
    /// is lent, not copied.
    fn display_value_fmt<'v>(&self, v: &'v Value) -> Cow<'v, str> {
        self.display_value_with_null(v, "null")
    }

    /// A value as `{{ x }}` and f-string fields take it (the reference's `FormattedString`):
    /// `None` for Unknown, which makes the whole string Unknown; a reference is refused; a
    /// float with an integral value becomes an int. `name` (the field's text, for the error) is
    /// only rendered when there is an error.
    fn interpolated(&self, v: Value, name: impl FnOnce() -> String) -> R<Option<Value>> {
        Ok(match v {
            Value::Unknown => None,
            Value::Reference(_) => {
                return Err(EvalError::new(
                    ErrorKind::UnexpectedReference,
                    format!("Encountered reference in string format for variable `{}`. This is not supported.", name()),
                ));
            }
            // An integral float shows as the int it equals, exactly: `1e300` has 301 digits.
            Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(Value::int_of_float(f)),
            other => Some(other),
        })
    }

    fn expr_text(&self, expr: ExprId) -> String {
        let p = &self.program;
        match self.code.expr(expr).kind {
            Op::Var(VarRef::Name(n)) => p.name(n).to_string(),
            Op::Var(VarRef::Qualified(ns, n)) => format!("{}::{}", p.namespaces[ns.index()].name, p.name(n)),
            Op::Attr { base, name } => format!("{}.{}", self.expr_text(base), p.name(name)),
            _ => "expression".to_string(),
        }
    }

    /// `not v`: Unknown stays Unknown; anything but a boolean is an error (a reference one of
    /// its own kind).
    fn negate(&self, v: Value) -> R<Value> {
        match v {
            Value::Unknown => Ok(Value::Unknown),
            Value::Bool(b) => Ok(Value::Bool(!b)),
            other => {
                let kind = if matches!(other, Value::Reference(_)) {
                    ErrorKind::UnexpectedReference
                } else {
                    ErrorKind::RuntimeException
                };
                Err(EvalError::new(
                    kind,
                    format!("Invalid value `{}`: `not` expects a boolean", self.display_value(&other)),
                ))
            }
        }
    }

    fn subscript(&self, m: Value, k: Value) -> R<Value> {
        if matches!(m, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        let Value::Dict(entries) = &m else {
            return Err(typing(format!(
                "dict lookup is only possible on dicts, {} is not an object",
                self.display_value(&m)
            )));
        };
        if matches!(k, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        let Value::Str(key) = &k else {
            return Err(typing(format!("dict keys must be string, {} is not a string", self.display_value(&k))));
        };
        match entries.iter().find(|(x, _)| x == key) {
            Some((_, v)) => Ok(v.clone()),
            None => Err(EvalError::new(
                ErrorKind::KeyException,
                format!(
                    "key {key} not found in dict, options are [{}]",
                    entries.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>().join(",")
                ),
            )),
        }
    }

    fn binary(&self, op: BinOp, a: &Value, b: &Value) -> R<Value> {
        if op == BinOp::In {
            if matches!(a, Value::Unknown) || matches!(b, Value::Unknown) {
                return Ok(Value::Unknown);
            }
            return match b {
                Value::List(items) => {
                    if items.iter().any(|x| x.py_eq(a)) {
                        Ok(Value::Bool(true))
                    } else if items.iter().any(|x| matches!(x, Value::Unknown)) {
                        Ok(Value::Unknown)
                    } else {
                        Ok(Value::Bool(false))
                    }
                }
                Value::Dict(_) => Value::py_contains(b, a).map(Value::Bool).map_err(|e| self.value_error(e)),
                other => Err(typing(format!(
                    "Operand two of 'in' can only be a list or dict ({})",
                    self.display_value(other)
                ))),
            };
        }
        if matches!(a, Value::Unknown) || matches!(b, Value::Unknown) {
            return Ok(Value::Unknown);
        }
        match op {
            BinOp::Eq => Ok(Value::Bool(a.py_eq(b))),
            BinOp::Ne => Ok(Value::Bool(!a.py_eq(b))),
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => {
                let ord = a.py_compare(b).map_err(|e| self.value_error(e))?;
                Ok(Value::Bool(match op {
                    BinOp::Lt => ord.is_lt(),
                    BinOp::Gt => ord.is_gt(),
                    BinOp::Le => ord.is_le(),
                    _ => ord.is_ge(),
                }))
            }
            _ => {
                let aop = match op {
                    BinOp::Add => ArithOp::Add,
                    BinOp::Sub => ArithOp::Sub,
                    BinOp::Mul => ArithOp::Mul,
                    BinOp::Div => ArithOp::Div,
                    BinOp::Mod => ArithOp::Mod,
                    _ => ArithOp::Pow,
                };
                let repr = |v: &Value| v.repr_with("null", &|i| self.instance_display(i));
                if let (Value::Reference(_), _) | (_, Value::Reference(_)) = (a, b) {
                    return Err(typing(format!(
                        "Unsupported operand type(s) for {}: '{}' ({}) and '{}' ({})",
                        aop.name(),
                        python_type(a),
                        repr(a),
                        python_type(b),
                        repr(b)
                    )));
                }
                value::arith_with(aop, a, b, &repr).map_err(|e| self.value_error(e))
            }
        }
    }

    fn value_error(&self, e: ValueError) -> EvalError {
        match e {
            ValueError::Typing(m) => typing(m),
            ValueError::ZeroDivision(m) => EvalError::new(ErrorKind::ZeroDivisionError, m),
            ValueError::Overflow(m) => EvalError::new(ErrorKind::OverflowError, m),
        }
    }

    // ----- constructors and indexes -------------------------------------------------------

    fn construct(&mut self, ctor_id: CtorId, values: &Values, scope: ScopeId, location: Location) -> R<Value> {
        let p = self.prog();
        let ctor = &p.ctors[ctor_id.index()];
        let entity = ctor.entity;
        // Late arguments: `**dict` and the implicit inverse.
        let mut late: Vec<(Symbol, Value)> = Vec::new();
        for s in &ctor.splats {
            for (k, v) in self.splat(*s, values, scope)? {
                if ctor.explicit.contains(&k) || late.iter().any(|(x, _)| *x == k) {
                    return Err(rt(format!(
                        "The attribute {} is set twice in the constructor call of {}.",
                        self.sym_name(k),
                        ctor.written
                    ))
                    .at(location));
                }
                if !p.entity(entity).slots.iter().any(|(n, _)| *n == k) {
                    return Err(typing(format!("no attribute {} on type {}", self.sym_name(k), p.entity(entity).name))
                        .at(location));
                }
                late.push((k, v));
            }
        }
        let mut inverse: Option<(Symbol, Value)> = None;
        if let Some((inst_expr, attr_name)) = ctor.lhs {
            let lhs = self.eval(inst_expr, values, scope)?;
            if let Value::Instance(li) = lhs {
                let lent = self.instances[li as usize].entity;
                if let Some(attr) = p.entity(lent).slots.iter().find(|s| s.0 == attr_name).map(|s| s.1)
                    && let AttributeKind::Relation(end) = p.attribute(attr).kind
                    && let Some(inv) = end.inverse
                {
                    let inv_attr = p.attribute(inv);
                    let in_index = p.entity(entity).indexes.iter().any(|ix| ix.contains(&inv_attr.name));
                    if !ctor.direct.iter().any(|(n, _)| *n == inv_attr.name)
                        && !late.iter().any(|(n, _)| *n == inv_attr.name)
                        && in_index
                        && p.is_subclass(entity, inv_attr.entity)
                    {
                        inverse = Some((inv_attr.name, Value::Instance(li)));
                    }
                }
            }
        }
        let mut late_args: Vec<(Symbol, Value)> = inverse.into_iter().collect();
        for (k, v) in late {
            if let Some(slot) = late_args.iter_mut().find(|(n, _)| *n == k) {
                slot.1 = v;
            } else {
                late_args.push((k, v));
            }
        }
        let missing: Vec<Symbol> =
            ctor.required_dynamic.iter().filter(|a| !late_args.iter().any(|(n, _)| n == *a)).copied().collect();
        if !missing.is_empty() {
            let mut message = "Invalid Constructor call:".to_string();
            for a in &missing {
                let attr = p.entity(entity).slots.iter().find(|s| s.0 == *a).map(|s| s.1);
                let kind = match attr.map(|x| p.attribute(x).kind) {
                    Some(AttributeKind::Relation(_)) => "relation",
                    _ => "attribute",
                };
                message.push_str(&format!(
                    "\n\t* Missing {kind} '{}'. The {kind} {}.{} is part of an index.",
                    p.name(*a),
                    p.entity(entity).name,
                    p.name(*a)
                ));
            }
            return Err(EvalError::new(ErrorKind::IndexAttributeMissingInConstructorException, message).at(location));
        }
        let mut direct: SmallVec<[(Symbol, Value); 8]> = SmallVec::with_capacity(ctor.direct.len() + late_args.len());
        for (k, v) in &ctor.direct {
            direct.push((*k, self.eval(*v, values, scope)?));
        }
        for (k, v) in &late_args {
            if let Some(slot) = direct.iter_mut().find(|(n, _)| n == k) {
                slot.1 = v.clone();
            } else {
                direct.push((*k, v.clone()));
            }
        }
        let indirect: SmallVec<[(Symbol, ExprId); 8]> =
            ctor.indirect.iter().filter(|(k, _)| !late_args.iter().any(|(n, _)| n == k)).copied().collect();
        // Index lookups: the instances found, by index.
        let mut found: SmallVec<[InstanceId; 2]> = SmallVec::new();
        for index in &p.entity(entity).indexes {
            let params: SmallVec<[(Symbol, Value); 4]> = index
                .iter()
                .map(|a| (*a, direct.iter().find(|(n, _)| n == a).map(|x| x.1.clone()).unwrap_or(Value::NULL)))
                .collect();
            if let Some(obj) = self.lookup_index(entity, &params, None, location).map_err(|e| e.at(location))? {
                if self.instances[obj as usize].entity != entity {
                    return Err(EvalError::new(
                        ErrorKind::DuplicateException,
                        "Type found in index is not an exact match",
                    )
                    .at(location));
                }
                found.push(obj);
            }
        }
        let inst = if let Some(&first) = found.first() {
            if found.iter().any(|i| *i != first) {
                return Err(
                    EvalError::new(ErrorKind::IndexCollisionException, "Inconsistent indexes detected!\n").at(location)
                );
            }
            self.add_location(first, location);
            for (k, v) in direct {
                self.set_attribute(first, k, v, location, true).map_err(|e| e.at(location))?;
            }
            first
        } else {
            let inst = self.new_instance(entity, location);
            for (k, v) in direct {
                self.set_attribute(inst, k, v, location, true).map_err(|e| e.at(location))?;
            }
            self.add_instance(entity, inst).map_err(|e| e.at(location))?;
            inst
        };
        // The hidden variable holding the new instance shares the instance's own `self` cell:
        // both hold the same value and neither is ever set again.
        let self_cell = self.self_cell(inst);
        let self_scope = self.push_scope(Scope::Var { name: ctor.self_name, cell: self_cell, parent: scope });
        for (name, value) in indirect {
            let Some(cell) = self.slot(inst, name) else { continue };
            self.emit_attribute_value(inst, name, cell, value, self_scope, location)?;
        }
        for (i, _) in p.entity(entity).implements.iter().enumerate() {
            self.emit_subctor(inst, i as u32)?;
        }
        Ok(Value::Instance(inst))
    }

    fn emit_subctor(&mut self, inst: InstanceId, index: u32) -> R<()> {
        let p = self.prog();
        let entity = self.instances[inst as usize].entity;
        let implement = &p.entity(entity).implements[index as usize];
        // An unconditional `implement` of implementations without statements (`std::none`)
        // waits for nothing and emits nothing: its task would run later with no effect but
        // recording the implementations, which nothing reads before the end of the
        // evaluation. Recording them now spares a task per instance.
        if implement.condition.is_none()
            && implement.implementations.iter().all(|imp| p.block(p.implementations[imp.index()].body).stmts.is_empty())
        {
            for &imp in &implement.implementations {
                self.record_implementation(inst, imp);
            }
            return Ok(());
        }
        // The condition sees the instance's attributes, then the `implement`'s namespace.
        let (reqs, scope) = match implement.condition {
            None => (Reqs::new(), 0),
            Some(c) => {
                let instance_scope = self.instance_scope(inst);
                let scope = self.push_scope(Scope::Ns { ns: implement.ns, parent: instance_scope });
                (self.requires(c, scope).map_err(|e| e.at(implement.location))?, scope)
            }
        };
        let target = self.sink;
        self.spawn(
            reqs,
            Body::Exec {
                target,
                promise: OptPromise::NONE,
                what: Exec::SubCtor { instance: inst, index },
                scope,
                attr: None,
            },
        );
        Ok(())
    }

    fn new_instance(&mut self, entity: EntityId, location: Location) -> InstanceId {
        let p = self.prog();
        let id = self.instances.len() as InstanceId;
        let first_cell = self.cells.len() as CellId;
        for &(_, attr) in &p.entity(entity).slots {
            let a = p.attribute(attr);
            // The cell's type check is the attribute's, looked up through `link` when set.
            let kind = match a.kind {
                AttributeKind::Value(_) => CellKind::Plain,
                AttributeKind::Relation(r) if r.lower == 1 && r.upper == Some(1) => CellKind::Single,
                AttributeKind::Relation(r) if r.lower == 0 && r.upper == Some(1) => CellKind::Option,
                AttributeKind::Relation(_) => CellKind::List,
            };
            let cid = self.cells.push(Cell::attribute(kind, id, attr)) as CellId;
            if self.cells[cid as usize].is_delayed() && self.can_get(cid) {
                self.queue(cid);
            }
        }
        let self_cell = self.plain_with(Value::Instance(id), Some(location));
        debug_assert_eq!(self_cell, first_cell + p.entity(entity).slots.len() as CellId);
        self.instances.push(Instance {
            entity,
            first_cell,
            location,
            more_locations: NONE,
            scope: NONE,
            implementations: SmallVec::new(),
        });
        id
    }

    fn add_instance(&mut self, entity: EntityId, inst: InstanceId) -> R<()> {
        let p = self.prog();
        self.add_to_index(entity, inst)?;
        for &parent in &p.entity(entity).parents {
            self.add_instance(parent, inst)?;
        }
        Ok(())
    }

    /// The reference's index key: `name=repr(value)` for each attribute, sorted by name and
    /// joined by `, `, written into one string. Only messages and the queue of lookups waiting
    /// for a key need it; finding a key hashes and compares values (`Machine::key_hash`).
    fn index_key(&self, params: &[(Symbol, Value)]) -> String {
        let mut order: SmallVec<[usize; 4]> = (0..params.len()).collect();
        order.sort_by(|&a, &b| self.sym_name(params[a].0).cmp(self.sym_name(params[b].0)));
        let mut key = String::with_capacity(32);
        for (n, &i) in order.iter().enumerate() {
            if n > 0 {
                key.push_str(", ");
            }
            key.push_str(self.sym_name(params[i].0));
            key.push('=');
            params[i].1.write_repr(&mut key, "null");
        }
        key
    }

    /// The hash of an index key. The reference's key is the string [`Self::index_key`]
    /// builds; two keys are the same when the same attributes have values with the same
    /// `repr` ([`key_part_eq`]). The hash is of the attributes in symbol order, which is as
    /// canonical as name order and needs no string.
    fn key_hash(&self, sorted: &[(Symbol, Value)]) -> u64 {
        let mut state = self.index_hasher.build_hasher();
        for (name, value) in sorted {
            name.hash(&mut state);
            hash_key_part(value, &mut state);
        }
        state.finish()
    }

    /// The instance in `entity`'s index whose key has the values `sorted` (in symbol order, of
    /// hash `hash`).
    fn find_indexed(&self, entity: EntityId, hash: u64, sorted: &[(Symbol, Value)]) -> Option<InstanceId> {
        self.entities[entity.index()]
            .index
            .find(hash, |e| e.hash == hash && self.has_key(entity, e, sorted))
            .map(|e| e.instance)
    }

    /// Whether an indexed instance's key has the values `sorted`: its index is on the same
    /// attributes, and its values for them, set before it was indexed and never changed
    /// since, have the same `repr`.
    fn has_key(&self, entity: EntityId, entry: &IndexEntry, sorted: &[(Symbol, Value)]) -> bool {
        let p = self.prog();
        let attributes = &p.entity(entity).indexes[entry.index as usize];
        attributes.len() == sorted.len()
            && sorted.iter().all(|(name, value)| {
                if !attributes.contains(name) {
                    return false;
                }
                let Some(cell) = self.slot(entry.instance, *name) else { return false };
                let c = &self.cells[cell as usize];
                match c.kind() {
                    CellKind::Plain | CellKind::Single | CellKind::Option => {
                        key_part_eq(c.value().as_deref().unwrap_or(&Value::NULL), value)
                    }
                    _ => key_part_eq(&self.peek(cell).unwrap_or(Value::NULL), value),
                }
            })
    }

    fn add_to_index(&mut self, entity: EntityId, inst: InstanceId) -> R<()> {
        let p = self.prog();
        for (index_no, index) in p.entity(entity).indexes.iter().enumerate() {
            let mut params: SmallVec<[(Symbol, Value); 4]> = SmallVec::new();
            let mut ok = true;
            for a in index {
                match self.slot(inst, *a) {
                    Some(c) if self.is_ready(c) => {
                        let v = self.peek(c).unwrap_or(Value::NULL);
                        if let Value::Reference(_) = v {
                            return Err(typing(format!(
                                "Invalid value `{}` in index for attribute {}: references can not be used in indexes.",
                                self.display_value(&v),
                                p.name(*a)
                            )));
                        }
                        params.push((*a, v));
                    }
                    _ => ok = false,
                }
            }
            if !ok {
                continue;
            }
            params.sort_unstable_by_key(|(name, _)| name.as_u32());
            let hash = self.key_hash(&params);
            match self.find_indexed(entity, hash, &params) {
                Some(other) if other != inst => {
                    return Err(EvalError::new(
                        ErrorKind::DuplicateException,
                        format!("Duplicate key in index. {}", self.index_key(&params)),
                    ));
                }
                Some(_) => {}
                None => {
                    let entry = IndexEntry { hash, instance: inst, index: index_no as u32 };
                    self.entities[entity.index()].index.insert_unique(hash, entry, |e| e.hash);
                }
            }
            // Most models never wait for a key: then no key string is built.
            if self.entities[entity.index()].index_queue.is_empty() {
                continue;
            }
            let key = self.index_key(&params);
            let queued = self.entities[entity.index()].index_queue.remove(&key);
            if let Some((_, waiting)) = queued {
                for (target, location) in waiting {
                    self.set_cell(target, Value::Instance(inst), location, true)?;
                }
            }
        }
        Ok(())
    }

    fn lookup_index(
        &mut self,
        entity: EntityId,
        params: &[(Symbol, Value)],
        target: Option<CellId>,
        location: Location,
    ) -> R<Option<InstanceId>> {
        let p = self.prog();
        let mut seen: SmallVec<[Symbol; 4]> = SmallVec::new();
        for (k, _) in params {
            if seen.contains(k) {
                return Err(rt(format!("Attribute {} provided twice in index lookup", self.sym_name(*k))));
            }
            seen.push(*k);
        }
        // The same set of attributes (`seen` has no duplicates).
        let has_index = p.entity(entity).indexes.iter().any(|ix| {
            ix.len() == seen.len() && ix.iter().all(|a| seen.contains(a)) && seen.iter().all(|a| ix.contains(a))
        });
        if !has_index {
            let shown: Vec<String> = params
                .iter()
                .map(|(k, v)| {
                    format!("('{}', {})", self.sym_name(*k), v.repr_with("null", &|i| self.instance_display(i)))
                })
                .collect();
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!("No index defined on {} for this lookup: [{}]", p.entity(entity).name, shown.join(", ")),
            ));
        }
        let mut coerced: SmallVec<[(Symbol, Value); 4]> = SmallVec::new();
        for (k, v) in params {
            if let Value::Reference(_) = v {
                return Err(typing(format!(
                    "Invalid value `{}` in index for attribute {}: references can not be used in indexes.",
                    self.display_value(v),
                    p.name(*k)
                )));
            }
            let attr = p.entity(entity).slots.iter().find(|s| s.0 == *k).map(|s| s.1);
            let v = match attr.map(|a| p.attribute(a).kind) {
                Some(AttributeKind::Value(t)) if t.base == BaseType::Primitive(Primitive::Float) && !t.list => {
                    match v {
                        null @ Value::Null(_) if t.nullable => null.clone(),
                        other => cast(Primitive::Float, std::slice::from_ref(other))?,
                    }
                }
                _ => v.clone(),
            };
            coerced.push((*k, v));
        }
        coerced.sort_unstable_by_key(|(name, _)| name.as_u32());
        let found = self.find_indexed(entity, self.key_hash(&coerced), &coerced);
        match target {
            None => Ok(found),
            Some(t) => {
                if let Some(inst) = found {
                    self.set_cell(t, Value::Instance(inst), location, true)?;
                } else {
                    let key = self.index_key(&coerced);
                    let state = &mut self.entities[entity.index()];
                    let order = state.queued_keys;
                    let entry = state.index_queue.entry(key).or_insert_with(|| (order, Vec::new()));
                    if entry.1.is_empty() {
                        state.queued_keys += 1;
                    }
                    entry.1.push((t, location));
                }
                Ok(None)
            }
        }
    }

    /// Unmatched index lookups, per entity, for the final checks.
    pub fn pending_lookups(&self, entity: EntityId) -> Vec<(String, Location)> {
        let mut keys: Vec<(&String, &QueuedLookups)> = self.entities[entity.index()].index_queue.iter().collect();
        keys.sort_by_key(|(_, (order, _))| *order);
        keys.into_iter().flat_map(|(k, (_, ws))| ws.iter().map(move |(_, l)| (k.clone(), *l))).collect()
    }
}

/// The source an instruction was lowered from, operands included
/// ([`weft_ir::program::source_extent`] on the bytecode, as an artifact keeps no IR).
fn operand_extent(c: &Code, expr: ExprId) -> Location {
    weft_ir::program::source_extent(expr, &|e| c.location(e), &|e| match c.expr(e).kind {
        Op::Binary { lhs, rhs, .. } | Op::And { lhs, rhs } | Op::Or { lhs, rhs } => Some((lhs, rhs)),
        Op::Not(inner) => Some((inner, inner)),
        _ => None,
    })
}

/// The marker a filtered comprehension element leaves in the results.
const FILTERED: &str = "\u{0}weft-filtered\u{0}";

/// How many constraint results `Machine::constraint_memo` keeps at most: enough for the
/// values models repeat, and bounded for models whose values are all different.
const CONSTRAINT_MEMO_LIMIT: usize = 1 << 16;

/// A value a constraint result is memoized for: the kinds whose equality is identity of the
/// value as a constraint sees it. (`1 == 1.0` and `1 == true` in the language, but a
/// constraint may tell them apart, so each kind is its own key.)
#[derive(Clone, PartialEq, Eq, Hash)]
enum MemoValue {
    Str(Arc<str>),
    Int(i64),
    Bool(bool),
}

impl MemoValue {
    fn of(value: &Value) -> Option<MemoValue> {
        match value {
            Value::Str(s) => Some(MemoValue::Str(s.clone())),
            Value::Int(i) => Some(MemoValue::Int(*i)),
            Value::Bool(b) => Some(MemoValue::Bool(*b)),
            _ => None,
        }
    }
}

/// Whether two values are the same part of an index key: whether their `repr`s, which the
/// reference's keys are made of, are equal. The common kinds compare directly: values of
/// different kinds never have equal `repr`s (strings are quoted, instances are `<instance N>`,
/// an `int` outside the `i64` range is a big integer, floats always have a point, an
/// exponent, `inf` or `nan`), so only the other kinds compare their `repr`s.
fn key_part_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null(_), Value::Null(_)) => true,
        (Value::Instance(x), Value::Instance(y)) => x == y,
        _ if keyed_by_repr(a) && keyed_by_repr(b) => a.py_repr() == b.py_repr(),
        _ => false,
    }
}

/// The kinds [`key_part_eq`] compares by `repr`.
fn keyed_by_repr(v: &Value) -> bool {
    !matches!(v, Value::Str(_) | Value::Int(_) | Value::Bool(_) | Value::Null(_) | Value::Instance(_))
}

/// Hashes a key part consistently with [`key_part_eq`].
fn hash_key_part(v: &Value, state: &mut impl Hasher) {
    match v {
        Value::Str(s) => {
            state.write_u8(0);
            s.hash(state);
        }
        Value::Int(i) => {
            state.write_u8(1);
            state.write_i64(*i);
        }
        Value::Bool(b) => {
            state.write_u8(2);
            state.write_u8(*b as u8);
        }
        Value::Null(_) => state.write_u8(3),
        Value::Instance(i) => {
            state.write_u8(4);
            state.write_u32(*i);
        }
        other => {
            state.write_u8(5);
            other.py_repr().hash(state);
        }
    }
}

fn python_type(v: &Value) -> &str {
    match v {
        Value::Null(_) => "NoneValue",
        Value::Reference(r) => &r.class,
        other => other.type_name(),
    }
}

/// What the reference's `type(value)` prints (`<class 'int'>`): its own null and Unknown are
/// classes of its `inmanta.execute.util` module, a reference's class is its module's.
fn python_class(v: &Value) -> String {
    match v {
        Value::Null(_) => "<class 'inmanta.execute.util.NoneValue'>".to_string(),
        Value::Unknown => "<class 'inmanta.execute.util.Unknown'>".to_string(),
        Value::Reference(r) => format!("<class '{}.{}'>", r.module, r.class),
        other => format!("<class '{}'>", other.type_name()),
    }
}

/// `{{x}}` interpolation in one pass: each matched span of `template` becomes the rendered
/// value of the first part that matched the same text. This equals the reference's sequence
/// of `str.replace` calls when no rendered value holds a brace and every brace of the template
/// lies in a matched span (a span is `{{`, a name without braces, `}}`): replacements then can
/// neither create nor split a span, so each replace call hits exactly the spans with its text.
/// `None` when those conditions do not hold, for the caller to replace part by part.
fn substitute_in_one_pass<S: AsRef<str>>(template: &str, matched: &[&str], rendered: &[S]) -> Option<String> {
    let has_brace = |s: &str| s.bytes().any(|b| b == b'{' || b == b'}');
    if rendered.iter().any(|v| has_brace(v.as_ref())) {
        return None;
    }
    let mut out = String::with_capacity(template.len() + rendered.iter().map(|v| v.as_ref().len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        // A span starts with `{{` and ends at the first `}`, which must start its `}}`.
        let close = rest.find('}')?;
        let span = rest.get(..close + 2)?;
        if !span.starts_with("{{") || !span.ends_with("}}") || has_brace(&span[2..span.len() - 2]) {
            return None;
        }
        let part = matched.iter().position(|m| *m == span)?;
        out.push_str(rendered[part].as_ref());
        rest = &rest[span.len()..];
    }
    out.push_str(rest);
    Some(out)
}

/// Whether a typedef's pattern matches: `engine` is the pattern as lowering translated and
/// anchored it (Python's `re.match`), already validated by the frontend.
fn regex_match(engine: &str, text: &str) -> bool {
    thread_local! {
        static CACHE: std::cell::RefCell<HashMap<String, Option<fancy_regex::Regex>>> = Default::default();
    }
    let matches = |re: &Option<fancy_regex::Regex>| re.as_ref().is_some_and(|re| re.is_match(text).unwrap_or(false));
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        // Looked up by `&str`, once: every typedef check passes here, and only the first one
        // of each pattern needs an owned key.
        if let Some(re) = c.get(engine) {
            return matches(re);
        }
        let re = fancy_regex::Regex::new(engine).ok();
        let matched = matches(&re);
        c.insert(engine.to_string(), re);
        matched
    })
}

/// A primitive type used as a function: `int("1")`.
fn cast(p: Primitive, args: &[Value]) -> R<Value> {
    if args.len() != 1 {
        return Err(rt(format!(
            "Illegal arguments {}: type cast expects exactly 1 argument",
            args.iter().map(|a| a.py_repr()).collect::<Vec<_>>().join(",")
        )));
    }
    let v = &args[0];
    let fail = || rt(format!("Failed to cast '{}' to {}", v.py_str(), p.name()));
    Ok(match p {
        Primitive::String => match v {
            Value::Bool(b) => Value::str(if *b { "true" } else { "false" }),
            other => Value::str(&other.py_str()),
        },
        Primitive::Int => match v {
            Value::Bool(b) => Value::Int(*b as i64),
            Value::Int(_) | Value::BigInt(_) => v.clone(),
            Value::Float(f) => {
                if !f.is_finite() {
                    return Err(fail());
                }
                Value::int_of_float(f.trunc())
            }
            Value::Str(s) => match s.trim().parse::<num_bigint::BigInt>() {
                Ok(i) => Value::int(i),
                Err(_) => return Err(fail()),
            },
            _ => return Err(fail()),
        },
        Primitive::Float => match v {
            Value::Float(_) => v.clone(),
            Value::Str(s) => match s.trim().parse::<f64>() {
                Ok(f) => Value::Float(f),
                Err(_) => return Err(fail()),
            },
            other => match other.as_f64() {
                Some(f) => Value::Float(f),
                None => return Err(fail()),
            },
        },
        Primitive::Number => match v {
            Value::Int(_) | Value::BigInt(_) => v.clone(),
            Value::Bool(b) => Value::Float(*b as i64 as f64),
            Value::Float(_) => v.clone(),
            Value::Str(s) => match s.trim().parse::<f64>() {
                Ok(f) => Value::Float(f),
                Err(_) => return Err(fail()),
            },
            _ => return Err(fail()),
        },
        Primitive::Bool => match v {
            Value::Null(_) => Value::Bool(false),
            other => Value::Bool(other.truthy()),
        },
        Primitive::List | Primitive::Dict => return Err(fail()),
    })
}

mod pyformat {
    //! Python's `str.format` for f-strings: named fields, conversions and format specs.

    use weft_ir::diagnostic::ErrorKind;
    use weft_ir::format_spec;
    use weft_ir::value::Value;

    use super::{EvalError, rt};

    pub fn format(
        template: &str,
        kwargs: &[(String, Value)],
        render: &dyn Fn(&Value) -> String,
    ) -> Result<String, EvalError> {
        let chars: Vec<char> = template.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '{' {
                if chars.get(i + 1) == Some(&'{') {
                    out.push('{');
                    i += 2;
                    continue;
                }
                // Find the matching close brace, allowing nested fields in the spec.
                let mut depth = 1;
                let mut j = i + 1;
                while j < chars.len() && depth > 0 {
                    match chars[j] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                if depth != 0 {
                    return Err(rt("Invalid f-string: Single '{' encountered in format string"));
                }
                let field: String = chars[i + 1..j - 1].iter().collect();
                out.push_str(&field_value(&field, kwargs, render)?);
                i = j;
            } else if c == '}' {
                if chars.get(i + 1) == Some(&'}') {
                    out.push('}');
                    i += 2;
                    continue;
                }
                return Err(rt("Invalid f-string: Single '}' encountered in format string"));
            } else {
                out.push(c);
                i += 1;
            }
        }
        Ok(out)
    }

    fn field_value(
        field: &str,
        kwargs: &[(String, Value)],
        render: &dyn Fn(&Value) -> String,
    ) -> Result<String, EvalError> {
        let (name_conv, spec) = match split_top(field, ':') {
            Some((a, b)) => (a, Some(b)),
            None => (field, None),
        };
        let (name, conversion) = match name_conv.rsplit_once('!') {
            Some((n, c)) => (n, Some(c)),
            None => (name_conv, None),
        };
        if name.is_empty() {
            return Err(rt(
                "f-strings do not support positional substitutions via '{}', use variable or attribute keys instead",
            ));
        }
        let value = kwargs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| rt(format!("Invalid key in f-string: ''{name}''")))?;
        let spec = match spec {
            Some(s) => format(s, kwargs, render)?,
            None => String::new(),
        };
        let text_value = match conversion {
            Some("r") => Value::str(&value.repr_with_null("null")),
            Some("s") => Value::str(&render(&value)),
            Some(other) => return Err(rt(format!("Invalid f-string: Unknown conversion specifier {other}"))),
            None => value,
        };
        apply_spec(&text_value, &spec, render)
    }

    fn split_top(s: &str, sep: char) -> Option<(&str, &str)> {
        let mut depth = 0;
        for (i, c) in s.char_indices() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                c if c == sep && depth == 0 => return Some((&s[..i], &s[i + 1..])),
                _ => {}
            }
        }
        None
    }

    /// The format spec mini-language is Python's, shared with `std::format`. The reference
    /// turns the `ValueError` of a bad spec into an "Invalid f-string" error; any other Python
    /// exception (the `TypeError` of a spec for a value with no format of its own, the
    /// `OverflowError` of a float too large) escapes raw.
    fn apply_spec(v: &Value, spec: &str, render: &dyn Fn(&Value) -> String) -> Result<String, EvalError> {
        match format_spec::format_value(v, spec) {
            Some(Ok(text)) => Ok(text),
            Some(Err(e)) if e.class == "OverflowError" => Err(EvalError::new(ErrorKind::OverflowError, e.message)),
            Some(Err(e)) => Err(rt(format!("Invalid f-string: {}", e.message))),
            None if spec.is_empty() => Ok(render(v)),
            None => Err(EvalError::new(
                ErrorKind::TypeError,
                format!("unsupported format string passed to {}.__format__", v.type_name()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::sync::Arc;

    use weft_ir::value::Value;

    use super::{
        Cell, CellKind, PackedType, Table, WaitList, WaitNodes, hash_key_part, key_part_eq, substitute_in_one_pass,
    };

    /// A cell gives back every kind of value it was given, and owns exactly one count of a
    /// shared value: reading it borrows, cloning it counts one more, replacing or dropping the
    /// cell releases it.
    #[test]
    fn cells_keep_values_and_their_counts() {
        let text: Arc<str> = Arc::from("text");
        let items: Arc<[Value]> = Arc::from(vec![Value::Int(1), Value::Str(text.clone())]);
        let key: Arc<str> = Arc::from("k");
        let entries: Arc<[(Arc<str>, Value)]> = Arc::from(vec![(key, Value::Float(f64::NAN))]);
        let big: Arc<num_bigint::BigInt> = Arc::new(num_bigint::BigInt::from(i64::MAX) * 4);
        let reference = Arc::new(weft_ir::value::Reference {
            class: "EnvironmentReference".into(),
            module: "inmanta_plugins.std".into(),
            args: vec![("name".into(), Value::str("HOME"))],
        });
        let values = [
            Value::Null(weft_ir::value::NullId(weft_ir::value::NullId::FIRST_FRESH + 5)),
            Value::Bool(true),
            Value::Int(i64::MIN),
            Value::BigInt(big.clone()),
            Value::Float(-0.0),
            Value::Str(text.clone()),
            Value::Str(Arc::from("")),
            Value::List(items.clone()),
            Value::Dict(entries.clone()),
            Value::Instance(u32::MAX),
            Value::Unknown,
            Value::Reference(reference.clone()),
        ];
        for value in &values {
            let mut cell = Cell::new(CellKind::Plain);
            assert!(cell.value().is_none());
            cell.set_value(value.clone());
            assert_eq!(format!("{:?}", *cell.value().expect("a value")), format!("{value:?}"));
            assert_eq!(format!("{:?}", cell.value_cloned().expect("a value")), format!("{value:?}"));
            assert_eq!(cell.location_index(), Cell::NO_LOCATION);
            cell.set_location_index(7);
            assert_eq!(format!("{:?}", cell.take_value().expect("a value")), format!("{value:?}"));
            assert!(cell.value().is_none());
            assert_eq!(cell.location_index(), 7);
        }
        let before = Arc::strong_count(&text);
        let mut cell = Cell::new(CellKind::Plain);
        cell.set_value(Value::Str(text.clone()));
        assert_eq!(Arc::strong_count(&text), before + 1);
        {
            let _borrowed = cell.value();
            assert_eq!(Arc::strong_count(&text), before + 1);
            let cloned = cell.value_cloned();
            assert_eq!(Arc::strong_count(&text), before + 2);
            drop(cloned);
        }
        cell.set_value(Value::List(items.clone()));
        assert_eq!(Arc::strong_count(&text), before);
        let list_count = Arc::strong_count(&items);
        drop(cell);
        assert_eq!(Arc::strong_count(&items), list_count - 1);
        drop(values);
        assert_eq!(Arc::strong_count(&big), 1);
        assert_eq!(Arc::strong_count(&reference), 1);
        assert_eq!(Arc::strong_count(&entries), 1);
    }

    /// Index key parts are equal exactly when their `repr`s are, which is how the reference
    /// compares keys, and equal parts hash alike.
    #[test]
    fn key_parts_compare_as_their_reprs() {
        let values = [
            Value::NULL,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(1),
            Value::Int(-1),
            Value::Float(1.0),
            Value::Float(-0.0),
            Value::Float(0.0),
            Value::Float(f64::NAN),
            Value::Float(-f64::NAN),
            Value::Float(f64::INFINITY),
            Value::int(num_bigint::BigInt::from(i64::MAX) * 4),
            Value::str("1"),
            Value::str("True"),
            Value::str("None"),
            Value::str("a'b"),
            Value::Instance(1),
            Value::Instance(2),
            Value::List(Arc::from(vec![Value::Int(1), Value::str("x")])),
            Value::List(Arc::from(vec![Value::Int(1), Value::str("x")])),
            Value::List(Arc::from(vec![Value::Float(1.0), Value::str("x")])),
            Value::Dict(Arc::from(vec![(Arc::from("k"), Value::Instance(1))])),
            Value::Unknown,
        ];
        let hasher = hashbrown::DefaultHashBuilder::default();
        let hash = |v: &Value| {
            let mut state = hasher.build_hasher();
            hash_key_part(v, &mut state);
            std::hash::Hasher::finish(&state)
        };
        for a in &values {
            for b in &values {
                let same = a.py_repr() == b.py_repr();
                assert_eq!(key_part_eq(a, b), same, "{a:?} and {b:?}");
                if same {
                    assert_eq!(hash(a), hash(b), "{a:?} and {b:?}");
                }
            }
        }
    }

    /// Waiter lists release their waiters in registration order, whatever the interleaving
    /// of lists sharing the node arena and the reuse of freed nodes.
    #[test]
    fn wait_lists_are_fifo() {
        let mut nodes = WaitNodes::default();
        let (mut a, mut b) = (WaitList::EMPTY, WaitList::EMPTY);
        for round in 0..3u32 {
            for i in 0..5 {
                nodes.push(&mut a, round * 100 + i);
                nodes.push(&mut b, round * 100 + 50 + i);
            }
            let mut list = std::mem::replace(&mut a, WaitList::EMPTY);
            let drained: Vec<u32> = std::iter::from_fn(|| nodes.pop(&mut list)).collect();
            assert_eq!(drained, (0..5).map(|i| round * 100 + i).collect::<Vec<_>>());
            assert!(nodes.pop(&mut list).is_none());
        }
        let drained: Vec<u32> = std::iter::from_fn(|| nodes.pop(&mut b)).collect();
        let expected: Vec<u32> = (0..3).flat_map(|round| (0..5).map(move |i| round * 100 + 50 + i)).collect();
        assert_eq!(drained, expected);
    }

    /// A cell's packed word keeps its kind, flags and index apart.
    #[test]
    fn cell_fields_share_one_word() {
        for kind in &CellKind::ALL[..7] {
            let mut cell = Cell::new(*kind);
            assert_eq!(cell.kind(), *kind);
            assert_eq!(cell.tracks_promises(), cell.is_delayed());
            cell.set_has_value(true);
            cell.set_queued(true);
            cell.flag(Cell::LISTENED, true);
            let last_entity = PackedType::entity(weft_ir::program::EntityId(super::MAX_ENTITIES as u32 - 1));
            if *kind == CellKind::Plain {
                cell.set_ty(&Table::new(), last_entity);
                assert_eq!(cell.ty(&Table::new()), last_entity);
            }
            cell.set_tracks_promises(false);
            assert_eq!(cell.kind(), *kind);
            assert!(cell.has_value() && cell.queued() && !cell.tracks_promises() && cell.is_set(Cell::LISTENED));
        }
        let attr = weft_ir::program::AttrId(super::MAX_ATTRIBUTES as u32 - 1);
        let mut exts = Table::new();
        let mut cell = Cell::attribute(CellKind::List, 7, attr);
        cell.set_has_value(true);
        cell.set_location_index(Cell::NO_LOCATION - 1);
        cell.set_value(Value::Int(3));
        assert_eq!(cell.owner(&exts), Some((7, attr)));
        assert_eq!(cell.ty(&exts), PackedType::FROM_OWNER);
        assert_eq!(cell.kind(), CellKind::List);
        // An extension takes the owner over, and the location and value stay as they were.
        assert_eq!(cell.ext_index(), None);
        let ext = cell.ext_or_make(&mut exts);
        assert_eq!((ext, cell.ext_or_make(&mut exts), exts.len()), (0, 0, 1));
        assert_eq!(cell.owner(&exts), Some((7, attr)));
        assert_eq!(cell.ty(&exts), PackedType::FROM_OWNER);
        assert_eq!(cell.location_index(), Cell::NO_LOCATION - 1);
        assert_eq!(format!("{:?}", *cell.value().expect("a value")), "Int(3)");
        cell.set_location_index(5);
        assert_eq!((cell.ext_index(), cell.location_index()), (Some(0), 5));
        // A proxy's target, with and without an extension.
        let mut proxy = Cell::new(CellKind::Proxy);
        assert_eq!((proxy.target(&exts), proxy.owner(&exts)), (None, None));
        proxy.set_link(&mut exts, 11);
        assert_eq!(proxy.target(&exts), Some(11));
        assert_eq!(proxy.ext_or_make(&mut exts), 1);
        assert_eq!(proxy.target(&exts), Some(11));
        proxy.set_link(&mut exts, 12);
        assert_eq!((proxy.target(&exts), proxy.owner(&exts)), (Some(12), None));
    }

    /// The `{{name}}` spans of a template as the frontend finds them (left to right, no
    /// overlap): `{{`, optional spaces, name characters, optional spaces, `}}`.
    fn spans(template: &str) -> Vec<&str> {
        let b = template.as_bytes();
        let mut found = Vec::new();
        let mut i = 0;
        while i + 1 < b.len() {
            if &b[i..i + 2] == b"{{" {
                let mut j = i + 2;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                let name = j;
                while j < b.len() && b[j].is_ascii_alphabetic() {
                    j += 1;
                }
                let named = j > name;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                if named && template[j..].starts_with("}}") {
                    found.push(&template[i..j + 2]);
                    i = j + 2;
                    continue;
                }
            }
            i += 1;
        }
        found
    }

    /// The one-pass substitution, where it applies, gives what the reference's sequence of
    /// `str.replace` calls gives: checked over every template of up to eight characters from
    /// an alphabet of braces, a name letter and a space, with values with and without braces.
    #[test]
    fn one_pass_substitution_agrees_with_replacing_part_by_part() {
        let alphabet = ['{', '}', 'a', ' '];
        let value_sets: [&[&str]; 4] =
            [&["x", "yy", "", "z"], &["{{a}}", "x", "a", "b"], &["}", "{", "a", "x"], &["a", "a}}", "{{", "q"]];
        let mut applied = 0;
        for len in 0..=8u32 {
            for code in 0..4usize.pow(len) {
                let mut n = code;
                let template: String = (0..len)
                    .map(|_| {
                        let c = alphabet[n % 4];
                        n /= 4;
                        c
                    })
                    .collect();
                let matched = spans(&template);
                for values in &value_sets {
                    let rendered: Vec<String> =
                        (0..matched.len()).map(|i| values[i % values.len()].to_string()).collect();
                    let mut expected = template.clone();
                    for (m, v) in matched.iter().zip(&rendered) {
                        expected = expected.replace(m, v);
                    }
                    if let Some(text) = substitute_in_one_pass(&template, &matched, &rendered) {
                        applied += 1;
                        assert_eq!(text, expected, "template {template:?}, values {rendered:?}");
                    }
                }
            }
        }
        assert!(applied > 2_000, "the one-pass path applied to only {applied} cases");
    }
}
