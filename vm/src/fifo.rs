//! `Fifo<T>`: the evaluator's queues (ready tasks, resumptions, cells to examine), stored in
//! fixed-size blocks that are reused once read.
//!
//! A `VecDeque` grows by doubling: each growth allocates a buffer twice the size, copies the
//! queue into it and frees the old one. On the million-instance model the run queue and the
//! queue of delayed cells grow to millions of entries, and these copies were a fifth of the
//! evaluating thread's page faults (fresh pages the kernel must zero, which on a virtual
//! machine costs several microseconds each). A block queue never moves an element, and a
//! block emptied at the front serves the back again, so a queue that is drained as it fills
//! keeps touching the same memory.

use std::collections::VecDeque;

/// The size of a block: large enough that the block directory stays small, small enough
/// that a short queue does not hold much memory.
const BLOCK_BYTES: usize = 64 * 1024;

/// Emptied blocks kept for reuse; more are returned to the allocator.
const SPARE_BLOCKS: usize = 8;

pub struct Fifo<T: Copy> {
    /// Every block but the last is full; the front element is `blocks[0][head]`.
    blocks: VecDeque<Vec<T>>,
    head: usize,
    len: usize,
    spare: Vec<Vec<T>>,
}

impl<T: Copy> Default for Fifo<T> {
    fn default() -> Self {
        Fifo { blocks: VecDeque::new(), head: 0, len: 0, spare: Vec::new() }
    }
}

impl<T: Copy> Fifo<T> {
    /// Elements per block: the largest power of two that fits in `BLOCK_BYTES` (at least
    /// one), so that positions split into block and offset with a shift and a mask.
    const BLOCK_LEN: usize = {
        let per_block = BLOCK_BYTES / if std::mem::size_of::<T>() == 0 { 1 } else { std::mem::size_of::<T>() };
        if per_block <= 1 { 1 } else { 1 << (usize::BITS - 1 - per_block.leading_zeros()) }
    };

    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn push_back(&mut self, value: T) {
        if self.blocks.back().is_none_or(|b| b.len() == Self::BLOCK_LEN) {
            let block = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(Self::BLOCK_LEN));
            self.blocks.push_back(block);
        }
        // A block is created with its full capacity and holds at most that many elements, so
        // this push never reallocates.
        self.blocks.back_mut().expect("a block exists").push(value);
        self.len += 1;
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let front = &self.blocks[0];
        let value = front[self.head];
        self.head += 1;
        self.len -= 1;
        // Every block but the last is full, so a block read to its end is either full or the
        // last one of a queue that is now empty: it is done either way.
        if self.head == front.len() {
            let mut block = self.blocks.pop_front().expect("the front block exists");
            self.head = 0;
            if self.spare.len() < SPARE_BLOCKS {
                block.clear();
                self.spare.push(block);
            }
        }
        Some(value)
    }

    /// The element `index` places from the front.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        let position = self.head + index;
        Some(&self.blocks[position / Self::BLOCK_LEN][position % Self::BLOCK_LEN])
    }

    #[inline]
    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interleaved pushes and pops across many blocks give the elements back in order, and
    /// `get` sees the same order as popping would.
    #[test]
    fn keeps_order_across_blocks_and_reuse() {
        let mut fifo: Fifo<u32> = Fifo::new();
        let block = Fifo::<u32>::BLOCK_LEN as u32;
        let mut expected = std::collections::VecDeque::new();
        let mut next = 0u32;
        // Rounds that grow the queue past several blocks, then drain most of it, so blocks
        // are emptied, kept and reused at every phase.
        for round in 0..6u32 {
            for _ in 0..(block * 3 + round * 7) {
                fifo.push_back(next);
                expected.push_back(next);
                next += 1;
            }
            for i in [0, 1, 2, block as usize - 1, block as usize, fifo.len() - 1] {
                assert_eq!(fifo.get(i), expected.get(i));
            }
            assert_eq!(fifo.get(fifo.len()), None);
            for _ in 0..(block * 2 + round * 11) {
                assert_eq!(fifo.pop_front(), expected.pop_front());
            }
            assert_eq!(fifo.len(), expected.len());
        }
        while let Some(v) = expected.pop_front() {
            assert_eq!(fifo.front(), Some(&v));
            assert_eq!(fifo.pop_front(), Some(v));
        }
        assert!(fifo.is_empty());
        assert_eq!(fifo.pop_front(), None);
        fifo.push_back(7);
        assert_eq!(fifo.pop_front(), Some(7));
    }

    #[test]
    fn blocks_fit_their_budget() {
        assert_eq!(Fifo::<u32>::BLOCK_LEN, 16 * 1024);
        assert_eq!(Fifo::<(u32, bool)>::BLOCK_LEN, 8 * 1024);
        assert_eq!(Fifo::<[u8; 24]>::BLOCK_LEN, 2 * 1024);
        assert_eq!(Fifo::<[u8; 100_000]>::BLOCK_LEN, 1);
    }
}
