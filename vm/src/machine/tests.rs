use std::hash::BuildHasher;
use std::sync::Arc;

use weft_ir::value::Value;

use super::{
    Cell, CellKind, IdentityKey, Items, Key, PackedType, SeenElements, Table, Values, WaitList, WaitNodes,
    hash_key_part, key_part_eq, substitute_in_one_pass,
};

/// A cell gives back every kind of value it was given, and owns exactly one count of a
/// shared value: reading it borrows, cloning it counts one more, replacing or dropping the
/// cell releases it.
#[test]
fn cells_keep_values_and_their_counts() {
    let text: Arc<str> = Arc::from("text");
    let items: Arc<[Value]> = Arc::from(vec![Value::Int(1), Value::Str(text.clone())]);
    let key: Arc<str> = Arc::from("k");
    let entries: weft_ir::value::Dict = vec![(key, Value::Float(f64::NAN))].into();
    let big: Arc<num_bigint::BigInt> = Arc::new(num_bigint::BigInt::from(i64::MAX) * 4);
    let reference = Arc::new(weft_ir::value::Reference {
        class: "EnvironmentReference".into(),
        module: "inmanta_plugins.std".into(),
        args: vec![("name".into(), Value::str("HOME"))],
    });
    let values = [
        Value::Null(weft_ir::value::NullId(weft_ir::value::NullId::FIRST_FRESH + 5)),
        Value::Bool(true),
        Value::Int(i64::MIN),
        Value::BigInt(big.clone()),
        Value::Float(-0.0),
        Value::Str(text.clone()),
        Value::Str(Arc::from("")),
        Value::List(items.clone()),
        Value::Dict(entries.clone()),
        Value::Instance(u32::MAX),
        Value::Unknown,
        Value::Reference(reference.clone()),
    ];
    let mut exts = Table::new();
    for value in &values {
        let mut cell = Cell::new(CellKind::Plain);
        assert!(cell.value().is_none());
        cell.set_value(value.clone());
        assert_eq!(format!("{:?}", *cell.value().expect("a value")), format!("{value:?}"));
        assert_eq!(format!("{:?}", cell.value_cloned().expect("a value")), format!("{value:?}"));
        assert_eq!(cell.location_index(&exts), Cell::NO_LOCATION);
        cell.set_has_value(true);
        cell.set_location_index(&mut exts, 7);
        assert_eq!(format!("{:?}", cell.take_value().expect("a value")), format!("{value:?}"));
        assert!(cell.value().is_none());
        assert_eq!(cell.location_index(&exts), 7);
    }
    let before = Arc::strong_count(&text);
    let mut cell = Cell::new(CellKind::Plain);
    cell.set_value(Value::Str(text.clone()));
    assert_eq!(Arc::strong_count(&text), before + 1);
    {
        let _borrowed = cell.value();
        assert_eq!(Arc::strong_count(&text), before + 1);
        let cloned = cell.value_cloned();
        assert_eq!(Arc::strong_count(&text), before + 2);
        drop(cloned);
    }
    cell.set_value(Value::List(items.clone()));
    assert_eq!(Arc::strong_count(&text), before);
    let list_count = Arc::strong_count(&items);
    drop(cell);
    assert_eq!(Arc::strong_count(&items), list_count - 1);
    drop(values);
    assert_eq!(Arc::strong_count(&big), 1);
    assert_eq!(Arc::strong_count(&reference), 1);
    assert_eq!(entries.strong_count(), 1);
}

/// Index key parts are equal exactly when their `repr`s are, which is how the reference
/// compares keys, and equal parts hash alike.
#[test]
fn key_parts_compare_as_their_reprs() {
    let values = [
        Value::NULL,
        Value::Bool(true),
        Value::Bool(false),
        Value::Int(1),
        Value::Int(-1),
        Value::Float(1.0),
        Value::Float(-0.0),
        Value::Float(0.0),
        Value::Float(f64::NAN),
        Value::Float(-f64::NAN),
        Value::Float(f64::INFINITY),
        Value::int(num_bigint::BigInt::from(i64::MAX) * 4),
        Value::str("1"),
        Value::str("True"),
        Value::str("None"),
        Value::str("a'b"),
        Value::Instance(1),
        Value::Instance(2),
        Value::List(Arc::from(vec![Value::Int(1), Value::str("x")])),
        Value::List(Arc::from(vec![Value::Int(1), Value::str("x")])),
        Value::List(Arc::from(vec![Value::Float(1.0), Value::str("x")])),
        Value::Dict(vec![(Arc::from("k"), Value::Instance(1))].into()),
        Value::Unknown,
    ];
    let hasher = hashbrown::DefaultHashBuilder::default();
    let hash = |v: &Value| {
        let mut state = hasher.build_hasher();
        hash_key_part(v, &mut state);
        std::hash::Hasher::finish(&state)
    };
    for a in &values {
        for b in &values {
            let same = a.py_repr() == b.py_repr();
            assert_eq!(key_part_eq(a, b), same, "{a:?} and {b:?}");
            if same {
                assert_eq!(hash(a), hash(b), "{a:?} and {b:?}");
            }
        }
    }
}

/// Waiter lists release their waiters in registration order, whatever the interleaving
/// of lists sharing the node arena and the reuse of freed nodes.
#[test]
fn wait_lists_are_fifo() {
    let mut nodes = WaitNodes::default();
    let (mut a, mut b) = (WaitList::EMPTY, WaitList::EMPTY);
    for round in 0..3u32 {
        for i in 0..5 {
            nodes.push(&mut a, round * 100 + i);
            nodes.push(&mut b, round * 100 + 50 + i);
        }
        let mut list = std::mem::replace(&mut a, WaitList::EMPTY);
        let drained: Vec<u32> = std::iter::from_fn(|| nodes.pop(&mut list)).collect();
        assert_eq!(drained, (0..5).map(|i| round * 100 + i).collect::<Vec<_>>());
        assert!(nodes.pop(&mut list).is_none());
    }
    let drained: Vec<u32> = std::iter::from_fn(|| nodes.pop(&mut b)).collect();
    let expected: Vec<u32> = (0..3).flat_map(|round| (0..5).map(move |i| round * 100 + 50 + i)).collect();
    assert_eq!(drained, expected);
}

/// A cell's packed word keeps its kind, flags and index apart.
#[test]
fn cell_fields_share_one_word() {
    for kind in &CellKind::ALL[..7] {
        let mut cell = Cell::new(*kind);
        assert_eq!(cell.kind(), *kind);
        assert_eq!(cell.tracks_promises(), cell.is_delayed());
        cell.set_has_value(true);
        cell.set_queued(true);
        cell.flag(Cell::LISTENED, true);
        let last_entity = PackedType::entity(weft_ir::program::EntityId(super::MAX_ENTITIES as u32 - 1));
        if *kind == CellKind::Plain {
            cell.set_ty(last_entity);
            assert_eq!(cell.ty(), last_entity);
            assert_eq!(cell.attribute_of(), None);
        }
        cell.set_tracks_promises(false);
        assert_eq!(cell.kind(), *kind);
        assert!(cell.has_value() && cell.queued() && !cell.tracks_promises() && cell.is_set(Cell::LISTENED));
    }
    let attr = weft_ir::program::AttrId(super::MAX_ATTRIBUTES as u32 - 1);
    let mut exts = Table::new();
    let mut cell = Cell::attribute(CellKind::Single, attr);
    cell.set_has_value(true);
    cell.set_location_index(&mut exts, Cell::NO_LOCATION - 1);
    cell.set_value(Value::Int(3));
    assert_eq!(cell.attribute_of(), Some(attr));
    assert_eq!(cell.ty(), PackedType::FROM_OWNER);
    assert_eq!(cell.kind(), CellKind::Single);
    // An extension takes the location over, and the attribute and value stay as they were.
    assert_eq!(cell.ext_index(), None);
    let ext = cell.ext_or_make(&mut exts);
    assert_eq!((ext, cell.ext_or_make(&mut exts), exts.len()), (0, 0, 1));
    assert_eq!(cell.attribute_of(), Some(attr));
    assert_eq!(cell.ty(), PackedType::FROM_OWNER);
    assert_eq!(cell.location_index(&exts), Cell::NO_LOCATION - 1);
    assert_eq!(format!("{:?}", *cell.value().expect("a value")), "Int(3)");
    cell.set_location_index(&mut exts, 5);
    assert_eq!((cell.ext_index(), cell.location_index(&exts)), (Some(0), 5));
    // A proxy's target, with and without an extension, and its waiters beside it.
    let mut proxy = Cell::new(CellKind::Proxy);
    assert_eq!((proxy.target(), proxy.attribute_of()), (None, None));
    proxy.waiters_mut(&mut exts).tail = 9;
    proxy.set_target(0);
    assert_eq!(proxy.target(), Some(0));
    assert_eq!(proxy.ext_or_make(&mut exts), 1);
    assert_eq!((proxy.target(), proxy.waiters(&exts).tail), (Some(0), 9));
    let mut far = Cell::new(CellKind::Proxy);
    far.set_target(super::CellId::MAX - 2);
    assert_eq!((far.target(), far.value().is_none()), (Some(super::CellId::MAX - 2), true));
}

/// The `{{name}}` spans of a template as the frontend finds them (left to right, no
/// overlap): `{{`, optional spaces, name characters, optional spaces, `}}`.
fn spans(template: &str) -> Vec<&str> {
    let b = template.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        if &b[i..i + 2] == b"{{" {
            let mut j = i + 2;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            let name = j;
            while j < b.len() && b[j].is_ascii_alphabetic() {
                j += 1;
            }
            let named = j > name;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            if named && template[j..].starts_with("}}") {
                found.push(&template[i..j + 2]);
                i = j + 2;
                continue;
            }
        }
        i += 1;
    }
    found
}

/// The one-pass substitution, where it applies, gives what the reference's sequence of
/// `str.replace` calls gives: checked over every template of up to eight characters from
/// an alphabet of braces, a name letter and a space, with values with and without braces.
#[test]
fn one_pass_substitution_agrees_with_replacing_part_by_part() {
    let alphabet = ['{', '}', 'a', ' '];
    let value_sets: [&[&str]; 4] =
        [&["x", "yy", "", "z"], &["{{a}}", "x", "a", "b"], &["}", "{", "a", "x"], &["a", "a}}", "{{", "q"]];
    let mut applied = 0;
    for len in 0..=8u32 {
        for code in 0..4usize.pow(len) {
            let mut n = code;
            let template: String = (0..len)
                .map(|_| {
                    let c = alphabet[n % 4];
                    n /= 4;
                    c
                })
                .collect();
            let matched = spans(&template);
            for values in &value_sets {
                let rendered: Vec<String> = (0..matched.len()).map(|i| values[i % values.len()].to_string()).collect();
                let mut expected = template.clone();
                for (m, v) in matched.iter().zip(&rendered) {
                    expected = expected.replace(m, v);
                }
                if let Some(text) = substitute_in_one_pass(&template, &matched, &rendered) {
                    applied += 1;
                    assert_eq!(text, expected, "template {template:?}, values {rendered:?}");
                }
            }
        }
    }
    assert!(applied > 2_000, "the one-pass path applied to only {applied} cases");
}

/// A task's values give the last value of each key, whether they were added one by one or at
/// once, below and beyond the size where they are kept sorted, and in any order of keys.
#[test]
fn values_keep_the_last_value_of_each_key() {
    for count in [0usize, 1, 5, Values::SCANNED - 1, Values::SCANNED, Values::SCANNED + 1, 40, 1000] {
        // Keys in a scrambled order, each given once, then every third given again.
        let keys: Vec<u32> = (0..count as u32).map(|i| (i * 7919) % (count as u32).max(1)).collect();
        let mut given: Vec<(u32, i64)> = keys.iter().map(|&k| (k, i64::from(k))).collect();
        given.extend(keys.iter().step_by(3).map(|&k| (k, -i64::from(k) - 1)));
        let expected = |k: u32| given.iter().rev().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let mut one_by_one = Values::new();
        for (k, v) in &given {
            one_by_one.insert(Key(*k), Value::Int(*v));
        }
        let mut at_once = Values::new();
        at_once.extend_many(given.iter().map(|(k, v)| Ok((Key(*k), Value::Int(*v))))).expect("no error");
        for values in [&one_by_one, &at_once] {
            assert_eq!(values.0.len(), keys.len(), "{count} keys");
            for k in 0..=count as u32 {
                let found = values.get(&Key(k)).map(|v| match v {
                    Value::Int(i) => *i,
                    other => panic!("{other:?}"),
                });
                assert_eq!(found, expected(k), "key {k} of {count}");
            }
        }
    }
}

/// Every kind of requirement key is distinct from the others with the same index, and says
/// what it is: a comprehension's results share their kind with a task's own requirements,
/// and the result of an operator computed into a temporary has a kind of its own.
#[test]
fn requirement_keys_of_every_kind_are_distinct() {
    use weft_ir::program::ExprId;
    for index in [0u32, 1, 7, 1000, (1 << 28) - 1] {
        let keys = [
            (Key::expr(ExprId(index)), "Expr"),
            (Key::collector(ExprId(index)), "Collector"),
            (Key::extra(index), "Extra"),
            (Key::index(index), "Index"),
            (Key::temporary(ExprId(index)), "Temporary"),
        ];
        for (i, (key, name)) in keys.iter().enumerate() {
            assert_eq!(format!("{key:?}"), format!("{name}({index})"));
            for (other, other_name) in &keys[i + 1..] {
                assert_ne!(key, other, "{name} and {other_name} of {index}");
            }
        }
        assert_eq!(Key::temporary(ExprId(index)).kind(), Key::KIND_TEMPORARY);
        assert_ne!(Key::index(index).kind(), Key::KIND_TEMPORARY);
    }
}

/// What a list cell's elements read as, whichever form it keeps them in.
fn items_as_text(items: &Items) -> String {
    let by_iteration: Vec<String> = items.iter().map(|v| format!("{v:?}")).collect();
    let by_position: Vec<String> = (0..items.len()).map(|i| format!("{:?}", items.get(i))).collect();
    let lent = items.with_values(|values| values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>());
    assert_eq!(by_iteration, by_position);
    assert_eq!(by_iteration, lent);
    by_iteration.join(", ")
}

/// A list of instances keeps their ids; an element of another kind turns it into values, and
/// sharing it makes one list; every form reads the same elements in the order they came.
#[test]
fn list_elements_read_the_same_in_every_form() {
    let mut items = Items::default();
    for id in [3, 1, 2] {
        items.push(Value::Instance(id));
    }
    assert!(matches!(items, Items::Instances(_)));
    assert_eq!(items_as_text(&items), "Instance(3), Instance(1), Instance(2)");
    assert!(items.contains(&Value::Instance(1)) && !items.contains(&Value::Instance(4)));
    assert!(!items.contains(&Value::Int(1)));

    let shared = items.share();
    assert!(matches!(items, Items::Shared(_)));
    assert_eq!(shared.len(), 3);
    assert_eq!(items_as_text(&items), "Instance(3), Instance(1), Instance(2)");
    // A complete list that grows after all becomes a vector again, of values.
    items.push(Value::Instance(9));
    assert!(matches!(items, Items::Values(_)));
    assert_eq!(items_as_text(&items), "Instance(3), Instance(1), Instance(2), Instance(9)");

    let mut mixed = Items::default();
    mixed.push(Value::Instance(5));
    mixed.push(Value::str("five"));
    mixed.push(Value::Instance(6));
    assert!(matches!(mixed, Items::Values(_)));
    assert_eq!(items_as_text(&mixed), "Instance(5), Str(\"five\"), Instance(6)");
    assert!(mixed.contains(&Value::str("five")) && mixed.contains(&Value::Instance(6)));
    assert!(matches!(mixed.to_list(), Value::List(list) if list.len() == 3));
    assert!(Items::default().is_empty());
    // Many elements (the list grows by one to four, then by doubling) keep their order.
    let mut many = Items::default();
    for id in 0..100 {
        many.push(Value::Instance(id));
    }
    assert!((0..100).all(|i| matches!(many.get(i as usize), Value::Instance(id) if id == i)));
}

/// A `for` loop's memory of what it ran for answers the same as a set, in its list of ids and
/// past it: once for each instance, and by identity for other values.
#[test]
fn seen_elements_remember_each_element_once() {
    let mut seen = SeenElements::new();
    for round in 0..2 {
        for id in 0..(SeenElements::SCANNED as u32 + 5) {
            assert_eq!(seen.insert(IdentityKey::Instance(id)), round == 0, "instance {id}, round {round}");
        }
    }
    assert!(matches!(seen, SeenElements::Keys(_)));

    let mut seen = SeenElements::new();
    assert!(seen.insert(IdentityKey::Instance(1)));
    assert!(matches!(seen, SeenElements::Instances(_)));
    assert!(seen.insert(IdentityKey::Bool(true)));
    assert!(matches!(seen, SeenElements::Keys(_)));
    assert!(!seen.insert(IdentityKey::Instance(1)));
    assert!(!seen.insert(IdentityKey::Bool(true)));
    assert!(seen.insert(IdentityKey::Instance(2)));
}
