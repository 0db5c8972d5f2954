//! Dict values: string keys in insertion order, looked up by hash once a dict is large.
//!
//! Python hashes a dict's keys, so a model that looks up every key of a 100,000-key dict, or
//! compares two such dicts, costs what the dict costs. A plain list of pairs made each lookup
//! a scan: comparing two dicts of 10,000 keys took a second, and of 100,000 keys ten.

use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

use hashbrown::HashTable;

use super::Value;

/// One entry of a dict: its key and its value.
pub type Entry = (Arc<str>, Value);

/// A dict value: its entries in insertion order, without two of the same key, shared. Which
/// allocation a dict is tells which Python object it is ([`Dict::ptr_eq`]), as for strings.
///
/// A dict of more than [`Dict::SCAN_LIMIT`] entries gets a table of its entries' positions by
/// key at its first lookup, so that [`Dict::get`] does not scan. Most dicts are never looked
/// up (attribute values, plugin results on their way to the export), so they never pay for
/// one.
#[derive(Clone)]
pub struct Dict(Arc<DictData>);

/// What a [`Dict`] shares: its entries and, once a large dict was looked up, their positions
/// by key.
pub struct DictData {
    entries: Box<[Entry]>,
    index: OnceLock<Box<KeyIndex>>,
}

/// The positions of a dict's entries, in a table hashed by key.
struct KeyIndex {
    hasher: hashbrown::DefaultHashBuilder,
    positions: HashTable<u32>,
}

impl KeyIndex {
    fn with_capacity(capacity: usize) -> KeyIndex {
        KeyIndex { hasher: hashbrown::DefaultHashBuilder::default(), positions: HashTable::with_capacity(capacity) }
    }

    /// The positions of `entries`, whose keys are distinct.
    fn of(entries: &[Entry]) -> KeyIndex {
        let mut index = KeyIndex::with_capacity(entries.len());
        for position in 0..entries.len() {
            index.insert(entries, position);
        }
        index
    }

    /// The position of `key` among `entries`, if it is there.
    fn find(&self, entries: &[Entry], key: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        self.positions.find(hash, |&position| *entries[position as usize].0 == *key).map(|&p| p as usize)
    }

    /// Adds the entry at `position`, whose key the table does not hold yet.
    fn insert(&mut self, entries: &[Entry], position: usize) {
        // A dict's length is bounded by memory long before `u32::MAX` entries (each is 40
        // bytes), but the position must not wrap if one ever is.
        let position = u32::try_from(position).expect("a dict of fewer than 2^32 entries");
        let hasher = &self.hasher;
        self.positions.insert_unique(hasher.hash_one(&*entries[position as usize].0), position, |&p| {
            hasher.hash_one(&*entries[p as usize].0)
        });
    }
}

impl Dict {
    /// Up to this many entries, a lookup scans them: comparing a few keys costs less than
    /// hashing one, and a small dict needs no table.
    pub const SCAN_LIMIT: usize = 16;

    /// A dict of `pairs` in order, as Python's `dict()` makes one: a key given again keeps
    /// its first position and takes the later value. Dict literals with a repeated key are
    /// refused before evaluation; JSON objects and plugins' results may repeat one.
    pub fn new(pairs: Vec<Entry>) -> Dict {
        if pairs.len() <= Dict::SCAN_LIMIT {
            let mut entries: Vec<Entry> = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                match entries.iter_mut().find(|(known, _)| *known == key) {
                    Some(entry) => entry.1 = value,
                    None => entries.push((key, value)),
                }
            }
            return Dict::of_distinct(entries);
        }
        // The repeated keys are found through a table of their own, dropped once the dict is
        // made (see the type's documentation).
        let mut index = KeyIndex::with_capacity(pairs.len());
        let mut entries: Vec<Entry> = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            match index.find(&entries, &key) {
                Some(position) => entries[position].1 = value,
                None => {
                    entries.push((key, value));
                    index.insert(&entries, entries.len() - 1);
                }
            }
        }
        Dict::of_distinct(entries)
    }

    /// A dict of `entries`, whose keys are distinct.
    fn of_distinct(entries: Vec<Entry>) -> Dict {
        Dict(Arc::new(DictData { entries: entries.into_boxed_slice(), index: OnceLock::new() }))
    }

    /// The value of `key`, if the dict has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let entries = &self.0.entries;
        let position = if entries.len() <= Dict::SCAN_LIMIT {
            entries.iter().position(|(known, _)| **known == *key)
        } else {
            self.0.index.get_or_init(|| Box::new(KeyIndex::of(entries))).find(entries, key)
        };
        position.map(|p| &entries[p].1)
    }

    /// Whether the dict has `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Whether two dicts are one Python object: the same allocation.
    pub fn ptr_eq(a: &Dict, b: &Dict) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// How many values share this dict's allocation.
    pub fn strong_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// The address of the dict's allocation, which names it while it lives.
    pub fn address(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The shared allocation itself: what the codec writes once, what tells one object from
    /// another.
    pub fn shared(&self) -> &Arc<DictData> {
        &self.0
    }

    /// The shared allocation, given up.
    pub(crate) fn into_shared(self) -> Arc<DictData> {
        self.0
    }

    /// A dict of an allocation [`Dict::shared`] gave.
    pub(crate) fn from_shared(shared: Arc<DictData>) -> Dict {
        Dict(shared)
    }

    /// Gives up the dict for a thin pointer that [`Dict::from_raw`] takes back.
    pub fn into_raw(self) -> *const DictData {
        Arc::into_raw(self.0)
    }

    /// Takes back a dict [`Dict::into_raw`] gave up.
    ///
    /// # Safety
    /// `raw` must come from `Dict::into_raw`, and each such pointer be taken back once.
    pub unsafe fn from_raw(raw: *const DictData) -> Dict {
        // SAFETY: `raw` came from `Arc::into_raw` of an `Arc<DictData>` (the caller's
        // guarantee), whose count it still holds.
        Dict(unsafe { Arc::from_raw(raw) })
    }
}

impl DictData {
    /// The entries, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

impl std::ops::Deref for Dict {
    type Target = [Entry];

    fn deref(&self) -> &[Entry] {
        &self.0.entries
    }
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter().map(|(k, v)| (k, v))).finish()
    }
}

impl From<Vec<Entry>> for Dict {
    fn from(pairs: Vec<Entry>) -> Dict {
        Dict::new(pairs)
    }
}

impl FromIterator<Entry> for Dict {
    fn from_iter<I: IntoIterator<Item = Entry>>(pairs: I) -> Dict {
        Dict::new(pairs.into_iter().collect())
    }
}

impl serde::Serialize for DictData {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.entries.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict_of(keys: impl IntoIterator<Item = (String, i64)>) -> Dict {
        keys.into_iter().map(|(k, v)| (Arc::from(k.as_str()), Value::Int(v))).collect()
    }

    /// Small and large dicts keep the first position of a repeated key and its last value,
    /// and find every key, as Python's `dict()` of the same pairs does.
    #[test]
    fn repeated_keys_and_lookups_follow_python_dicts() {
        for size in [0, 1, Dict::SCAN_LIMIT, Dict::SCAN_LIMIT + 1, 1000] {
            let mut pairs: Vec<(String, i64)> = (0..size).map(|i| (format!("k{i}"), i as i64)).collect();
            pairs.extend((0..size).step_by(3).map(|i| (format!("k{i}"), -(i as i64))));
            let dict = dict_of(pairs);
            assert_eq!(dict.len(), size, "size {size}");
            for (i, (key, value)) in dict.iter().enumerate() {
                assert_eq!(**key, format!("k{i}"));
                let expected = if i % 3 == 0 { -(i as i64) } else { i as i64 };
                assert!(matches!(value, Value::Int(v) if *v == expected), "{key}: {value:?}");
                assert!(matches!(dict.get(key), Some(Value::Int(v)) if *v == expected));
            }
            assert!(dict.get("absent").is_none());
            assert!(!dict.contains_key(&format!("k{size}")));
        }
    }
}
