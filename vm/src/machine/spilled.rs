//! The requirement lists of the tasks that have more than one requirement, kept apart from
//! their slots (see `Waiter::requirement`), in one table per length.
//!
//! A `Reqs` is 24 bytes and holds two requirements inline; a list of three or four kept as a
//! `Reqs` also has an allocation of its own. On the 93k-instance benchmark, about 50k of the
//! tasks pending at the peak of resident memory have two to four requirements, and the one
//! table of `Reqs` they were kept in held 2.2 MB (60k lists of 24 bytes, and the allocations
//! of the longer ones). By length, a list takes 16, 24 or 32 bytes and nothing more; longer
//! lists, which few tasks have, stay `Reqs`.

use super::{CellId, Key, Reqs};
use crate::table::Table;

type Requirement = (Key, CellId);

/// Values in a table, with the indices of the places freed for reuse.
struct Pool<T> {
    table: Table<T>,
    free: Vec<u32>,
}

impl<T> Pool<T> {
    fn new() -> Self {
        Pool { table: Table::new(), free: Vec::new() }
    }

    fn put(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(index) => {
                self.table[index as usize] = value;
                index
            }
            None => self.table.push(value) as u32,
        }
    }

    /// Frees a place; the caller has taken what it needs of its value.
    fn release(&mut self, index: u32) -> &mut T {
        self.free.push(index);
        &mut self.table[index as usize]
    }
}

/// The payload of a kept-apart list's key: its length, or `LONGER` for a list of more than
/// four.
const LONGER: u32 = 0;

pub(super) struct SpilledLists {
    pairs: Pool<[Requirement; 2]>,
    triples: Pool<[Requirement; 3]>,
    quads: Pool<[Requirement; 4]>,
    /// Lists of more than four; a free place holds an empty list.
    longer: Pool<Reqs>,
}

impl Default for SpilledLists {
    fn default() -> Self {
        SpilledLists { pairs: Pool::new(), triples: Pool::new(), quads: Pool::new(), longer: Pool::new() }
    }
}

impl SpilledLists {
    /// Keeps a list of at least two requirements; returns what the task's slot holds for it:
    /// a key naming the table (the list's length, or [`LONGER`]) and, for a cell, the index.
    pub(super) fn store(&mut self, list: Reqs) -> Requirement {
        debug_assert!(list.len() >= 2, "a list of one requirement stays in its slot");
        let (class, index) = match *list.as_slice() {
            [a, b] => (2, self.pairs.put([a, b])),
            [a, b, c] => (3, self.triples.put([a, b, c])),
            [a, b, c, d] => (4, self.quads.put([a, b, c, d])),
            _ => (LONGER, self.longer.put(list)),
        };
        (Key::new(Key::KIND_SPILLED, class), index)
    }

    /// The list a slot's `handle` names.
    #[inline(always)]
    pub(super) fn get(&self, handle: Requirement) -> &[Requirement] {
        let index = handle.1 as usize;
        match handle.0.payload() {
            2 => &self.pairs.table[index],
            3 => &self.triples.table[index],
            4 => &self.quads.table[index],
            _ => &self.longer.table[index],
        }
    }

    pub(super) fn get_mut(&mut self, handle: Requirement) -> &mut [Requirement] {
        let index = handle.1 as usize;
        match handle.0.payload() {
            2 => &mut self.pairs.table[index],
            3 => &mut self.triples.table[index],
            4 => &mut self.quads.table[index],
            _ => &mut self.longer.table[index],
        }
    }

    /// Takes the list a slot's `handle` names out; its place is reused.
    pub(super) fn take(&mut self, handle: Requirement) -> Reqs {
        let index = handle.1;
        match handle.0.payload() {
            2 => Reqs::from_slice(self.pairs.release(index)),
            3 => Reqs::from_slice(self.triples.release(index)),
            4 => Reqs::from_slice(self.quads.release(index)),
            _ => std::mem::take(self.longer.release(index)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists of every length come back as they were stored, also from reused places, and
    /// a change through `get_mut` is what `take` returns.
    #[test]
    fn lists_of_every_length_round_trip() {
        let list = |length: u32, salt: u32| -> Reqs { (0..length).map(|n| (Key::extra(n), salt * 100 + n)).collect() };
        let mut spilled = SpilledLists::default();
        let mut kept = Vec::new();
        for round in 0..3 {
            for length in 2..8 {
                let handle = spilled.store(list(length, round));
                assert_eq!(spilled.get(handle), list(length, round).as_slice());
                kept.push((handle, length, round));
            }
            // Take every other list, so that the next round reuses their places.
            let mut index = 0;
            kept.retain(|&(handle, length, salt)| {
                index += 1;
                if index % 2 == 0 {
                    return true;
                }
                assert_eq!(spilled.take(handle), list(length, salt));
                false
            });
        }
        for (handle, length, salt) in kept {
            spilled.get_mut(handle)[0].1 = 7;
            let mut expected = list(length, salt);
            expected[0].1 = 7;
            assert_eq!(spilled.take(handle), expected);
        }
    }
}
