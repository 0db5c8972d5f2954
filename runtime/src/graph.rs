//! The resource graph: what an evaluated model asks to deploy.
//!
//! [`crate::export`] builds it from an evaluated model; [`crate::apply`] deploys it. The two
//! meet only here, and only through JSON-shaped data: a resource is the object the
//! reference's `inmanta export -j` writes for it (every field, `references`, `mutators`), so
//! a graph read back from an export file deploys exactly as one built in memory.
//!
//! Invariant: a reference's resolved value never appears in a graph. Fields that hold a
//! reference are `null`, with a `core::Replace` mutator naming the reference by id; only the
//! apply step, on the host, resolves it into a private copy of the fields.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use rayon::prelude::*;
use serde_json::{Map, Value as Json};

/// A resource's identity without version: `type[agent,attribute=value]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// The registered entity type, e.g. `fs::File`.
    pub entity_type: String,
    /// The agent that deploys it.
    pub agent: String,
    /// The identifying attribute's name, e.g. `path`.
    pub attribute: String,
    /// The identifying attribute's value, as Python's `str()` renders it.
    pub value: String,
}

impl ResourceId {
    /// The id with the version suffix, as in the `id` field of the export JSON.
    pub fn with_version(&self, version: u64) -> String {
        let version = version.to_string();
        let mut text = String::with_capacity(self.text_len() + 3 + version.len());
        self.write_text(&mut text);
        text.push_str(",v=");
        text.push_str(&version);
        text
    }

    /// The id as text, `type[agent,attribute=value]`: what `Display` writes, in a string of
    /// the right size built without the formatting machinery. The export makes the text of an
    /// id several times per resource (its own id, its requirements', its references'
    /// owner), and `format!` took about 1,300 instructions for each.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(self.text_len());
        self.write_text(&mut text);
        text
    }

    /// Appends the id's text to `out`.
    pub fn write_text(&self, out: &mut String) {
        out.reserve(self.text_len());
        self.write_pieces(out).expect("writing to a string does not fail");
    }

    /// Writes the id's text piece by piece: for `write_text` and `Display` alike.
    fn write_pieces(&self, out: &mut impl fmt::Write) -> fmt::Result {
        out.write_str(&self.entity_type)?;
        out.write_char('[')?;
        out.write_str(&self.agent)?;
        out.write_char(',')?;
        out.write_str(&self.attribute)?;
        out.write_char('=')?;
        out.write_str(&self.value)?;
        out.write_char(']')
    }

    fn text_len(&self) -> usize {
        self.entity_type.len() + self.agent.len() + self.attribute.len() + self.value.len() + 4
    }

    /// Parses `type[agent,attr=value]` with an optional `,v=N` suffix, as the reference's
    /// `Id.parse_id` does.
    pub fn parse(text: &str) -> Option<ResourceId> {
        let text = match text.rfind("],v=") {
            Some(at) if text[at + 4..].bytes().all(|b| b.is_ascii_digit()) && at + 4 < text.len() => &text[..=at],
            _ => text,
        };
        let open = text.find('[')?;
        let inner = text[open + 1..].strip_suffix(']')?;
        let (agent, rest) = inner.split_once(',')?;
        let (attribute, value) = rest.split_once('=')?;
        let entity_type = &text[..open];
        if entity_type.is_empty() || agent.is_empty() || attribute.is_empty() || value.is_empty() {
            return None;
        }
        Some(ResourceId {
            entity_type: entity_type.to_string(),
            agent: agent.to_string(),
            attribute: attribute.to_string(),
            value: value.to_string(),
        })
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_pieces(f)
    }
}

/// A resource's fields, sorted by name (the order the export JSON writes them in, that of
/// `serde_json`'s map), kept as the JSON text the export writes: `"name":value` entries joined
/// by commas, the inside of the resource's object.
///
/// The text is made once, on the thread that maps the resource, and the export's file is
/// then a concatenation of texts. As a map of JSON values (every string its own allocation),
/// the fields were most of a large export's memory, and serializing them again was most of
/// the time it took to write the file. The few readers (the apply step, the export's own
/// checks) parse the one field they ask for.
#[derive(Clone, Default, PartialEq)]
pub struct Fields {
    text: Box<str>,
    /// Per field, in name order: where its value starts and ends in `text`. A field's name
    /// starts at the end of the one before (after the comma), or at 0 for the first.
    spans: Box<[(usize, usize)]>,
}

impl Fields {
    pub fn new() -> Fields {
        Fields::default()
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Where field `i`'s entry (`"name":value`) starts in the text.
    fn entry_start(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.spans[i - 1].1 + 1 }
    }

    /// The name of field `i`. Names from a resource type's table need no escaping, so they
    /// are read in place.
    fn name_at(&self, i: usize) -> Cow<'_, str> {
        let quoted = &self.text[self.entry_start(i)..self.spans[i].0 - 1];
        match quoted.contains('\\') {
            false => Cow::Borrowed(&quoted[1..quoted.len() - 1]),
            true => Cow::Owned(serde_json::from_str(quoted).expect("a name the fields wrote as a JSON string")),
        }
    }

    /// How the name of field `i` compares with `name`, read from the text without decoding
    /// it unless an escape comes before the first difference. The export looks up two names
    /// in every resource it writes (`write_object`), and decoding each name it passed cost
    /// more than the comparisons.
    fn compare_name(&self, i: usize, name: &str) -> std::cmp::Ordering {
        let text = self.text.as_bytes();
        let inner = &text[self.entry_start(i) + 1..self.spans[i].0 - 2];
        let mut theirs = inner.iter();
        let mut ours = name.as_bytes().iter();
        loop {
            match (theirs.next(), ours.next()) {
                (Some(b'\\'), _) => return self.name_at(i).as_ref().cmp(name),
                (Some(a), Some(b)) if a == b => {}
                (Some(a), Some(b)) => return a.cmp(b),
                (Some(_), None) => return std::cmp::Ordering::Greater,
                (None, Some(_)) => return std::cmp::Ordering::Less,
                (None, None) => return std::cmp::Ordering::Equal,
            }
        }
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        // The names are not a slice to search: each is read from the text as it is compared.
        let (mut low, mut high) = (0, self.spans.len());
        while low < high {
            let middle = (low + high) / 2;
            match self.compare_name(middle, name) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(middle),
            }
        }
        Err(low)
    }

    /// A field's value as the JSON text the export writes (`true`, `"a string"`, ...): for
    /// readers that only compare it with a literal.
    pub fn value_text(&self, name: &str) -> Option<&str> {
        self.position(name).ok().map(|i| self.value_text_at(i))
    }

    fn value_text_at(&self, i: usize) -> &str {
        let (start, end) = self.spans[i];
        &self.text[start..end]
    }

    fn value_at(&self, i: usize) -> Json {
        serde_json::from_str(self.value_text_at(i)).expect("a value the fields wrote as JSON")
    }

    /// A field's value.
    pub fn get(&self, name: &str) -> Option<Json> {
        self.position(name).ok().map(|i| self.value_at(i))
    }

    /// Where fields of these names, given in this order, go in name order: their positions
    /// sorted by name, with only the last position of a repeated name, which is what
    /// inserting them one by one keeps.
    fn name_order(names: &[&str]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..names.len()).collect();
        // Stable: positions of one name stay in the order given, and the last one is kept.
        order.sort_by(|&a, &b| names[a].cmp(names[b]));
        let mut kept: Vec<usize> = Vec::with_capacity(order.len());
        for position in order {
            match kept.last_mut() {
                Some(last) if names[*last] == names[position] => *last = position,
                _ => kept.push(position),
            }
        }
        kept
    }

    /// Fields given in any order, put in name order: the same fields as inserting them one by
    /// one.
    pub fn from_order<N: AsRef<str>>(fields: &[(N, Json)]) -> Fields {
        let mut values = Vec::new();
        let mut spans = Vec::with_capacity(fields.len());
        for (_, value) in fields {
            let start = values.len();
            write_json(&mut values, value);
            spans.push((start, values.len()));
        }
        let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_ref()).collect();
        Fields::from_layout(&FieldLayout::new(&names), &values, &spans)
    }

    /// Fields made in the order `layout` was worked out for, whose values are already JSON
    /// text: the value of the `i`-th field made is `values[spans[i].0..spans[i].1]`, which
    /// must be JSON as `serde_json` writes it. The text is written once, at its final size.
    pub fn from_layout(layout: &FieldLayout, values: &[u8], spans: &[(usize, usize)]) -> Fields {
        let size: usize =
            layout.order.iter().zip(&layout.keys).map(|(&i, key)| key.len() + spans[i].1 - spans[i].0).sum::<usize>()
                + layout.order.len().saturating_sub(1);
        let mut text = Vec::with_capacity(size);
        let mut positions = Vec::with_capacity(layout.order.len());
        for (&i, key) in layout.order.iter().zip(&layout.keys) {
            if !positions.is_empty() {
                text.push(b',');
            }
            text.extend_from_slice(key);
            let start = text.len();
            text.extend_from_slice(&values[spans[i].0..spans[i].1]);
            positions.push((start, text.len()));
        }
        let text = String::from_utf8(text).expect("JSON text from serde_json is UTF-8");
        Fields { text: text.into_boxed_str(), spans: positions.into_boxed_slice() }
    }

    /// The fields as owned names and values, in name order.
    fn entries(&self) -> Vec<(String, Json)> {
        (0..self.len()).map(|i| (self.name_at(i).into_owned(), self.value_at(i))).collect()
    }

    /// Sets a field, replacing the value it had. The text is made again: for building
    /// fields by hand (tests, an export file read back), not for the export's resources.
    pub fn insert(&mut self, name: impl Into<Cow<'static, str>>, value: Json) {
        let name = name.into();
        let mut entries = self.entries();
        match entries.binary_search_by(|(n, _)| n.as_str().cmp(&name)) {
            Ok(i) => entries[i].1 = value,
            Err(i) => entries.insert(i, (name.into_owned(), value)),
        }
        *self = Fields::from_order(&entries);
    }

    /// Removes a field and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Json> {
        let i = self.position(name).ok()?;
        let mut entries = self.entries();
        let (_, value) = entries.remove(i);
        *self = Fields::from_order(&entries);
        Some(value)
    }

    /// The fields in name order.
    pub fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, Json)> + '_ {
        (0..self.len()).map(|i| (self.name_at(i), self.value_at(i)))
    }

    /// The fields as a JSON object, for the handlers.
    pub fn to_map(&self) -> Map<String, Json> {
        self.iter().map(|(n, v)| (n.into_owned(), v)).collect()
    }

    /// Writes the resource's object: the fields with the entries `id` and `requires` (which
    /// `write_id` and `write_requires` append) merged in name order, replacing fields of
    /// those names, as a map would. The fields between the two added keys are copied as one
    /// piece each.
    fn write_object(
        &self,
        out: &mut Vec<u8>,
        write_id: impl FnOnce(&mut Vec<u8>),
        write_requires: impl FnOnce(&mut Vec<u8>),
    ) {
        // Where a name is or would go, and where the fields after it start.
        let bounds = |name: &str| match self.position(name) {
            Ok(i) => (i, i + 1),
            Err(i) => (i, i),
        };
        let (before_id, after_id) = bounds("id");
        let (before_requires, after_requires) = bounds("requires");
        out.push(b'{');
        let before = self.run(0, before_id);
        out.extend_from_slice(before.as_bytes());
        if !before.is_empty() {
            out.push(b',');
        }
        write_id(out);
        out.push(b',');
        let between = self.run(after_id, before_requires);
        if !between.is_empty() {
            out.extend_from_slice(between.as_bytes());
            out.push(b',');
        }
        write_requires(out);
        let after = self.run(after_requires, self.len());
        if !after.is_empty() {
            out.push(b',');
            out.extend_from_slice(after.as_bytes());
        }
        out.push(b'}');
    }

    /// The text of the entries of fields `from..to`, joined by their commas.
    fn run(&self, from: usize, to: usize) -> &str {
        if from >= to { "" } else { &self.text[self.entry_start(from)..self.spans[to - 1].1] }
    }
}

/// How fields made in one order (a resource type's) are put in name order, worked out once for
/// every resource of the type instead of for each: where each field goes, and its key as JSON
/// text (`"name":`).
#[derive(Clone, Debug)]
pub struct FieldLayout {
    /// The positions, in the order made, of the fields in name order ([`Fields::name_order`]).
    order: Vec<usize>,
    /// The key of each field of `order`.
    keys: Vec<Box<[u8]>>,
}

impl FieldLayout {
    /// The layout of fields made with these names, in this order.
    pub fn new(names: &[&str]) -> FieldLayout {
        let order = Fields::name_order(names);
        let keys = order
            .iter()
            .map(|&i| {
                let mut key = Vec::with_capacity(names[i].len() + 3);
                write_json_str(&mut key, names[i]);
                key.push(b':');
                key.into_boxed_slice()
            })
            .collect();
        FieldLayout { order, keys }
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fields({{{}}})", self.text)
    }
}

impl From<Map<String, Json>> for Fields {
    fn from(map: Map<String, Json>) -> Fields {
        let entries: Vec<(String, Json)> = map.into_iter().collect();
        Fields::from_order(&entries)
    }
}

pub(crate) use crate::json_text::write_json_str;

/// Appends the compact JSON text of `value`, as `serde_json::to_writer` writes it. Strings
/// have a faster writer of the same bytes, [`write_json_str`].
pub(crate) fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("JSON with string keys only");
}

/// One resource of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub id: ResourceId,
    /// Every field of the resource type, including `references` and `mutators`; an Unknown
    /// value is the string `"<<undefined>>"`.
    pub fields: Fields,
    /// Indices (into [`ResourceGraph::resources`]) of the resources this one requires,
    /// sorted and without duplicates.
    pub requires: Vec<usize>,
    /// Whether a field is Unknown: such a resource cannot be deployed (the reference's
    /// `undefined` state); its dependents are skipped.
    pub undefined: bool,
}

impl Resource {
    /// A field's value, `None` when the type has no such field.
    pub fn field(&self, name: &str) -> Option<Json> {
        self.fields.get(name)
    }
}

/// The resources of a model and their `requires` edges (acyclic, checked by the export).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceGraph {
    /// The model version; 0 for a local export, as `inmanta export -j` without a server.
    pub version: u64,
    pub resources: Vec<Resource>,
    /// File contents by their sha1 hash (the reference's file store): `fs::File` carries only
    /// the hash of its content in its fields.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// The marker the reference writes for an Unknown field.
pub const UNDEFINED: &str = "<<undefined>>";

/// How many resources [`ResourceGraph::write_json`] serializes at a time: enough for every
/// thread of a large machine to get a good share, few enough that a batch's text (about
/// 400 bytes a resource) stays a few megabytes.
const WRITE_BATCH: usize = 8192;

impl ResourceGraph {
    /// The export JSON: an array with one object per resource, its fields with `requires`
    /// (ids without version) and `id` (with version) merged in, as the reference writes it.
    /// Built as a value, independently of the text [`Self::write_json`] writes.
    pub fn to_json(&self) -> Json {
        Json::Array(self.resources.iter().map(|r| self.resource_json(r)).collect())
    }

    /// The export JSON as compact text, the bytes `serde_json::to_string(&self.to_json())`
    /// gives. Each resource is built and written on rayon's pool, and the pieces are joined
    /// in graph order, so the text does not depend on the number of threads.
    pub fn to_json_text(&self) -> String {
        let mut bytes = Vec::new();
        self.write_json(&mut bytes).expect("writing to a vector does not fail");
        String::from_utf8(bytes).expect("serde_json writes UTF-8")
    }

    /// [`Self::to_json_text`], written to `out` a batch of resources at a time: the resources
    /// of a batch are serialized in parallel, and each batch is written while the next one is
    /// built. Only a few batches of text are ever held in memory, not the whole text (40 MB
    /// for the 93k resources of the largest benchmark, 400 MB for a million): fresh memory
    /// costs a page fault per 4 KiB, and the next batches reuse the memory the last ones
    /// freed.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(b"[")?;
        let mut first = true;
        let mut write_batch = |pieces: Vec<Vec<u8>>| -> std::io::Result<()> {
            for piece in &pieces {
                if !first {
                    out.write_all(b",")?;
                }
                first = false;
                out.write_all(piece)?;
            }
            Ok(())
        };
        if rayon::current_thread_index().is_some() {
            // On a thread of a pool (`ThreadPool::install`), the batches are built on that
            // pool, in turn with their writing: a thread of our own would use the global
            // pool instead, and waiting here for it could take this pool's only thread.
            for resources in self.resources.chunks(WRITE_BATCH) {
                write_batch(self.serialize_batch(resources))?;
            }
        } else {
            std::thread::scope(|scope| -> std::io::Result<()> {
                // A thread of its own drives the pool (the global one, as a parallel iterator
                // here would) batch after batch, while this one, which owns `out`, writes:
                // copying a batch into the file would otherwise leave the pool idle. The
                // channel holds one batch, so the builder is at most two ahead.
                let (sender, built) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(1);
                scope.spawn(move || {
                    for resources in self.resources.chunks(WRITE_BATCH) {
                        // The writer stops at its first error and drops its end: nothing more
                        // is needed then.
                        if sender.send(self.serialize_batch(resources)).is_err() {
                            break;
                        }
                    }
                });
                built.into_iter().try_for_each(&mut write_batch)
            })?;
        }
        out.write_all(b"]")
    }

    /// The JSON text of each of `resources`, serialized in parallel.
    fn serialize_batch(&self, resources: &[Resource]) -> Vec<Vec<u8>> {
        resources.par_iter().map(|resource| self.resource_text(resource)).collect()
    }

    /// One resource's object in the export JSON: its fields' text, with `id` and `requires`.
    fn resource_text(&self, resource: &Resource) -> Vec<u8> {
        let mut text = String::new();
        let mut out = Vec::with_capacity(resource.fields.text.len() + 64 * (2 + resource.requires.len()));
        let write_id = |out: &mut Vec<u8>| {
            out.extend_from_slice(b"\"id\":");
            write_json_str(out, &resource.id.with_version(self.version));
        };
        let write_requires = |out: &mut Vec<u8>| {
            out.extend_from_slice(b"\"requires\":[");
            for (n, &required) in resource.requires.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                text.clear();
                self.resources[required].id.write_text(&mut text);
                write_json_str(out, text.as_str());
            }
            out.push(b']');
        };
        resource.fields.write_object(&mut out, write_id, write_requires);
        out
    }

    /// One resource of the export JSON, as a value: its fields as a map, with `id` and
    /// `requires`.
    fn resource_json(&self, resource: &Resource) -> Json {
        let mut map = resource.fields.to_map();
        map.insert("id".to_string(), Json::String(resource.id.with_version(self.version)));
        let requires = resource.requires.iter().map(|&i| Json::String(self.resources[i].id.text())).collect();
        map.insert("requires".to_string(), Json::Array(requires));
        Json::Object(map)
    }

    /// Reads an export JSON back (from weft or from `inmanta export -j`). File contents are
    /// not part of that format, so `files` is empty.
    pub fn from_json(json: &Json) -> Result<ResourceGraph, String> {
        let Json::Array(items) = json else {
            return Err("an export file holds a JSON array of resources".to_string());
        };
        let mut graph = ResourceGraph::default();
        let mut requires_text = Vec::with_capacity(items.len());
        let mut by_id = std::collections::HashMap::with_capacity(items.len());
        for (n, item) in items.iter().enumerate() {
            let Json::Object(object) = item else {
                return Err(format!("resource {n}: not a JSON object"));
            };
            let mut object = object.clone();
            let id_text = match object.remove("id") {
                Some(Json::String(s)) => s,
                _ => return Err(format!("resource {n}: no `id` string")),
            };
            let id = ResourceId::parse(&id_text).ok_or_else(|| format!("resource {n}: malformed id `{id_text}`"))?;
            if let Some(v) = id_text.rsplit_once(",v=").and_then(|(_, v)| v.parse().ok()) {
                graph.version = v;
            }
            let requires = match object.remove("requires") {
                Some(Json::Array(list)) => list
                    .into_iter()
                    .map(|r| match r {
                        Json::String(s) => Ok(s),
                        other => Err(format!("resource {id}: requires holds {other}, not an id")),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None => Vec::new(),
                Some(other) => return Err(format!("resource {id}: requires is {other}, not a list")),
            };
            let undefined = object.values().any(|v| v.as_str() == Some(UNDEFINED));
            let fields = Fields::from(object);
            if by_id.insert(id.clone(), graph.resources.len()).is_some() {
                return Err(format!("resource {id} exists more than once"));
            }
            requires_text.push(requires);
            graph.resources.push(Resource { id, fields, requires: Vec::new(), undefined });
        }
        for (n, requires) in requires_text.into_iter().enumerate() {
            let mut indices = Vec::with_capacity(requires.len());
            for text in requires {
                let id = ResourceId::parse(&text).ok_or_else(|| format!("malformed id `{text}` in requires"))?;
                let &target = by_id.get(&id).ok_or_else(|| {
                    format!("resource {} requires {id}, which is not in the file", graph.resources[n].id)
                })?;
                indices.push(target);
            }
            indices.sort_unstable();
            indices.dedup();
            graph.resources[n].requires = indices;
        }
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        let id = ResourceId::parse("fs::File[web-1,path=/etc/a=b],v=3").unwrap();
        assert_eq!(id.entity_type, "fs::File");
        assert_eq!(id.agent, "web-1");
        assert_eq!(id.attribute, "path");
        assert_eq!(id.value, "/etc/a=b");
        assert_eq!(id.with_version(3), "fs::File[web-1,path=/etc/a=b],v=3");
        assert_eq!(id.with_version(0), "fs::File[web-1,path=/etc/a=b],v=0");
        assert_eq!(id.text(), "fs::File[web-1,path=/etc/a=b]");
        assert_eq!(id.text(), id.to_string());
        assert_eq!(ResourceId::parse("no brackets"), None);
    }

    fn sample_graph(resources: usize) -> ResourceGraph {
        let mut graph = ResourceGraph { version: 7, ..ResourceGraph::default() };
        for n in 0..resources {
            let id = ResourceId {
                entity_type: "std::testing::NullResource".to_string(),
                agent: format!("agent-{}", n % 3),
                attribute: "name".to_string(),
                value: format!("r\"{n}\u{e9}"),
            };
            let mut fields = Fields::new();
            fields.insert("name", Json::String(id.value.clone()));
            fields.insert("value", serde_json::json!({"n": n, "f": 1.5, "list": [null, true, "x\ny"]}));
            // Names on both sides of the two added keys, and fields of those names, which the
            // added keys replace (as in a map).
            if n % 2 == 1 {
                fields.insert("a", Json::from(n));
                fields.insert("ib", Json::Null);
                fields.insert("ie", Json::Null);
                fields.insert("requirer", Json::Null);
            }
            if n % 3 == 1 {
                fields.insert("id", Json::from("a field named id"));
                fields.insert("requires", Json::from("a field named requires"));
            }
            let requires = (n.saturating_sub(12)..n).filter(|r| r % 4 == n % 4).collect();
            graph.resources.push(Resource { id, fields, requires, undefined: false });
        }
        graph
    }

    /// Fields put in name order by their names' order are the fields inserted one by one in
    /// the order given.
    #[test]
    fn ordered_fields_are_inserted_fields() {
        let given = [("b", 1), ("a", 2), ("c", 3), ("a", 4), ("b", 5), ("", 6)];
        let mut inserted = Fields::new();
        for (name, value) in given {
            inserted.insert(name, Json::from(value));
        }
        let unsorted: Vec<(Cow<'static, str>, Json)> =
            given.iter().map(|&(name, value)| (Cow::Borrowed(name), Json::from(value))).collect();
        assert_eq!(Fields::from_order(&unsorted), inserted);
    }

    /// Fields whose names need escaping (an export file read back may have any) are found,
    /// replaced and removed by name, and written as a map writes them.
    #[test]
    fn fields_with_any_names() {
        let names = ["plain", "quote\"d", "back\\slash", "new\nline", "\u{1}", "é", "", "id", "requires", "zzz"];
        let mut map = Map::new();
        for (n, name) in names.iter().enumerate() {
            map.insert(name.to_string(), serde_json::json!({"n": n, "name": name}));
        }
        let mut fields = Fields::from(map.clone());
        assert_eq!(fields.len(), names.len());
        assert_eq!(fields.to_map(), map);
        for (n, name) in names.iter().enumerate() {
            assert_eq!(fields.get(name), Some(serde_json::json!({"n": n, "name": name})), "{name:?}");
        }
        assert_eq!(fields.get("absent"), None);
        assert_eq!(fields.value_text("plain"), Some(r#"{"n":0,"name":"plain"}"#));
        fields.insert("quote\"d", Json::Bool(true));
        assert_eq!(fields.value_text("quote\"d"), Some("true"));
        assert_eq!(fields.remove("back\\slash"), Some(serde_json::json!({"n": 2, "name": "back\\slash"})));
        assert_eq!(fields.get("back\\slash"), None);
        assert_eq!(fields.len(), names.len() - 1);
        // The graph writes them as the map of its fields with `id` and `requires` replaced.
        let id = ResourceId {
            entity_type: "std::testing::NullResource".to_string(),
            agent: "a".to_string(),
            attribute: "name".to_string(),
            value: "x".to_string(),
        };
        let graph = ResourceGraph {
            resources: vec![Resource { id, fields, requires: Vec::new(), undefined: false }],
            ..ResourceGraph::default()
        };
        assert_eq!(graph.to_json_text(), serde_json::to_string(&graph.to_json()).unwrap());
        // Read back, the file's `id` and `requires` are the resource's, not fields.
        let read_back = ResourceGraph::from_json(&graph.to_json()).unwrap();
        let mut expected = graph.resources[0].fields.to_map();
        expected.remove("id");
        expected.remove("requires");
        assert_eq!(read_back.resources[0].fields.to_map(), expected);
    }

    #[test]
    fn json_text_is_the_serialized_json_whatever_the_threads() {
        // Sizes around the batches of `write_json`: the separators between batches matter.
        for resources in [0, 1, 2, 200, WRITE_BATCH, WRITE_BATCH + 1, 2 * WRITE_BATCH + 3] {
            let graph = sample_graph(resources);
            let expected = serde_json::to_string(&graph.to_json()).unwrap();
            // On a pool's thread the batches are built and written in turn; outside one
            // (as the CLI calls it), a thread of its own builds them on the global pool.
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                assert_eq!(pool.install(|| graph.to_json_text()), expected, "{resources} resources, {threads} threads");
            }
            assert_eq!(graph.to_json_text(), expected, "{resources} resources, outside a pool");
        }
    }
}
