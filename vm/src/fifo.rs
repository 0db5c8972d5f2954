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
use std::ptr::NonNull;

/// Elements per block: a power of two, so that a position splits into block and offset with a
/// shift and a mask, and fixed, so that indexing a block needs no bounds check. The evaluator's
/// queue entries are 4 to 24 bytes, so a block is 16 to 96 KiB.
const BLOCK_LEN: usize = 4096;
const BLOCK_MASK: usize = BLOCK_LEN - 1;

/// Emptied blocks kept for reuse; more are returned to the allocator.
const SPARE_BLOCKS: usize = 8;

/// A block, owned through a raw pointer (made by `Box::into_raw`, freed by `Box::from_raw` in
/// `Drop`) rather than a `Box`, so that the pointers `Fifo` caches into it stay valid when the
/// block moves between the queue's containers: moving a `Box` would assert that it is the
/// only way to its memory.
type Block<T> = NonNull<[T; BLOCK_LEN]>;

pub struct Fifo<T: Copy> {
    /// The blocks holding positions `head` (rounded down to a block) to `tail`.
    blocks: VecDeque<Block<T>>,
    /// Positions count every element ever pushed: the front is at `head`, the next push goes
    /// to `tail`, and `tail & BLOCK_MASK` is the offset in the last block.
    head: usize,
    tail: usize,
    /// The first element of the front block and of the back block (dangling while there is
    /// none), so that a push or a pop reaches its block without going through `blocks`: the
    /// run queue takes a push and a pop per task.
    front: NonNull<T>,
    back: NonNull<T>,
    spare: Vec<Block<T>>,
}

// SAFETY: a queue owns its blocks and their elements as a `VecDeque<Box<[T; N]>>` would; the
// raw pointers only point into those blocks.
unsafe impl<T: Copy + Send> Send for Fifo<T> {}
// SAFETY: as above; `&Fifo` only reads the elements.
unsafe impl<T: Copy + Sync> Sync for Fifo<T> {}

impl<T: Copy> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            blocks: VecDeque::new(),
            head: 0,
            tail: 0,
            front: NonNull::dangling(),
            back: NonNull::dangling(),
            spare: Vec::new(),
        }
    }
}

impl<T: Copy> Drop for Fifo<T> {
    fn drop(&mut self) {
        for block in self.blocks.drain(..).chain(self.spare.drain(..)) {
            // SAFETY: every block was made by `Box::into_raw` in `new_block` and is in exactly
            // one of the two containers, so it is freed once; `T: Copy` needs no drop.
            drop(unsafe { Box::from_raw(block.as_ptr()) });
        }
    }
}

impl<T: Copy> Fifo<T> {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.tail - self.head
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }

    #[inline]
    pub fn push_back(&mut self, value: T) {
        let offset = self.tail & BLOCK_MASK;
        if offset == 0 {
            self.new_block(value);
        }
        // SAFETY: `back` is the first element of the last block (`new_block` made one when
        // the previous one was full) and `offset < BLOCK_LEN`.
        unsafe { self.back.as_ptr().add(offset).write(value) };
        self.tail += 1;
    }

    /// Starts a block at the back: a spare one, or a new one filled with `value` (any value
    /// of the type will do: a position is read only after it was written).
    #[cold]
    fn new_block(&mut self, value: T) {
        let block = self.spare.pop().unwrap_or_else(|| {
            // Built on the heap: an array of this size on the stack could be up to 96 KiB.
            let boxed: Box<[T; BLOCK_LEN]> = vec![value; BLOCK_LEN]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("BLOCK_LEN elements"));
            NonNull::from(Box::leak(boxed))
        });
        self.back = block.cast();
        if self.blocks.is_empty() {
            self.front = self.back;
        }
        self.blocks.push_back(block);
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.head == self.tail {
            return None;
        }
        // SAFETY: the queue is not empty, so `front` is the first element of the block
        // holding position `head`, at offset `head & BLOCK_MASK`, which was written.
        let value = unsafe { self.front.as_ptr().add(self.head & BLOCK_MASK).read() };
        self.head += 1;
        // The front block was read to its end: it serves the back again. (A block that is
        // also the last one is empty now, and the next push starts a block.)
        if self.head & BLOCK_MASK == 0 {
            self.retire_front_block();
        }
        Some(value)
    }

    #[cold]
    fn retire_front_block(&mut self) {
        let block = self.blocks.pop_front().expect("the front block exists");
        self.front = self.blocks.front().map_or(NonNull::dangling(), |b| b.cast());
        if self.spare.len() < SPARE_BLOCKS {
            self.spare.push(block);
        } else {
            // SAFETY: made by `Box::into_raw` in `new_block`, and out of both containers now.
            drop(unsafe { Box::from_raw(block.as_ptr()) });
        }
    }

    /// The element `index` places from the front.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len() {
            return None;
        }
        let position = self.head + index;
        let block = (position / BLOCK_LEN) - (self.head / BLOCK_LEN);
        // SAFETY: `position` is below `tail`, so its block is in `blocks` and the element at
        // its offset was written; the block lives as long as `&self` keeps the queue.
        Some(unsafe { &(*self.blocks[block].as_ptr())[position & BLOCK_MASK] })
    }

    /// The entries of the front block from the front on: nearly always the first entries of
    /// the queue, and at worst fewer of them, for looking ahead without computing positions.
    #[inline]
    pub fn front_block(&self) -> &[T] {
        if self.is_empty() {
            return &[];
        }
        let offset = self.head & BLOCK_MASK;
        let len = self.len().min(BLOCK_LEN - offset);
        // SAFETY: the queue is not empty, so `front` is the first element of the front block;
        // its positions from `offset` on, `len` of them and all below `tail`, were written.
        unsafe { std::slice::from_raw_parts(self.front.as_ptr().add(offset), len) }
    }

    #[inline]
    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    /// Lets `f` rewrite every element in place, front to back.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut T)) {
        let first_block = self.head / BLOCK_LEN;
        for position in self.head..self.tail {
            let block = self.blocks[position / BLOCK_LEN - first_block];
            // SAFETY: `position` is below `tail`, so its block is in `blocks` and the element
            // at its offset was written; `&mut self` makes the borrow exclusive.
            f(unsafe { &mut (*block.as_ptr())[position & BLOCK_MASK] });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front block's entries are the first entries of the queue, as many as remain
    /// before the block ends.
    fn check_front_block(fifo: &Fifo<u32>, expected: &std::collections::VecDeque<u32>) {
        let front = fifo.front_block();
        let in_block = (BLOCK_LEN - fifo.head % BLOCK_LEN).min(expected.len());
        assert_eq!(front.len(), in_block);
        assert!(front.iter().eq(expected.iter().take(in_block)));
    }

    /// `for_each_mut` visits the elements front to back, from a front that is not at a block's
    /// start to a back in a later block, and what it writes is what pops.
    #[test]
    fn rewrites_in_place_across_blocks() {
        let mut fifo: Fifo<u32> = Fifo::new();
        let mut expected = std::collections::VecDeque::new();
        for n in 0..(BLOCK_LEN as u32 * 2 + 100) {
            fifo.push_back(n);
            expected.push_back(n);
        }
        for _ in 0..(BLOCK_LEN / 2) {
            assert_eq!(fifo.pop_front(), expected.pop_front());
        }
        let mut visited = Vec::new();
        fifo.for_each_mut(|n| {
            visited.push(*n);
            *n = *n * 3 + 1;
        });
        assert!(visited.iter().eq(expected.iter()));
        for n in expected {
            assert_eq!(fifo.pop_front(), Some(n * 3 + 1));
        }
        assert!(fifo.is_empty());
        fifo.for_each_mut(|_| panic!("an empty queue has nothing to visit"));
    }

    /// Interleaved pushes and pops across many blocks give the elements back in order, and
    /// `get` sees the same order as popping would.
    #[test]
    fn keeps_order_across_blocks_and_reuse() {
        let mut fifo: Fifo<u32> = Fifo::new();
        let block = BLOCK_LEN as u32;
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
            check_front_block(&fifo, &expected);
            assert_eq!(fifo.get(fifo.len()), None);
            for _ in 0..(block * 2 + round * 11) {
                assert_eq!(fifo.pop_front(), expected.pop_front());
            }
            assert_eq!(fifo.len(), expected.len());
        }
        while let Some(v) = expected.pop_front() {
            assert_eq!(fifo.front(), Some(&v));
            let mut with_front = expected.clone();
            with_front.push_front(v);
            check_front_block(&fifo, &with_front);
            assert_eq!(fifo.pop_front(), Some(v));
        }
        assert!(fifo.is_empty());
        assert_eq!(fifo.pop_front(), None);
        fifo.push_back(7);
        assert_eq!(fifo.pop_front(), Some(7));
    }
}
