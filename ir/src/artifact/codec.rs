//! The encoding of structured artifact sections (the metadata): the only module that names
//! bincode.
//!
//! bincode 2.0.1 is the last working release of an unmaintained crate (RUSTSEC-2025-0141), so
//! it is kept behind these two functions: replacing it means rewriting this file and rebuilding
//! artifacts (the format version changes), and nothing else. Callers see serde traits and
//! [`CodecError`], never a bincode type.
//!
//! The encoding is bincode's standard configuration through serde: little-endian, variable-length
//! integers, no field names, no self-description. Decoding is strict, because the bytes come from
//! a file: the value must use every byte, and the total size of the strings and byte buffers it
//! declares is capped at [`DECODE_LIMIT`], so that a crafted length cannot make the decoder
//! allocate without bound. Sequences and maps need no cap: serde pre-allocates at most about a
//! megabyte for them whatever their declared length, and grows them only as elements are
//! actually decoded, each of which consumes input.
//!
//! Nesting is bounded too. Decoding a recursive type (the IR's constant [`Value`]s nest) recurses
//! once per level, and a crafted input two bytes per level long would otherwise overflow the
//! stack, which aborts the process. The decoder is wrapped in a guard that fails beyond
//! [`MAX_DEPTH`] levels of nesting and grows the stack on the heap when it runs low, so that
//! deep but legitimate data also decodes on a thread with a small stack. The bound also keeps
//! what the decoded value's later recursive passes (dropping it, printing it) need in check.
//!
//! [`Value`]: crate::value::Value
//!
//! Values keep which of their parts are one object. A string or dict constant that several
//! places of a program share (an attribute's default, copied into each constructor that uses
//! it) is one allocation in memory, and the evaluator takes one allocation for one Python
//! object: a `for` loop skips an element it has seen by `id()`. serde writes an `Arc`'s
//! contents wherever it appears, so [`sharing`] writes a string or dict the first time and a
//! back-reference to it after that, within one [`encode`] or [`decode`].
//!
//! Because the encoding is not self-describing, serde attributes that rely on field names or on
//! missing fields (`#[serde(default)]` on a field, `flatten`, `skip_serializing_if`, untagged
//! enums) do not work as they do in JSON: a value must be decoded with exactly the type it was
//! encoded with. That is what the format version is for.

use bincode::config::{Config, standard};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The most bytes a decoded value may claim for its strings and byte buffers together: far more
/// than the metadata of any real model, far less than would hurt a host.
pub const DECODE_LIMIT: usize = 1 << 30;

fn config() -> impl Config {
    standard().with_limit::<DECODE_LIMIT>()
}

/// Encodes `value`.
///
/// # Panics
///
/// If `value`'s `Serialize` implementation fails, or serializes a sequence or map without telling
/// its length up front (which bincode cannot encode). Derived implementations and the standard
/// collections never do either, so this is a bug in a hand-written implementation.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    match sharing::within_session(|| bincode::serde::encode_to_vec(value, config())) {
        Ok(bytes) => bytes,
        Err(e) => panic!("cannot encode artifact metadata: {e}"),
    }
}

/// Decodes a `T` that takes up exactly `bytes`.
///
/// Fails if the bytes end early, if bytes are left over, if the data does not fit `T` (an
/// invalid enum tag, invalid UTF-8, an out-of-range `char`), or if it declares more than
/// [`DECODE_LIMIT`] bytes of strings and byte buffers. Never panics, whatever `bytes` holds.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let mut decoder = bincode::serde::BorrowedSerdeDecoder::from_slice(bytes, config(), ());
    let value = sharing::within_session(|| T::deserialize(depth::Guard::new(decoder.as_deserializer())))
        .map_err(|e| CodecError(Problem::Decode(e)))?;
    // The decoder does not say how far it read, so decoding anything more from what is left
    // tells whether there is anything left: a single byte always decodes as a `u8`.
    match u8::deserialize(decoder.as_deserializer()) {
        Err(_) => Ok(value),
        Ok(_) => Err(CodecError(Problem::TrailingBytes { len: bytes.len() })),
    }
}

/// Why decoding failed. The message is one line; the underlying codec's type stays private so
/// that replacing the codec does not change this crate's API.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CodecError(Problem);

#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("cannot decode artifact metadata: {}", describe(.0))]
    Decode(bincode::error::DecodeError),
    #[error("cannot decode artifact metadata: the value ends before the end of the data ({len} bytes)")]
    TrailingBytes { len: usize },
}

/// A message for the common decoding errors; bincode's own `Display` is its `Debug`.
fn describe(e: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as E;
    match e {
        E::UnexpectedEnd { additional } => format!("the data ends early ({additional} more bytes expected)"),
        E::LimitExceeded => format!("it declares more than {DECODE_LIMIT} bytes of strings and byte buffers"),
        E::Utf8 { inner } => format!("a string is not UTF-8 ({inner})"),
        E::UnexpectedVariant { type_name, found, .. } => format!("variant {found} of {type_name} does not exist"),
        E::InvalidBooleanValue(v) => format!("{v} is not a bool"),
        E::InvalidCharEncoding(bytes) => format!("{bytes:02x?} is not a char"),
        E::OutsideUsizeRange(n) => format!("the length {n} does not fit this host's usize"),
        // What serde's derived implementations report (an unknown variant, a missing field).
        E::OtherString(message) => message.clone(),
        E::Other(message) => (*message).to_owned(),
        other => format!("{other:?}"),
    }
}

impl CodecError {
    /// Whether decoding stopped because the data declared more than [`DECODE_LIMIT`] bytes.
    pub fn is_limit_exceeded(&self) -> bool {
        matches!(self.0, Problem::Decode(bincode::error::DecodeError::LimitExceeded))
    }
}

/// The deepest nesting [`decode`] accepts, counted in serde levels: each struct, sequence, map,
/// option, newtype and enum variant is one. A constant list nests two levels per list and a dict
/// three, and the parser bounds syntax trees at 1000 levels, so 4096 leaves room for any model
/// the frontend accepts while keeping recursion over a decoded value shallow.
pub const MAX_DEPTH: u32 = 4096;

/// A serde adapter that counts nesting and grows the stack as the decoder recurses.
///
/// Every `Deserializer` call wraps the visitor, and every place where a visitor descends (into
/// a sequence's elements, a map's entries, an enum's variant, an option's or newtype's content)
/// wraps the access or deserializer it hands on with the depth one higher. Everything else is
/// forwarded unchanged, including `is_human_readable`, so that types that serialize differently
/// for binary formats see the same answer as when they were encoded.
mod depth {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

    use super::MAX_DEPTH;

    /// Stack left when the guard moves to a new segment, and the size of the segment: as the
    /// frontend's passes do.
    const RED_ZONE: usize = 128 * 1024;
    const SEGMENT: usize = 4 * 1024 * 1024;
    /// How many levels apart the stack is checked.
    const CHECK_EVERY: u32 = 8;

    pub(super) struct Guard<D> {
        de: D,
        depth: u32,
    }

    impl<D> Guard<D> {
        pub(super) fn new(de: D) -> Self {
            Guard { de, depth: 0 }
        }
    }

    struct Wrap<V> {
        visitor: V,
        depth: u32,
    }

    struct Seed<S> {
        seed: S,
        depth: u32,
    }

    struct Access<A> {
        access: A,
        depth: u32,
    }

    /// Runs `f` one level deeper than `depth`, or fails if that is too deep.
    fn descend<T, E: de::Error>(depth: u32, f: impl FnOnce(u32) -> Result<T, E>) -> Result<T, E> {
        if depth >= MAX_DEPTH {
            return Err(E::custom(format_args!("the data nests deeper than {MAX_DEPTH} levels")));
        }
        // Checking the stack costs a little on every level, and a level takes far less than the
        // red zone divided by the interval, so checking every few levels is as safe.
        if depth.is_multiple_of(CHECK_EVERY) {
            stacker::maybe_grow(RED_ZONE, SEGMENT, || f(depth + 1))
        } else {
            f(depth + 1)
        }
    }

    macro_rules! forward_deserialize {
        ($($method:ident $(($($arg:ident: $ty:ty),*))?;)*) => {
            $(
                fn $method<V: Visitor<'de>>(self, $($($arg: $ty,)*)? visitor: V) -> Result<V::Value, Self::Error> {
                    self.de.$method($($($arg,)*)? Wrap { visitor, depth: self.depth })
                }
            )*
        };
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Guard<D> {
        type Error = D::Error;

        forward_deserialize! {
            deserialize_any; deserialize_bool; deserialize_i8; deserialize_i16; deserialize_i32;
            deserialize_i64; deserialize_i128; deserialize_u8; deserialize_u16; deserialize_u32;
            deserialize_u64; deserialize_u128; deserialize_f32; deserialize_f64; deserialize_char;
            deserialize_str; deserialize_string; deserialize_bytes; deserialize_byte_buf;
            deserialize_option; deserialize_unit; deserialize_unit_struct(name: &'static str);
            deserialize_newtype_struct(name: &'static str); deserialize_seq;
            deserialize_tuple(len: usize); deserialize_tuple_struct(name: &'static str, len: usize);
            deserialize_map; deserialize_struct(name: &'static str, fields: &'static [&'static str]);
            deserialize_enum(name: &'static str, variants: &'static [&'static str]);
            deserialize_identifier; deserialize_ignored_any;
        }

        fn is_human_readable(&self) -> bool {
            self.de.is_human_readable()
        }
    }

    macro_rules! forward_visit {
        ($($method:ident($ty:ty);)*) => {
            $(
                fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                    self.visitor.$method(v)
                }
            )*
        };
    }

    impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
        type Value = V::Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.visitor.expecting(f)
        }

        forward_visit! {
            visit_bool(bool); visit_i8(i8); visit_i16(i16); visit_i32(i32); visit_i64(i64);
            visit_i128(i128); visit_u8(u8); visit_u16(u16); visit_u32(u32); visit_u64(u64);
            visit_u128(u128); visit_f32(f32); visit_f64(f64); visit_char(char); visit_str(&str);
            visit_borrowed_str(&'de str); visit_string(String); visit_bytes(&[u8]);
            visit_borrowed_bytes(&'de [u8]); visit_byte_buf(Vec<u8>);
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            self.visitor.visit_none()
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.visitor.visit_unit()
        }

        fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            descend(self.depth, |depth| self.visitor.visit_some(Guard { de, depth }))
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            descend(self.depth, |depth| self.visitor.visit_newtype_struct(Guard { de, depth }))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, access: A) -> Result<Self::Value, A::Error> {
            descend(self.depth, |depth| self.visitor.visit_seq(Access { access, depth }))
        }

        fn visit_map<A: MapAccess<'de>>(self, access: A) -> Result<Self::Value, A::Error> {
            descend(self.depth, |depth| self.visitor.visit_map(Access { access, depth }))
        }

        fn visit_enum<A: EnumAccess<'de>>(self, access: A) -> Result<Self::Value, A::Error> {
            descend(self.depth, |depth| self.visitor.visit_enum(Access { access, depth }))
        }
    }

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
        type Value = S::Value;

        fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            self.seed.deserialize(Guard { de, depth: self.depth })
        }
    }

    impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<A> {
        type Error = A::Error;

        fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
            self.access.next_element_seed(Seed { seed, depth: self.depth })
        }

        fn size_hint(&self) -> Option<usize> {
            self.access.size_hint()
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
            self.access.next_key_seed(Seed { seed, depth: self.depth })
        }

        fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
            self.access.next_value_seed(Seed { seed, depth: self.depth })
        }

        fn size_hint(&self) -> Option<usize> {
            self.access.size_hint()
        }
    }

    impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<A> {
        type Error = A::Error;
        type Variant = Access<A::Variant>;

        fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self::Variant), A::Error> {
            let depth = self.depth;
            let (value, access) = self.access.variant_seed(Seed { seed, depth })?;
            Ok((value, Access { access, depth }))
        }
    }

    impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<A> {
        type Error = A::Error;

        fn unit_variant(self) -> Result<(), A::Error> {
            self.access.unit_variant()
        }

        fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
            self.access.newtype_variant_seed(Seed { seed, depth: self.depth })
        }

        fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
            self.access.tuple_variant(len, Wrap { visitor, depth: self.depth })
        }

        fn struct_variant<V: Visitor<'de>>(
            self,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, A::Error> {
            self.access.struct_variant(fields, Wrap { visitor, depth: self.depth })
        }
    }
}

/// Strings and dicts of [`Value`]s written once per allocation within one encode, and read
/// back as one allocation ([`Value`]'s `Str` and `Dict` use these through `#[serde(with)]`).
/// Outside an [`encode`] or [`decode`] (serde_json, say), or for a human-readable format, a
/// value is written whole every time, as serde writes an `Arc`.
///
/// A shared part is numbered when its contents have been written (or read), so a dict inside
/// a dict gets its number first on both sides.
///
/// [`Value`]: crate::value::Value
pub(crate) mod sharing {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::Arc;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::value::{Dict, DictData, Entry};

    /// What one encode or decode has seen.
    #[derive(Default)]
    struct Session {
        /// Encoding: the number of each string and dict allocation written, by address.
        written_strs: HashMap<usize, u32>,
        written_dicts: HashMap<usize, u32>,
        /// Decoding: the strings and dicts read, by number.
        read_strs: Vec<Arc<str>>,
        read_dicts: Vec<Arc<DictData>>,
    }

    thread_local! {
        static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
    }

    /// Runs `f` with a fresh session, and puts back whatever session there was after.
    pub(super) fn within_session<R>(f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Session>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                SESSION.with(|session| *session.borrow_mut() = previous);
            }
        }
        let _restore = Restore(SESSION.with(|session| session.borrow_mut().replace(Session::default())));
        f()
    }

    fn with_session<R>(f: impl FnOnce(&mut Session) -> R) -> Option<R> {
        SESSION.with(|session| session.borrow_mut().as_mut().map(f))
    }

    /// A shared part as written: its contents the first time, its number after.
    #[derive(Serialize, Deserialize)]
    enum Shared<T> {
        New(T),
        Seen(u32),
    }

    /// Writes a shared part: whole the first time its allocation is met (numbered in
    /// `written`), its number after.
    fn serialize_shared<T: ?Sized + Serialize, S: Serializer>(
        arc: &Arc<T>,
        written: fn(&mut Session) -> &mut HashMap<usize, u32>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return (**arc).serialize(serializer);
        }
        let key = Arc::as_ptr(arc) as *const u8 as usize;
        match with_session(|session| written(session).get(&key).copied()).flatten() {
            Some(number) => Shared::<&T>::Seen(number).serialize(serializer),
            None => {
                let done = Shared::New(&**arc).serialize(serializer)?;
                with_session(|session| {
                    let table = written(session);
                    let number = table.len() as u32;
                    table.insert(key, number);
                });
                Ok(done)
            }
        }
    }

    /// Reads a shared part written by [`serialize_shared`]: `Owned` is how its contents
    /// decode and `make` what shares them, `read` the parts read so far, `what` names the
    /// kind in errors.
    fn deserialize_shared<'de, T: ?Sized, Owned: Deserialize<'de>, D: Deserializer<'de>>(
        read: fn(&mut Session) -> &mut Vec<Arc<T>>,
        make: fn(Owned) -> Arc<T>,
        what: &str,
        deserializer: D,
    ) -> Result<Arc<T>, D::Error> {
        if deserializer.is_human_readable() {
            return Ok(make(Owned::deserialize(deserializer)?));
        }
        match Shared::<Owned>::deserialize(deserializer)? {
            Shared::New(contents) => {
                let arc: Arc<T> = make(contents);
                with_session(|session| read(session).push(arc.clone()));
                Ok(arc)
            }
            Shared::Seen(number) => with_session(|session| read(session).get(number as usize).cloned())
                .flatten()
                .ok_or_else(|| D::Error::custom(format!("{what} {number} is named before it was read"))),
        }
    }

    pub(crate) fn serialize_str<S: Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_shared(s, |session| &mut session.written_strs, serializer)
    }

    pub(crate) fn deserialize_str<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        deserialize_shared::<str, String, D>(|session| &mut session.read_strs, Arc::from, "string", deserializer)
    }

    pub(crate) fn serialize_dict<S: Serializer>(dict: &Dict, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_shared(dict.shared(), |session| &mut session.written_dicts, serializer)
    }

    pub(crate) fn deserialize_dict<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Dict, D::Error> {
        deserialize_shared::<DictData, Vec<Entry>, D>(
            |session| &mut session.read_dicts,
            |entries| Dict::new(entries).into_shared(),
            "dict",
            deserializer,
        )
        .map(Dict::from_shared)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::value::Value;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Outer {
        name: String,
        items: Vec<Inner>,
        by_name: BTreeMap<String, Vec<u8>>,
        next: Option<Box<Outer>>,
        pair: (u8, i64),
        ratio: f64,
        shared: Arc<str>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Inner {
        Unit,
        Number(u64),
        Named { flag: bool, text: String },
    }

    fn outer() -> Outer {
        Outer {
            name: "outer".into(),
            items: vec![Inner::Unit, Inner::Number(u64::MAX), Inner::Named { flag: true, text: "é".into() }],
            by_name: [("a".to_string(), vec![1, 2, 3]), ("b".to_string(), vec![])].into_iter().collect(),
            next: Some(Box::new(Outer {
                name: String::new(),
                items: vec![],
                by_name: BTreeMap::new(),
                next: None,
                pair: (0, -1),
                ratio: f64::NEG_INFINITY,
                shared: Arc::from(""),
            })),
            pair: (255, i64::MIN),
            ratio: 0.1,
            shared: Arc::from("shared"),
        }
    }

    #[test]
    fn round_trip() {
        let value = outer();
        let bytes = encode(&value);
        assert_eq!(decode::<Outer>(&bytes).unwrap(), value);

        // The IR's values: nested, shared, big integers.
        let value = Value::List(Arc::from(vec![
            Value::Null(crate::value::NullId::literal(2, 17)),
            Value::Int(-3),
            Value::BigInt(Arc::new(num_bigint::BigInt::from(u64::MAX) * 1000)),
            Value::Dict(crate::value::Dict::from(vec![(Arc::from("k"), Value::str("v"))])),
        ]));
        let decoded: Value = decode(&encode(&value)).unwrap();
        assert_eq!(format!("{decoded:?}"), format!("{value:?}"));
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut bytes = encode(&outer());
        let len = bytes.len();
        bytes.push(0);
        assert!(decode::<Outer>(&bytes[..len]).is_ok());
        let e = decode::<Outer>(&bytes).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot decode artifact metadata: the value ends before the end of the data ({} bytes)", len + 1)
        );
    }

    #[test]
    fn rejects_every_truncation() {
        let bytes = encode(&outer());
        for len in 0..bytes.len() {
            assert!(decode::<Outer>(&bytes[..len]).is_err(), "length {len}");
        }
        assert_eq!(
            decode::<Outer>(&[]).unwrap_err().to_string(),
            "cannot decode artifact metadata: the data ends early (1 more bytes expected)"
        );
    }

    #[test]
    fn rejects_invalid_data() {
        let cases: [(Result<(), CodecError>, &str); 4] = [
            (
                decode::<String>(&[2, 0xff, 0xfe]).map(drop),
                "a string is not UTF-8 (invalid utf-8 sequence of 1 bytes from index 0)",
            ),
            (
                decode::<(String, Inner)>(&[1, b'a', 7]).map(drop),
                "invalid value: integer `7`, expected variant index 0 <= i < 3",
            ),
            (decode::<bool>(&[2]).map(drop), "2 is not a bool"),
            (decode::<char>(&[0xf4, 0x90, 0x80, 0x80]).map(drop), "[f4, 90, 80, 80] is not a char"),
        ];
        for (result, expected) in cases {
            assert_eq!(result.unwrap_err().to_string(), format!("cannot decode artifact metadata: {expected}"));
        }
    }

    /// A crafted length must fail fast: for strings and byte buffers (which bincode allocates up
    /// front) through the limit, for sequences because serde grows them only as elements arrive.
    /// If either allocated what the length says, this test would abort on allocation failure.
    #[test]
    fn huge_lengths_do_not_allocate() {
        // bincode's varint: 253 announces a u64.
        let huge = |n: u64| [&[253u8][..], &n.to_le_bytes()].concat();
        for n in [DECODE_LIMIT as u64 + 1, 1 << 40, u64::MAX / 2, u64::MAX] {
            let e = decode::<String>(&huge(n)).unwrap_err();
            assert!(e.is_limit_exceeded(), "{n}: {e}");
            let e = decode::<Vec<u8>>(&[&huge(n)[..], b"abc"].concat()).unwrap_err();
            assert!(e.is_limit_exceeded() || e.to_string().contains("ends early"), "{n}: {e}");
            let e = decode::<Vec<u64>>(&[&huge(n)[..], &[1, 2, 3]].concat()).unwrap_err();
            assert!(e.to_string().contains("ends early"), "{n}: {e}");
            let e = decode::<BTreeMap<String, String>>(&huge(n)).unwrap_err();
            assert!(e.to_string().contains("ends early"), "{n}: {e}");
        }
        assert_eq!(
            decode::<String>(&huge(1 << 40)).unwrap_err().to_string(),
            format!(
                "cannot decode artifact metadata: it declares more than {DECODE_LIMIT} bytes of strings and byte buffers"
            )
        );
    }

    /// `depth` nested one-element lists around a null, as bincode encodes the IR's `Value`.
    fn nested_lists(depth: usize) -> Vec<u8> {
        let list = 6; // Value::List's variant index
        let mut bytes = [list, 1].repeat(depth);
        // Value::Null (variant 0) and its identity, a varint.
        bytes.extend([0, 0]);
        bytes
    }

    #[test]
    fn deep_data_decodes_on_a_small_stack() {
        // As deep as the parser allows a list literal to be, decoded on a thread whose stack
        // would overflow without the guard's growth.
        let bytes = nested_lists(1000);
        let decoded = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || decode::<Value>(&bytes).map_err(|e| e.to_string()))
            .unwrap()
            .join()
            .unwrap();
        let mut value = decoded.unwrap();
        for _ in 0..1000 {
            let Value::List(items) = value else { panic!("not a list") };
            value = items[0].clone();
        }
        assert!(matches!(value, Value::Null(_)));
    }

    #[test]
    fn too_deep_data_is_rejected() {
        for depth in [MAX_DEPTH as usize, 1_000_000] {
            let e = decode::<Value>(&nested_lists(depth)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("cannot decode artifact metadata: the data nests deeper than {MAX_DEPTH} levels")
            );
        }
    }

    /// A string or dict that several places share is one allocation again after a round
    /// trip, and equal ones that were apart stay apart: which allocation a value is tells
    /// which Python object it is.
    #[test]
    fn shared_values_stay_shared() {
        use crate::value::{Dict, Value};
        use std::sync::Arc;
        let shared_str: Arc<str> = Arc::from("a default");
        let shared_dict =
            Dict::from(vec![(Arc::from("k"), Value::Dict(Dict::from(vec![(Arc::from("j"), Value::Int(1))])))]);
        let values = vec![
            Value::Str(shared_str.clone()),
            Value::Str(Arc::from("a default")),
            Value::List(Arc::from(vec![Value::Str(shared_str.clone()), Value::Dict(shared_dict.clone())])),
            Value::Dict(shared_dict.clone()),
            Value::Dict(Dict::from(shared_dict.to_vec())),
        ];
        let decoded: Vec<Value> = decode(&encode(&values)).unwrap();
        let (Value::Str(a), Value::Str(b), Value::List(list), Value::Dict(d), Value::Dict(e)) =
            (&decoded[0], &decoded[1], &decoded[2], &decoded[3], &decoded[4])
        else {
            panic!("{decoded:?}")
        };
        let (Value::Str(c), Value::Dict(f)) = (&list[0], &list[1]) else { panic!("{list:?}") };
        assert!(Arc::ptr_eq(a, c) && !Arc::ptr_eq(a, b) && &**a == "a default" && **b == **a);
        assert!(Dict::ptr_eq(d, f) && !Dict::ptr_eq(d, e));
        assert_eq!(format!("{decoded:?}"), format!("{values:?}"));
    }

    /// A back-reference to a string not read yet is an error, not a panic.
    #[test]
    fn unknown_back_references_are_rejected() {
        use crate::value::Value;
        // A list of one string ends with `Shared::New` (0), the length 1 and "x": make it
        // `Shared::Seen` (1) of string 7.
        let mut bytes = encode(&vec![Value::str("x")]);
        bytes.truncate(bytes.len() - 3);
        bytes.extend_from_slice(&[1, 7]);
        let error = decode::<Vec<Value>>(&bytes).unwrap_err().to_string();
        assert!(error.contains("string 7 is named before it was read"), "{error}");
    }
}
