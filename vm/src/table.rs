//! `Table<T>`: the evaluator's append-only tables (cells, tasks, scopes), stored in fixed-size
//! chunks.
//!
//! A `Vec` that grows by doubling copies all its elements at every growth and, for the moment
//! of the copy, holds the old and the new buffer at once: with 1.8 million 100-byte cells that
//! is a 200 MB copy and a transient of several hundred megabytes of peak memory. A chunked
//! table never moves an element and grows by one chunk at a time, so its peak is its size.

use std::ops::{Index, IndexMut};

/// Elements per chunk: 2^14, so that a chunk of the largest element type (about 100 bytes) is
/// under 2 MB and the chunk directory of a million-instance model stays small.
const CHUNK_BITS: u32 = 14;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: usize = CHUNK_LEN - 1;

pub struct Table<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { chunks: Vec::new(), len: 0 }
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
    pub fn push(&mut self, value: T) -> usize {
        let index = self.len;
        if index & CHUNK_MASK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK_LEN));
        }
        // The chunk was created with its full capacity, so this push never reallocates.
        self.chunks.last_mut().expect("a chunk exists").push(value);
        self.len += 1;
        index
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
        &self.chunks[index >> CHUNK_BITS][index & CHUNK_MASK]
    }
}

impl<T> IndexMut<usize> for Table<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & CHUNK_MASK]
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
}
