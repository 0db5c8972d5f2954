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
//! down, and the machine cuts it off and gives its pages back (`Table::truncate`).

/// A set of free slots: one bit per slot of the table, set when the slot is free.
#[derive(Default)]
pub(super) struct FreeSlots {
    words: Vec<u64>,
    /// No word below this one has a free slot: the search for the lowest starts here.
    lowest_word: usize,
    count: usize,
}

impl FreeSlots {
    /// Takes the lowest free slot, if there is one.
    #[inline]
    pub(super) fn take_lowest(&mut self) -> Option<u32> {
        if self.count == 0 {
            return None;
        }
        // Every word below `lowest_word` is empty and some word is not, so the search ends
        // inside the vector.
        let mut word_index = self.lowest_word;
        while self.words[word_index] == 0 {
            word_index += 1;
        }
        let word = self.words[word_index];
        self.words[word_index] = word & (word - 1);
        self.lowest_word = word_index;
        self.count -= 1;
        Some((word_index * 64) as u32 + word.trailing_zeros())
    }

    /// Marks a slot free.
    #[inline]
    pub(super) fn release(&mut self, slot: u32) {
        let (word_index, bit) = (slot as usize / 64, slot % 64);
        if word_index >= self.words.len() {
            self.words.resize(word_index + 1, 0);
        }
        debug_assert_eq!(self.words[word_index] & (1 << bit), 0, "slot {slot} freed twice");
        self.words[word_index] |= 1 << bit;
        self.count += 1;
        self.lowest_word = self.lowest_word.min(word_index);
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
        }
        self.words.truncate(len.div_ceil(64));
        self.lowest_word = self.lowest_word.min(self.words.len());
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
    #[test]
    fn lowest_first_and_the_top_cut() {
        let mut slots = FreeSlots::default();
        let mut model = std::collections::BTreeSet::new();
        let mut len = 300usize;
        let mut used: std::collections::BTreeSet<u32> = (0..len as u32).collect();
        // A fixed pseudo-random walk: frees two slots for each one it takes.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for step in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if step % 3 != 2 && !used.is_empty() {
                let victim = *used.iter().nth(state as usize % used.len()).unwrap();
                used.remove(&victim);
                slots.release(victim);
                model.insert(victim);
                if victim as usize + 1 == len {
                    len = slots.cut_top(len);
                    model.retain(|&s| (s as usize) < len);
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
            }
            assert_eq!(slots.len(), model.len());
        }
    }
}
