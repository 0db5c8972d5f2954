//! Interned identifiers.
//!
//! Every name in a program (entities, attributes, variables, namespaces path segments) is
//! interned once and referred to by a 4-byte [`Symbol`]; comparisons and hashing are then
//! integer operations.

use serde::{Deserialize, Serialize};
use string_interner::backend::StringBackend;
use string_interner::symbol::SymbolU32;
use string_interner::{StringInterner, Symbol as _};

/// An interned string.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::Immutable,
    zerocopy::KnownLayout,
)]
#[repr(transparent)]
pub struct Symbol(u32);

impl Symbol {
    pub fn as_u32(self) -> u32 {
        self.0
    }

    pub fn from_u32(raw: u32) -> Self {
        Symbol(raw)
    }
}

/// The table behind [`Symbol`]s.
pub struct Interner {
    table: StringInterner<StringBackend<SymbolU32>>,
}

impl std::fmt::Debug for Interner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Interner({} symbols)", self.table.len())
    }
}

impl Default for Interner {
    fn default() -> Self {
        Interner::new()
    }
}

impl Interner {
    pub fn new() -> Self {
        Interner { table: StringInterner::new() }
    }

    pub fn intern(&mut self, text: &str) -> Symbol {
        Symbol(self.table.get_or_intern(text).to_usize() as u32)
    }

    /// The symbol of `text` if it was interned before.
    pub fn get(&self, text: &str) -> Option<Symbol> {
        self.table.get(text).map(|s| Symbol(s.to_usize() as u32))
    }

    pub fn resolve(&self, symbol: Symbol) -> &str {
        let raw = SymbolU32::try_from_usize(symbol.0 as usize).expect("symbol index fits in u32");
        self.table.resolve(raw).expect("symbol comes from this interner")
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_idempotent() {
        let mut i = Interner::new();
        let a = i.intern("host");
        let b = i.intern("file");
        assert_eq!(a, i.intern("host"));
        assert_ne!(a, b);
        assert_eq!(i.resolve(b), "file");
        assert_eq!(i.get("nope"), None);
    }
}
