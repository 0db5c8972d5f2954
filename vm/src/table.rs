//! `Table<T>`: the evaluator's append-only tables (cells, tasks, scopes, instances, ...), each
//! one array that never moves.
//!
//! A table reserves a large range of addresses when it gets its first element and makes the
//! memory usable (commits it) at its end as it grows, so that its elements stay where they
//! are and an index is an offset from one base pointer. Two other layouts were measured
//! before this one:
//!
//! * A `Vec` that grows by doubling copies all its elements at every growth and, for the
//!   moment of the copy, holds the old and the new buffer at once: with 1.8 million 100-byte
//!   cells that is a 200 MB copy and a transient of several hundred megabytes of peak memory.
//! * Fixed-size chunks behind a chunk directory never move an element either, but every
//!   access then reads the directory first: a dependent load and a few instructions more on
//!   every cell, task slot and scope the evaluator touches, 7.7% of the evaluation's
//!   instructions on hosts500 (`benches/README.md`, twenty-first round).
//!
//! Reserving addresses costs no memory: the range is mapped without access, which the kernel
//! neither backs nor counts against the commit limit, and only the committed part at the
//! front becomes readable and writable (and only the pages the table touches become
//! resident). A 64-bit process has address space for thousands of such reservations. Where a
//! reservation cannot be had (an address-space limit, a platform without `mmap`), the table
//! takes a smaller one and, if it outgrows it, moves to a larger one as a `Vec` would.
//!
//! The page faults of a growing table (the kernel zeroing fresh pages) happen on the
//! evaluator's thread. Earlier layouts had a second thread fault in the next chunk ahead of
//! time; with this one, a thread that had the kernel populate the committed memory ahead made
//! the evaluation slower (the twenty-first round), so there is none.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::ptr::NonNull;

/// The granularity of commits: a multiple of every page size in use (4 KiB, 16 KiB, 64 KiB).
const GRANULE: usize = 64 << 10;

/// How much a table reserves at first: far more than any table of a model that fits in memory
/// needs (a cell table of 64 GiB would hold two billion cells). Halved until the system grants
/// it, and smaller under a limit on the address space (see `region::first_reservation`).
/// Without `mmap` a reservation is memory, and a table starts small and doubles.
#[cfg(all(unix, target_pointer_width = "64"))]
const FIRST_RESERVATION: usize = 64 << 30;
#[cfg(all(unix, not(target_pointer_width = "64")))]
const FIRST_RESERVATION: usize = 64 << 20;
#[cfg(not(unix))]
const FIRST_RESERVATION: usize = 1 << 20;

/// Under a limit on the address space (`ulimit -v`), the share of it a table reserves at
/// first: a machine has eight tables, and the allocator and the program need most of the
/// rest. A table that outgrows it moves to a reservation twice as large.
const SHARE_OF_ADDRESS_LIMIT: usize = 64;

/// How much a growing table commits at a time, at most: enough that commits are rare, little
/// enough that a table commits (and, under strict overcommit, is charged for) at most this
/// much beyond what it uses.
const MAX_COMMIT_STEP: usize = 16 << 20;

/// How far a table shrinks before `Table::truncate` gives its pages back: a system call, and
/// page faults again if the table grows back, so not for every element.
const RELEASE_STEP: usize = 1 << 20;

pub struct Table<T> {
    /// The first element; dangling (but aligned) until the table has its reservation.
    base: NonNull<T>,
    len: usize,
    /// The committed elements: `push` commits more memory when `len` reaches this. The
    /// region's committed bytes divided by the element size, kept so that a push compares
    /// without dividing.
    committed: usize,
    /// The end of the bytes the table may have made resident since it last gave pages back
    /// (see `truncate`): the most it held since then.
    touched_end: usize,
    region: region::Region,
    _owns: PhantomData<T>,
}

// SAFETY: a table owns its elements as a `Vec` does; the region is plain memory that only the
// table reaches, so sending or sharing the table sends or shares exactly its elements.
unsafe impl<T: Send> Send for Table<T> {}
// SAFETY: as above; `&Table` gives only shared access to the elements.
unsafe impl<T: Sync> Sync for Table<T> {}

impl<T> Default for Table<T> {
    fn default() -> Self {
        const { assert!(std::mem::size_of::<T>() > 0, "a table of zero-sized elements") };
        const { assert!(std::mem::align_of::<T>() <= GRANULE, "elements aligned beyond a granule") };
        Table {
            base: NonNull::dangling(),
            len: 0,
            committed: 0,
            touched_end: 0,
            region: region::Region::EMPTY,
            _owns: PhantomData,
        }
    }
}

impl<T> Table<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends an element and returns its index.
    #[inline]
    pub fn push(&mut self, value: T) -> usize {
        let index = self.len;
        if index == self.committed {
            self.grow();
        }
        // SAFETY: `grow` made `committed` larger than `index`, so slot `index` is committed
        // memory of the region, past the initialised elements: writing there creates element
        // `index`.
        unsafe { self.base.as_ptr().add(index).write(value) };
        self.len = index + 1;
        index
    }

    /// Makes room for at least one more element: commits more of the reservation, or moves
    /// to a larger one.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let size = std::mem::size_of::<T>();
        let needed = (self.len + 1) * size;
        if needed > self.region.reserved() {
            self.relocate(needed);
        }
        let before = self.region.committed();
        // Commit in steps that grow with the table, so that a big table commits rarely and a
        // small one takes little.
        let step = before.clamp(GRANULE, MAX_COMMIT_STEP);
        let wanted = needed.max(before + step).min(self.region.reserved());
        if !self.region.commit(wanted) {
            out_of_memory(wanted);
        }
        self.committed = self.region.committed() / size;
    }

    /// Moves the elements to a reservation of at least `needed` bytes: the first reservation,
    /// or a larger one for a table that outgrows what it could reserve (twice as large, as a
    /// `Vec` grows).
    #[cold]
    fn relocate(&mut self, needed: usize) {
        let mut wanted = needed.max(self.region.reserved().saturating_mul(2)).max(region::first_reservation());
        let mut region = loop {
            if let Some(region) = region::Region::reserve(wanted) {
                break region;
            }
            // Refused (an address-space limit, or memory without `mmap`): ask for less.
            if wanted / 2 < needed.max(GRANULE) {
                out_of_memory(needed);
            }
            wanted /= 2;
        };
        let used = self.len * std::mem::size_of::<T>();
        if !region.commit(used) {
            out_of_memory(used);
        }
        let base = region.base().cast::<T>();
        // SAFETY: the old region holds `len` initialised elements at `self.base`, the new one
        // has at least `used` committed bytes at `base`, and two regions never overlap. The
        // elements move bitwise, which is how Rust moves any value; the old copies are never
        // dropped, since the old region is unmapped (when it is replaced below) without
        // running destructors.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr(), base, self.len) };
        self.region = region;
        self.base = NonNull::new(base).unwrap_or_else(|| out_of_memory(needed));
    }

    /// Drops the elements from `len` on and, once the table has shrunk by more than
    /// [`RELEASE_STEP`] bytes since its pages were last given back, gives the system the whole
    /// pages past the new end (they stay committed: a later push finds zeroed pages there).
    /// For tables whose top empties while the evaluation goes on (the task slots).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let size = std::mem::size_of::<T>();
        self.touched_end = self.touched_end.max(self.len * size);
        let old_len = self.len;
        // The length first: should a destructor panic, the rest leak instead of being dropped
        // twice.
        self.len = len;
        // SAFETY: elements `len..old_len` were initialised and, past the new length, are no
        // longer reachable through the table: each is dropped once, here.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.base.as_ptr().add(len), old_len - len))
        };
        let end = len * size;
        if self.touched_end - end >= RELEASE_STEP {
            let released_from = self.region.release_after(end);
            self.touched_end = released_from.max(end);
        }
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.as_slice().get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.as_slice().iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.as_mut_slice().iter_mut()
    }

    fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements are initialised and stay in place; `base` is
        // dangling only when `len` is 0, which a slice allows for an aligned pointer.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        // SAFETY: the first `len` elements are initialised and dropped once, here; the region
        // (unmapped when `self.region` drops, after this) is not read again.
        unsafe { std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.len)) };
    }
}

impl<T> Index<usize> for Table<T> {
    type Output = T;

    #[inline]
    fn index(&self, index: usize) -> &T {
        assert!(index < self.len, "index {index} out of a table of {}", self.len);
        // SAFETY: `index < len`, and the first `len` elements are initialised.
        unsafe { &*self.base.as_ptr().add(index) }
    }
}

impl<T> IndexMut<usize> for Table<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        assert!(index < self.len, "index {index} out of a table of {}", self.len);
        // SAFETY: as in `index`; `&mut self` makes the access exclusive.
        unsafe { &mut *self.base.as_ptr().add(index) }
    }
}

/// Ends the process as a failed allocation does: the system refused memory for a table.
#[cold]
fn out_of_memory(bytes: usize) -> ! {
    std::alloc::handle_alloc_error(
        std::alloc::Layout::from_size_align(bytes.max(1), GRANULE).unwrap_or(std::alloc::Layout::new::<u64>()),
    )
}

#[cfg(unix)]
mod region {
    use super::{FIRST_RESERVATION, GRANULE, SHARE_OF_ADDRESS_LIMIT};

    /// A range of reserved addresses whose first `committed` bytes are readable and writable.
    pub(super) struct Region {
        base: *mut u8,
        reserved: usize,
        committed: usize,
    }

    /// [`FIRST_RESERVATION`], or a share of the address-space limit when there is one: taking
    /// 64 GiB per table under `ulimit -v` would leave the allocator nothing. Read once.
    pub(super) fn first_reservation() -> usize {
        static FIRST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *FIRST.get_or_init(|| {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: `getrlimit` writes one `rlimit` through the pointer, which points to one.
            let status = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
            if status != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
                return FIRST_RESERVATION;
            }
            let share = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX) / SHARE_OF_ADDRESS_LIMIT;
            share.clamp(GRANULE, FIRST_RESERVATION) / GRANULE * GRANULE
        })
    }

    impl Region {
        pub(super) const EMPTY: Region = Region { base: std::ptr::null_mut(), reserved: 0, committed: 0 };

        /// Reserves `bytes` (rounded up to a granule) of addresses, none of them usable yet.
        pub(super) fn reserve(bytes: usize) -> Option<Region> {
            let bytes = bytes.checked_next_multiple_of(GRANULE)?;
            // SAFETY: an anonymous private mapping at an address of the kernel's choice
            // touches no existing memory; the result is checked before use.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED || base.is_null() {
                return None;
            }
            Some(Region { base: base.cast(), reserved: bytes, committed: 0 })
        }

        pub(super) fn base(&self) -> *mut u8 {
            self.base
        }

        pub(super) fn reserved(&self) -> usize {
            self.reserved
        }

        pub(super) fn committed(&self) -> usize {
            self.committed
        }

        /// Makes at least the first `bytes` usable (rounded up to a granule, within the
        /// reservation). False when the system refuses.
        pub(super) fn commit(&mut self, bytes: usize) -> bool {
            let Some(bytes) = bytes.checked_next_multiple_of(GRANULE) else { return false };
            let bytes = bytes.min(self.reserved);
            if bytes <= self.committed {
                return true;
            }
            // SAFETY: `[committed, bytes)` lies inside the reservation, which this region
            // owns, and is granule-aligned, so page-aligned; nothing in it is in use.
            let status = unsafe {
                libc::mprotect(
                    self.base.add(self.committed).cast(),
                    bytes - self.committed,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if status != 0 {
                return false;
            }
            self.committed = bytes;
            true
        }
    }

    impl Region {
        /// Gives the system the resident pages of the committed bytes from `offset` on
        /// (rounded up to a page), which the owner no longer uses; they stay committed and
        /// read as zeros afterwards. Returns where the released bytes start.
        pub(super) fn release_after(&mut self, offset: usize) -> usize {
            let page = page_size();
            let start = offset.next_multiple_of(page);
            if start >= self.committed {
                return start;
            }
            // SAFETY: `[start, committed)` is page-aligned, inside this region's own mapping,
            // and holds no element in use: the owner's elements end at `offset`. Private
            // anonymous pages given back this way read as zeros when touched again.
            unsafe { libc::madvise(self.base.add(start).cast(), self.committed - start, libc::MADV_DONTNEED) };
            start
        }
    }

    fn page_size() -> usize {
        static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *PAGE.get_or_init(|| {
            // SAFETY: `sysconf` reads a system constant.
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            usize::try_from(size).ok().filter(|&s| s > 0 && s <= super::GRANULE).unwrap_or(super::GRANULE)
        })
    }

    impl Drop for Region {
        fn drop(&mut self) {
            if self.reserved > 0 {
                // SAFETY: the range is this region's own mapping, unmapped once; its owner
                // dropped the elements in it before.
                unsafe { libc::munmap(self.base.cast(), self.reserved) };
            }
        }
    }
}

/// Without `mmap`: a region is an ordinary allocation, committed whole, and a table that
/// outgrows it moves (see `Table::relocate`), as a `Vec` does.
#[cfg(not(unix))]
mod region {
    use super::{FIRST_RESERVATION, GRANULE};
    use std::alloc::Layout;

    pub(super) fn first_reservation() -> usize {
        FIRST_RESERVATION
    }

    pub(super) struct Region {
        base: *mut u8,
        reserved: usize,
    }

    impl Region {
        pub(super) const EMPTY: Region = Region { base: std::ptr::null_mut(), reserved: 0 };

        pub(super) fn reserve(bytes: usize) -> Option<Region> {
            let bytes = bytes.checked_next_multiple_of(GRANULE)?;
            let layout = Layout::from_size_align(bytes, GRANULE).ok()?;
            // SAFETY: the layout has a non-zero size.
            let base = unsafe { std::alloc::alloc(layout) };
            (!base.is_null()).then_some(Region { base, reserved: bytes })
        }

        pub(super) fn base(&self) -> *mut u8 {
            self.base
        }

        pub(super) fn reserved(&self) -> usize {
            self.reserved
        }

        pub(super) fn committed(&self) -> usize {
            self.reserved
        }

        pub(super) fn commit(&mut self, bytes: usize) -> bool {
            bytes <= self.reserved
        }

        /// Without `mmap` there is nothing to give back short of moving the table.
        pub(super) fn release_after(&mut self, _offset: usize) -> usize {
            self.reserved
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            if self.reserved > 0 {
                // SAFETY: allocated in `reserve` with this layout, freed once.
                unsafe { std::alloc::dealloc(self.base, Layout::from_size_align_unchecked(self.reserved, GRANULE)) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_survive_growth() {
        let mut table = Table::new();
        let count = 3 * MAX_COMMIT_STEP / std::mem::size_of::<usize>() + 7;
        for i in 0..count {
            assert_eq!(table.push(i), i);
        }
        assert_eq!(table.len(), count);
        assert_eq!(table[count - 1], count - 1);
        assert!(table.get(count).is_none());
        table[3] = 42;
        assert_eq!(table.iter().nth(3), Some(&42));
        assert_eq!(table.iter().count(), table.len());
    }

    /// An index past the end panics, as a slice's does, even inside the committed memory.
    #[test]
    #[should_panic(expected = "out of a table")]
    fn an_index_past_the_end_panics() {
        let mut table = Table::new();
        table.push(1u8);
        let _ = table[1];
    }

    /// Elements that own memory are dropped with the table, once.
    #[test]
    fn elements_are_dropped() {
        let shared = std::sync::Arc::new(());
        let mut table = Table::new();
        for _ in 0..100_000 {
            table.push(shared.clone());
        }
        assert_eq!(std::sync::Arc::strong_count(&shared), 100_001);
        drop(table);
        assert_eq!(std::sync::Arc::strong_count(&shared), 1);
    }

    /// Truncating drops the elements past the new end once, gives their pages back past a
    /// megabyte, and the table grows again over them with the values pushed then.
    #[test]
    fn truncation_drops_the_top_and_the_table_grows_back() {
        let shared = std::sync::Arc::new(());
        let mut table = Table::new();
        let count = 4 * RELEASE_STEP / std::mem::size_of::<std::sync::Arc<()>>();
        for _ in 0..count {
            table.push(shared.clone());
        }
        table.truncate(count / 8);
        assert_eq!((table.len(), std::sync::Arc::strong_count(&shared)), (count / 8, count / 8 + 1));
        table.truncate(count);
        assert_eq!(table.len(), count / 8, "truncating to a larger length changes nothing");
        let mut numbers = Table::new();
        for i in 0..count {
            numbers.push(i);
        }
        numbers.truncate(10);
        for i in 10..count {
            assert_eq!(numbers.push(i + 1), i);
        }
        assert!((10..count).all(|i| numbers[i] == i + 1) && (0..10).all(|i| numbers[i] == i));
        drop(table);
        assert_eq!(std::sync::Arc::strong_count(&shared), 1);
    }

    /// A table that outgrows its reservation moves and keeps its elements.
    #[test]
    fn a_table_moves_when_it_outgrows_its_reservation() {
        let mut table: Table<String> = Table::new();
        table.push("first".to_string());
        table.region = {
            // A reservation of one granule, as if the system had granted no more.
            let mut small = region::Region::reserve(GRANULE).expect("a granule of addresses");
            assert!(small.commit(GRANULE));
            // SAFETY: the one element moves bitwise to the small region, and the old
            // region is then unmapped without dropping it.
            unsafe { std::ptr::copy_nonoverlapping(table.base.as_ptr(), small.base().cast::<String>(), 1) };
            table.base = NonNull::new(small.base().cast()).expect("a mapped region");
            small
        };
        table.committed = table.region.committed() / std::mem::size_of::<String>();
        let count = 10 * GRANULE / std::mem::size_of::<String>();
        for i in 1..count {
            table.push(i.to_string());
        }
        assert_eq!(table[0], "first");
        assert!((1..count).all(|i| table[i] == i.to_string()));
    }
}
