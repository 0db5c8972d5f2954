//! The export: from an evaluated model to the resource graph, as the reference's exporter
//! (`inmanta export`, spec §5) builds it.
//!
//! 1. Every instance of a registered resource type (or of a subclass) becomes a resource,
//!    unless its id or agent is Unknown or its type asks to ignore it (`managed=false`).
//!    Which entity types are resources is decided by the Python code of the modules (the
//!    `@resource` decorator); weft reads those registrations from the module sources (an
//!    artifact carries them, read when it was built: [`Modules::registrations`]) and
//!    implements the field mapping of the types it knows natively ([`types`]). A registered
//!    type weft does not know is an error, never a silent omission.
//! 2. Fields are mapped and converted to JSON ([`values`]); references are moved out of the
//!    values into `references` and `mutators`.
//! 3. `requires` keeps the direct members of the instance's `requires` relation that are
//!    exported resources; then the modules' dependency managers run ([`fs`]).
//! 4. A cycle in `requires` is rejected.
//!
//! The order of resources follows the registration order of their types and, within a type,
//! the order in which instances were created; the reference's is the same up to its sets.

mod bridged;
mod fs;
mod id;
mod types;
mod values;

use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::path::Path;

use weft_ir::diagnostic::codes;
use weft_ir::program::{AttributeKind, EntityId, Program};
use weft_ir::span::Location;
use weft_ir::value::Value;
use weft_ir::{Diagnostic, ErrorKind, Symbol};
use weft_vm::{Machine, Peeked};

use crate::graph::{Resource, ResourceGraph, write_json, write_json_str};
use crate::modules::Modules;
use crate::python;
pub(crate) use id::{Attributes, IdFailure, resource_id};
use types::Getter;
pub use types::{Registration, STD_SOURCE, registered_in_source, registrations};
pub(crate) use types::{ResourceType, native, scan_registrations, std_registrations};

/// An evaluated model: the instances and their frozen attribute values.
pub struct Model {
    machine: Machine,
    /// The program's names, to find attributes by name: the export reads several per resource.
    /// Made at the first read; a compile that exports nothing never needs it.
    symbols: std::sync::OnceLock<hashbrown::HashMap<String, Symbol>>,
    /// The evaluation's host, with its Python servers: the export runs the resource classes
    /// of modules' Python code in them ([`bridged`]), one request at a time. Dropping it stops
    /// them.
    host: std::sync::Mutex<Option<Box<crate::RuntimeHost>>>,
}

impl Model {
    /// Releases the model at the end of a command without freeing its tables (see
    /// [`Machine::release_without_freeing`]). The host is dropped, which stops its Python
    /// servers.
    pub fn release_without_freeing(self) {
        drop(self.host);
        self.machine.release_without_freeing();
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("instances", &self.machine.instances.len()).finish()
    }
}

/// What reading an attribute of an instance gives, lent ([`Model::read_symbol_with`]).
pub(crate) enum ReadRef<'a> {
    Missing,
    NoValue,
    Value(&'a Value),
    /// A relation's elements, or a list literal's.
    Items(&'a [Value]),
}

/// What reading an attribute of an instance gives.
#[derive(Clone, Debug)]
pub(crate) enum Read {
    /// The entity has no attribute of that name (Python's `AttributeError`).
    Missing,
    /// An optional relation (`[0:1]`) without a value (the reference's `OptionalValueException`).
    NoValue,
    Value(Value),
}

impl Model {
    /// The model of a machine that finished evaluating. What only the evaluation needed is
    /// freed here (`Machine::shed_evaluation_state`), before the export allocates.
    pub(crate) fn new(mut machine: Machine, host: Option<Box<crate::RuntimeHost>>) -> Model {
        machine.shed_evaluation_state();
        Model { machine, symbols: std::sync::OnceLock::new(), host: std::sync::Mutex::new(host) }
    }

    pub fn program(&self) -> &Program {
        self.machine.program()
    }

    /// How many instances the model holds.
    pub fn instance_count(&self) -> usize {
        self.machine.instances.len()
    }

    pub(crate) fn entity_of(&self, instance: u32) -> EntityId {
        self.machine.instances[instance as usize].entity
    }

    /// The location an instance was constructed at (the last constructor, as the reference
    /// reports it).
    pub(crate) fn location_of(&self, instance: u32) -> Option<Location> {
        Some(self.machine.last_location(instance))
    }

    /// Python's `str()` of a value, instances as `Entity (instantiated at file:line)`; a null
    /// is `None`, as the reference's exporter reads it through its proxies.
    pub(crate) fn display(&self, value: &Value) -> String {
        self.machine.display_python_value(value)
    }

    pub(crate) fn is_instance_of(&self, instance: u32, entity: &str) -> bool {
        let program = self.program();
        program.entity_by_name(entity).is_some_and(|e| program.is_subclass(self.entity_of(instance), e))
    }

    /// Every instance of `entity` or of a subclass, in creation order.
    fn instances_of(&self, entity: EntityId) -> Vec<u32> {
        let program = self.program();
        let subclasses: Vec<bool> =
            (0..program.entities.len()).map(|e| program.is_subclass(EntityId(e as u32), entity)).collect();
        (0..self.machine.instances.len() as u32)
            .filter(|&i| subclasses[self.machine.instances[i as usize].entity.0 as usize])
            .collect()
    }

    /// The value of attribute `name` of an instance, as a plugin's proxy reads it.
    pub(crate) fn read(&self, instance: u32, name: &str) -> Read {
        self.read_symbol(instance, self.symbol(name))
    }

    /// The symbol of a name, if the program has it: for reading the same attribute of many
    /// instances without finding its name each time.
    pub(crate) fn symbol(&self, name: &str) -> Option<Symbol> {
        let program = self.program();
        let symbols = self.symbols.get_or_init(|| {
            program.names.iter().enumerate().map(|(i, name)| (name.clone(), Symbol::from_u32(i as u32))).collect()
        });
        symbols.get(name).copied()
    }

    /// [`Self::read`] of the attribute named by `symbol` (`None`: a name the program does not
    /// have): [`Self::read_symbol_with`], the value copied out.
    pub(crate) fn read_symbol(&self, instance: u32, symbol: Option<Symbol>) -> Read {
        self.read_symbol_with(instance, symbol, |read| match read {
            ReadRef::Missing => Read::Missing,
            ReadRef::NoValue => Read::NoValue,
            ReadRef::Value(value) => Read::Value(value.clone()),
            ReadRef::Items(items) => Read::Value(Value::List(std::sync::Arc::from(items))),
        })
    }

    /// An attribute of an instance, lent to `f` where the model keeps it: a relation's elements
    /// as they are, a `[1]` or `[0:1]` end as its one element or as no value.
    pub(crate) fn read_symbol_with<T>(
        &self,
        instance: u32,
        symbol: Option<Symbol>,
        f: impl FnOnce(ReadRef<'_>) -> T,
    ) -> T {
        let Some(cell) = symbol.and_then(|symbol| self.machine.slot(instance, symbol)) else {
            return f(ReadRef::Missing);
        };
        let Some(attr) = self.machine.cell_attribute(cell) else { return f(ReadRef::Missing) };
        let single = matches!(self.program().attribute(attr).kind, AttributeKind::Relation(end) if !end.is_multi());
        let null = Value::NULL;
        // A `[1]` or `[0:1]` end is read as its one element, or as no value.
        fn one(items: &[Value]) -> ReadRef<'_> {
            items.first().map_or(ReadRef::NoValue, ReadRef::Value)
        }
        self.machine.peek_with(cell, |peeked| {
            f(match (peeked, single) {
                (Peeked::Empty, true) | (Peeked::Value(Value::Null(_)), true) => ReadRef::NoValue,
                (Peeked::Empty, false) => ReadRef::Value(&null),
                (Peeked::Value(Value::List(items)), true) => one(items),
                (Peeked::Items(items), true) => one(items),
                (Peeked::Value(value), _) => ReadRef::Value(value),
                (Peeked::Items(items), false) => ReadRef::Items(items),
            })
        })
    }

    /// The names of an instance's attributes that are not relations, in slot order.
    pub(crate) fn plain_attributes(&self, instance: u32) -> Vec<String> {
        let program = self.program();
        let entity = program.entity(self.entity_of(instance));
        entity
            .slots
            .iter()
            .filter(|(_, attr)| matches!(program.attribute(*attr).kind, AttributeKind::Value(_)))
            .map(|(symbol, _)| program.name(*symbol).to_string())
            .collect()
    }
}

/// The evaluated model's attributes, for resource ids: every value is final.
struct ModelAttributes<'m>(&'m Model);

impl Attributes for ModelAttributes<'_> {
    type Wait = Infallible;

    fn read(&mut self, instance: u32, name: &str) -> Result<Read, Infallible> {
        Ok(self.0.read(instance, name))
    }

    fn display(&self, value: &Value) -> String {
        self.0.display(value)
    }

    fn entity_name(&self, instance: u32) -> String {
        self.0.program().entity(self.0.entity_of(instance)).name.clone()
    }
}

/// The result of an export: the graph, and the warnings the reference would log.
#[derive(Debug, Default)]
pub struct Export {
    pub graph: ResourceGraph,
    pub warnings: Vec<Diagnostic>,
    /// What the modules' Python code printed while it mapped resources, and wrote to its
    /// error stream (as an evaluation's `Outcome` has them).
    pub prints: Vec<String>,
    pub plugin_messages: Vec<String>,
}

/// Why an export failed: the diagnostics, errors first.
#[derive(Debug)]
pub struct ExportError {
    pub diagnostics: Vec<Diagnostic>,
    /// As for [`Export`].
    pub prints: Vec<String>,
    pub plugin_messages: Vec<String>,
}

/// Builds the resource graph of an evaluated model. The modules' Python sources declare which
/// entity types are resources: `modules` reads them from the modules' directories, or carries
/// the registrations read when an artifact was built ([`Modules::registrations`]).
///
/// The resources of a type whose Python class weft has no native mapping for are mapped by
/// that class, in the evaluation's Python server ([`bridged`]); so are the dependency managers
/// of the modules' Python code.
pub fn export(model: &Model, modules: &Modules) -> Result<Export, ExportError> {
    let mut host = model.host.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut host = host.as_deref_mut();
    let bridged = match host.as_deref_mut() {
        Some(host) => bridged::map(model, host, modules),
        None => bridged::Bridged::default(),
    };
    let mut exporter = Exporter::new(model, modules, &bridged, host);
    let result = exporter.run();
    let (prints, plugin_messages) =
        exporter.host.as_deref_mut().map(crate::RuntimeHost::take_output).unwrap_or_default();
    match result {
        Ok(()) => Ok(Export { graph: exporter.graph, warnings: exporter.warnings, prints, plugin_messages }),
        Err(error) => {
            let mut diagnostics = vec![error];
            diagnostics.extend(exporter.warnings);
            Err(ExportError { diagnostics, prints, plugin_messages })
        }
    }
}

/// What mapping the resources of one type needs, worked out once for the type.
struct TypePlan {
    /// Where each field goes in name order, and its key.
    layout: crate::graph::FieldLayout,
    /// The symbol of each field of [`mapping_order`], in that order.
    symbols: Vec<Option<Symbol>>,
}

/// Why mapping one resource failed or stopped.
pub(crate) enum Stop {
    /// The resource is dropped silently (Unknown id or agent) or on request (`managed=false`).
    Ignore,
    /// An error that fails the export.
    Error(Diagnostic),
}

pub(crate) fn error_at(kind: ErrorKind, message: String, location: Option<Location>) -> Diagnostic {
    let diagnostic = Diagnostic::error(kind, codes::EXPORT_ERROR, message);
    match location {
        Some(location) => diagnostic.at(location, "this resource"),
        None => diagnostic,
    }
}

/// A mapped resource, with what the sequential part of the export needs of it worked out on
/// the pool: the hash of its id's text (see `Exporter::by_id`) and the file contents it adds
/// to the file store (hash, content).
struct Mapping {
    resource: Resource,
    id_hash: u64,
    files: Vec<(String, Vec<u8>)>,
}

struct Exporter<'m> {
    model: &'m Model,
    modules: &'m Modules,
    bridged: &'m bridged::Bridged,
    /// The evaluation's host, for the dependency managers of the modules' Python code.
    host: Option<&'m mut crate::RuntimeHost>,
    graph: ResourceGraph,
    warnings: Vec<Diagnostic>,
    /// The resource of each instance, by instance (`NO_RESOURCE` for an instance that is not
    /// an exported resource).
    resource_of: Vec<u32>,
    /// The instance each resource was made from.
    instance_of: Vec<u32>,
    /// Resources by the hash of the text of their id: the reference compares ids as text, so
    /// an agent `a,name=b` with name `c` is the same id as agent `a` with name `b,name=c`.
    /// The table keeps hashes (`id_hashes`), not texts: two texts are only compared for a
    /// candidate of the same hash.
    by_id: hashbrown::HashTable<usize>,
    id_hasher: hashbrown::DefaultHashBuilder,
    /// The hash of each resource's id text, by resource.
    id_hashes: Vec<u64>,
}

const NO_RESOURCE: u32 = u32::MAX;

/// The resource made from an instance, in a table of resources by instance
/// (`Exporter::resource_of`), if it is an exported resource.
fn resource_index(resource_of: &[u32], instance: u32) -> Option<usize> {
    resource_of.get(instance as usize).filter(|&&r| r != NO_RESOURCE).map(|&r| r as usize)
}

/// The hash of the text of a resource id (see `Exporter::by_id`), formatted into `text`. The
/// whole text is hashed at once: hashers do not give the same
/// hash for the same bytes written in different pieces, and ids of the same text may format
/// in different pieces. The hasher's seed is fixed when the exporter is made, so the hash of
/// an id is the same on every thread.
fn id_text_hash(hasher: &hashbrown::DefaultHashBuilder, id: &crate::graph::ResourceId, text: &mut String) -> u64 {
    use std::hash::BuildHasher;
    text.clear();
    id.write_text(text);
    hasher.hash_one(text.as_str())
}

/// How the id table (`Exporter::by_id`, which keeps indices into `resources`) hashes an entry
/// again when it grows: from the hashes kept by resource (`Exporter::id_hashes`).
fn rehash_id(id_hashes: &[u64]) -> impl Fn(&usize) -> u64 + '_ {
    move |&i| id_hashes[i]
}

impl<'m> Exporter<'m> {
    fn new(
        model: &'m Model,
        modules: &'m Modules,
        bridged: &'m bridged::Bridged,
        host: Option<&'m mut crate::RuntimeHost>,
    ) -> Self {
        Exporter {
            model,
            modules,
            bridged,
            host,
            graph: ResourceGraph::default(),
            warnings: Vec::new(),
            resource_of: vec![NO_RESOURCE; model.instance_count()],
            instance_of: Vec::new(),
            by_id: hashbrown::HashTable::new(),
            id_hasher: hashbrown::DefaultHashBuilder::default(),
            id_hashes: Vec::new(),
        }
    }

    fn run(&mut self) -> Result<(), Diagnostic> {
        let model = self.model;
        let program = model.program();
        let registered = registrations(self.modules, |name| program.entity_by_name(name).is_some());
        // What to map, in export order: the instances of each registered type, up to the first
        // type weft cannot export (an error once it is reached).
        let mut work: Vec<(&ResourceType, usize, u32)> = Vec::new();
        // Per registered type, worked out once rather than for each resource: where each field
        // map_resource makes goes in name order, and the symbols of the fields it reads.
        let mut plans: Vec<TypePlan> = Vec::new();
        let mut unsupported = None;
        for registration in &registered {
            let Some(entity) = program.entity_by_name(&registration.name) else { continue };
            let instances = model.instances_of(entity);
            let ty = match self.bridged.types.get(&registration.name) {
                Some(Ok(ty)) => Some(ty),
                Some(Err(error)) => {
                    unsupported = Some(error.clone());
                    break;
                }
                None => types::native(&registration.name),
            };
            let Some(ty) = ty else {
                if let Some(&first) = instances.first() {
                    let source = self.modules.source_display(registration);
                    unsupported = Some(unsupported_type(registration, &source, model.location_of(first)));
                    break;
                }
                continue;
            };
            let plan = plans.len();
            plans.push(TypePlan {
                layout: crate::graph::FieldLayout::new(&mapped_field_names(ty)),
                symbols: mapping_order(ty).map(|(name, _)| model.symbol(name)).collect(),
            });
            work.extend(instances.into_iter().map(|instance| (ty, plan, instance)));
        }
        // Mapping a resource reads the model and nothing else, so the resources are mapped in
        // parallel on rayon's pool. The outcome is then taken in export order, so the first
        // error is the one a resource-by-resource export meets, whatever the threads.
        let id_hasher = &self.id_hasher;
        let bridged = &self.bridged.instances;
        let mapped: Vec<Result<Mapping, Stop>> = work
            .par_iter()
            .map(|&(ty, plan, instance)| {
                Self::map_resource(model, id_hasher, ty, &plans[plan], instance, bridged.get(&instance))
            })
            .collect();
        // Sized once: grown by doubling, the vectors would hold the old and the new buffer
        // at once, next to every mapped resource.
        self.graph.resources.reserve_exact(mapped.len());
        self.instance_of.reserve_exact(mapped.len());
        self.id_hashes.reserve_exact(mapped.len());
        self.by_id.reserve(mapped.len(), rehash_id(&self.id_hashes));
        let mut ignored = HashSet::new();
        for (&(_, _, instance), mapping) in work.iter().zip(mapped) {
            match mapping {
                Ok(resource) => self.add(resource, instance)?,
                Err(Stop::Ignore) => {
                    ignored.insert(instance);
                }
                Err(Stop::Error(diagnostic)) => return Err(diagnostic),
            }
        }
        if let Some(error) = unsupported {
            return Err(error);
        }
        self.check_resource_sets()?;
        self.convert_requires(&ignored);
        fs::dir_before_file(self)?;
        bridged::dependency_managers(self)?;
        for resource in &mut self.graph.resources {
            resource.requires.sort_unstable();
            resource.requires.dedup();
        }
        self.check_cycles()
    }

    /// Builds one resource: its id, then every field, evaluated in [`mapping_order`] and kept
    /// in name order (`plan.layout`, the `FieldLayout` of `mapped_field_names`). Reads the
    /// model and nothing else.
    fn map_resource(
        model: &Model,
        id_hasher: &hashbrown::DefaultHashBuilder,
        ty: &ResourceType,
        plan: &TypePlan,
        instance: u32,
        bridged: Option<&Result<python::ExportedFields, Diagnostic>>,
    ) -> Result<Mapping, Stop> {
        let location = model.location_of(instance);
        let bridged = match bridged {
            Some(Ok(fields)) => Some(fields),
            Some(Err(error)) => return Err(Stop::Error(error.clone())),
            None => None,
        };
        let id = match bridged.and_then(|b| b.id.as_ref()) {
            Some(outcome) => bridged::mapped_id(model, ty, instance, outcome),
            None => resource_id(ty, instance, &mut ModelAttributes(model)),
        };
        let id = match id {
            Ok(id) => id,
            Err(IdFailure::Unknown) => return Err(Stop::Ignore),
            Err(IdFailure::Error(kind, message)) => return Err(Stop::Error(error_at(kind, message, location))),
            Err(IdFailure::Wait(never)) => match never {},
        };
        // A getter that asks to leave the resource out wins over the others' errors, as
        // `managed=false` does (see `mapping_order`).
        if bridged.is_some_and(|b| b.fields.iter().any(|f| matches!(f, python::FieldOutcome::Ignore))) {
            return Err(Stop::Ignore);
        }
        let mut python_fields = bridged.map(|b| b.fields.iter());
        let mut id_text = String::new();
        let id_hash = id_text_hash(id_hasher, &id, &mut id_text);
        let mut collector = values::ReferenceCollector::new(id_text);
        // The fields' JSON text, in the order they are mapped (that of `mapped_field_names`),
        // put in name order at the end.
        let mut text: Vec<u8> = Vec::with_capacity(512);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(ty.fields.len());
        let mut undefined = false;
        let mut files = Vec::new();
        for ((name, getter), &symbol) in mapping_order(ty).zip(&plan.symbols) {
            let (name, getter) = (name.as_str(), *getter);
            let start = text.len();
            let known = match getter {
                Getter::FileHash => match fs::file_content(model, instance, location)? {
                    Some(content) => {
                        let hash = fs::sha1_hex(content.as_bytes());
                        write_json_str(&mut text, &hash);
                        files.push((hash, content.into_bytes()));
                        true
                    }
                    None if matches!(model.read(instance, "content"), Read::Value(Value::Unknown)) => false,
                    None => {
                        text.extend_from_slice(b"null");
                        true
                    }
                },
                Getter::Python => match python_fields.as_mut().and_then(Iterator::next) {
                    Some(python::FieldOutcome::Value(value)) => {
                        let display = |v: &Value| model.display(v);
                        collector.collect_text(&display, value, values::FieldPath::Field(name), &mut text).map_err(
                            |cause| {
                                let (kind, message) =
                                    bridged::failure(&ty.name, name, python::BridgeError::Unencodable(cause));
                                Stop::Error(error_at(kind, message, location))
                            },
                        )?
                    }
                    Some(python::FieldOutcome::Unknown) => false,
                    Some(python::FieldOutcome::Ignore) => return Err(Stop::Ignore),
                    Some(python::FieldOutcome::Failed(e)) => {
                        let (kind, message) = bridged::failure(&ty.name, name, e.clone());
                        return Err(Stop::Error(error_at(kind, message, location)));
                    }
                    None => {
                        let message = format!("the Python bridge gave no value for field '{name}' of {}", ty.name);
                        return Err(Stop::Error(error_at(ErrorKind::CompilerException, message, location)));
                    }
                },
                _ => values::map_field(model, ty, (name, getter), symbol, instance, &mut collector, &mut text)?,
            };
            if !known {
                undefined = true;
                text.truncate(start);
                write_json_str(&mut text, crate::graph::UNDEFINED);
            }
            spans.push((start, text.len()));
        }
        let (references, mutators) = collector.finish();
        for list in [references, mutators] {
            let start = text.len();
            write_json(&mut text, &list);
            spans.push((start, text.len()));
        }
        if let Some(bridged) = bridged {
            files.extend(bridged.files.iter().cloned());
        }
        let fields = crate::graph::Fields::from_layout(&plan.layout, &text, &spans);
        Ok(Mapping { resource: Resource { id, fields, requires: Vec::new(), undefined }, id_hash, files })
    }

    /// The resource made from an instance, if it is an exported resource.
    fn resource_of(&self, instance: u32) -> Option<usize> {
        resource_index(&self.resource_of, instance)
    }

    fn add(&mut self, Mapping { resource, id_hash: hash, files }: Mapping, instance: u32) -> Result<(), Diagnostic> {
        let resources = &self.graph.resources;
        // Ids of the same text hash the same; different texts of the same hash are compared.
        let same_text = |&i: &usize| {
            let other = &resources[i].id;
            other == &resource.id || other.text() == resource.id.text()
        };
        if self.by_id.find(hash, same_text).is_some() {
            return Err(error_at(
                ErrorKind::CompilerException,
                format!("Resource {} exists more than once in the configuration model", resource.id),
                self.model.location_of(instance),
            ));
        }
        let index = self.graph.resources.len();
        self.by_id.insert_unique(hash, index, rehash_id(&self.id_hashes));
        self.id_hashes.push(hash);
        self.resource_of[instance as usize] = u32::try_from(index).expect("fewer resources than instances");
        self.instance_of.push(instance);
        self.graph.resources.push(resource);
        self.graph.files.extend(files);
        Ok(())
    }

    /// `std::ResourceSet`: a resource may be in one set only.
    fn check_resource_sets(&mut self) -> Result<(), Diagnostic> {
        let model = self.model;
        let Some(entity) = model.program().entity_by_name("std::ResourceSet") else { return Ok(()) };
        let mut set_of: HashMap<usize, String> = HashMap::new();
        for set in model.instances_of(entity) {
            let name = match model.read(set, "name") {
                Read::Value(value) => model.display(&value),
                _ => continue,
            };
            let Read::Value(Value::List(members)) = model.read(set, "resources") else { continue };
            for member in members.iter() {
                let Value::Instance(i) = member else { continue };
                match self.resource_of(*i) {
                    Some(r) => {
                        let id = self.graph.resources[r].id.to_string();
                        if let Some(previous) = set_of.get(&r).filter(|p| **p != name) {
                            return Err(error_at(
                                ErrorKind::CompilerException,
                                format!(
                                    "resource '{id}' can not be part of multiple ResourceSets: {previous} and {name}"
                                ),
                                model.location_of(set),
                            ));
                        }
                        set_of.insert(r, name.clone());
                    }
                    None => self.warn(
                        format!(
                            "resource {} is part of ResourceSet {name} but will not be exported.",
                            model.display(member)
                        ),
                        model.location_of(set),
                    ),
                }
            }
        }
        Ok(())
    }

    /// Keeps the direct members of each instance's `requires` that are exported resources.
    fn convert_requires(&mut self, ignored: &HashSet<u32>) {
        let model = self.model;
        let resource_of = &self.resource_of;
        // A resource's requirements read the model and the table of resources, which is
        // complete, so they are worked out on the pool; the warnings are then given in
        // resource order. The initial list is only kept where it may be warned about.
        let requires_symbol = model.symbol("requires");
        let instances = |items: &[Value]| -> Vec<u32> {
            items
                .iter()
                .filter_map(|v| match v {
                    Value::Instance(i) => Some(*i),
                    _ => None,
                })
                .collect()
        };
        let converted: Vec<(Vec<usize>, Vec<u32>)> = self
            .instance_of
            .par_iter()
            .map(|&instance| {
                let initial: Vec<u32> = model.read_symbol_with(instance, requires_symbol, |read| match read {
                    ReadRef::Items(items) => instances(items),
                    ReadRef::Value(Value::List(items)) => instances(items),
                    _ => Vec::new(),
                });
                let requires: Vec<usize> = initial.iter().filter_map(|&i| resource_index(resource_of, i)).collect();
                if requires.is_empty() { (requires, initial) } else { (requires, Vec::new()) }
            })
            .collect();
        for (index, (requires, initial)) in converted.into_iter().enumerate() {
            let instance = self.instance_of[index];
            if requires.is_empty() {
                let dropped = without_ignored_as_the_reference_loops(initial, ignored);
                if !dropped.is_empty() {
                    let names: Vec<String> = dropped.iter().map(|&i| model.display(&Value::Instance(i))).collect();
                    self.warn(
                        format!(
                            "The resource {} had requirements before flattening, but not after flattening. Initial set \
                             was [{}]. Perhaps provides relation is not wired through correctly?",
                            self.graph.resources[index].id,
                            names.join(", ")
                        ),
                        model.location_of(instance),
                    );
                }
            }
            self.graph.resources[index].requires = requires;
        }
    }

    /// Rejects a cycle in `requires`, naming its members as the reference does.
    fn check_cycles(&self) -> Result<(), Diagnostic> {
        let resources = &self.graph.resources;
        // 0 = not visited, 1 = on the current path, 2 = done.
        let mut state = vec![0u8; resources.len()];
        for start in 0..resources.len() {
            if state[start] != 0 {
                continue;
            }
            // An explicit stack of (resource, next requirement to visit): deep chains must not
            // overflow the thread's stack.
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if let Some(&dep) = resources[node].requires.get(*next) {
                    *next += 1;
                    match state[dep] {
                        0 => {
                            state[dep] = 1;
                            stack.push((dep, 0));
                        }
                        1 => {
                            let at = stack.iter().position(|&(n, _)| n == dep).unwrap_or(0);
                            let cycle: Vec<String> =
                                stack[at..].iter().map(|&(n, _)| resources[n].id.to_string()).collect();
                            let location = self.model.location_of(self.instance_of[dep]);
                            let diagnostic = Diagnostic::error(
                                ErrorKind::DependencyCycleException,
                                codes::EXPORT_CYCLE,
                                format!("Cycle in dependencies: [{}]", cycle.join(", ")),
                            );
                            return Err(match location {
                                Some(l) => diagnostic.at(l, "this resource is part of the cycle"),
                                None => diagnostic,
                            });
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    stack.pop();
                }
            }
        }
        Ok(())
    }

    fn warn(&mut self, message: String, location: Option<Location>) {
        let diagnostic = Diagnostic::warning(ErrorKind::CompilerRuntimeWarning, codes::W_EXPORT, message);
        self.warnings.push(match location {
            Some(l) => diagnostic.at(l, "here"),
            None => diagnostic,
        });
    }
}

/// The fields `map_resource` maps, in the order it maps them (which decides the first error):
/// the type's fields except the two it collects while mapping the others, those that can
/// ignore the resource (`managed=false`, `autostart`) first. The reference maps them in the
/// order of a Python set, which changes with the process's hash seed, so a resource that is
/// ignored and has a field that fails to map is dropped by some of its runs and fails the
/// export in others; weft always drops it, as the user asked.
fn mapping_order(ty: &ResourceType) -> impl Iterator<Item = &(String, Getter)> {
    let mapped = ty.fields.iter().filter(|(_, getter)| !matches!(getter, Getter::References | Getter::Mutators));
    let ignores = |getter: &Getter| matches!(getter, Getter::Managed | Getter::IgnoreResource);
    mapped.clone().filter(move |(_, getter)| ignores(getter)).chain(mapped.filter(move |(_, getter)| !ignores(getter)))
}

/// The names of the fields `map_resource` makes for a type, in the order it makes them: those
/// of [`mapping_order`], then the two it collects while mapping them.
fn mapped_field_names(ty: &ResourceType) -> Vec<&str> {
    mapping_order(ty).map(|(name, _)| name.as_str()).chain(["references", "mutators"]).collect()
}

/// A registered type without a native export; `source` is the registering Python file as
/// [`Modules::source_display`] names it.
fn unsupported_type(registration: &Registration, source: &str, location: Option<Location>) -> Diagnostic {
    let diagnostic = Diagnostic::error(
        ErrorKind::CompilerException,
        codes::EXPORT_UNSUPPORTED,
        format!(
            "resource type {} is registered by the Python code of module {} ({}), and weft has no native \
             implementation of its export",
            registration.name, registration.module, source
        ),
    )
    .with_help(format!("weft exports these resource types natively: {}", types::native_names().join(", ")));
    match location {
        Some(l) => diagnostic.at(l, "an instance of it is created here"),
        None => diagnostic,
    }
}

/// Whether a file is a Python source (`.py`).
fn is_python_source(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "py")
}

/// The requirements that make the reference warn that a resource lost its requirements: it
/// removes the ignored ones (`managed=false`) from the list while it loops over that list, so
/// the element after each removed one is not looked at, and an ignored one right after
/// another stays (and is named in the warning). `list.remove` takes out the first equal
/// element.
///
/// Done as the reference does it, removing from the middle of the list, this costs n^2 for a
/// resource that requires n ignored ones (10 s for 400,000). The same result comes from
/// marking the removed places: a Fenwick tree over the places still in the list finds the one
/// the loop's index stands for, and the first equal element still in the list is the front of
/// its value's queue of places (the loop always removes the first).
fn without_ignored_as_the_reference_loops(list: Vec<u32>, ignored: &HashSet<u32>) -> Vec<u32> {
    if !list.iter().any(|item| ignored.contains(item)) {
        return list;
    }
    let mut places_of: HashMap<u32, std::collections::VecDeque<usize>> = HashMap::new();
    for (place, item) in list.iter().enumerate() {
        if ignored.contains(item) {
            places_of.entry(*item).or_default().push_back(place);
        }
    }
    let mut remaining = PlacesRemaining::all(list.len());
    let mut kept = vec![true; list.len()];
    let mut position = 0;
    while position < remaining.count {
        let item = list[remaining.nth(position)];
        if let Some(first) = places_of.get_mut(&item).and_then(|places| places.pop_front()) {
            kept[first] = false;
            remaining.remove(first);
        }
        position += 1;
    }
    list.into_iter().zip(kept).filter_map(|(item, kept)| kept.then_some(item)).collect()
}

/// The places of a list still in it, as a Fenwick tree of ones and zeros: removing a place and
/// finding the n-th remaining one each take O(log n).
struct PlacesRemaining {
    /// `tree[i]` (1-based) counts the remaining places in `(i - lowbit(i), i]`.
    tree: Vec<usize>,
    count: usize,
}

impl PlacesRemaining {
    fn all(len: usize) -> PlacesRemaining {
        let mut tree = vec![0; len + 1];
        for i in 1..=len {
            tree[i] += 1;
            let parent = i + (i & i.wrapping_neg());
            if parent <= len {
                tree[parent] += tree[i];
            }
        }
        PlacesRemaining { tree, count: len }
    }

    fn remove(&mut self, place: usize) {
        let mut i = place + 1;
        while i < self.tree.len() {
            self.tree[i] -= 1;
            i += i & i.wrapping_neg();
        }
        self.count -= 1;
    }

    /// The place of the `n`-th remaining element (from 0); `n` is below `count`.
    fn nth(&self, n: usize) -> usize {
        let len = self.tree.len() - 1;
        let mut at = 0;
        let mut left = n + 1;
        let mut step = if len == 0 { 0 } else { 1 << (usize::BITS - 1 - len.leading_zeros()) };
        while step > 0 {
            let next = at + step;
            if next <= len && self.tree[next] < left {
                at = next;
                left -= self.tree[next];
            }
            step >>= 1;
        }
        // `at` is the last 1-based index with fewer than `n + 1` remaining up to it, so the
        // element is at 1-based `at + 1`, place `at`.
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Fields;

    /// The reference's loop that drops ignored requirements skips the element after each one
    /// it drops (recorded: two ignored requirements give a warning naming the second).
    #[test]
    fn ignored_requirements_are_dropped_as_the_reference_loops() {
        let ignored: HashSet<u32> = [1, 2, 3].into_iter().collect();
        let cases: &[(&[u32], &[u32])] = &[
            (&[1, 2], &[2]),
            (&[1, 2, 3], &[2]),
            (&[1, 9, 2], &[9]),
            (&[9, 1, 2], &[9, 2]),
            (&[1], &[]),
            (&[1, 1], &[1]),
            (&[9], &[9]),
        ];
        for (initial, kept) in cases {
            assert_eq!(
                without_ignored_as_the_reference_loops(initial.to_vec(), &ignored),
                kept.to_vec(),
                "{initial:?}"
            );
        }
    }

    /// The reference's loop itself: removing from the middle of the list while looping over it.
    fn as_python_loops(mut list: Vec<u32>, ignored: &HashSet<u32>) -> Vec<u32> {
        let mut position = 0;
        while position < list.len() {
            let item = list[position];
            if ignored.contains(&item) {
                let first = list.iter().position(|&i| i == item).expect("the item is in the list");
                list.remove(first);
            }
            position += 1;
        }
        list
    }

    /// Every list of up to seven elements over four values, two of them ignored, loses the
    /// same elements as the reference's loop takes out.
    #[test]
    fn ignored_requirements_are_dropped_as_the_loop_drops_them_for_every_small_list() {
        let ignored: HashSet<u32> = [0, 1].into_iter().collect();
        for len in 0..=7u32 {
            for code in 0..4u32.pow(len) {
                let list: Vec<u32> = (0..len).map(|i| code / 4u32.pow(i) % 4).collect();
                assert_eq!(
                    without_ignored_as_the_reference_loops(list.clone(), &ignored),
                    as_python_loops(list.clone(), &ignored),
                    "{list:?}"
                );
            }
        }
    }

    type Made = Vec<(std::borrow::Cow<'static, str>, serde_json::Value)>;

    /// The fields `map_resource` makes for a type, each with its position as value.
    fn made(ty: &ResourceType) -> Made {
        mapped_field_names(ty)
            .into_iter()
            .enumerate()
            .map(|(i, field)| (field.to_string().into(), serde_json::Value::from(i)))
            .collect()
    }

    /// Put in name order by the type's order, as `map_resource` does.
    fn ordered(ty: &ResourceType) -> Fields {
        Fields::from_order(&made(ty))
    }

    /// The same fields inserted one by one, in the order made.
    fn inserted(made: Made) -> Fields {
        let mut fields = Fields::new();
        for (name, value) in made {
            fields.insert(name, value);
        }
        fields
    }

    /// For every native type, putting the fields in name order by the type's worked-out
    /// order gives the fields inserted one resource at a time.
    #[test]
    fn field_order_sorts_as_each_resource_would() {
        for name in types::native_names() {
            let ty = types::native(name).expect("a native type");
            assert_eq!(ordered(ty), inserted(made(ty)), "{name}");
        }
        // A type with a repeated name, and a field named like one of the two added at the end.
        let repeated = ResourceType {
            name: "test::Repeated".to_string(),
            agent: "agent".to_string(),
            id_attribute: "b".to_string(),
            id_getter: Getter::Attr,
            fields: [("b", Getter::Attr), ("a", Getter::Attr), ("b", Getter::Attr), ("references", Getter::Attr)]
                .map(|(name, getter)| (name.to_string(), getter))
                .into(),
        };
        assert_eq!(made(&repeated).len(), 6);
        let ordered = ordered(&repeated);
        assert_eq!(ordered, inserted(made(&repeated)));
        assert_eq!(ordered.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["a", "b", "mutators", "references"]);
        assert_eq!(ordered.get("b"), Some(serde_json::Value::from(2)));
        assert_eq!(ordered.get("references"), Some(serde_json::Value::from(4)));
    }
}
