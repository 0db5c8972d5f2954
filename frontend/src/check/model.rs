//! The checked program: every definition resolved, indexed by typed ids.
//!
//! This is what the static checks produce and what lowering to IR consumes. It refers back to
//! the syntax tree (`'a`) for the code it does not need to look into: implementation bodies,
//! conditions, relation annotations and the top-level blocks.

use std::collections::{HashMap, HashSet};

use weft_ir::plugin::PluginSignature;
use weft_ir::value::Value;
use weft_ir::{FileId, Location, Symbol};

use crate::ast;

/// How long the list of an entity's `implement`s may grow with the repetitions a hierarchy of
/// diamonds gives it (see `Model::implements_of`).
pub(crate) const MAX_REPEATED_IMPLEMENTS: usize = 4096;

/// What the walks over an entity's ancestors found, by entity, kept between walks: see
/// [`Model::default_values_in`] and [`Model::all_attributes_in`]. Valid for one state of the
/// model: a walk after the entities changed needs a new one. Maps rather than tables by
/// entity, since most are made for one question about one entity of a large model.
#[derive(Default)]
pub struct Ancestry {
    defaults: HashMap<EntityId, Vec<(Symbol, DefaultValue)>>,
    attributes: HashMap<EntityId, Vec<(Symbol, AttrId)>>,
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A namespace: a loaded `.cf` file.
    NsId
);
id_type!(EntityId);
id_type!(AttrId);
id_type!(TypedefId);
id_type!(ImplId);
id_type!(ImplementId);
id_type!(PluginId);
id_type!(RelationId);

/// A named thing in a namespace's type table. Entities, typedefs, implementations and plugins
/// share one table per namespace, as in the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeItem {
    Entity(EntityId),
    Typedef(TypedefId),
    Implementation(ImplId),
    Plugin(PluginId),
}

#[derive(Debug)]
pub struct Namespace<'a> {
    /// `__config__`, `std`, `mod::sub`.
    pub name: String,
    pub file: FileId,
    /// The enclosing namespace by name (`mod` for `mod::sub`), where unqualified type names
    /// are also looked up.
    pub parent: Option<NsId>,
    pub types: HashMap<Symbol, TypeItem>,
    /// Namespaces visible from here, by the name code uses for them: the namespace itself
    /// (full name), `std`, and every import (full name or alias).
    pub visible: HashMap<String, NsId>,
    pub ast: ast::File<'a>,
}

/// A primitive type of the language (the IR's own).
pub use weft_ir::program::Primitive;

/// The base of a value type: a primitive or a typedef.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BaseType {
    Primitive(Primitive),
    Typedef(TypedefId),
}

/// The declared type of a plain attribute: `base`, `base[]`, `base?` or `base[]?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ValueType {
    pub base: BaseType,
    pub list: bool,
    pub nullable: bool,
}

#[derive(Debug)]
pub struct Typedef<'a> {
    pub name: Symbol,
    pub ns: NsId,
    pub location: Location,
    /// `None` until resolved, and when the base type could not be resolved.
    pub base: Option<BaseType>,
    /// The constraint: an expression over `self`, or a regex.
    pub constraint: &'a ast::Expr<'a>,
    pub docstring: Option<&'a str>,
}

#[derive(Debug)]
pub struct Entity<'a> {
    pub name: Symbol,
    pub ns: NsId,
    pub location: Location,
    pub docstring: Option<&'a str>,
    /// Direct parents in declaration order; every entity but `std::Entity` has at least one.
    pub parents: Vec<EntityId>,
    pub children: Vec<EntityId>,
    /// Own attributes by name: the body's attributes in order, then relation ends in the
    /// order the relation statements were evaluated.
    pub attributes: Vec<AttrId>,
    /// Own defaults: `None` removes an inherited default (an attribute redeclared without a
    /// default, or with `= undef`).
    pub own_defaults: Vec<(Symbol, Option<DefaultValue>)>,
    /// Indexes as sorted attribute-name lists, own and inherited.
    pub indexes: Vec<Vec<Symbol>>,
    /// `implement` statements for this entity, in definition order.
    pub implements: Vec<ImplementId>,
    /// Some `implement X using parents` exists.
    pub implements_inherit: bool,
    /// The entity extends `std::Dataclass` (directly or not).
    pub is_dataclass: bool,
    /// Checking this entity failed; checks that depend on it are skipped.
    pub invalid: bool,
    /// The definition, `None` for `std::Entity`, which the compiler defines itself.
    pub def: Option<&'a ast::EntityDef<'a>>,
}

/// A default value: a constant, evaluated when the entity is defined.
#[derive(Clone, Debug)]
pub struct DefaultValue {
    pub value: Value,
    pub location: Location,
}

#[derive(Debug)]
pub struct Attribute {
    pub name: Symbol,
    pub entity: EntityId,
    pub location: Location,
    pub kind: AttributeKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributeKind {
    Value(ValueType),
    Relation(RelationEnd),
}

/// One end of a relation, as an attribute of the entity at the other end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelationEnd {
    pub target: EntityId,
    pub lower: i64,
    /// `None` for an unbounded end (`[0:]`).
    pub upper: Option<i64>,
    /// The opposite end of a bidirectional relation (itself for a self-inverse relation).
    pub inverse: Option<AttrId>,
    pub relation: RelationId,
}

impl RelationEnd {
    pub fn is_optional(&self) -> bool {
        self.lower == 0
    }

    pub fn is_multi(&self) -> bool {
        self.upper != Some(1)
    }
}

impl Attribute {
    /// Whether the attribute takes several values: a list type or a relation whose upper
    /// bound is not 1.
    pub fn is_multi(&self) -> bool {
        match self.kind {
            AttributeKind::Value(t) => t.list,
            AttributeKind::Relation(r) => r.is_multi(),
        }
    }
}

#[derive(Debug)]
pub struct Relation<'a> {
    pub ns: NsId,
    pub location: Location,
    pub annotations: &'a [ast::Expr<'a>],
    /// The attribute on the left entity (`A.b` in `A.b [..] -- B.a [..]`).
    pub left_attr: Option<AttrId>,
    /// The attribute on the right entity, for bidirectional relations.
    pub right_attr: Option<AttrId>,
}

#[derive(Debug)]
pub struct Implementation<'a> {
    pub name: Symbol,
    pub ns: NsId,
    pub location: Location,
    pub entity: Option<EntityId>,
    pub body: ast::Block<'a>,
    pub docstring: Option<&'a str>,
}

#[derive(Debug)]
pub struct Implement<'a> {
    pub entity: EntityId,
    /// The namespace of the `implement` statement: its condition is evaluated there.
    pub ns: NsId,
    pub location: Location,
    pub implementations: Vec<ImplId>,
    /// `None` is the constant `true`.
    pub condition: Option<&'a ast::Expr<'a>>,
    pub inherit: bool,
}

#[derive(Debug)]
pub struct Plugin {
    pub name: Symbol,
    pub ns: NsId,
    pub signature: PluginSignature,
}

/// The checked program.
#[derive(Debug, Default)]
pub struct Model<'a> {
    pub namespaces: Vec<Namespace<'a>>,
    pub entities: Vec<Entity<'a>>,
    pub attributes: Vec<Attribute>,
    pub typedefs: Vec<Typedef<'a>>,
    pub relations: Vec<Relation<'a>>,
    pub implementations: Vec<Implementation<'a>>,
    pub implements: Vec<Implement<'a>>,
    pub plugins: Vec<Plugin>,
    /// `std::Entity`, the root of every entity.
    pub std_entity: Option<EntityId>,
    /// What names in code resolved to, keyed by the address of their expression node
    /// (constructors, calls and index lookups), for lowering.
    pub resolved: HashMap<usize, Resolved>,
}

/// The resolution of a name used in code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    Entity(EntityId),
    Plugin(PluginId),
    Cast(Primitive),
}

/// The key of an expression node in [`Model::resolved`].
pub fn expr_key(expr: &ast::Expr<'_>) -> usize {
    expr as *const ast::Expr<'_> as usize
}

impl<'a> Model<'a> {
    pub fn entity(&self, id: EntityId) -> &Entity<'a> {
        &self.entities[id.index()]
    }

    pub fn attribute(&self, id: AttrId) -> &Attribute {
        &self.attributes[id.index()]
    }

    pub fn namespace(&self, id: NsId) -> &Namespace<'a> {
        &self.namespaces[id.index()]
    }

    /// The attribute `name` of an entity: its own, or the first found in a depth-first walk of
    /// its parents, left to right. Each ancestor is looked at once ([`Self::ancestors`]), in
    /// the order of that walk: along every path, a name that no ancestor has would take time
    /// exponential in the depth of a hierarchy of diamonds.
    pub fn find_attribute(&self, entity: EntityId, name: Symbol) -> Option<AttrId> {
        let own =
            |entity: EntityId| self.entity(entity).attributes.iter().copied().find(|&a| self.attribute(a).name == name);
        own(entity).or_else(|| self.ancestors(entity).into_iter().find_map(own))
    }

    /// All ancestors of an entity (not including itself), without duplicates.
    pub fn ancestors(&self, entity: EntityId) -> Vec<EntityId> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<EntityId> = self.entity(entity).parents.iter().rev().copied().collect();
        while let Some(e) = stack.pop() {
            if seen.insert(e) {
                out.push(e);
                stack.extend(self.entity(e).parents.iter().rev().copied());
            }
        }
        out
    }

    /// Whether `entity` is `other` or one of its descendants.
    pub fn is_subclass(&self, entity: EntityId, other: EntityId) -> bool {
        entity == other || self.ancestors(entity).contains(&other)
    }

    /// All descendants of an entity, without duplicates.
    pub fn descendants(&self, entity: EntityId) -> Vec<EntityId> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = self.entity(entity).children.clone();
        while let Some(e) = stack.pop() {
            if seen.insert(e) {
                out.push(e);
                stack.extend(self.entity(e).children.iter().copied());
            }
        }
        out
    }

    /// The effective defaults of an entity, after inheritance: its own defaults win, then the
    /// left-most parent's. A `None` default (removed) does not appear.
    pub fn default_values(&self, entity: EntityId) -> Vec<(Symbol, DefaultValue)> {
        self.default_values_in(entity, &mut Ancestry::default())
    }

    /// [`Self::default_values`], with the results of the entities already merged kept in
    /// `memo`: an entity reached again (through another path of a diamond, `A extends B, C`,
    /// both extending `D`, or for the next entity of a lowering) has the same defaults every
    /// time. Merging them anew along every path made the work exponential in the depth of a
    /// hierarchy of diamonds, and for every entity of a chain, quadratic in its length.
    pub fn default_values_in(&self, entity: EntityId, memo: &mut Ancestry) -> Vec<(Symbol, DefaultValue)> {
        crate::with_stack(|| self.default_values_memoized(entity, memo))
    }

    fn default_values_memoized(&self, entity: EntityId, memo: &mut Ancestry) -> Vec<(Symbol, DefaultValue)> {
        if let Some(known) = memo.defaults.get(&entity) {
            return known.clone();
        }
        // The merged defaults, and where each name is among them: an entity can have
        // thousands of attributes, too many to find a name by a scan for each.
        let mut merged: Vec<(Symbol, Option<DefaultValue>)> = Vec::new();
        let mut positions: HashMap<Symbol, usize> = HashMap::new();
        let mut put = |name: Symbol, value: Option<DefaultValue>| match positions.get(&name) {
            Some(&at) => merged[at].1 = value,
            None => {
                positions.insert(name, merged.len());
                merged.push((name, value));
            }
        };
        let e = self.entity(entity);
        for &parent in e.parents.iter().rev() {
            for (name, value) in crate::with_stack(|| self.default_values_memoized(parent, memo)) {
                put(name, Some(value));
            }
        }
        for (name, value) in &e.own_defaults {
            put(*name, value.clone());
        }
        let merged: Vec<(Symbol, DefaultValue)> = merged.into_iter().filter_map(|(n, v)| v.map(|v| (n, v))).collect();
        memo.defaults.insert(entity, merged.clone());
        merged
    }

    /// The reference's `get_implements`: the entity's own `implement`s, then, when it uses
    /// `parents`, those of each parent by the parent's own rule, recursively. A parent reached
    /// along two paths of a diamond gives its `implement`s twice, as in the reference, where
    /// each is a sub-constructor of its own; the repeated ones select implementations the
    /// instance already has, so their only effect is their own tasks.
    ///
    /// The list grows exponentially with the depth of a hierarchy of diamonds. Beyond
    /// [`MAX_REPEATED_IMPLEMENTS`] entries, which no real model comes near (the reference
    /// would spend minutes on such a hierarchy), each `implement` is kept at its first place
    /// only: the entities are walked once each.
    pub fn implements_of(&self, entity: EntityId) -> Vec<ImplementId> {
        crate::with_stack(|| {
            let mut visited = (self.implements_count(entity, &mut HashMap::new()) > MAX_REPEATED_IMPLEMENTS)
                .then(|| vec![false; self.entities.len()]);
            let mut out = Vec::new();
            self.collect_implements(entity, &mut visited, &mut out);
            out
        })
    }

    /// The length of [`Self::implements_of`]'s list with every repetition, saturating.
    fn implements_count(&self, entity: EntityId, counted: &mut HashMap<EntityId, usize>) -> usize {
        if let Some(&count) = counted.get(&entity) {
            return count;
        }
        let e = self.entity(entity);
        let mut count = e.implements.len();
        if e.implements_inherit {
            for &parent in &e.parents {
                let inherited = crate::with_stack(|| self.implements_count(parent, counted));
                count = count.saturating_add(inherited);
            }
        }
        counted.insert(entity, count);
        count
    }

    /// Appends the `implement`s of [`Self::implements_of`] to `out`: along every path without
    /// `visited`, or with each entity at its first visit only, which is the list without its
    /// repetitions (an `implement` belongs to one entity, and an entity's part of the list is
    /// the same wherever it is reached).
    fn collect_implements(&self, entity: EntityId, visited: &mut Option<Vec<bool>>, out: &mut Vec<ImplementId>) {
        if let Some(visited) = visited.as_mut()
            && std::mem::replace(&mut visited[entity.index()], true)
        {
            return;
        }
        let e = self.entity(entity);
        out.extend_from_slice(&e.implements);
        if e.implements_inherit {
            for &parent in &e.parents {
                crate::with_stack(|| self.collect_implements(parent, visited, out));
            }
        }
    }

    /// All attribute names of an entity, own first, then its parents'.
    pub fn all_attribute_names(&self, entity: EntityId) -> Vec<Symbol> {
        self.all_attributes_in(entity, &mut Ancestry::default()).into_iter().map(|(name, _)| name).collect()
    }

    /// The attributes of an entity by name, in the order of [`Self::all_attribute_names`],
    /// each the one [`Self::find_attribute`] finds for its name (the first declaration in a
    /// depth-first walk from the entity, which is where the name first enters the list). The
    /// results of the entities already walked are kept in `memo` (see
    /// [`Self::default_values_in`]).
    pub fn all_attributes_in(&self, entity: EntityId, memo: &mut Ancestry) -> Vec<(Symbol, AttrId)> {
        crate::with_stack(|| self.all_attributes_memoized(entity, memo))
    }

    fn all_attributes_memoized(&self, entity: EntityId, memo: &mut Ancestry) -> Vec<(Symbol, AttrId)> {
        if let Some(known) = memo.attributes.get(&entity) {
            return known.clone();
        }
        let mut attributes: Vec<(Symbol, AttrId)> =
            self.entity(entity).attributes.iter().map(|&a| (self.attribute(a).name, a)).collect();
        // The names listed so far, as a set: see `default_values_memoized`.
        let mut listed: HashSet<Symbol> = attributes.iter().map(|&(name, _)| name).collect();
        for &p in &self.entity(entity).parents {
            for (name, attribute) in crate::with_stack(|| self.all_attributes_memoized(p, memo)) {
                if listed.insert(name) {
                    attributes.push((name, attribute));
                }
            }
        }
        memo.attributes.insert(entity, attributes.clone());
        attributes
    }
}
