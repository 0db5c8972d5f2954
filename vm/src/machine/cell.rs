//! The cell: the reference's result variable, in 16 bytes.
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
    /// The value's payload; its tag is in `packed` (see [`PackedValue`]). A proxy, which never
    /// holds a value of its own, keeps the cell it was connected to here instead (with the
    /// tag empty: see [`Cell::target`]).
    value: PackedValue,
    /// The cell's waiters until it holds its value, then where the value was set; once the
    /// cell has an extension (`Cell::HAS_EXT`), the extension's index in the machine's `exts`
    /// table, and the extension keeps the waiters or the location (`CellExt::waiters`).
    ///
    /// A task that waits for a cell with a value is ready at once, so a cell never needs its
    /// waiters and its location at the same time, and one word for the two keeps a cell four
    /// bytes smaller (6 MB of the 93k-instance benchmark). Which one the word holds:
    /// [`Cell::holds_location`]. The waiters of list cells (relation ends of more than one
    /// element, list literals), which have no location, wait for their freeze, after which
    /// they have none. One cell in twenty has an extension, and moving the word there keeps
    /// the others from paying four bytes for an index they do not use.
    word: WaitList,
    /// The low 18 bits: the attribute of an attribute cell (`Cell::ATTRIBUTE`), the
    /// `PackedType` of any other cell (an attribute cell's type is its attribute's). Bit 18:
    /// `Cell::ATTRIBUTE`. Bit 19: `Cell::HAS_EXT`. Bits 20 to 23: the value's tag
    /// (`TAG_EMPTY` without one). The high 8 bits: the kind and the flags (`Cell::KIND_SHIFT`
    /// and the `Cell::HAS_VALUE`, ... masks). The verifier keeps entity and attribute indices
    /// within 18 bits (`MAX_PACKED_INDEX`).
    ///
    /// An attribute cell does not name its instance: the machine finds it from the cell's
    /// place among the instances' cells (`Machine::cell_owner`), which only relation ends
    /// and error messages ask for.
    packed: u32,
}

/// The largest index a cell holds in its 18 bits: an attribute, or an entity's `PackedType`.
/// A quarter of a million attributes is fifty times what the largest real models declare.
const MAX_PACKED_INDEX: u32 = (1 << 18) - 1;

/// How many entities and attributes a program may have for its indices to fit in a cell; the
/// verifier rejects programs with more.
pub(crate) const MAX_ENTITIES: usize = (MAX_PACKED_INDEX - PackedType::FIRST_ENTITY + 1) as usize;
pub(crate) const MAX_ATTRIBUTES: usize = MAX_PACKED_INDEX as usize + 1;

// A cell is 16 bytes: a million-instance model has sixteen million of them. At 24 bytes three
// cells in eight straddled two cache lines, which at 32 none did; on the benchmarks the smaller
// table more than made up for it (`benches/README.md`, twenty-fourth round). 20 bytes came
// with the thirty-second round and 16, four to a cache line again, with the thirty-third.
// Growing it is a decision, not an accident.
const _: () = assert!(std::mem::size_of::<Cell>() == 16);

/// A cell's value without the enum's tag word: the payload of a [`Value`] in one 64-bit word,
/// with the tag kept in four bits of the cell's `packed` word. A `Value` is 24 bytes
/// because its largest variants (a string, a list, a dict) are a pointer and a length and the
/// tag needs a word of its own; splitting the tag off made a cell 40 bytes instead of 48, 130
/// MB less on a million-instance model, and four-byte words (with the extension an index
/// instead of a pointer) made it 32.
///
/// A pointer and a length share the word: the address in the low 48 bits, where every
/// address a process gets on the 64-bit platforms weft runs on lies unless it asks for more,
/// and the length in the high 16. A value that does not fit (a string of 64 KiB or more, an
/// address above 2^48) is boxed instead, under a tag of its own, so that nothing depends on
/// the layout of the address space. With an eight-byte payload a cell was 24 bytes: 25 MB less
/// on the 186k-instance benchmark, whose 3.2 million cells were its largest table.
///
/// Owning: a slot whose tag is not `TAG_EMPTY` owns the shared allocation its payload points
/// to (one count of the `Arc`), exactly as the `Value` it was made of did, and the box of a
/// boxed value. [`Cell`] releases them on drop and when the value is replaced.
///
/// Stored as two 32-bit words, so that the cell's alignment is four bytes; the word is put
/// together when read.
#[derive(Clone, Copy)]
struct PackedValue([u32; 2]);

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
/// A string or list whose address and length do not share a word: the payload is the
/// address of a box holding the `Arc` itself. (A dict is one thin pointer, as a big int is.)
const TAG_BOXED_STR: u32 = 12;
const TAG_BOXED_LIST: u32 = 13;

/// How many low bits of a payload hold the address of a string or list; the length takes the
/// rest.
const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;

impl PackedValue {
    pub(super) const EMPTY: PackedValue = PackedValue([0; 2]);

    #[inline]
    fn from_word(word: u64) -> PackedValue {
        PackedValue([word as u32, (word >> 32) as u32])
    }

    #[inline]
    fn word(self) -> u64 {
        let [low, high] = self.0;
        u64::from(low) | u64::from(high) << 32
    }

    /// An address and a length in one word, if both fit.
    #[inline]
    fn thin(address: *const u8, len: usize) -> Option<PackedValue> {
        let address = address as usize as u64;
        let len = len as u64;
        (address & !ADDRESS_MASK == 0 && len >> (64 - ADDRESS_BITS) == 0)
            .then(|| PackedValue::from_word(address | len << ADDRESS_BITS))
    }

    /// The address and the length of a [`PackedValue::thin`] payload.
    #[inline]
    fn split(self) -> (usize, usize) {
        let word = self.word();
        ((word & ADDRESS_MASK) as usize, (word >> ADDRESS_BITS) as usize)
    }

    /// The payload of a boxed value: the address of its box.
    fn boxed<T>(value: T) -> PackedValue {
        PackedValue::from_word(Box::into_raw(Box::new(value)) as usize as u64)
    }

    /// A string, list or dict of `len` elements, taken apart: its address and length in one
    /// word under `thin_tag`, or boxed under `boxed_tag` when they do not fit.
    fn pack_shared<T: ?Sized>(shared: Arc<T>, len: usize, thin_tag: u32, boxed_tag: u32) -> (u32, PackedValue) {
        match PackedValue::thin(Arc::as_ptr(&shared).cast(), len) {
            Some(payload) => {
                let _ = Arc::into_raw(shared);
                (thin_tag, payload)
            }
            None => (boxed_tag, PackedValue::boxed(shared)),
        }
    }

    /// Takes a value apart: its tag and its payload, which now owns what the value owned.
    fn pack(value: Value) -> (u32, PackedValue) {
        let pointer = |p: *const u8| p as usize as u64;
        match value {
            Value::Null(id) => (TAG_NULL, PackedValue::from_word(id.0)),
            Value::Bool(b) => (TAG_BOOL, PackedValue::from_word(b as u64)),
            Value::Int(i) => (TAG_INT, PackedValue::from_word(i as u64)),
            Value::BigInt(i) => (TAG_BIGINT, PackedValue::from_word(pointer(Arc::into_raw(i).cast()))),
            Value::Float(f) => (TAG_FLOAT, PackedValue::from_word(f.to_bits())),
            Value::Str(s) => {
                let len = s.len();
                PackedValue::pack_shared(s, len, TAG_STR, TAG_BOXED_STR)
            }
            Value::List(items) => {
                let len = items.len();
                PackedValue::pack_shared(items, len, TAG_LIST, TAG_BOXED_LIST)
            }
            Value::Dict(dict) => (TAG_DICT, PackedValue::from_word(pointer(dict.into_raw().cast()))),
            Value::Instance(i) => (TAG_INSTANCE, PackedValue::from_word(u64::from(i))),
            Value::Unknown => (TAG_UNKNOWN, Self::EMPTY),
            Value::Reference(r) => (TAG_REFERENCE, PackedValue::from_word(pointer(Arc::into_raw(r).cast()))),
        }
    }

    /// Puts a value back together. A boxed value is read out of its box, which stays: the
    /// owner that gives the payload up frees it ([`PackedValue::free_box`]).
    ///
    /// # Safety
    /// `tag` and `self` must come from one [`PackedValue::pack`] (`tag` not `TAG_EMPTY`), and
    /// the result takes over what the payload owns: the caller either gives up the payload
    /// (takes the value out, then frees its box) or never drops the result (see
    /// [`ValueRef`]).
    unsafe fn unpack(tag: u32, payload: PackedValue) -> Value {
        let word = payload.word();
        let (address, len) = payload.split();
        // SAFETY: every `from_raw` below rebuilds an `Arc` (or, for a dict, the `Dict` around
        // one) from the address (and the length of the slice or string) that `pack` took from
        // `into_raw` of a value of this very type for this tag, whose count the payload still
        // holds; every `read` copies the
        // `Arc` out of the box `pack` made for this tag, which the payload still owns. Either
        // way, the caller guarantees the count is used once.
        unsafe {
            match tag {
                TAG_NULL => Value::Null(value::NullId(word)),
                TAG_BOOL => Value::Bool(word != 0),
                TAG_INT => Value::Int(word as i64),
                TAG_BIGINT => Value::BigInt(Arc::from_raw(word as usize as *const BigInt)),
                TAG_FLOAT => Value::Float(f64::from_bits(word)),
                TAG_STR => {
                    let bytes = std::ptr::slice_from_raw_parts(address as *const u8, len);
                    Value::Str(Arc::from_raw(bytes as *const str))
                }
                TAG_LIST => {
                    let items = std::ptr::slice_from_raw_parts(address as *const Value, len);
                    Value::List(Arc::from_raw(items))
                }
                TAG_DICT => Value::Dict(value::Dict::from_raw(word as usize as *const value::DictData)),
                TAG_INSTANCE => Value::Instance(word as u32),
                TAG_UNKNOWN => Value::Unknown,
                TAG_BOXED_STR => Value::Str(std::ptr::read(word as usize as *const Arc<str>)),
                TAG_BOXED_LIST => Value::List(std::ptr::read(word as usize as *const Arc<[Value]>)),
                _ => Value::Reference(Arc::from_raw(word as usize as *const Reference)),
            }
        }
    }

    /// Frees the box of a boxed value whose `Arc` [`PackedValue::unpack`] took out; nothing
    /// for the other tags.
    ///
    /// # Safety
    /// As for `unpack`, and the payload must be given up: its box is gone afterwards.
    unsafe fn free_box(tag: u32, payload: PackedValue) {
        let address = payload.word() as usize;
        // SAFETY: the box was made by `Box::new` of this very type for this tag (`boxed`), and
        // its `Arc` was moved out by `unpack`, so it is freed without dropping its contents.
        unsafe {
            match tag {
                TAG_BOXED_STR => drop(Box::from_raw(address as *mut ManuallyDrop<Arc<str>>)),
                TAG_BOXED_LIST => drop(Box::from_raw(address as *mut ManuallyDrop<Arc<[Value]>>)),
                _ => {}
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

impl Default for WaitList {
    fn default() -> Self {
        WaitList::EMPTY
    }
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
    /// The cell's waiters or location (see `Cell::word`), moved here when the extension was
    /// made.
    pub(super) waiters: WaitList,
    pub(super) nb_gradual_waiters: u32,
    /// Promises acquired on a delayed cell and not yet fulfilled, while `tracks_promises`.
    pub(super) outstanding: u32,
    /// The length of a delayed cell's waiter list.
    pub(super) waiting: u32,
}

// A cell's extension is 40 bytes on 64-bit targets: one in twenty cells of the 93k-instance
// benchmark has one (list relations that were filled, listened to or waited on). The few
// with listeners keep them in a map (`Machine::cell_listeners`), which made it 24 bytes
// smaller.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<CellExt>() == 40);

/// The elements of a list cell: a vector while the list may grow, and shared once it is
/// complete and read as a whole. Every read of a relation's value (a plugin argument, an
/// attribute of an exported resource) used to copy its elements into a new list, so `n`
/// instances each reading a relation of `n` elements made `n²` copies; a shared list is
/// handed out by its reference count.
///
/// A growing list whose elements are all instances (a relation's always are) keeps their ids,
/// four bytes each where a value takes 24: the relations of the 93k-instance benchmark held
/// 3.2 MB of its peak as values. Other elements (a list literal's) are values in a box, which
/// keeps `Items`, and so a cell's extension, at three words.
pub enum Items {
    Instances(Vec<InstanceId>),
    Values(Box<Vec<Value>>),
    Shared(Arc<[Value]>),
}

impl Default for Items {
    fn default() -> Self {
        Items::Instances(Vec::new())
    }
}

/// Grows a short vector by one element: most relation lists (and the instances a `for` loop
/// over one has seen) hold a few, for which a vector's doubling (to four elements, then eight)
/// leaves much of it empty (a list of one element cost 2.3 MB of the 93k-instance benchmark's
/// peak: `benches/README.md`, thirty-first round). Up to four elements, it grows by one; past
/// that, by doubling.
pub(super) fn push_growing<T>(items: &mut Vec<T>, item: T) {
    if items.len() == items.capacity() && items.len() < 4 {
        items.reserve_exact(1);
    }
    items.push(item)
}

/// The elements of [`Items`], as values.
pub enum ItemsIter<'a> {
    Instances(std::slice::Iter<'a, InstanceId>),
    Values(std::slice::Iter<'a, Value>),
}

impl Iterator for ItemsIter<'_> {
    type Item = Value;

    #[inline]
    fn next(&mut self) -> Option<Value> {
        match self {
            ItemsIter::Instances(ids) => ids.next().map(|&id| Value::Instance(id)),
            ItemsIter::Values(values) => values.next().cloned(),
        }
    }

    // Exact, so that collecting the elements into a list allocates it once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            ItemsIter::Instances(ids) => ids.size_hint(),
            ItemsIter::Values(values) => values.size_hint(),
        }
    }
}

impl ExactSizeIterator for ItemsIter<'_> {}

impl Items {
    pub fn len(&self) -> usize {
        match self {
            Items::Instances(ids) => ids.len(),
            Items::Values(values) => values.len(),
            Items::Shared(values) => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at `position`, which is below [`Items::len`].
    pub fn get(&self, position: usize) -> Value {
        match self {
            Items::Instances(ids) => Value::Instance(ids[position]),
            Items::Values(values) => values[position].clone(),
            Items::Shared(values) => values[position].clone(),
        }
    }

    pub fn iter(&self) -> ItemsIter<'_> {
        match self {
            Items::Instances(ids) => ItemsIter::Instances(ids.iter()),
            Items::Values(values) => ItemsIter::Values(values.iter()),
            Items::Shared(values) => ItemsIter::Values(values.iter()),
        }
    }

    /// Whether an element equals `value` (Python's `==`: instances by identity).
    pub fn contains(&self, value: &Value) -> bool {
        match (self, value) {
            (Items::Instances(ids), Value::Instance(id)) => ids.contains(id),
            _ => self.iter().any(|item| item.py_eq(value)),
        }
    }

    /// Lends the elements as values to `f`: where they are, or for instances' ids, copied
    /// into a list of their own (on the stack up to eight elements).
    pub fn with_values<T>(&self, f: impl FnOnce(&[Value]) -> T) -> T {
        match self {
            Items::Instances(_) => {
                let values: SmallVec<[Value; 8]> = self.iter().collect();
                f(&values)
            }
            Items::Values(values) => f(values),
            Items::Shared(values) => f(values),
        }
    }

    pub(super) fn push(&mut self, value: Value) {
        match (&mut *self, value) {
            (Items::Instances(ids), Value::Instance(id)) => push_growing(ids, id),
            (Items::Values(values), value) => push_growing(values, value),
            // An element that is not an instance turns a list of ids into values; a complete
            // list does not grow, but should one, it becomes a vector again.
            (_, value) => {
                let mut values = Vec::with_capacity(self.len() + 1);
                values.extend(self.iter());
                values.push(value);
                *self = Items::Values(Box::new(values));
            }
        }
    }

    /// The elements as a shared list, sharing them from now on.
    pub(super) fn share(&mut self) -> Arc<[Value]> {
        let shared: Arc<[Value]> = match self {
            Items::Shared(values) => return values.clone(),
            Items::Values(values) => Arc::from(std::mem::take(&mut **values)),
            Items::Instances(_) => self.iter().collect(),
        };
        *self = Items::Shared(shared.clone());
        shared
    }

    /// The elements as a list value, without changing how they are kept.
    pub(super) fn to_list(&self) -> Value {
        match self {
            Items::Shared(values) => Value::List(values.clone()),
            Items::Values(values) => Value::List(Arc::from(&values[..])),
            Items::Instances(_) => Value::List(self.iter().collect()),
        }
    }
}

pub(super) static EMPTY_EXT: CellExt = CellExt {
    items: Items::Instances(Vec::new()),
    waiters: WaitList::EMPTY,
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
    /// A cell with an entry in a map of listeners: `Machine::proxy_listeners` for a proxy,
    /// `Machine::cell_listeners` for a list. Cells are read, set and connected often and few
    /// have a listener, so the flag spares the others a map lookup.
    pub(super) const LISTENED: u32 = 1 << 30;
    /// A delayed cell in the scheduler's zerowaiters: its next waiter, or its freeze, is
    /// reported in `Machine::zerowaiter_events`.
    pub(super) const WATCHED: u32 = 1 << 31;
    const INDEX_MASK: u32 = MAX_PACKED_INDEX;
    /// An attribute cell: the index is its attribute.
    const ATTRIBUTE: u32 = 1 << 18;
    /// Whether `word` holds the index of an extension, which holds the word instead.
    const HAS_EXT: u32 = 1 << 19;
    const TAG_SHIFT: u32 = 20;
    const TAG_MASK: u32 = 0xf << Self::TAG_SHIFT;

    /// The location of a cell whose value has no recorded location.
    pub(super) const NO_LOCATION: u32 = (1 << 27) - 1;

    pub(super) fn new(kind: CellKind) -> Self {
        Cell {
            value: PackedValue::EMPTY,
            // No extension: one is made when first needed (`Machine::xm`), and a list that is
            // never filled, listened to, promised or waited on (a relation nobody sets) reads
            // as empty without one.
            word: WaitList::EMPTY,
            packed: PackedType::NONE.0
                | (kind as u32) << Self::KIND_SHIFT
                | if kind.is_delayed() { Self::TRACKS_PROMISES } else { 0 },
        }
    }

    /// An attribute cell of `attr` (the instance's cells are consecutive: see
    /// `Machine::cell_owner`).
    pub(super) fn attribute(kind: CellKind, attr: AttrId) -> Self {
        debug_assert!(attr.0 <= Self::INDEX_MASK, "the verifier bounds attribute indices");
        let mut cell = Cell::new(kind);
        cell.packed |= Self::ATTRIBUTE;
        cell.set_index(attr.0);
        cell
    }

    /// The attribute of an attribute cell.
    #[inline]
    pub(super) fn attribute_of(&self) -> Option<AttrId> {
        self.is_set(Self::ATTRIBUTE).then_some(AttrId(self.packed & Self::INDEX_MASK))
    }

    /// The waiters, or the location once the cell has its value (see `word`).
    #[inline]
    pub(super) fn waiters(&self, exts: &Table<CellExt>) -> WaitList {
        match self.ext_index() {
            None => self.word,
            Some(ext) => exts[ext].waiters,
        }
    }

    /// [`Self::waiters`], to change.
    #[inline]
    pub(super) fn waiters_mut<'a>(&'a mut self, exts: &'a mut Table<CellExt>) -> &'a mut WaitList {
        match self.ext_index() {
            None => &mut self.word,
            Some(ext) => &mut exts[ext].waiters,
        }
    }

    #[inline]
    pub(super) fn tag(&self) -> u32 {
        (self.packed & Self::TAG_MASK) >> Self::TAG_SHIFT
    }

    /// Where the shared allocation of a string, list or dict value is (its reference count
    /// first), for a prefetch before the value is cloned; `None` for other values.
    #[inline]
    pub(super) fn shared_value_address(&self) -> Option<*const u8> {
        match self.tag() {
            TAG_STR | TAG_LIST => Some(self.value.split().0 as *const u8),
            TAG_DICT | TAG_BOXED_STR | TAG_BOXED_LIST => Some(self.value.word() as usize as *const u8),
            _ => None,
        }
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
        self.fill(value);
        drop(previous);
    }

    /// Stores the value of a cell that holds none: [`Self::set_value`] without taking out
    /// and releasing a previous value, inlined where a cell is set for the first time (once
    /// per cell, a hundred thousand times on the 9k-instance benchmark).
    #[inline(always)]
    pub(super) fn fill(&mut self, value: Value) {
        debug_assert_eq!(self.tag(), TAG_EMPTY, "filling a cell that holds a value");
        let (tag, payload) = PackedValue::pack(value);
        self.value = payload;
        self.packed = (self.packed & !Self::TAG_MASK) | tag << Self::TAG_SHIFT;
    }

    /// Takes the value out, leaving none.
    pub(super) fn take_value(&mut self) -> Option<Value> {
        let tag = self.tag();
        if tag == TAG_EMPTY {
            return None;
        }
        self.packed &= !Self::TAG_MASK;
        let payload = std::mem::replace(&mut self.value, PackedValue::EMPTY);
        // SAFETY: the tag and payload come from one `pack`, and the cell gives the payload up
        // (its tag is now empty), so the value takes over what it owned and the box, if any,
        // is freed once.
        unsafe {
            let value = PackedValue::unpack(tag, payload);
            PackedValue::free_box(tag, payload);
            Some(value)
        }
    }

    /// Whether the word of the waiters holds the location instead: the cell has its value and
    /// is not a list cell (whose waiters wait for the freeze, and which has no location).
    #[inline]
    pub(super) fn holds_location(&self) -> bool {
        self.has_value() && !matches!(self.kind(), CellKind::List | CellKind::ListLiteral)
    }

    /// Where the value was set, as an index in the `LocationTable` (`NO_LOCATION` for none).
    #[inline]
    pub(super) fn location_index(&self, exts: &Table<CellExt>) -> u32 {
        if self.holds_location() { self.waiters(exts).tail.min(Self::NO_LOCATION) } else { Self::NO_LOCATION }
    }

    /// Records where the value was set, once the cell holds it (so that its waiters were
    /// released: the word is theirs before).
    #[inline]
    pub(super) fn set_location_index(&mut self, exts: &mut Table<CellExt>, index: u32) {
        debug_assert!(self.holds_location(), "a location recorded before the value");
        self.waiters_mut(exts).tail = index.min(Self::NO_LOCATION);
    }

    /// Replaces the low 18 bits: the attribute or the type check.
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
    pub(super) fn ty(&self) -> PackedType {
        if self.is_set(Self::ATTRIBUTE) { PackedType::FROM_OWNER } else { PackedType(self.packed & Self::INDEX_MASK) }
    }

    pub(super) fn set_ty(&mut self, ty: PackedType) {
        debug_assert!(!self.is_set(Self::ATTRIBUTE), "an attribute cell's type is its attribute's");
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

    /// The index of the cell's extension in `exts`, if it has one: then `word` holds it.
    #[inline]
    pub(super) fn ext_index(&self) -> Option<usize> {
        (self.packed & Self::HAS_EXT != 0).then_some(self.word.tail as usize)
    }

    /// The index of the cell's extension ([`Cell::ext_index`]), made first if it has none;
    /// the waiters or location move there.
    pub(super) fn ext_or_make(&mut self, exts: &mut Table<CellExt>) -> usize {
        if let Some(ext) = self.ext_index() {
            return ext;
        }
        let ext = exts.push(CellExt { waiters: self.word, ..CellExt::default() });
        // Four billion extensions would take 256 GB; the table cannot grow that far.
        self.word = WaitList { tail: u32::try_from(ext).expect("fewer than 2^32 cell extensions") };
        self.packed |= Self::HAS_EXT;
        ext
    }

    /// The attribute of a relation end's cell: cells of the relation kinds are made only as
    /// attribute cells (`Machine::add_instance`).
    pub(super) fn relation_attr(&self) -> Option<AttrId> {
        if !matches!(self.kind(), CellKind::Single | CellKind::Option | CellKind::List) {
            return None;
        }
        debug_assert!(self.is_set(Self::ATTRIBUTE), "relation cells are attribute cells");
        self.attribute_of()
    }

    /// Whether a list cell has gradual listeners in `Machine::cell_listeners` (a proxy's flag
    /// means an entry in `Machine::proxy_listeners` instead).
    #[inline]
    pub(super) fn has_list_listeners(&self) -> bool {
        self.kind() != CellKind::Proxy && self.is_set(Self::LISTENED)
    }

    /// The cell a proxy was connected to. A proxy never holds a value of its own (nothing
    /// sets one: `Machine::set_cell` refuses), so its payload keeps the target, one more than
    /// its id so that an empty payload means none.
    #[inline]
    pub(super) fn target(&self) -> Option<CellId> {
        if self.kind() != CellKind::Proxy || self.tag() != TAG_EMPTY {
            return None;
        }
        let word = self.value.word();
        (word != 0).then(|| (word - 1) as CellId)
    }

    /// Connects a proxy to `target` (see [`Self::target`]).
    pub(super) fn set_target(&mut self, target: CellId) {
        debug_assert!(self.kind() == CellKind::Proxy && self.tag() == TAG_EMPTY, "only an empty proxy has a target");
        self.value = PackedValue::from_word(target as u64 + 1);
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        drop(self.take_value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Puts `value` in a cell, reads it back borrowed and cloned, replaces it, and checks
    /// that the cell held exactly one count of its shared allocation throughout.
    fn check(value: Value, tag: u32) {
        let mut cell = Cell::new(CellKind::Plain);
        cell.set_value(value.clone());
        assert_eq!(cell.tag(), tag, "tag of {}", value.type_name());
        // The counts of a shared value's allocation; values without one count as one each.
        let count = |v: &Value| match v {
            Value::Str(s) => Arc::strong_count(s),
            Value::List(items) => Arc::strong_count(items),
            Value::Dict(dict) => dict.strong_count(),
            _ => 0,
        };
        let shared = count(&value) > 0;
        let count = |v: &Value| if shared { count(v) } else { 2 };
        // One count here and one in the cell.
        assert_eq!(count(&value), 2);
        let same_object = |a: &Value, b: &Value| match (a, b) {
            (Value::Str(a), Value::Str(b)) => Arc::ptr_eq(a, b),
            (Value::List(a), Value::List(b)) => Arc::ptr_eq(a, b),
            (Value::Dict(a), Value::Dict(b)) => value::Dict::ptr_eq(a, b),
            (a, b) => a.py_eq(b),
        };
        assert!(cell.value().is_some_and(|v| same_object(&v, &value)));
        let cloned = cell.value_cloned().expect("a value");
        assert_eq!(count(&value), if shared { 3 } else { 2 });
        drop(cloned);
        // Replacing the value releases the cell's count (and frees a box).
        cell.set_value(Value::Int(7));
        assert_eq!(count(&value), if shared { 1 } else { 2 });
        cell.set_value(value.clone());
        let taken = cell.take_value().expect("a value");
        assert_eq!(count(&value), 2);
        assert!(same_object(&taken, &value));
        drop(taken);
        cell.set_value(value.clone());
        drop(cell);
        assert_eq!(count(&value), if shared { 1 } else { 2 });
    }

    #[test]
    fn values_keep_their_identity_and_counts_in_a_cell() {
        let short: Arc<str> = Arc::from("a string");
        check(Value::Str(short), TAG_STR);
        check(Value::Str(Arc::from("")), TAG_STR);
        check(Value::List(Arc::from(vec![Value::Int(1), Value::Str(Arc::from("x"))])), TAG_LIST);
        check(Value::Dict(value::Dict::from(vec![(Arc::from("k"), Value::Bool(true))])), TAG_DICT);
        check(Value::Int(i64::MIN), TAG_INT);
        check(Value::Float(-0.5), TAG_FLOAT);
    }

    /// Lengths past what a payload's sixteen bits hold are boxed, and behave the same.
    #[test]
    fn long_values_are_boxed() {
        let long: Arc<str> = Arc::from("x".repeat(1 << 16));
        check(Value::Str(long), TAG_BOXED_STR);
        let just_fits: Arc<str> = Arc::from("y".repeat((1 << 16) - 1));
        check(Value::Str(just_fits), TAG_STR);
        check(Value::List(Arc::from(vec![Value::Int(0); 70_000])), TAG_BOXED_LIST);
        // A dict is one pointer, however long.
        let entries: Vec<(Arc<str>, Value)> = (0..70_000).map(|i| (Arc::from(i.to_string()), Value::Int(i))).collect();
        check(Value::Dict(value::Dict::from(entries)), TAG_DICT);
    }
}
