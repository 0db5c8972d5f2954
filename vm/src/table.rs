//! `Table<T>`: the evaluator's append-only tables (cells, tasks, scopes), stored in fixed-size
//! chunks.
//!
//! A `Vec` that grows by doubling copies all its elements at every growth and, for the moment
//! of the copy, holds the old and the new buffer at once: with 1.8 million 100-byte cells that
//! is a 200 MB copy and a transient of several hundred megabytes of peak memory. A chunked
//! table never moves an element and grows by one chunk at a time, so its peak is its size.

use std::ops::{Index, IndexMut};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Elements per chunk: 2^14, so that a chunk of the largest element type (about 100 bytes) is
/// under 2 MB and the chunk directory of a million-instance model stays small.
const CHUNK_BITS: u32 = 14;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: usize = CHUNK_LEN - 1;

pub struct Table<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
    /// Empty chunks whose memory another thread already touched, when prefaulting is on. In
    /// a mutex only so that a table can be shared between threads once it is complete; the
    /// table reaches it through `&mut self`, without locking.
    prefaulted: Option<Mutex<Receiver<Vec<T>>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { chunks: Vec::new(), len: 0, prefaulted: None }
    }
}

/// Chunks a prefaulting thread keeps ready besides the one it hands over: none, so that a
/// table has one touched chunk ahead of its last, not two. The chunks ahead are touched and
/// never used once the table stops growing, and the second one cost 5 MB of the 160 MB peak of
/// the 93k-instance benchmark. A burst of instances may now fill chunks faster than the thread
/// prepares them, and the evaluating thread then allocates (and faults in) a chunk itself: an
/// earlier measurement found about 80 MB of the 1.35 GB of chunks of the million-instance model
/// allocated so; that model's wall time measured the same with one chunk ahead as with two
/// (7.5 s).
const PREFAULTED_CHUNKS: usize = 0;

/// The size of the smallest page: touching one byte per page makes the kernel provide it.
const PAGE: usize = 4096;

/// Allocates empty chunks and touches each page of their memory, so that the page faults
/// (the kernel zeroing fresh pages, which on a virtual machine costs as much as the
/// evaluation itself on large models) happen on the thread running this instead of the
/// evaluator's. It stops when the table is dropped. A table whose job never runs just
/// allocates its chunks itself.
fn prefault_chunks<T>(ready: SyncSender<Vec<T>>) {
    loop {
        let mut chunk: Vec<T> = Vec::with_capacity(CHUNK_LEN);
        let spare = chunk.spare_capacity_mut();
        let bytes = std::mem::size_of_val(spare);
        let base = spare.as_mut_ptr().cast::<u8>();
        for offset in (0..bytes).step_by(PAGE) {
            // SAFETY: `offset < bytes`, so the write stays inside the chunk's allocation, whose
            // spare capacity is uninitialised memory owned by `chunk`: writing a byte there is
            // allowed and no element is created (the length stays 0). The volatile write keeps
            // the compiler from dropping a store nothing reads.
            unsafe { base.add(offset).write_volatile(0) };
        }
        if ready.send(chunk).is_err() {
            return;
        }
    }
}

impl<T> Table<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Has the table take its next chunks from the returned job, which allocates them and
    /// touches their memory ahead of time (see [`prefault_chunks`]) when it runs on another
    /// thread; the caller decides where it runs, and it stops when the table is dropped.
    pub fn prefault_job(&mut self) -> Box<dyn FnOnce() + Send>
    where
        T: Send + 'static,
    {
        let (ready, chunks) = sync_channel(PREFAULTED_CHUNKS);
        self.prefaulted = Some(Mutex::new(chunks));
        Box::new(move || prefault_chunks(ready))
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
        if index & CHUNK_MASK == 0 {
            self.add_chunk();
        }
        // The chunk was created with its full capacity, so this push never reallocates.
        self.chunks.last_mut().expect("a chunk exists").push(value);
        self.len += 1;
        index
    }

    #[cold]
    fn add_chunk(&mut self) {
        let chunk = self.prefaulted.as_mut().and_then(|ready| ready.get_mut().ok()?.try_recv().ok());
        self.chunks.push(chunk.unwrap_or_else(|| Vec::with_capacity(CHUNK_LEN)));
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks.get(index >> CHUNK_BITS)?.get(index & CHUNK_MASK)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T> Index<usize> for Table<T> {
    type Output = T;

    #[inline]
    fn index(&self, index: usize) -> &T {
        assert!(index < self.len, "index {index} out of a table of {}", self.len);
        // SAFETY: every chunk before the last is full and the last holds the rest, so an
        // index below `len` names an existing chunk and an element below that chunk's length.
        // One check instead of the two of indexing the chunk list and then the chunk.
        unsafe { self.chunks.get_unchecked(index >> CHUNK_BITS).get_unchecked(index & CHUNK_MASK) }
    }
}

impl<T> IndexMut<usize> for Table<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        assert!(index < self.len, "index {index} out of a table of {}", self.len);
        // SAFETY: as in `index`.
        unsafe { self.chunks.get_unchecked_mut(index >> CHUNK_BITS).get_unchecked_mut(index & CHUNK_MASK) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_survive_growth_across_chunks() {
        let mut table = Table::new();
        for i in 0..(CHUNK_LEN * 2 + 7) {
            assert_eq!(table.push(i), i);
        }
        assert_eq!(table.len(), CHUNK_LEN * 2 + 7);
        assert_eq!(table[CHUNK_LEN - 1], CHUNK_LEN - 1);
        assert_eq!(table[CHUNK_LEN], CHUNK_LEN);
        assert_eq!(table[CHUNK_LEN * 2 + 6], CHUNK_LEN * 2 + 6);
        assert!(table.get(CHUNK_LEN * 2 + 7).is_none());
        table[3] = 42;
        assert_eq!(table.iter().nth(3), Some(&42));
        assert_eq!(table.iter().count(), table.len());
    }

    /// An index past the end panics, as a slice's does, even inside the last chunk's
    /// capacity.
    #[test]
    #[should_panic(expected = "out of a table")]
    fn an_index_past_the_end_panics() {
        let mut table = Table::new();
        table.push(1u8);
        let _ = table[1];
    }

    #[test]
    fn prefaulted_chunks_hold_the_same_elements() {
        let mut table = Table::new();
        let job = table.prefault_job();
        std::thread::spawn(job);
        for i in 0..(CHUNK_LEN * 3 + 5) {
            assert_eq!(table.push(i as u64), i);
        }
        assert!(table.iter().copied().eq(0..(CHUNK_LEN * 3 + 5) as u64));
    }
}
