//! The cell: the reference's result variable, in 32 bytes.
//!
//! A cell's value is kept as a tag and a payload ([`PackedValue`]) that own what the value
//! owned, so only this module puts values in and takes them out; the rest of the machine
//! reads a cell through its methods.

use super::*;

/// The type a plain cell checks on set.
#[derive(Clone, Copy, Debug)]
pub(super) enum CellType {
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
    pub(super) const ALL: [CellKind; 8] = [
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
    pub(super) fn is_relation(self) -> bool {
        matches!(self, CellKind::Option | CellKind::List)
    }

    /// A cell whose value is complete only when it freezes: its providers are counted.
    pub(super) fn is_delayed(self) -> bool {
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
    pub(super) waiters: WaitList,
    /// The low 24 bits: the attribute of an attribute cell, the `PackedType` of any other
    /// cell (an attribute cell's type is its attribute's). The high 8 bits: the kind and the
    /// flags (`Cell::KIND_SHIFT` and the `Cell::HAS_VALUE`, ... masks). The verifier keeps
    /// entity and attribute indices within 24 bits (`MAX_PACKED_INDEX`).
    packed: u32,
}

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
    pub(super) const EMPTY: PackedValue = PackedValue([0; 4]);

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
pub(super) struct ValueRef<'a> {
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
pub(super) struct PackedType(pub(super) u32);

impl PackedType {
    pub(super) const NONE: PackedType = PackedType(0);
    pub(super) const BOOL: PackedType = PackedType(1);
    pub(super) const FROM_OWNER: PackedType = PackedType(2);
    pub(super) const FIRST_ENTITY: u32 = 3;

    pub(super) fn entity(e: EntityId) -> PackedType {
        PackedType(Self::FIRST_ENTITY + e.0)
    }
}

/// A cell's waiters: a FIFO list of nodes in the machine's `WaitNodes` arena, kept as a
/// circular list of which only the last node is stored (its `next` is the first), so that
/// the list costs a cell four bytes. Delayed cells, whose waiters the scheduler counts,
/// keep the count in their `CellExt`.
#[derive(Clone, Copy, Debug)]
pub(super) struct WaitList {
    pub(super) tail: u32,
}

impl WaitList {
    pub(super) const EMPTY: WaitList = WaitList { tail: NONE };
}

/// The nodes of every cell's waiter list, with a free list: a waiter registration costs no
/// allocation of its own and the nodes of released lists are reused.
pub(super) struct WaitNodes {
    /// (waiter, next node). A free node's next node is the next free node.
    pub(super) nodes: Table<(WaiterId, u32)>,
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
    pub(super) fn push(&mut self, list: &mut WaitList, waiter: WaiterId) {
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
    pub(super) fn pop(&mut self, list: &mut WaitList) -> Option<WaiterId> {
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
    pub(super) listeners: Option<Vec<CollectorId>>,
    /// The cell's link (see `Cell::side`), moved here when the extension was made.
    link: u32,
    pub(super) nb_gradual_waiters: u32,
    /// Promises acquired on a delayed cell and not yet fulfilled, while `tracks_promises`.
    pub(super) outstanding: u32,
    /// The length of a delayed cell's waiter list.
    pub(super) waiting: u32,
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
    pub(super) fn push(&mut self, value: Value) {
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
    pub(super) fn share(&mut self) -> Arc<[Value]> {
        let shared: Arc<[Value]> = match self {
            Items::Open(items) => Arc::from(std::mem::take(items)),
            Items::Shared(items) => return items.clone(),
        };
        *self = Items::Shared(shared.clone());
        shared
    }

    /// The elements as a list value, without changing how they are kept.
    pub(super) fn to_list(&self) -> Value {
        match self {
            Items::Open(items) => Value::List(Arc::from(&items[..])),
            Items::Shared(items) => Value::List(items.clone()),
        }
    }
}

pub(super) static EMPTY_EXT: CellExt = CellExt {
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
    pub(super) const LISTENED: u32 = 1 << 30;
    /// A delayed cell in the scheduler's zerowaiters: its next waiter, or its freeze, is
    /// reported in `Machine::zerowaiter_events`.
    pub(super) const WATCHED: u32 = 1 << 31;
    const INDEX_MASK: u32 = MAX_PACKED_INDEX;

    /// The location bits of a cell whose value has no recorded location.
    pub(super) const NO_LOCATION: u32 = (1 << 27) - 1;
    /// In `location`: whether `side` holds an extension instead of the link.
    const HAS_EXT: u32 = 1 << 27;
    const TAG_SHIFT: u32 = 28;
    const TAG_MASK: u32 = 0xf << Self::TAG_SHIFT;

    pub(super) fn new(kind: CellKind) -> Self {
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
    pub(super) fn attribute(kind: CellKind, instance: InstanceId, attr: AttrId) -> Self {
        debug_assert!(attr.0 <= Self::INDEX_MASK, "the verifier bounds attribute indices");
        let mut cell = Cell::new(kind);
        cell.side = instance;
        cell.set_index(attr.0);
        cell
    }

    #[inline]
    pub(super) fn tag(&self) -> u32 {
        self.location >> Self::TAG_SHIFT
    }

    /// Where the shared allocation of a string, list or dict value is (its reference count
    /// first), for a prefetch before the value is cloned; `None` for other values.
    #[inline]
    pub(super) fn shared_value_address(&self) -> Option<*const u8> {
        matches!(self.tag(), TAG_STR | TAG_LIST | TAG_DICT).then(|| self.value.words()[0] as usize as *const u8)
    }

    /// The value, borrowed.
    #[inline]
    pub(super) fn value(&self) -> Option<ValueRef<'_>> {
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
    pub(super) fn value_cloned(&self) -> Option<Value> {
        self.value().map(|v| Value::clone(&v))
    }

    /// Stores a value, releasing the previous one.
    #[inline]
    pub(super) fn set_value(&mut self, value: Value) {
        let previous = self.take_value();
        let (tag, payload) = PackedValue::pack(value);
        self.value = payload;
        self.location = (self.location & !Self::TAG_MASK) | tag << Self::TAG_SHIFT;
        drop(previous);
    }

    /// Takes the value out, leaving none.
    pub(super) fn take_value(&mut self) -> Option<Value> {
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
    pub(super) fn location_index(&self) -> u32 {
        self.location & Self::NO_LOCATION
    }

    #[inline]
    pub(super) fn set_location_index(&mut self, index: u32) {
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
    pub(super) fn is_set(&self, flag: u32) -> bool {
        self.packed & flag != 0
    }

    #[inline]
    pub(super) fn flag(&mut self, mask: u32, on: bool) {
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
    pub(super) fn set_has_value(&mut self, on: bool) {
        self.flag(Self::HAS_VALUE, on);
    }

    #[inline]
    pub(super) fn queued(&self) -> bool {
        self.is_set(Self::QUEUED)
    }

    #[inline]
    pub(super) fn set_queued(&mut self, on: bool) {
        self.flag(Self::QUEUED, on);
    }

    #[inline]
    pub(super) fn tracks_promises(&self) -> bool {
        self.is_set(Self::TRACKS_PROMISES)
    }

    #[inline]
    pub(super) fn set_tracks_promises(&mut self, on: bool) {
        self.flag(Self::TRACKS_PROMISES, on);
    }

    /// The type a value set here is checked against.
    pub(super) fn ty(&self, exts: &Table<CellExt>) -> PackedType {
        if self.owner(exts).is_some() { PackedType::FROM_OWNER } else { PackedType(self.packed & Self::INDEX_MASK) }
    }

    pub(super) fn set_ty(&mut self, exts: &Table<CellExt>, ty: PackedType) {
        debug_assert!(self.owner(exts).is_none(), "an attribute cell's type is its attribute's");
        debug_assert!(ty.0 <= Self::INDEX_MASK, "the verifier bounds entity indices");
        self.set_index(ty.0);
    }

    /// A relation end that takes elements gradually (`[0:1]` or multi-valued).
    pub(super) fn is_relation(&self) -> bool {
        self.kind().is_relation()
    }

    pub fn is_delayed(&self) -> bool {
        self.kind().is_delayed()
    }

    /// The index of the cell's extension in `exts`, if it has one. `side` holds one more
    /// than the index; this is the only place that reads it so.
    #[inline]
    pub(super) fn ext_index(&self) -> Option<usize> {
        (self.location & Self::HAS_EXT != 0).then(|| self.side as usize - 1)
    }

    /// The owning instance, the target or `NONE` (see `side`).
    #[inline]
    pub(super) fn link(&self, exts: &Table<CellExt>) -> u32 {
        match self.ext_index() {
            None => self.side,
            Some(ext) => exts[ext].link,
        }
    }

    pub(super) fn set_link(&mut self, exts: &mut Table<CellExt>, link: u32) {
        match self.ext_index() {
            None => self.side = link,
            Some(ext) => exts[ext].link = link,
        }
    }

    /// The index of the cell's extension ([`Cell::ext_index`]), made first if it has none;
    /// the link moves there.
    pub(super) fn ext_or_make(&mut self, exts: &mut Table<CellExt>) -> usize {
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
    pub(super) fn relation_attr(&self) -> Option<AttrId> {
        matches!(self.kind(), CellKind::Single | CellKind::Option | CellKind::List)
            .then_some(AttrId(self.packed & Self::INDEX_MASK))
    }

    /// For attribute cells: the instance and attribute.
    pub(super) fn owner(&self, exts: &Table<CellExt>) -> Option<(InstanceId, AttrId)> {
        if self.kind() == CellKind::Proxy {
            return None;
        }
        let link = self.link(exts);
        (link != NONE).then_some((link, AttrId(self.packed & Self::INDEX_MASK)))
    }

    /// The cell a proxy was connected to.
    pub(super) fn target(&self, exts: &Table<CellExt>) -> Option<CellId> {
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
