//! Phases 4 to 7 of the static checks: implementations, relations, indexes, `implement`
//! statements, and the normalisation of types (typedef constraints, entity defaults and
//! relation names, dataclasses, implementation bodies).

use weft_ir::diagnostic::codes;
use weft_ir::{Diagnostic, ErrorKind};

use super::consteval::Validation;
use super::normalize::Lhs;
use super::*;

impl<'p, 'a> Checker<'p, 'a> {
    // ------------------------------------------------------------------ 4. implementations, relations

    /// Implementations and relations are evaluated together, in statement order; the
    /// `requires`/`provides` relation of `std::Entity` comes last.
    pub(super) fn define_implementations_and_relations(&mut self) {
        let impl_ids: HashMap<*const ast::ImplementationDef<'a>, ImplId> =
            self.impl_defs.iter().map(|&(_, def, id)| (def as *const _, id)).collect();
        for ns in self.ns_ids() {
            let items = self.model.namespace(ns).ast.items;
            for item in items {
                match item {
                    ast::Item::Implementation(def) => {
                        // Duplicates were not registered and are skipped.
                        let Some(&id) = impl_ids.get(&(*def as *const _)) else { continue };
                        self.model.implementations[id.index()].entity = self.implemented_entity(ns, &def.entity);
                    }
                    ast::Item::Relation(def) => self.define_relation(ns, def),
                    _ => {}
                }
            }
        }
        self.define_requires_relation();
    }

    /// The entity an `implementation ... for` or `implement` names, reporting what the
    /// reference reports when it is not an entity.
    fn implemented_entity(&mut self, ns: NsId, class: &ast::ClassRef<'a>) -> Option<EntityId> {
        match self.lookup_entity(ns, class) {
            Ok(e) => Some(e),
            Err(mut d) => {
                if d.kind == ErrorKind::TypingException {
                    d.message = format!(
                        "Implementation can only be define for an Entity, but {} is not an entity",
                        self.path_text(&class_parts(class))
                    );
                }
                self.push(d);
                None
            }
        }
    }

    fn define_relation(&mut self, ns: NsId, def: &'a ast::RelationDef<'a>) {
        let location = self.loc(ns, def.span);
        let left = match self.lookup_entity(ns, &def.left) {
            Ok(e) => e,
            Err(d) => return self.push(d),
        };
        let right = match self.lookup_entity(ns, &def.right) {
            Ok(e) => e,
            Err(d) => return self.push(d),
        };
        let relation = RelationId(self.model.relations.len() as u32);
        self.model.relations.push(Relation {
            ns,
            location,
            annotations: def.annotations,
            left_attr: None,
            right_attr: None,
        });
        // The far end (`B.a`) is created first, then `A.b`, as in the reference; this order is
        // the order of the attribute slots.
        let mut right_attr = None;
        if let Some(end) = def.right_attr {
            let attr = self.add_relation_attribute(ns, right, end, left, relation);
            if attr.is_none() {
                return;
            }
            right_attr = attr;
        }
        let self_inverse = left == right && def.right_attr.is_some_and(|e| e.name.name == def.left_attr.name.name);
        let left_attr = if self_inverse {
            right_attr
        } else {
            let attr = self.add_relation_attribute(ns, left, def.left_attr, right, relation);
            if attr.is_none() {
                return;
            }
            attr
        };
        if let (Some(l), Some(r)) = (left_attr, right_attr) {
            self.set_inverse(l, r);
            self.set_inverse(r, l);
        }
        let rel = &mut self.model.relations[relation.index()];
        rel.left_attr = left_attr;
        rel.right_attr = right_attr;
    }

    fn set_inverse(&mut self, attr: AttrId, inverse: AttrId) {
        if let AttributeKind::Relation(end) = &mut self.model.attributes[attr.index()].kind {
            end.inverse = Some(inverse);
        }
    }

    /// Adds the relation attribute `end` to `owner`, pointing at `target`.
    fn add_relation_attribute(
        &mut self,
        ns: NsId,
        owner: EntityId,
        end: ast::RelationAttr,
        target: EntityId,
        relation: RelationId,
    ) -> Option<AttrId> {
        let existing = self
            .model
            .entity(owner)
            .attributes
            .iter()
            .copied()
            .find(|&a| self.model.attribute(a).name == end.name.name);
        if let Some(existing) = existing {
            let owner_name = self.sym(self.model.entity(owner).name).to_string();
            let existing_loc = self.model.attribute(existing).location;
            self.push(
                Diagnostic::error(
                    ErrorKind::DuplicateException,
                    codes::RELATION_NAME_CLASH,
                    format!("attribute '{}' already exists on entity '{owner_name}'", self.sym(end.name.name)),
                )
                .at(existing_loc, "the attribute is defined here")
                .with_label(self.loc(ns, end.name.span), "the relation defines it again here"),
            );
            return None;
        }
        let id = AttrId(self.model.attributes.len() as u32);
        self.model.attributes.push(Attribute {
            name: end.name.name,
            entity: owner,
            location: self.loc(ns, end.name.span),
            kind: AttributeKind::Relation(RelationEnd {
                target,
                lower: end.multiplicity.lower,
                upper: end.multiplicity.upper,
                inverse: None,
                relation,
            }),
        });
        self.model.entities[owner.index()].attributes.push(id);
        Some(id)
    }

    fn define_requires_relation(&mut self) {
        let Some(entity) = self.model.std_entity else { return };
        let ns = self.model.entity(entity).ns;
        let location = self.model.entity(entity).location;
        let relation = RelationId(self.model.relations.len() as u32);
        self.model.relations.push(Relation { ns, location, annotations: &[], left_attr: None, right_attr: None });
        let make = |name, relation| Attribute {
            name,
            entity,
            location,
            kind: AttributeKind::Relation(RelationEnd {
                target: entity,
                lower: 0,
                upper: None,
                inverse: None,
                relation,
            }),
        };
        let requires = AttrId(self.model.attributes.len() as u32);
        self.model.attributes.push(make(self.known.requires, relation));
        let provides = AttrId(self.model.attributes.len() as u32);
        self.model.attributes.push(make(self.known.provides, relation));
        self.set_inverse(requires, provides);
        self.set_inverse(provides, requires);
        self.model.entities[entity.index()].attributes.extend([requires, provides]);
        let rel = &mut self.model.relations[relation.index()];
        rel.left_attr = Some(provides);
        rel.right_attr = Some(requires);
    }

    // ------------------------------------------------------------------ 5. indexes

    pub(super) fn define_indexes(&mut self) {
        for (ns, def) in self.index_defs.clone() {
            let entity = match self.lookup_entity(ns, &def.entity) {
                Ok(e) => e,
                Err(d) => {
                    self.push(d);
                    continue;
                }
            };
            if self.model.entity(entity).invalid {
                continue;
            }
            let all = self.model.all_attribute_names(entity);
            let at = self.loc(ns, def.span);
            let entity_name = self.entity_name(entity);
            let mut ok = true;
            for attr in def.attributes {
                let name = self.sym(attr.name).to_string();
                if !all.contains(&attr.name) {
                    let error = Diagnostic::error(
                        ErrorKind::NotFoundException,
                        codes::INDEX_ATTRIBUTE_NOT_FOUND,
                        format!("Attribute '{name}' referenced in index is not defined in entity {entity_name}"),
                    );
                    let error = self.at_attribute_of_index(error, self.loc(ns, attr.span), "no such attribute", at);
                    self.push(error);
                    ok = false;
                    break;
                }
                let Some(a) = self.model.find_attribute(entity, attr.name) else { continue };
                let attribute = self.model.attribute(a);
                let problem = match attribute.kind {
                    AttributeKind::Relation(end) if end.is_optional() => Some(format!(
                        "Index can not contain optional relations, Relation ' {name}.{entity_name}' is optional"
                    )),
                    _ if attribute.is_multi() => Some(format!(
                        "Index can not contain list attributes, Attribute ' {name}.{entity_name}' is a list"
                    )),
                    _ => None,
                };
                if let Some(message) = problem {
                    let error = Diagnostic::error(ErrorKind::IndexException, codes::INVALID_INDEX, message);
                    let attribute = self.loc(ns, attr.span);
                    let error = self.at_attribute_of_index(error, attribute, "cannot be part of an index", at);
                    self.push(error);
                    ok = false;
                    break;
                }
            }
            if ok {
                let names: Vec<Symbol> = def.attributes.iter().map(|a| a.name).collect();
                self.add_index(entity, names);
            }
        }
    }

    /// Places an error about one attribute of an index. The reference reports it at the index
    /// statement's line; on that line the attribute is the more precise place, and on a later
    /// one (an index written over several lines) the statement is the place and the attribute
    /// is labelled.
    fn at_attribute_of_index(&self, error: Diagnostic, attribute: Location, what: &str, index: Location) -> Diagnostic {
        let line = |l: Location| self.program.sources.line_col(l).line;
        if line(attribute) == line(index) {
            error.at(attribute, what).with_label(index, "in this index")
        } else {
            error.at(index, "in this index").with_label(attribute, what)
        }
    }

    /// Adds an index to an entity and its descendants, skipping duplicates; indexes are kept
    /// as sorted attribute lists.
    fn add_index(&mut self, entity: EntityId, attributes: Vec<Symbol>) {
        crate::with_stack(|| self.add_index_inner(entity, attributes))
    }

    fn add_index_inner(&mut self, entity: EntityId, attributes: Vec<Symbol>) {
        let mut sorted = attributes.clone();
        sorted.sort_by(|a, b| self.sym(*a).cmp(self.sym(*b)));
        let exists = self.model.entity(entity).indexes.iter().any(|i| *i == attributes || *i == sorted);
        if exists {
            return;
        }
        self.model.entities[entity.index()].indexes.push(sorted);
        for child in self.model.entity(entity).children.clone() {
            self.add_index(child, attributes.clone());
        }
    }

    // ------------------------------------------------------------------ 6. implement

    pub(super) fn define_implements(&mut self) {
        for (ns, def) in self.implement_defs.clone() {
            let Some(entity) = self.implemented_entity(ns, &def.entity) else { continue };
            let mut implementations = Vec::new();
            let mut ok = true;
            for item in def.items {
                let ast::ImplementItem::Named(path) = item else { continue };
                let implementation = match self.lookup_type(ns, path.parts, path.span) {
                    Ok(TypeRef::Item(TypeItem::Implementation(i))) => i,
                    Ok(other) => {
                        let what = self.describe_type_ref(other);
                        self.error(
                            ErrorKind::TypingException,
                            codes::IMPLEMENTATION_TYPE_MISMATCH,
                            format!("{} is not an implementation but {what}", self.path_text(path.parts)),
                            self.loc(ns, path.span),
                            "an implementation is expected here",
                        );
                        ok = false;
                        break;
                    }
                    Err(d) => {
                        self.push(d);
                        ok = false;
                        break;
                    }
                };
                if let Some(implemented) = self.model.implementations[implementation.index()].entity
                    && !self.model.is_subclass(entity, implemented)
                {
                    let impl_name = self.sym(self.model.implementations[implementation.index()].name).to_string();
                    self.error(
                        ErrorKind::TypingException,
                        codes::IMPLEMENTATION_TYPE_MISMATCH,
                        format!(
                            "Type mismatch: cannot use {impl_name} as implementation for  {} because its implementing type is {}",
                            self.entity_name(entity),
                            self.entity_name(implemented)
                        ),
                        self.loc(ns, path.span),
                        "this implementation is for another entity",
                    );
                    ok = false;
                    break;
                }
                implementations.push(implementation);
            }
            if !ok {
                continue;
            }
            let inherit = def.uses_parents();
            let id = ImplementId(self.model.implements.len() as u32);
            self.model.implements.push(Implement {
                entity,
                ns,
                location: self.loc(ns, def.entity.span),
                implementations,
                condition: def.when,
                inherit,
            });
            let e = &mut self.model.entities[entity.index()];
            e.implements.push(id);
            e.implements_inherit |= inherit;
        }
    }

    // ------------------------------------------------------------------ 7. normalise types

    pub(super) fn normalize_types(&mut self) {
        // Typedef constraints first: defaults are validated against them.
        for (ns, def, _) in self.typedef_defs.clone() {
            self.normalize_expr(ns, def.constraint, Lhs::None, Scope::Constraint);
        }
        // Plugin signatures next, as the reference normalises its plugins after its typedefs.
        self.check_plugin_annotations();
        // Entities in definition order (`std::Entity` last).
        let mut entities: Vec<EntityId> = self.entity_defs.iter().map(|d| d.2).collect();
        entities.extend(self.model.std_entity);
        for entity in entities {
            if !self.model.entity(entity).invalid {
                self.normalize_entity(entity);
            }
        }
        // Implementation bodies last: their constructors need every entity normalised.
        for (ns, _, id) in self.impl_defs.clone() {
            let body = self.model.implementations[id.index()].body;
            let entity = self.model.implementations[id.index()].entity;
            self.normalize_block(ns, body, Scope::Implementation(entity), true);
        }
    }

    fn normalize_entity(&mut self, entity: EntityId) {
        // Own defaults, in attribute order: each must be a constant of the declared type.
        let defaults: Vec<PendingDefault<'a>> = self.pending_defaults.remove(&entity).unwrap_or_default();
        // Where each own default is, by name (an entity can have thousands).
        let default_positions: HashMap<Symbol, usize> = self.model.entities[entity.index()]
            .own_defaults
            .iter()
            .enumerate()
            .rev()
            .map(|(at, &(name, _))| (name, at))
            .collect();
        for pending in defaults {
            let attr_loc = self.model.attribute(pending.attr).location;
            let file = self.loc(pending.ns, pending.expr.span).file;
            let value = match self.constant_value(pending.expr, Some(file)) {
                Ok(v) => v,
                Err(message) => {
                    self.push(
                        Diagnostic::error(ErrorKind::RuntimeException, codes::DEFAULT_NOT_CONSTANT, message)
                            .at(attr_loc, "a default value must be a constant")
                            .with_label(self.loc(pending.ns, pending.expr.span), "not a constant"),
                    );
                    self.model.entities[entity.index()].invalid = true;
                    return;
                }
            };
            match self.validate_value(&value, pending.ty) {
                Validation::Valid | Validation::Deferred => {}
                Validation::Invalid(kind, message) => {
                    self.push(
                        Diagnostic::error(kind, codes::INVALID_DEFAULT, message)
                            .at(attr_loc, "this default does not fit the attribute's type")
                            .with_label(self.loc(pending.ns, pending.expr.span), "the default value"),
                    );
                    self.model.entities[entity.index()].invalid = true;
                    return;
                }
            }
            let name = self.model.attribute(pending.attr).name;
            let location = self.loc(pending.ns, pending.expr.span);
            if let Some(&at) = default_positions.get(&name) {
                self.model.entities[entity.index()].own_defaults[at].1 = Some(DefaultValue { value, location });
            }
        }
        // A relation may not reuse the name of an attribute of a parent.
        for attr in self.model.entity(entity).attributes.clone() {
            if !matches!(self.model.attribute(attr).kind, AttributeKind::Relation(_)) {
                continue;
            }
            let name = self.model.attribute(attr).name;
            for parent in self.model.entity(entity).parents.clone() {
                if let Some(parent_attr) = self.model.find_attribute(parent, name) {
                    let owner = self.model.attribute(parent_attr).entity;
                    let owner_name = self.sym(self.model.entity(owner).name).to_string();
                    let (my_loc, parent_loc) =
                        (self.model.attribute(attr).location, self.model.attribute(parent_attr).location);
                    self.push(
                        Diagnostic::error(
                            ErrorKind::DuplicateException,
                            codes::RELATION_NAME_CLASH,
                            format!(
                                "Attribute name {} is already defined in {owner_name}, unable to define relationship",
                                self.sym(name)
                            ),
                        )
                        .at(my_loc, "this relation end")
                        .with_label(parent_loc, "clashes with this inherited attribute"),
                    );
                    self.model.entities[entity.index()].invalid = true;
                    return;
                }
            }
        }
        // Conditions of the `implement` statements that apply.
        for implement in self.model.implements_of(entity) {
            let (ns, condition) =
                (self.model.implements[implement.index()].ns, self.model.implements[implement.index()].condition);
            if let Some(condition) = condition {
                self.normalize_expr(ns, condition, Lhs::None, Scope::Instance(entity));
            }
        }
        if self.model.entity(entity).is_dataclass {
            self.pair_dataclass(entity);
        }
    }

    // ------------------------------------------------------------------ 8. root blocks

    pub(super) fn normalize_root_blocks(&mut self) {
        for ns in self.ns_ids() {
            let items = self.model.namespace(ns).ast.items;
            for item in items {
                match item {
                    ast::Item::Stmt(stmt) => self.normalize_stmt(ns, stmt, Scope::Namespace, false),
                    ast::Item::Relation(def) => {
                        for annotation in def.annotations {
                            self.normalize_expr(ns, annotation, Lhs::None, Scope::Namespace);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Where code being normalised runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The top level of a namespace.
    Namespace,
    /// An implementation body, for the given entity if it resolved.
    Implementation(Option<EntityId>),
    /// An `implement ... when` condition, evaluated in an instance's scope.
    Instance(EntityId),
    /// A typedef constraint: only `self` is bound.
    Constraint,
}
