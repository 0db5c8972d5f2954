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

/// A resource as the export writes it: its fields, with `requires` and `id` (which replace
/// fields of those names) merged in, in key order, the order of `serde_json`'s map. Serialized
/// straight from the fields, it writes the text without copying every field into a map first:
/// on the export of a large model that copy, strings and all, was a fifth of the export's
/// instructions.
struct ResourceView<'a> {
    graph: &'a ResourceGraph,
    resource: &'a Resource,
}

impl serde::Serialize for ResourceView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let requires: Vec<String> = self.resource.requires.iter().map(|&i| self.graph.resources[i].id.text()).collect();
        let id = self.resource.id.with_version(self.graph.version);
        let fields = self.resource.fields.0.iter().filter(|(name, _)| name != "requires" && name != "id");
        let mut map = serializer.serialize_map(Some(self.resource.fields.0.len() + 2))?;
        // The two added keys ("id" sorts before "requires"), merged into the sorted fields.
        let (mut id_done, mut requires_done) = (false, false);
        for (name, value) in fields {
            if !id_done && "id" < name.as_ref() {
                map.serialize_entry("id", &id)?;
                id_done = true;
            }
            if !requires_done && "requires" < name.as_ref() {
                map.serialize_entry("requires", &requires)?;
                requires_done = true;
            }
            map.serialize_entry(name.as_ref(), value)?;
        }
        if !id_done {
            map.serialize_entry("id", &id)?;
        }
        if !requires_done {
            map.serialize_entry("requires", &requires)?;
        }
        map.end()
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_pieces(f)
    }
}

/// A resource's fields, sorted by name: the order the export JSON writes them in (that of
/// `serde_json`'s map). A name from a resource type's table is shared with the table instead
/// of copied into every resource: with a map of owned strings, the fields were most of a
/// large export's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields(Vec<(Cow<'static, str>, Json)>);

impl Fields {
    pub fn new() -> Fields {
        Fields::default()
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_ref().cmp(name))
    }

    /// A field's value.
    pub fn get(&self, name: &str) -> Option<&Json> {
        self.position(name).ok().map(|i| &self.0[i].1)
    }

    /// Where fields of these names, given in this order, go in name order: their positions
    /// sorted by name, with only the last position of a repeated name, which is what
    /// inserting them one by one keeps. Worked out once for every list of fields made the
    /// same way (a resource type's), instead of sorting each list.
    pub fn name_order(names: &[&str]) -> Vec<usize> {
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

    /// Fields given in any order, put in name order by `order`, from [`Fields::name_order`]
    /// of their names: the same fields as inserting them one by one.
    pub fn from_order(fields: Vec<(Cow<'static, str>, Json)>, order: &[usize]) -> Fields {
        let mut fields: Vec<Option<(Cow<'static, str>, Json)>> = fields.into_iter().map(Some).collect();
        Fields(order.iter().map(|&i| fields[i].take().expect("each position is in the order once")).collect())
    }

    /// Sets a field, replacing the value it had.
    pub fn insert(&mut self, name: impl Into<Cow<'static, str>>, value: Json) {
        let name = name.into();
        match self.position(&name) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (name, value)),
        }
    }

    /// Removes a field and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Json> {
        self.position(name).ok().map(|i| self.0.remove(i).1)
    }

    /// The fields in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Json)> + '_ {
        self.0.iter().map(|(n, v)| (n.as_ref(), v))
    }

    /// The fields as a JSON object, for the handlers and the export JSON.
    pub fn to_map(&self) -> Map<String, Json> {
        self.0.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
    }
}

impl From<Map<String, Json>> for Fields {
    fn from(map: Map<String, Json>) -> Fields {
        let mut fields: Vec<(Cow<'static, str>, Json)> = map.into_iter().map(|(n, v)| (Cow::Owned(n), v)).collect();
        // A map's keys are unique; its order is already sorted unless `serde_json` keeps
        // insertion order.
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        Fields(fields)
    }
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
    pub fn field(&self, name: &str) -> Option<&Json> {
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
    /// The export JSON: an array with one object per resource, its fields followed by
    /// `requires` (ids without version) and `id` (with version), as the reference writes it.
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
        resources
            .par_iter()
            .map(|resource| {
                serde_json::to_vec(&ResourceView { graph: self, resource }).expect("a resource's JSON has string keys only")
            })
            .collect()
    }

    /// One resource of the export JSON, as a value: [`ResourceView`] collected into a map.
    fn resource_json(&self, resource: &Resource) -> Json {
        serde_json::to_value(ResourceView { graph: self, resource }).expect("a resource's JSON has string keys only")
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
            let mut fields = Fields::from(object.clone());
            let id_text = match fields.remove("id") {
                Some(Json::String(s)) => s,
                _ => return Err(format!("resource {n}: no `id` string")),
            };
            let id = ResourceId::parse(&id_text).ok_or_else(|| format!("resource {n}: malformed id `{id_text}`"))?;
            if let Some(v) = id_text.rsplit_once(",v=").and_then(|(_, v)| v.parse().ok()) {
                graph.version = v;
            }
            let requires = match fields.remove("requires") {
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
            let undefined = fields.iter().any(|(_, v)| v.as_str() == Some(UNDEFINED));
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
        let names: Vec<&str> = given.iter().map(|&(name, _)| name).collect();
        let unsorted = given.iter().map(|&(name, value)| (Cow::Borrowed(name), Json::from(value))).collect();
        assert_eq!(Fields::from_order(unsorted, &Fields::name_order(&names)), inserted);
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
