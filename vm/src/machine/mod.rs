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

use cell::*;
pub use cell::{Cell, CellExt, CellKind, Items};
pub(crate) use cell::{MAX_ATTRIBUTES, MAX_ENTITIES};

// The machine's methods, by what they work on. The types they share, the machine's fields and
// its construction are here; each module adds one `impl Machine` block.
mod cell;
mod constructors;
mod emission;
mod eval;
mod execution;
mod free_slots;
mod listeners;
mod pyformat;
mod scopes;
mod setting;
mod spilled;
#[cfg(test)]
mod tests;
mod typecheck;
mod values;
mod waiting;

pub type CellId = u32;
pub type WaiterId = u32;
pub type ScopeId = u32;
pub type CollectorId = u32;
pub type PromiseId = u32;
pub type InstanceId = u32;

/// The place of a resolved hook in the run queue (see `Machine::resumptions`). No task slot
/// has this id: four billion live tasks would take 350 GB of task slots.
pub const RESUMPTION: WaiterId = WaiterId::MAX;

/// How many cells a block of `Machine::instance_blocks` covers: a few instances' worth, so
/// that finding a cell's owner searches a handful of instances, for 4 bytes per 64 cells.
const OWNER_BLOCK: usize = 64;

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

    /// Locates the error at `location` even if it has a place already, which is kept as where
    /// it arose: the reference's `RawUnit`, which runs a list comprehension's helper, puts the
    /// errors of what the helper emits at the comprehension, whatever placed them before.
    fn relocated(mut self, location: Location) -> Self {
        let previous = self.location.replace(location);
        self.provisional = false;
        if let Some(previous) = previous.filter(|&previous| previous != location) {
            self.arose = Some(previous);
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
/// ever calls it through `&mut`. It is `Any` so that the runtime can take its own host back
/// from a machine that finished ([`Machine::take_host`]).
pub trait Host: std::any::Any + Send + Sync {
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

    /// What plugins wrote to their error stream so far (the runtime's Python plugins' warnings
    /// and messages), for the caller to show.
    fn take_messages(&mut self) -> Vec<String> {
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

const NONE: u32 = u32::MAX;

/// How deep a list or dict may nest in an attribute's value: the parser's limit on nesting in
/// the source. The reference fails with a `RecursionError` somewhat before this depth.
const MAX_VALUE_DEPTH: usize = 1000;

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

    /// The index of a location: from the cache when it holds it (nearly always), inlined into
    /// every set, so that the hit costs a dozen instructions and no call; called out of line,
    /// the hit's register saves and restores were half of its cost.
    #[inline(always)]
    fn intern(&mut self, location: Location) -> u32 {
        let slot = Self::recent_slot(&location);
        let cached = self.recent[slot];
        if cached != NONE && self.list.get(cached as usize) == Some(&location) {
            return cached;
        }
        self.intern_missed(location, slot)
    }

    /// [`Self::intern`] when the cache does not hold the location.
    #[cold]
    #[inline(never)]
    fn intern_missed(&mut self, location: Location, slot: usize) -> u32 {
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

/// One attribute cell of a new instance, worked out once per entity from the program rather
/// than for every instance: constructing an instance looked up each attribute's kind and
/// bounds, about a hundred instructions per attribute.
struct InstanceCellPlan {
    attr: AttrId,
    kind: CellKind,
    /// Whether the cell could be frozen as soon as it exists, so that it is queued for the
    /// scheduler at once (`Machine::can_get` of an empty cell): a `[0:1]` end, and a
    /// multi-valued end without a lower bound.
    queued_at_birth: bool,
    /// Whether the attribute is named `self`. The reference's instance replaces the slot of
    /// that name with a variable holding the instance itself, whatever the attribute's type or
    /// multiplicity: reading it gives the instance, it is never incomplete, and any other value
    /// set to it (a default, an argument, an assignment) is a second value.
    holds_instance: bool,
}

impl InstanceCellPlan {
    fn for_entity(
        program: &Program,
        entity: &weft_ir::program::Entity,
        self_name: Option<Symbol>,
    ) -> Box<[InstanceCellPlan]> {
        entity
            .slots
            .iter()
            .map(|&(name, attr)| {
                if Some(name) == self_name {
                    return InstanceCellPlan {
                        attr,
                        kind: CellKind::Plain,
                        queued_at_birth: false,
                        holds_instance: true,
                    };
                }
                let (kind, queued_at_birth) = match program.attribute(attr).kind {
                    AttributeKind::Value(_) => (CellKind::Plain, false),
                    AttributeKind::Relation(r) if r.lower == 1 && r.upper == Some(1) => (CellKind::Single, false),
                    AttributeKind::Relation(r) if r.lower == 0 && r.upper == Some(1) => (CellKind::Option, true),
                    AttributeKind::Relation(r) => (CellKind::List, r.lower <= 0),
                };
                InstanceCellPlan { attr, kind, queued_at_birth, holds_instance: false }
            })
            .collect()
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

/// A key in a task's requirement table, in one word: its kind in the high three bits and an
/// index in the other 29, so that a requirement is 8 bytes and a task slot's two inline ones
/// take 24 with their length (see [`Waiter`]). The verifier keeps instructions and names
/// within 29 bits (`MAX_KEY_INDEX`). A variable of another namespace (`ns::x`) is keyed by
/// its expression instead of by its two-word name: every read of it in one expression finds
/// the same cell, so one entry per read holds the same value that one entry per name would.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key(u32);

/// The largest index a [`Key`] holds.
pub(crate) const MAX_KEY_INDEX: u32 = (1 << 29) - 1;

impl Key {
    const KIND_EXPR: u32 = 0;
    const KIND_NAME: u32 = 1;
    const KIND_COLLECTOR: u32 = 2;
    const KIND_PROMISES: u32 = 3;
    /// A requirement a task adds for itself, or (with [`Key::INDEX_BIT`]) a comprehension's
    /// result.
    const KIND_EXTRA: u32 = 4;
    /// The result of an operator that a sub-task computes into a cell of its own, made for
    /// the one task that reads it (`Machine::new_temporary`).
    const KIND_TEMPORARY: u32 = 5;
    /// Not a requirement: in a task slot, the task has none (see `Waiter::requirement`).
    const KIND_NONE: u32 = 6;
    /// Not a requirement: in a task slot, the task's requirements are a list in
    /// `Machine::spilled_requirements`, at the index the slot has for a cell, in the table
    /// for lists of the length the payload holds (0 for the longest, see `spilled`).
    const KIND_SPILLED: u32 = 7;
    const KIND_SHIFT: u32 = 29;

    /// A task slot's requirement when its task has none.
    const NONE: Key = Key::new(Self::KIND_NONE, 0);

    #[inline(always)]
    fn kind(self) -> u32 {
        self.0 >> Self::KIND_SHIFT
    }

    /// The index the key holds: an instruction, a name, a position.
    #[inline(always)]
    fn payload(self) -> u32 {
        self.0 & MAX_KEY_INDEX
    }

    /// The promises of a constructor's eager attributes.
    const PROMISES: Key = Key::new(Self::KIND_PROMISES, 0);

    #[inline]
    const fn new(kind: u32, index: u32) -> Key {
        debug_assert!(index <= MAX_KEY_INDEX, "the verifier and the machine bound key indices");
        Key(kind << Self::KIND_SHIFT | index & MAX_KEY_INDEX)
    }

    /// The value of an expression.
    #[inline]
    fn expr(expr: ExprId) -> Key {
        Key::new(Self::KIND_EXPR, expr.0)
    }

    /// The value of a variable of the task's own namespace.
    #[inline]
    fn name(name: Symbol) -> Key {
        Key::new(Self::KIND_NAME, name.as_u32())
    }

    /// The collector that gathers the value of `expr` gradually.
    #[inline]
    fn collector(expr: ExprId) -> Key {
        Key::new(Self::KIND_COLLECTOR, expr.0)
    }

    /// The value of `expr`, an operator computed into a temporary cell.
    #[inline]
    fn temporary(expr: ExprId) -> Key {
        Key::new(Self::KIND_TEMPORARY, expr.0)
    }

    /// Tells a comprehension's results from the requirements a task adds for itself, which
    /// share their kind: a task has a few of the latter, and a comprehension's list is far
    /// shorter than this.
    const INDEX_BIT: u32 = 1 << 28;

    /// A requirement a task adds for itself (the `n`th).
    #[inline]
    fn extra(n: u32) -> Key {
        debug_assert!(n < Self::INDEX_BIT);
        Key::new(Self::KIND_EXTRA, n)
    }

    /// The `n`th result of a list comprehension.
    #[inline]
    fn index(n: u32) -> Key {
        debug_assert!(n < Self::INDEX_BIT);
        Key::new(Self::KIND_EXTRA, Self::INDEX_BIT | n)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kind = ["Expr", "Name", "Collector", "Promises", "Extra", "Temporary", "?", "?"][self.kind() as usize];
        let mut payload = self.payload();
        if self.kind() == Self::KIND_EXTRA && payload & Self::INDEX_BIT != 0 {
            kind = "Index";
            payload &= !Self::INDEX_BIT;
        }
        write!(f, "{kind}({payload})")
    }
}

/// A task's requirements: usually one or two, kept inline.
type Reqs = SmallVec<[(Key, CellId); 2]>;

/// The values of a task's requirements; a later key replaces an earlier one, as in the
/// reference's dict. A task has one or two requirements as a rule, found by a scan. One that
/// reads many (a list or dict literal of 100,000 variables) would make every read a scan:
/// beyond [`Values::SCANNED`] values, they are kept sorted by key and found by a binary
/// search (the invariant [`Values::get`] relies on).
struct Values(SmallVec<[(Key, Value); 4]>);

impl Values {
    /// Up to this many values, a key is found by a scan.
    const SCANNED: usize = 16;

    #[inline(always)]
    fn new() -> Values {
        Values(SmallVec::new())
    }

    #[inline(always)]
    fn insert(&mut self, k: Key, v: Value) {
        // One look at where the items are (a `SmallVec` asks whether it spilled for its
        // length as for its slice) serves the size check and the scan.
        let items = self.0.as_mut_slice();
        if items.len() >= Values::SCANNED {
            return self.insert_sorted(k, v);
        }
        match items.iter_mut().find(|(x, _)| *x == k) {
            Some(slot) => slot.1 = v,
            None => self.0.push((k, v)),
        }
    }

    /// [`Values::insert`] into values that are, or are about to be, more than
    /// [`Values::SCANNED`]: sorted by key first if they were not yet.
    #[cold]
    #[inline(never)]
    fn insert_sorted(&mut self, k: Key, v: Value) {
        if self.0.len() == Values::SCANNED {
            self.0.sort_unstable_by_key(|(key, _)| key.0);
        }
        match self.0.binary_search_by_key(&k.0, |(key, _)| key.0) {
            Ok(position) => self.0[position].1 = v,
            Err(position) => self.0.insert(position, (k, v)),
        }
    }

    /// Adds many values at once: appended, then sorted by key with the last value of each
    /// key kept, in O(n log n) where inserting them one by one would move the sorted tail for
    /// each.
    #[cold]
    fn extend_many(&mut self, values: impl Iterator<Item = R<(Key, Value)>>) -> R<()> {
        for value in values {
            self.0.push(value?);
        }
        // A stable sort keeps the values of one key in the order they came, and the merge
        // keeps the last of them in the place of the first.
        self.0.sort_by_key(|(key, _)| key.0);
        self.0.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        Ok(())
    }

    #[inline(always)]
    fn get(&self, k: &Key) -> Option<&Value> {
        let items = self.0.as_slice();
        if items.len() > Values::SCANNED {
            return Values::get_sorted(items, k);
        }
        items.iter().find(|(x, _)| x == k).map(|(_, v)| v)
    }

    /// [`Values::get`] of more than [`Values::SCANNED`] values, which are sorted by key.
    #[cold]
    #[inline(never)]
    fn get_sorted<'a>(items: &'a [(Key, Value)], k: &Key) -> Option<&'a Value> {
        items.binary_search_by_key(&k.0, |(key, _)| key.0).ok().map(|position| &items[position].1)
    }

    /// Whether a gradual listener collects the value of `expr` (see [`Key::collector`]).
    #[inline(always)]
    fn has_collector(&self, expr: ExprId) -> bool {
        !self.0.is_empty() && self.get(&Key::collector(expr)).is_some()
    }
}

/// A cell's value as [`Machine::peek_with`] lends it.
pub enum Peeked<'a> {
    /// The cell holds no value.
    Empty,
    Value(&'a Value),
    /// A list cell's elements.
    Items(&'a [Value]),
}

/// What a task does when its requirements are ready.
enum Body {
    /// Evaluate an expression and store it (`ExecutionUnit`), optionally as an attribute
    /// assignment whose errors are wrapped (`SetAttributeHelper`).
    Exec { target: CellId, promise: OptPromise, what: Exec, scope: ScopeId, attr: AttrSite },
    /// `x.a = e` after `x` is known.
    SetAttr { stmt: StmtId, scope: ScopeId },
    /// `a and b` / `a or b` after `a` is known.
    Lazy { expr: ExprId, scope: ScopeId, target: CellId },
    /// An index lookup once the query is known.
    Lookup { expr: ExprId, scope: ScopeId, target: CellId },
    /// `VariableReferenceHook`: resolve `base.name` and hand the cell to a resumer.
    Hook { base: ExprId, name: Symbol, scope: ScopeId, resumer: Resumer, propagate_unset: bool, location: LocId },
    /// `is defined` waiting for the variable to be ready.
    IsDefinedWait { cell: CellId, target: CellId, location: LocId },
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

/// The body of a task that waits for nothing (see `Machine::deferred`), when it is not the
/// common kind a [`DeferredTask`] holds itself: the bodies such tasks have, which are all
/// plain data.
#[derive(Clone, Copy)]
enum Deferred {
    Exec { target: CellId, promise: OptPromise, what: Exec, scope: ScopeId, attr: AttrSite },
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

    /// The cell the task sets.
    fn target(&self) -> CellId {
        match *self {
            Deferred::Exec { target, .. } => target,
            Deferred::Cond { result, .. } => result,
        }
    }
}

/// A task that waits for nothing, in the run queue's order (see `Machine::deferred`), in four
/// words. Nearly every such task evaluates an expression into an attribute, without a promise:
/// an attribute's default or a constructor's literal argument (93k of the 105k waiting at the
/// 93k-instance benchmark's peak, where a [`Deferred`] of 32 bytes made the queue 3.4 MB).
/// Any other body waits in `Machine::deferred_bodies`, in the same order, and its entry here
/// has [`DeferredTask::OTHER`] for an expression.
#[derive(Clone, Copy)]
struct DeferredTask {
    /// The cell the task sets (also for a body kept apart: it is what the run loop prefetches).
    target: CellId,
    expr: u32,
    scope: ScopeId,
    attr: AttrSite,
}

impl DeferredTask {
    /// Not an expression (the verifier keeps expression ids within 29 bits): the body is the
    /// front of `Machine::deferred_bodies`.
    const OTHER: u32 = u32::MAX;

    /// The task for `deferred`; its body is kept apart when it is [`DeferredTask::kept_apart`].
    fn of(deferred: &Deferred) -> DeferredTask {
        match *deferred {
            Deferred::Exec { target, promise, what: Exec::Expr(expr), scope, attr } if promise.get().is_none() => {
                DeferredTask { target, expr: expr.0, scope, attr }
            }
            _ => DeferredTask { target: deferred.target(), expr: Self::OTHER, scope: NONE, attr: AttrSite::NONE },
        }
    }

    /// Whether the task's body waits in `Machine::deferred_bodies`.
    fn kept_apart(self) -> bool {
        self.expr == Self::OTHER
    }
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<DeferredTask>() == 16);

// A task body is 32 bytes on 64-bit targets, and with its one requirement a task slot is 48: a
// million-instance model keeps four million slots, and the slots live at the peak of the
// 93k-instance benchmark were 14.8 MB at 64 bytes (the size of a slot with a list of two
// requirements inline, one cache line). Half of the slots now straddle two lines; the run
// loop's prefetching loads both (`Machine::prefetch_task`).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<Option<Body>>() == 32
        && std::mem::size_of::<(Key, CellId)>() == 8
        && std::mem::size_of::<Waiter>() == 48
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

/// A place in the source, as its index in the machine's `LocationTable`: four bytes where a
/// `Location` is twelve, so that task bodies stay within 32 bytes (see [`Waiter`]).
#[derive(Clone, Copy, PartialEq, Eq)]
struct LocId(u32);

/// The place of an attribute assignment whose task this is (`SetAttributeHelper`), or none:
/// its errors are wrapped as errors of the attribute, which is the task's target cell's.
#[derive(Clone, Copy)]
struct AttrSite(u32);

impl AttrSite {
    const NONE: AttrSite = AttrSite(NONE);

    fn get(self) -> Option<LocId> {
        (self.0 != NONE).then_some(LocId(self.0))
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
        location: LocId,
    },
}

pub struct Waiter {
    waitcount: i32,
    /// Creation order (see `Machine::pending_tasks`); meaningless in a free slot, which has
    /// no body (free slots are `Machine::free_slots`).
    seq: u32,
    /// The task's requirement when it has one; [`Key::NONE`] when it has none; and when it has
    /// more, a key of kind `Key::KIND_SPILLED` (its payload the list's length class) with the
    /// index of its list in `Machine::spilled_requirements` for a cell. Three tasks in four
    /// have one requirement (of the 229k live at the 93k-instance benchmark's peak, 170k), and
    /// a slot with a list of its own was 16 bytes larger: see `Machine::task_requirements`.
    requirement: (Key, CellId),
    /// `None` while the task runs and once it finished.
    body: Option<Body>,
}

impl Waiter {
    /// A free slot's content: no body, no requirement.
    const FREE: Waiter = Waiter { waitcount: 0, seq: 0, requirement: (Key::NONE, 0), body: None };
}

/// A block's distinct variables in declaration order: variable `i` of a block's scope is the
/// cell `first + i` (`Scope::Block`). A block of many variables (a generated model's top level
/// can declare hundreds of thousands) also has a table by name: a scan of the list at every
/// lookup made such a model quadratic in its number of variables.
pub(crate) struct BlockVariables {
    names: Box<[Symbol]>,
    by_name: Option<HashMap<Symbol, u32>>,
}

impl BlockVariables {
    /// From this many variables on, a block has a table by name.
    const TABLE_FROM: usize = 16;

    fn new(declared: &[Symbol]) -> BlockVariables {
        let mut names: Vec<Symbol> = Vec::with_capacity(declared.len());
        let mut by_name: HashMap<Symbol, u32> = HashMap::new();
        let large = declared.len() >= Self::TABLE_FROM;
        for &name in declared {
            let known = if large { by_name.contains_key(&name) } else { names.contains(&name) };
            if !known {
                if large {
                    by_name.insert(name, names.len() as u32);
                }
                names.push(name);
            }
        }
        BlockVariables { names: names.into_boxed_slice(), by_name: large.then_some(by_name) }
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// The index of a variable among the block's.
    #[inline]
    pub(crate) fn position(&self, name: Symbol) -> Option<usize> {
        match &self.by_name {
            Some(table) => table.get(&name).map(|&i| i as usize),
            None => self.names.iter().position(|&n| n == name),
        }
    }
}

/// Gradual listeners (`ResultCollector`s).
enum Collector {
    For {
        stmt: StmtId,
        scope: ScopeId,
        seen: SeenElements,
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
    Str(SameObject<str>),
    /// A dict is one object wherever it is read from: an attribute read twice, a variable,
    /// a constant literal (which the reference evaluates to one object, as weft shares one
    /// allocation for it).
    Dict(SameObject<value::DictData>),
    Instance(u32),
    Unique(u64),
}

/// The elements a `for` loop has run its body for, by identity ([`IdentityKey`]). Nearly every
/// loop that stays open runs over a relation, whose elements are instances, a few of them:
/// their ids in a list, scanned, take four bytes each where a set of keys takes about forty
/// (the 25k loops of the 93k-instance benchmark that are open at its peak held 2.4 MB in
/// sets). A loop given anything else, or more than [`SeenElements::SCANNED`] instances, keeps
/// a set.
enum SeenElements {
    Instances(Vec<u32>),
    Keys(Box<HashSet<IdentityKey>>),
}

impl SeenElements {
    /// Up to this many instances, the loop's are found by a scan.
    const SCANNED: usize = 16;

    fn new() -> SeenElements {
        SeenElements::Instances(Vec::new())
    }

    /// Remembers `key`; false when the loop has seen it already.
    fn insert(&mut self, key: IdentityKey) -> bool {
        match (&mut *self, &key) {
            (SeenElements::Instances(ids), IdentityKey::Instance(id)) if ids.len() < Self::SCANNED => {
                if ids.contains(id) {
                    return false;
                }
                push_growing(ids, *id);
                true
            }
            (SeenElements::Instances(ids), _) => {
                let mut keys: HashSet<IdentityKey> = ids.iter().map(|&id| IdentityKey::Instance(id)).collect();
                let fresh = keys.insert(key);
                *self = SeenElements::Keys(Box::new(keys));
                fresh
            }
            (SeenElements::Keys(keys), _) => keys.insert(key),
        }
    }
}

/// A value compared by the address of its allocation: two values are the same object when
/// they share it. The key holds the value, so the address cannot be reused by another while
/// the key exists.
struct SameObject<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Clone for SameObject<T> {
    fn clone(&self) -> Self {
        SameObject(Arc::clone(&self.0))
    }
}

impl<T: ?Sized> PartialEq for SameObject<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: ?Sized> Eq for SameObject<T> {}

impl<T: ?Sized> std::hash::Hash for SameObject<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0) as *const u8, state);
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

/// An execution context: a model has about four per entity instance. Kept in the scope
/// table as a [`PackedScope`].
#[derive(Clone, Copy)]
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

/// A [`Scope`] in 12 bytes instead of 16 (350k scopes on the 93k-instance benchmark): three
/// words, the variant in the top three bits of the first. The first word's other bits hold a
/// block, a name or a namespace, which the verifier bounds to 29 bits
/// ([`MAX_SCOPE_INDEX`]); the two others hold a cell, an instance or a parent scope whole.
#[derive(Clone, Copy)]
struct PackedScope([u32; 3]);

/// The largest block, name or namespace index a [`PackedScope`] holds.
pub(crate) const MAX_SCOPE_INDEX: u32 = (1 << PackedScope::TAG_SHIFT) - 1;

impl PackedScope {
    const TAG_SHIFT: u32 = 29;
    const BLOCK: u32 = 0;
    const VAR: u32 = 1;
    const NS: u32 = 2;
    const INSTANCE: u32 = 3;
    const ROOT: u32 = 4;

    fn first(tag: u32, index: u32) -> u32 {
        debug_assert!(index <= MAX_SCOPE_INDEX, "the verifier bounds blocks, names and namespaces");
        tag << Self::TAG_SHIFT | index
    }

    fn pack(scope: Scope) -> PackedScope {
        PackedScope(match scope {
            Scope::Block { block, first, parent } => [Self::first(Self::BLOCK, block.0), first, parent],
            Scope::Var { name, cell, parent } => [Self::first(Self::VAR, name.as_u32()), cell, parent],
            Scope::Ns { ns, parent } => [Self::first(Self::NS, ns.0), 0, parent],
            Scope::Instance { instance } => [Self::first(Self::INSTANCE, 0), instance, 0],
            Scope::Root { ns } => [Self::first(Self::ROOT, ns.0), 0, 0],
        })
    }

    #[inline]
    fn unpack(self) -> Scope {
        let [first, second, third] = self.0;
        let index = first & MAX_SCOPE_INDEX;
        match first >> Self::TAG_SHIFT {
            Self::BLOCK => Scope::Block { block: BlockId(index), first: second, parent: third },
            Self::VAR => Scope::Var { name: Symbol::from_u32(index), cell: second, parent: third },
            Self::NS => Scope::Ns { ns: NsId(index), parent: third },
            Self::INSTANCE => Scope::Instance { instance: second },
            _ => Scope::Root { ns: NsId(index) },
        }
    }
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PackedScope>() == 12);

/// An entity instance, without a heap allocation of its own in the common case: its cells are
/// consecutive in the cell table, in the order of its entity's slots, followed by its `self`
/// cell.
pub struct Instance {
    pub entity: EntityId,
    first_cell: CellId,
    /// The constructor call that created it (an id: the place is asked for only to report).
    location: LocId,
    /// The constructor calls that matched it through an index afterwards (rare): an index in
    /// `Machine::more_locations`, or `NONE`.
    more_locations: u32,
    /// The instance as a scope once an implementation needed it, or `NONE`.
    scope: ScopeId,
    /// The first two implementations it has run, `NO_IMPLEMENTATION` where it has run fewer;
    /// `Machine::more_implementations` has the others (see `Machine::record_implementation`).
    implementations: [weft_ir::program::ImplId; 2],
}

impl Instance {
    /// An empty place of `Instance::implementations`.
    const NO_IMPLEMENTATION: weft_ir::program::ImplId = weft_ir::program::ImplId(NONE);

    /// Whether an implementation was selected for the instance.
    pub fn has_implementation(&self) -> bool {
        self.implementations[0] != Self::NO_IMPLEMENTATION
    }
}

// An instance is 28 bytes: one per entity instance, a million for the largest benchmark. Most
// instances run one or two implementations; a list of up to four made it 48.
const _: () = assert!(std::mem::size_of::<Instance>() == 28);

/// An instance in an entity's index: 32 bits of the hash of its key, and which of the entity's
/// indexes (`Entity::indexes`) the key is for. A candidate is confirmed by comparing its
/// values (`Machine::has_key`), so 32 bits only have to make a false candidate rare; 12 bytes
/// instead of 16 are 0.7 MB of the 93k-instance benchmark's index tables.
#[derive(Clone, Copy)]
struct IndexEntry {
    hash: u32,
    instance: InstanceId,
    index: u32,
}

impl IndexEntry {
    /// The 32 bits of a key's hash ([`Machine::key_hash`]) an entry keeps.
    fn short_hash(hash: u64) -> u32 {
        (hash ^ (hash >> 32)) as u32
    }

    /// The hash the table files an entry under: hashbrown takes its control bytes from the
    /// top seven bits and the bucket from the low ones, so the 32 bits are spread over all 64
    /// (a product with an odd constant, which loses none of them).
    fn table_hash(short: u32) -> u64 {
        u64::from(short).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
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
    /// Task slots; a finished task's slot is reused (`free_slots`), so the table holds the
    /// live tasks, not every task ever spawned, and shrinks when its top slots are free.
    pub waiters: Table<Waiter>,
    /// The requirement lists of the tasks that have more than one (`Waiter::requirement`).
    spilled_requirements: spilled::SpilledLists,
    /// The free task slots below the table's top, handed out lowest first.
    free_slots: free_slots::FreeSlots,
    /// The most task slots the table has held.
    peak_task_slots: usize,
    wait_nodes: WaitNodes,
    /// Tasks spawned so far: the creation sequence number of the next task.
    spawned: u32,
    collectors: Table<Collector>,
    scopes: Table<PackedScope>,
    promises: Table<Promise>,
    eager: Vec<EagerPromise>,
    comps: Vec<CompHelper>,
    pub instances: Table<Instance>,
    /// For each block of [`OWNER_BLOCK`] cells, how many instances have their first cell
    /// before the block: where `Machine::cell_owner` starts looking for the instance an
    /// attribute cell belongs to (cells do not name their instance).
    instance_blocks: Vec<InstanceId>,
    /// Where cells were set (see `Cell::location`).
    locations: LocationTable,
    /// Recent variable lookups (see [`Machine::lookup_var`]).
    lookups: LookupCache,
    /// Constructor locations after an instance's first (see `Instance::more_locations`).
    more_locations: Vec<Vec<Location>>,
    /// The implementations an instance has run beyond the two it keeps itself
    /// (`Instance::implementations`; see `Machine::record_implementation`).
    more_implementations: HashMap<InstanceId, HashSet<weft_ir::program::ImplId>>,
    /// Per block, its distinct variables in declaration order (see `Scope::Block`).
    block_variables: Vec<BlockVariables>,
    /// For each constructor, whether something reads the hidden variable that holds its
    /// instance while its attribute values are emitted (`Ctor::self_name`): the lowering
    /// reads it only as the left-hand side of a nested constructor that takes an index
    /// attribute from the implicit inverse (`Ctor::lhs`), and no source can name it. The
    /// others emit their values in the caller's scope, without a scope that binds it (93k
    /// scopes of the 93k-instance benchmark, none of them read).
    ctor_instance_read: Box<[bool]>,
    pub entities: Vec<EntityState>,
    /// Per entity: where its attributes are among an instance's cells.
    slot_tables: Vec<SlotTable>,
    /// Per entity: the cells a new instance starts with (see [`InstanceCellPlan`]), made with
    /// the machine.
    instance_plans: Vec<Box<[InstanceCellPlan]>>,
    /// Per entity, once it has an instance: the entities whose indexes a new instance joins
    /// (see `Machine::add_instance`).
    index_lineages: Vec<Option<Box<[EntityId]>>>,
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
    deferred: Fifo<DeferredTask>,
    /// The bodies of the tasks in `deferred` that it does not hold itself, in the same order.
    deferred_bodies: Fifo<Deferred>,
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
    /// The listeners of each cell with more than `listeners::LISTENERS_SCANNED` of them, as a
    /// set, so that a collector asks whether it listens already without a scan.
    listener_sets: HashMap<CellId, HashSet<CollectorId>>,
    /// The gradual listeners of list cells, in the order they joined, for the cells flagged
    /// `Cell::LISTENED`: few cells have any, and keeping them here instead of in every cell
    /// extension keeps an extension 24 bytes smaller.
    cell_listeners: HashMap<CellId, Vec<CollectorId>>,
    /// Requirement proxies that were connected and can be reused (see
    /// `Machine::connect_requirement`).
    free_proxies: Vec<CellId>,
    /// Cells that held the result of a sub-task (see `Machine::new_temporary`) or a carried
    /// value (`Machine::new_carrier`) for a task that has read it and finished, to be reused.
    free_temporaries: Vec<CellId>,
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
    /// The one-pass plan of each `{{x}}` string evaluated so far, by its instruction (`None`
    /// for a template that is substituted part by part).
    interpolations: HashMap<u32, Option<OnePassPlan>>,
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
        let instance_plans =
            program.entities.iter().map(|e| InstanceCellPlan::for_entity(&program, e, self_)).collect();
        let entity_count = program.entities.len();
        let block_variables = program.blocks.iter().map(|b| BlockVariables::new(&b.variables)).collect();
        let mut read = vec![false; program.names.len()];
        for (lhs, _) in program.ctors.iter().filter_map(|c| c.lhs) {
            if let Op::Var(VarRef::Name(name)) = code.expr(lhs).kind
                && let Some(flag) = read.get_mut(name.as_u32() as usize)
            {
                *flag = true;
            }
        }
        let ctor_instance_read =
            program.ctors.iter().map(|c| read.get(c.self_name.as_u32() as usize).copied().unwrap_or(true)).collect();
        Machine {
            program,
            code,
            cells: Table::new(),
            exts: Table::new(),
            waiters: Table::new(),
            free_slots: free_slots::FreeSlots::default(),
            spilled_requirements: spilled::SpilledLists::default(),
            peak_task_slots: 0,
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
            instance_blocks: Vec::new(),
            more_locations: Vec::new(),
            slot_tables,
            instance_plans,
            index_lineages: vec![None; entity_count],
            more_implementations: HashMap::new(),
            locations: LocationTable::default(),
            lookups: LookupCache::default(),
            block_variables,
            ctor_instance_read,
            entities,
            ns_scopes: Vec::new(),
            run_queue: Fifo::new(),
            free_proxies: Vec::new(),
            free_temporaries: Vec::new(),
            resumptions: Fifo::new(),
            deferred: Fifo::new(),
            deferred_bodies: Fifo::new(),
            wait_queue: Fifo::new(),
            proxy_listeners: HashMap::default(),
            list_members: HashMap::default(),
            listener_sets: HashMap::default(),
            cell_listeners: HashMap::default(),
            live_tasks: 0,
            host: Some(host),
            unique: 0,
            index_hasher: hashbrown::DefaultHashBuilder::default(),
            constraint_memo: HashMap::default(),
            fresh_null: value::NullId::FIRST_FRESH,
            constraint_pure: Vec::new(),
            interpolations: HashMap::new(),
            extra_names: Vec::new(),
            sink: 0,
            symbols_by_name: None,
            symbols: Known { self_: self_.unwrap_or(Symbol::from_u32(u32::MAX)) },
        }
    }

    /// Frees what only evaluating needs, once the evaluation finished: the task slots and
    /// their wait lists, the scopes, the gradual listeners, the promises and the queues. What
    /// stays (instances, cells, locations, the program and the indexes) is what reading the
    /// model needs. The machine must not evaluate afterwards.
    ///
    /// The export allocates its resources next. The tables freed here (the task slots alone
    /// are 32 MB on the 93k-instance resources benchmark) go back to the system, since a
    /// table's reservation is unmapped, which lowers the export's peak; the queues and maps go
    /// back to the allocator, whose pages the export's allocations reuse.
    pub fn shed_evaluation_state(&mut self) {
        self.waiters = Table::new();
        self.free_slots = free_slots::FreeSlots::default();
        self.spilled_requirements = spilled::SpilledLists::default();
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
        self.deferred_bodies = Fifo::new();
        self.wait_queue = Fifo::new();
        self.proxy_listeners = HashMap::default();
        self.list_members = HashMap::default();
        self.free_proxies = Vec::new();
        self.free_temporaries = Vec::new();
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
            "{} cells ({} B each; {} with an extension of {} B), {} task slots at most and {} at the end ({} B each) for {} tasks, {} scopes, {} collectors",
            self.cells.len(),
            std::mem::size_of::<Cell>(),
            self.exts.len(),
            std::mem::size_of::<CellExt>(),
            self.peak_task_slots.max(self.waiters.len()),
            self.waiters.len(),
            std::mem::size_of::<Waiter>(),
            self.spawned,
            self.scopes.len(),
            self.collectors.len()
        ) + &self.table_bytes()
            + &self.cell_census()
    }

    /// The cells by kind, for `--stats`: how many of each kind the model made, and of the
    /// plain cells, how many are attributes (the rest are variables and temporaries). The
    /// cell table is the largest part of a model's memory.
    fn cell_census(&self) -> String {
        let mut by_kind = [0usize; CellKind::ALL.len()];
        let mut plain_attributes = 0;
        for i in 0..self.cells.len() {
            let cell = &self.cells[i];
            by_kind[cell.kind() as usize] += 1;
            if cell.kind() == CellKind::Plain && cell.attribute_of().is_some() {
                plain_attributes += 1;
            }
        }
        let counts: Vec<String> = CellKind::ALL
            .iter()
            .zip(by_kind)
            .filter(|&(_, n)| n > 0)
            .map(|(kind, n)| match kind {
                CellKind::Plain => format!("{kind:?} {n} ({plain_attributes} attributes)"),
                _ => format!("{kind:?} {n}"),
            })
            .collect();
        format!("; cells by kind: {}", counts.join(", "))
    }

    /// The bytes each table's elements take (not counting what they own on the heap), for
    /// `--stats`: where a model's memory goes.
    fn table_bytes(&self) -> String {
        fn mb<T>(table: &Table<T>) -> f64 {
            (table.len() * std::mem::size_of::<T>()) as f64 / 1e6
        }
        format!(
            "; table memory (MB): cells {:.1}, extensions {:.1}, task slots at the end {:.1}, wait nodes {:.1}, scopes {:.1} ({} B each), promises {:.1} ({} B each), collectors {:.1} ({} B each), instances {:.1} ({} B each)",
            mb(&self.cells),
            mb(&self.exts),
            mb(&self.waiters),
            mb(&self.wait_nodes.nodes),
            mb(&self.scopes),
            std::mem::size_of::<PackedScope>(),
            mb(&self.promises),
            std::mem::size_of::<Promise>(),
            mb(&self.collectors),
            std::mem::size_of::<Collector>(),
            mb(&self.instances),
            std::mem::size_of::<Instance>(),
        )
    }

    /// Takes the host out of the machine, which has none afterwards: the runtime keeps its
    /// host next to an evaluated model, for what the export still asks of it (the Python
    /// servers that map resources).
    pub fn take_host(&mut self) -> Option<Box<dyn Host>> {
        self.host.take()
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

    /// The id of a place in the source, for a task body.
    #[inline]
    fn loc_id(&mut self, location: Location) -> LocId {
        LocId(self.locations.intern(location))
    }

    /// The place a [`LocId`] stands for. Task bodies hold places of the program's code, of
    /// which there are far fewer than the table keeps; should one have been left out, the
    /// error is reported without a place in a file rather than not at all.
    fn loc(&self, id: LocId) -> Location {
        self.locations.get(id.0).unwrap_or(Location::new(weft_ir::span::FileId(0), weft_ir::span::Span::default()))
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
/// values models repeat (a few per typedef), and few enough that the unique values a model
/// checks (one name per instance) do not make it large: at `1 << 16` it held 1.3 MB of the
/// 93k-instance benchmark's peak. Its table stays at 4,096 buckets.
const CONSTRAINT_MEMO_LIMIT: usize = 3_584;

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
#[cfg(test)]
fn substitute_in_one_pass<S: AsRef<str>>(template: &str, matched: &[&str], rendered: &[S]) -> Option<String> {
    OnePassPlan::new(template, matched)?.apply(template, rendered)
}

/// How a `{{x}}` template is put together in one pass (see `substitute_in_one_pass`): its
/// literal pieces and, for each span, the part whose rendered value replaces it. It depends on
/// the template and the parts' matched texts only, so the machine works it out once per
/// instruction (`Machine::interpolations`) rather than scanning the template and comparing its
/// spans with the parts' texts at every evaluation: that scan was most of the cost of an
/// interpolation, 4% of the evaluation of the 93k-instance benchmark.
#[derive(Debug)]
struct OnePassPlan {
    pieces: Box<[TemplatePiece]>,
    /// The bytes of the literal pieces.
    literal_len: usize,
}

#[derive(Clone, Copy, Debug)]
enum TemplatePiece {
    /// Bytes `start..end` of the template.
    Literal(u32, u32),
    /// The rendered value of this part.
    Part(u32),
}

impl OnePassPlan {
    /// The plan of a template, `None` when a brace of the template is outside a span that some
    /// part matches (the template is then substituted part by part).
    fn new(template: &str, matched: &[&str]) -> Option<OnePassPlan> {
        let mut pieces = Vec::new();
        let mut literal_len = 0;
        let mut start = 0;
        while let Some(open) = template[start..].find(['{', '}']).map(|at| start + at) {
            if open > start {
                pieces.push(TemplatePiece::Literal(start as u32, open as u32));
                literal_len += open - start;
            }
            let rest = &template[open..];
            // A span starts with `{{` and ends at the first `}`, which must start its `}}`.
            let close = rest.find('}')?;
            let span = rest.get(..close + 2)?;
            if !span.starts_with("{{") || !span.ends_with("}}") || Self::has_brace(&span[2..span.len() - 2]) {
                return None;
            }
            let part = matched.iter().position(|m| *m == span)?;
            pieces.push(TemplatePiece::Part(part as u32));
            start = open + span.len();
        }
        if start < template.len() {
            pieces.push(TemplatePiece::Literal(start as u32, template.len() as u32));
            literal_len += template.len() - start;
        }
        Some(OnePassPlan { pieces: pieces.into_boxed_slice(), literal_len })
    }

    /// Whether a text holds a brace: the one thing that makes a span's name or a rendered
    /// value unfit for one pass.
    fn has_brace(text: &str) -> bool {
        text.bytes().any(|b| b == b'{' || b == b'}')
    }

    /// The template with its spans replaced by the rendered values of their parts; `None` when
    /// a rendered value holds a brace, where one pass would not give what replacing part by
    /// part gives.
    fn apply<S: AsRef<str>>(&self, template: &str, rendered: &[S]) -> Option<String> {
        if rendered.iter().any(|v| Self::has_brace(v.as_ref())) {
            return None;
        }
        let part_len = |piece: &TemplatePiece| match *piece {
            TemplatePiece::Part(part) => rendered[part as usize].as_ref().len(),
            TemplatePiece::Literal(..) => 0,
        };
        let mut out = String::with_capacity(self.literal_len + self.pieces.iter().map(part_len).sum::<usize>());
        for piece in self.pieces.iter() {
            match *piece {
                TemplatePiece::Literal(start, end) => out.push_str(&template[start as usize..end as usize]),
                TemplatePiece::Part(part) => out.push_str(rendered[part as usize].as_ref()),
            }
        }
        Some(out)
    }
}

/// Whether a typedef's pattern matches: `engine` is the pattern as lowering translated and
/// anchored it (Python's `re.match`), already validated by the frontend. `Err` says why it
/// could not be decided (see [`crate::patterns::is_match`]).
fn regex_match(engine: &str, text: &str) -> Result<bool, String> {
    thread_local! {
        static CACHE: std::cell::RefCell<HashMap<String, Option<fancy_regex::Regex>>> = Default::default();
    }
    let matches = |re: &Option<fancy_regex::Regex>| match re {
        Some(re) => crate::patterns::is_match(re, text),
        None => Ok(false),
    };
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        // Looked up by `&str`, once: every typedef check passes here, and only the first one
        // of each pattern needs an owned key.
        if let Some(re) = c.get(engine) {
            return matches(re);
        }
        let re = crate::patterns::build(engine).ok();
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
