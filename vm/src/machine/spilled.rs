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

/// Lists of `N` requirements, with the indices of the free ones.
struct Lists<const N: usize> {
    table: Table<[Requirement; N]>,
    free: Vec<u32>,
}

impl<const N: usize> Lists<N> {
    fn new() -> Self {
        Lists { table: Table::new(), free: Vec::new() }
    }

    fn store(&mut self, list: &[Requirement]) -> u32 {
        let list: [Requirement; N] = list.try_into().expect("a list of the table's length");
        match self.free.pop() {
            Some(index) => {
                self.table[index as usize] = list;
                index
            }
            None => self.table.push(list) as u32,
        }
    }

    fn take(&mut self, index: u32) -> Reqs {
        self.free.push(index);
        Reqs::from_slice(&self.table[index as usize])
    }
}

pub(super) struct SpilledLists {
    pairs: Lists<2>,
    triples: Lists<3>,
    quads: Lists<4>,
    longer: Table<Reqs>,
    /// The free indices of `longer`, which hold empty lists.
    free_longer: Vec<u32>,
}

impl Default for SpilledLists {
    fn default() -> Self {
        SpilledLists {
            pairs: Lists::new(),
            triples: Lists::new(),
            quads: Lists::new(),
            longer: Table::new(),
            free_longer: Vec::new(),
        }
    }
}

impl SpilledLists {
    /// What a task slot holds for a list of `N` requirements kept here: the key names the
    /// table (the list's length, or 0 for a longer one), the cell field the index in it.
    fn handle(length: usize, index: u32) -> Requirement {
        let class = if length <= 4 { length as u32 } else { 0 };
        (Key::new(Key::KIND_SPILLED, class), index)
    }

    /// Keeps a list of at least two requirements; returns what the task's slot holds for it.
    pub(super) fn store(&mut self, list: Reqs) -> Requirement {
        debug_assert!(list.len() >= 2, "a list of one requirement stays in its slot");
        let index = match list.len() {
            2 => self.pairs.store(&list),
            3 => self.triples.store(&list),
            4 => self.quads.store(&list),
            _ => match self.free_longer.pop() {
                Some(index) => {
                    self.longer[index as usize] = list;
                    return Self::handle(5, index);
                }
                None => return Self::handle(5, self.longer.push(list) as u32),
            },
        };
        Self::handle(list.len(), index)
    }

    /// The list a slot's `handle` names.
    #[inline(always)]
    pub(super) fn get(&self, handle: Requirement) -> &[Requirement] {
        let index = handle.1 as usize;
        match handle.0.payload() {
            2 => &self.pairs.table[index],
            3 => &self.triples.table[index],
            4 => &self.quads.table[index],
            _ => &self.longer[index],
        }
    }

    pub(super) fn get_mut(&mut self, handle: Requirement) -> &mut [Requirement] {
        let index = handle.1 as usize;
        match handle.0.payload() {
            2 => &mut self.pairs.table[index],
            3 => &mut self.triples.table[index],
            4 => &mut self.quads.table[index],
            _ => &mut self.longer[index],
        }
    }

    /// Takes the list a slot's `handle` names out; its place is reused.
    pub(super) fn take(&mut self, handle: Requirement) -> Reqs {
        let index = handle.1;
        match handle.0.payload() {
            2 => self.pairs.take(index),
            3 => self.triples.take(index),
            4 => self.quads.take(index),
            _ => {
                self.free_longer.push(index);
                std::mem::take(&mut self.longer[index as usize])
            }
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
