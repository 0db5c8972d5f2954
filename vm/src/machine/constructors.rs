//! Constructors and indexes: new instances, their defaults and implementations, index keys
//! and index lookups.

use super::*;

/// Up to this many late arguments (`**` and the implicit inverse), a constructor merges them
/// with its direct ones by a scan; beyond, through a table of names.
const LATE_ARGUMENTS_SCANNED: usize = 8;

impl Machine {
    /// The arguments a constructor call gets through its `**` dicts, in order, each name
    /// once. A dict may hold as many keys as its entity has attributes (tens of thousands),
    /// so each name is checked in tables, not against every other.
    #[inline(never)]
    fn splat_arguments(
        &mut self,
        ctor: &weft_ir::program::Ctor,
        values: &Values,
        scope: ScopeId,
        location: Location,
    ) -> R<Vec<(Symbol, Value)>> {
        let entity = ctor.entity;
        let explicit: HashSet<Symbol> = ctor.explicit.iter().copied().collect();
        let mut late = Vec::new();
        let mut names = HashSet::new();
        for s in &ctor.splats {
            for (k, v) in self.splat(*s, values, scope)? {
                if explicit.contains(&k) || !names.insert(k) {
                    return Err(rt(format!(
                        "The attribute {} is set twice in the constructor call of {}.",
                        self.sym_name(k),
                        ctor.written
                    ))
                    .at(location));
                }
                if self.slot_tables[entity.index()].position(k).is_none() {
                    let p = self.prog();
                    return Err(typing(format!("no attribute {} on type {}", self.sym_name(k), p.entity(entity).name))
                        .at(location));
                }
                late.push((k, v));
            }
        }
        Ok(late)
    }

    pub(super) fn construct(
        &mut self,
        ctor_id: CtorId,
        values: &Values,
        scope: ScopeId,
        location: Location,
    ) -> R<Value> {
        let p = self.prog();
        let ctor = &p.ctors[ctor_id.index()];
        let entity = ctor.entity;
        // Late arguments: `**dict` and the implicit inverse.
        let late =
            if ctor.splats.is_empty() { Vec::new() } else { self.splat_arguments(ctor, values, scope, location)? };
        let mut inverse: Option<(Symbol, Value)> = None;
        if let Some((inst_expr, attr_name)) = ctor.lhs {
            let lhs = self.eval(inst_expr, values, scope)?;
            if let Value::Instance(li) = lhs {
                let lent = self.instances[li as usize].entity;
                if let Some(attr) = p.entity(lent).slots.iter().find(|s| s.0 == attr_name).map(|s| s.1)
                    && let AttributeKind::Relation(end) = p.attribute(attr).kind
                    && let Some(inv) = end.inverse
                {
                    let inv_attr = p.attribute(inv);
                    let in_index = p.entity(entity).indexes.iter().any(|ix| ix.contains(&inv_attr.name));
                    if !ctor.direct.iter().any(|(n, _)| *n == inv_attr.name)
                        && !late.iter().any(|(n, _)| *n == inv_attr.name)
                        && in_index
                        && p.is_subclass(entity, inv_attr.entity)
                    {
                        inverse = Some((inv_attr.name, Value::Instance(li)));
                    }
                }
            }
        }
        // The inverse is taken only when no `**` gave its name, and the `**` names are
        // distinct (`splat_arguments`), so every late argument has a name of its own.
        let late_args: Vec<(Symbol, Value)> = inverse.into_iter().chain(late).collect();
        let missing: Vec<Symbol> =
            ctor.required_dynamic.iter().filter(|a| !late_args.iter().any(|(n, _)| n == *a)).copied().collect();
        if !missing.is_empty() {
            let mut message = "Invalid Constructor call:".to_string();
            for a in &missing {
                let attr = p.entity(entity).slots.iter().find(|s| s.0 == *a).map(|s| s.1);
                let kind = match attr.map(|x| p.attribute(x).kind) {
                    Some(AttributeKind::Relation(_)) => "relation",
                    _ => "attribute",
                };
                message.push_str(&format!(
                    "\n\t* Missing {kind} '{}'. The {kind} {}.{} is part of an index.",
                    p.name(*a),
                    p.entity(entity).name,
                    p.name(*a)
                ));
            }
            return Err(EvalError::new(ErrorKind::IndexAttributeMissingInConstructorException, message).at(location));
        }
        let mut direct: SmallVec<[(Symbol, Value); 8]> = SmallVec::with_capacity(ctor.direct.len() + late_args.len());
        for (k, v) in &ctor.direct {
            direct.push((*k, self.eval(*v, values, scope)?));
        }
        // A late argument replaces a direct one of its name, in its place: found by a scan
        // for the few late arguments of most calls, in a table for a large `**`.
        if late_args.len() <= LATE_ARGUMENTS_SCANNED {
            for (k, v) in &late_args {
                match direct.iter_mut().find(|(n, _)| n == k) {
                    Some(slot) => slot.1 = v.clone(),
                    None => direct.push((*k, v.clone())),
                }
            }
        } else {
            let mut direct_positions: HashMap<Symbol, usize> =
                direct.iter().enumerate().map(|(position, (name, _))| (*name, position)).collect();
            for (k, v) in &late_args {
                match direct_positions.get(k) {
                    Some(&position) => direct[position].1 = v.clone(),
                    None => {
                        direct_positions.insert(*k, direct.len());
                        direct.push((*k, v.clone()));
                    }
                }
            }
        }
        let indirect: SmallVec<[(Symbol, ExprId); 8]> =
            ctor.indirect.iter().filter(|(k, _)| !late_args.iter().any(|(n, _)| n == k)).copied().collect();
        // Index lookups: the instances found, by index.
        let mut found: SmallVec<[InstanceId; 2]> = SmallVec::new();
        for index in &p.entity(entity).indexes {
            let params: SmallVec<[(Symbol, Value); 4]> = index
                .iter()
                .map(|a| (*a, direct.iter().find(|(n, _)| n == a).map(|x| x.1.clone()).unwrap_or(Value::NULL)))
                .collect();
            if let Some(obj) = self.lookup_index(entity, &params, None, location).map_err(|e| e.at(location))? {
                if self.instances[obj as usize].entity != entity {
                    return Err(EvalError::new(
                        ErrorKind::DuplicateException,
                        "Type found in index is not an exact match",
                    )
                    .at(location));
                }
                found.push(obj);
            }
        }
        let inst = if let Some(&first) = found.first() {
            if found.iter().any(|i| *i != first) {
                return Err(
                    EvalError::new(ErrorKind::IndexCollisionException, "Inconsistent indexes detected!\n").at(location)
                );
            }
            self.add_location(first, location);
            for (k, v) in direct {
                self.set_attribute(first, k, v, location, true).map_err(|e| e.at(location))?;
            }
            first
        } else {
            let inst = self.new_instance(entity, location);
            for (k, v) in direct {
                self.set_attribute(inst, k, v, location, true).map_err(|e| e.at(location))?;
            }
            self.add_instance(entity, inst).map_err(|e| e.at(location))?;
            inst
        };
        // The hidden variable holding the new instance shares the instance's own `self` cell:
        // both hold the same value and neither is ever set again. It is bound only when
        // something reads it (`Machine::ctor_instance_read`): otherwise a scope binding it
        // resolves every name as the caller's scope does.
        let self_scope = if self.ctor_instance_read[ctor_id.index()] {
            let self_cell = self.self_cell(inst);
            self.push_scope(Scope::Var { name: ctor.self_name, cell: self_cell, parent: scope })
        } else {
            scope
        };
        for (name, value) in indirect {
            let Some(cell) = self.slot(inst, name) else { continue };
            self.emit_attribute_value(inst, name, cell, value, self_scope, location)?;
        }
        for (i, _) in p.entity(entity).implements.iter().enumerate() {
            self.emit_subctor(inst, i as u32)?;
        }
        Ok(Value::Instance(inst))
    }

    pub(super) fn emit_subctor(&mut self, inst: InstanceId, index: u32) -> R<()> {
        let p = self.prog();
        let entity = self.instances[inst as usize].entity;
        let implement = &p.entity(entity).implements[index as usize];
        // An unconditional `implement` of implementations without statements (`std::none`)
        // waits for nothing and emits nothing: its task would run later with no effect but
        // recording the implementations, which nothing reads before the end of the
        // evaluation. Recording them now spares a task per instance.
        if implement.condition.is_none()
            && implement.implementations.iter().all(|imp| p.block(p.implementations[imp.index()].body).stmts.is_empty())
        {
            for &imp in &implement.implementations {
                self.record_implementation(inst, imp);
            }
            return Ok(());
        }
        // The condition sees the instance's attributes, then the `implement`'s namespace.
        let (reqs, scope) = match implement.condition {
            None => (Reqs::new(), 0),
            Some(c) => {
                let scope = self.instance_ns_scope(inst, implement.ns);
                (self.requires(c, scope).map_err(|e| e.at(implement.location))?, scope)
            }
        };
        let target = self.sink;
        self.spawn(
            reqs,
            Body::Exec {
                target,
                promise: OptPromise::NONE,
                what: Exec::SubCtor { instance: inst, index },
                scope,
                attr: AttrSite::NONE,
            },
        );
        Ok(())
    }

    pub(super) fn new_instance(&mut self, entity: EntityId, location: Location) -> InstanceId {
        let p = self.prog();
        let id = self.instances.len() as InstanceId;
        let first_cell = self.cells.len() as CellId;
        for planned in self.instance_plans[entity.index()].iter() {
            // The cell's type check is the attribute's, looked up when a value is set.
            let mut cell = Cell::attribute(planned.kind, planned.attr);
            if planned.holds_instance {
                cell.fill(Value::Instance(id));
                cell.set_has_value(true);
                cell.set_location_index(&mut self.exts, self.locations.intern(location));
                self.cells.push(cell);
            } else if planned.queued_at_birth {
                // `Machine::queue` of a cell that was never queued.
                cell.set_queued(true);
                let cid = self.cells.push(cell) as CellId;
                self.wait_queue.push_back((cid, true));
            } else {
                self.cells.push(cell);
            }
        }
        debug_assert!((first_cell..self.cells.len() as CellId).all(|cid| {
            let c = &self.cells[cid as usize];
            c.queued() == (c.is_delayed() && self.can_get(cid))
        }));
        let self_cell = self.plain_with(Value::Instance(id), Some(location));
        debug_assert_eq!(self_cell, first_cell + p.entity(entity).slots.len() as CellId);
        let location = self.loc_id(location);
        // Every block that starts at or before this instance's first cell, and after the
        // previous instance's, has all the instances so far before it.
        while self.instance_blocks.len() * OWNER_BLOCK <= first_cell as usize {
            self.instance_blocks.push(id);
        }
        self.instances.push(Instance {
            entity,
            first_cell,
            location,
            more_locations: NONE,
            scope: NONE,
            implementations: [Instance::NO_IMPLEMENTATION; 2],
        });
        id
    }

    /// Adds a new instance to the indexes of its entity and of every ancestor, in the order of
    /// a depth-first walk of the parents, left to right (`Machine::index_lineage`).
    pub(super) fn add_instance(&mut self, entity: EntityId, inst: InstanceId) -> R<()> {
        let lineage = match self.index_lineages[entity.index()].take() {
            Some(lineage) => lineage,
            None => self.index_lineage(entity),
        };
        let added = lineage.iter().try_for_each(|&indexed| self.add_to_index(indexed, inst));
        self.index_lineages[entity.index()] = Some(lineage);
        added
    }

    /// The entities whose indexes an instance of `entity` joins: those of its lineage
    /// (`Program::lineage`) with an index. Adding an instance to the indexes of an entity a
    /// second time (through another path of a diamond) finds the instance itself and changes
    /// nothing, so visiting each once does what the walk along every path did, without its
    /// time exponential in the depth of a hierarchy of diamonds.
    fn index_lineage(&self, entity: EntityId) -> Box<[EntityId]> {
        let p = self.prog();
        p.lineage(entity).into_iter().filter(|&e| !p.entity(e).indexes.is_empty()).collect()
    }

    /// The reference's index key: `name=repr(value)` for each attribute, sorted by name and
    /// joined by `, `, written into one string. Only messages and the queue of lookups waiting
    /// for a key need it; finding a key hashes and compares values (`Machine::key_hash`).
    pub(super) fn index_key(&self, params: &[(Symbol, Value)]) -> String {
        let mut order: SmallVec<[usize; 4]> = (0..params.len()).collect();
        order.sort_by(|&a, &b| self.sym_name(params[a].0).cmp(self.sym_name(params[b].0)));
        let mut key = String::with_capacity(32);
        for (n, &i) in order.iter().enumerate() {
            if n > 0 {
                key.push_str(", ");
            }
            key.push_str(self.sym_name(params[i].0));
            key.push('=');
            params[i].1.write_repr(&mut key, "null");
        }
        key
    }

    /// The hash of an index key. The reference's key is the string [`Self::index_key`]
    /// builds; two keys are the same when the same attributes have values with the same
    /// `repr` ([`key_part_eq`]). The hash is of the attributes in symbol order, which is as
    /// canonical as name order and needs no string.
    pub(super) fn key_hash(&self, sorted: &[(Symbol, Value)]) -> u64 {
        let mut state = self.index_hasher.build_hasher();
        for (name, value) in sorted {
            name.hash(&mut state);
            hash_key_part(value, &mut state);
        }
        state.finish()
    }

    /// The instance in `entity`'s index whose key has the values `sorted` (in symbol order, of
    /// hash `hash`).
    pub(super) fn find_indexed(&self, entity: EntityId, hash: u64, sorted: &[(Symbol, Value)]) -> Option<InstanceId> {
        let short = IndexEntry::short_hash(hash);
        self.entities[entity.index()]
            .index
            .find(IndexEntry::table_hash(short), |e| e.hash == short && self.has_key(entity, e, sorted))
            .map(|e| e.instance)
    }

    /// Whether an indexed instance's key has the values `sorted`: its index is on the same
    /// attributes, and its values for them, set before it was indexed and never changed
    /// since, have the same `repr`.
    pub(super) fn has_key(&self, entity: EntityId, entry: &IndexEntry, sorted: &[(Symbol, Value)]) -> bool {
        let p = self.prog();
        let attributes = &p.entity(entity).indexes[entry.index as usize];
        attributes.len() == sorted.len()
            && sorted.iter().all(|(name, value)| {
                if !attributes.contains(name) {
                    return false;
                }
                let Some(cell) = self.slot(entry.instance, *name) else { return false };
                let c = &self.cells[cell as usize];
                match c.kind() {
                    CellKind::Plain | CellKind::Single | CellKind::Option => {
                        key_part_eq(c.value().as_deref().unwrap_or(&Value::NULL), value)
                    }
                    _ => key_part_eq(&self.peek(cell).unwrap_or(Value::NULL), value),
                }
            })
    }

    pub(super) fn add_to_index(&mut self, entity: EntityId, inst: InstanceId) -> R<()> {
        let p = self.prog();
        for (index_no, index) in p.entity(entity).indexes.iter().enumerate() {
            let mut params: SmallVec<[(Symbol, Value); 4]> = SmallVec::new();
            let mut ok = true;
            for a in index {
                match self.slot(inst, *a) {
                    Some(c) if self.is_ready(c) => {
                        let v = self.peek(c).unwrap_or(Value::NULL);
                        if let Value::Reference(_) = v {
                            return Err(typing(format!(
                                "Invalid value `{}` in index for attribute {}: references can not be used in indexes.",
                                self.display_value(&v),
                                p.name(*a)
                            )));
                        }
                        params.push((*a, v));
                    }
                    _ => ok = false,
                }
            }
            if !ok {
                continue;
            }
            params.sort_unstable_by_key(|(name, _)| name.as_u32());
            let hash = self.key_hash(&params);
            match self.find_indexed(entity, hash, &params) {
                Some(other) if other != inst => {
                    return Err(EvalError::new(
                        ErrorKind::DuplicateException,
                        format!("Duplicate key in index. {}", self.index_key(&params)),
                    ));
                }
                Some(_) => {}
                None => {
                    let short = IndexEntry::short_hash(hash);
                    let entry = IndexEntry { hash: short, instance: inst, index: index_no as u32 };
                    self.entities[entity.index()]
                        .index
                        .insert_unique(IndexEntry::table_hash(short), entry, |e| IndexEntry::table_hash(e.hash));
                }
            }
            // Most models never wait for a key: then no key string is built.
            if self.entities[entity.index()].index_queue.is_empty() {
                continue;
            }
            let key = self.index_key(&params);
            let queued = self.entities[entity.index()].index_queue.remove(&key);
            if let Some((_, waiting)) = queued {
                for (target, location) in waiting {
                    self.set_cell(target, Value::Instance(inst), location, true)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn lookup_index(
        &mut self,
        entity: EntityId,
        params: &[(Symbol, Value)],
        target: Option<CellId>,
        location: Location,
    ) -> R<Option<InstanceId>> {
        let p = self.prog();
        let mut seen: SmallVec<[Symbol; 4]> = SmallVec::new();
        for (k, _) in params {
            if seen.contains(k) {
                return Err(rt(format!("Attribute {} provided twice in index lookup", self.sym_name(*k))));
            }
            seen.push(*k);
        }
        // The same set of attributes (`seen` has no duplicates).
        let has_index = p.entity(entity).indexes.iter().any(|ix| {
            ix.len() == seen.len() && ix.iter().all(|a| seen.contains(a)) && seen.iter().all(|a| ix.contains(a))
        });
        if !has_index {
            let shown: Vec<String> = params
                .iter()
                .map(|(k, v)| {
                    format!("('{}', {})", self.sym_name(*k), v.repr_with("null", &|i| self.instance_display(i)))
                })
                .collect();
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!("No index defined on {} for this lookup: [{}]", p.entity(entity).name, shown.join(", ")),
            ));
        }
        let mut coerced: SmallVec<[(Symbol, Value); 4]> = SmallVec::new();
        for (k, v) in params {
            if let Value::Reference(_) = v {
                return Err(typing(format!(
                    "Invalid value `{}` in index for attribute {}: references can not be used in indexes.",
                    self.display_value(v),
                    p.name(*k)
                )));
            }
            let attr = p.entity(entity).slots.iter().find(|s| s.0 == *k).map(|s| s.1);
            let v = match attr.map(|a| p.attribute(a).kind) {
                Some(AttributeKind::Value(t)) if t.base == BaseType::Primitive(Primitive::Float) && !t.list => {
                    match v {
                        null @ Value::Null(_) if t.nullable => null.clone(),
                        other => cast(Primitive::Float, std::slice::from_ref(other))?,
                    }
                }
                _ => v.clone(),
            };
            coerced.push((*k, v));
        }
        coerced.sort_unstable_by_key(|(name, _)| name.as_u32());
        let found = self.find_indexed(entity, self.key_hash(&coerced), &coerced);
        match target {
            None => Ok(found),
            Some(t) => {
                if let Some(inst) = found {
                    self.set_cell(t, Value::Instance(inst), location, true)?;
                } else {
                    let key = self.index_key(&coerced);
                    let state = &mut self.entities[entity.index()];
                    let order = state.queued_keys;
                    let entry = state.index_queue.entry(key).or_insert_with(|| (order, Vec::new()));
                    if entry.1.is_empty() {
                        state.queued_keys += 1;
                    }
                    entry.1.push((t, location));
                }
                Ok(None)
            }
        }
    }

    /// Unmatched index lookups, per entity, for the final checks.
    pub fn pending_lookups(&self, entity: EntityId) -> Vec<(String, Location)> {
        let mut keys: Vec<(&String, &QueuedLookups)> = self.entities[entity.index()].index_queue.iter().collect();
        keys.sort_by_key(|(_, (order, _))| *order);
        keys.into_iter().flat_map(|(k, (_, ws))| ws.iter().map(move |(_, l)| (k.clone(), *l))).collect()
    }
}
