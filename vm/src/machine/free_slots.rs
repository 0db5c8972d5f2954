//! The free task slots, handed out lowest first.
//!
//! A finished task's slot is reused by a later task. Which free slot a task gets changes
//! nothing the evaluation shows (tasks are ordered by their creation sequence number, never
//! by their slot), but it decides how much memory the task slots keep. Live tasks peak
//! somewhere in the middle of an evaluation (231k on the 93k-instance benchmark, at 60% of
//! its spawns) and fall to a few thousand at the end, which is where the process's resident
//! memory peaks. Handed out most recently freed first, the slots of the tasks that live long
//! end up spread over the whole table, and all of it stays resident; handed out lowest first,
//! live tasks gather at the bottom, the top of the table empties as the evaluation winds
//! down, and the machine cuts it off and gives its pages back (`Table::truncate`). What that
//! order leaves spread out, `Machine::compact_task_slots` moves down.

/// A set of free slots: one bit per slot of the table, set when the slot is free, and one
/// bit per word of those, set when the word has a free slot, so that finding the lowest free
/// slot passes over 4,096 slots in use at a time rather than 64 (a table of a million slots
/// has 245 summary words).
#[derive(Default)]
pub(super) struct FreeSlots {
    words: Vec<u64>,
    summary: Vec<u64>,
    /// No summary word below this one has a bit set: the search for the lowest starts here.
    lowest_summary: usize,
    count: usize,
}

impl FreeSlots {
    /// Takes the lowest free slot, if there is one.
    #[inline]
    pub(super) fn take_lowest(&mut self) -> Option<u32> {
        if self.count == 0 {
            return None;
        }
        // Every summary word below `lowest_summary` is empty and some word is not, so the
        // search ends inside the vector.
        let mut summary_index = self.lowest_summary;
        while self.summary[summary_index] == 0 {
            summary_index += 1;
        }
        self.lowest_summary = summary_index;
        let summary = self.summary[summary_index];
        let word_index = summary_index * 64 + summary.trailing_zeros() as usize;
        let word = self.words[word_index];
        let rest = word & (word - 1);
        self.words[word_index] = rest;
        if rest == 0 {
            self.summary[summary_index] = summary & (summary - 1);
        }
        self.count -= 1;
        Some((word_index * 64) as u32 + word.trailing_zeros())
    }

    /// Marks a slot free.
    #[inline]
    pub(super) fn release(&mut self, slot: u32) {
        let (word_index, bit) = (slot as usize / 64, slot % 64);
        if word_index >= self.words.len() {
            self.words.resize(word_index + 1, 0);
            self.summary.resize(self.words.len().div_ceil(64), 0);
        }
        debug_assert_eq!(self.words[word_index] & (1 << bit), 0, "slot {slot} freed twice");
        self.words[word_index] |= 1 << bit;
        let summary_index = word_index / 64;
        self.summary[summary_index] |= 1 << (word_index % 64);
        self.count += 1;
        self.lowest_summary = self.lowest_summary.min(summary_index);
    }

    /// Whether a slot below the table's top is free.
    #[inline]
    pub(super) fn is_free(&self, slot: usize) -> bool {
        self.words.get(slot / 64).is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    /// Forgets the free slots at the top of a table of `len` slots, and returns the table's
    /// length without them: one more than its highest slot in use (0 if none is).
    pub(super) fn cut_top(&mut self, mut len: usize) -> usize {
        while len > 0 {
            let (word_index, bit) = ((len - 1) / 64, (len - 1) % 64);
            let word = self.words.get(word_index).copied().unwrap_or(0);
            if bit == 63 && word == u64::MAX {
                // A whole word of free slots at once.
                self.words[word_index] = 0;
                self.count -= 64;
                len -= 64;
            } else if word & (1 << bit) != 0 {
                self.words[word_index] = word & !(1 << bit);
                self.count -= 1;
                len -= 1;
            } else {
                break;
            }
            if self.words[word_index] == 0 {
                self.summary[word_index / 64] &= !(1 << (word_index % 64));
            }
        }
        self.words.truncate(len.div_ceil(64));
        self.summary.truncate(self.words.len().div_ceil(64));
        self.lowest_summary = self.lowest_summary.min(self.summary.len());
        len
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::FreeSlots;

    /// Replays a sequence of frees and takes against a sorted set, and cuts the top as the
    /// machine does: the lowest free slot comes first, and the cut keeps every slot in use.
    /// The larger table spans several summary words.
    #[test]
    fn lowest_first_and_the_top_cut() {
        check_against_a_sorted_set(300, 2_000);
        check_against_a_sorted_set(20_000, 60_000);
    }

    fn check_against_a_sorted_set(slots_in_use: usize, steps: usize) {
        let mut slots = FreeSlots::default();
        let mut model = std::collections::BTreeSet::new();
        let mut len = slots_in_use;
        let mut used: std::collections::BTreeSet<u32> = (0..len as u32).collect();
        // The same slots in a vector, to pick one at random in constant time.
        let mut pool: Vec<u32> = used.iter().copied().collect();
        // A fixed pseudo-random walk: frees two slots for each one it takes.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for step in 0..steps {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if step % 3 != 2 && !pool.is_empty() {
                let victim = pool.swap_remove(state as usize % pool.len());
                used.remove(&victim);
                slots.release(victim);
                model.insert(victim);
                if victim as usize + 1 == len {
                    len = slots.cut_top(len);
                    // The cut forgets the free slots above the new top, as the model must.
                    while model.last().is_some_and(|&s| s as usize >= len) {
                        model.pop_last();
                    }
                    assert_eq!(len, used.iter().next_back().map_or(0, |&s| s as usize + 1));
                }
            } else {
                let taken = slots.take_lowest();
                assert_eq!(taken, model.pop_first());
                let slot = taken.unwrap_or_else(|| {
                    len += 1;
                    len as u32 - 1
                });
                used.insert(slot);
                pool.push(slot);
            }
            assert_eq!(slots.len(), model.len());
        }
    }
}
