//! Static checks: everything the reference compiler verifies before it executes a statement.
//!
//! The checks run in the reference's order (spec §3.1 step 3), because which error a user
//! sees first must match it:
//!
//! 1. register every named definition (one table per namespace for entities, typedefs,
//!    implementations and plugins) and every import;
//! 2. resolve typedef base types;
//! 3. define entities, parents first (inheritance cycles are found here), with their
//!    attributes;
//! 4. implementations and relations, in statement order;
//! 5. indexes;
//! 6. `implement` statements;
//! 7. normalise types: typedef constraints and plugin signatures, then entities (defaults
//!    are validated, relation names checked against parents, dataclasses paired), then
//!    implementation bodies;
//! 8. normalise the top-level blocks: names of namespaces, plugins and entity types in
//!    statements are resolved, constructor arguments checked, constructor types inferred.
//!
//! Unlike the reference, checking goes on after an error where it can, so that one run
//! reports as many independent problems as possible; definitions that failed are marked and
//! checks depending on them are skipped to avoid follow-up noise.

mod consteval;
mod dataclass;
mod definitions;
pub mod model;
mod normalize;
pub(crate) mod pretty;
mod suggest;

use std::collections::HashMap;

use weft_ir::diagnostic::codes;
use weft_ir::plugin::{PluginSignature, TypeAnnotation};
use weft_ir::{Diagnostic, ErrorKind, FileId, Location, SourceFile, Span, Symbol};

use crate::ast;
use crate::lexer;
use crate::project::Program;
pub use model::*;

/// The result of checking a program.
#[derive(Debug)]
pub struct CheckOutput<'a> {
    pub model: Model<'a>,
    /// In the order the reference would raise them: the first error is the one it reports.
    pub diagnostics: Vec<Diagnostic>,
}

/// Checks a loaded program.
pub fn check<'a>(program: &mut Program<'a>) -> CheckOutput<'a> {
    let mut checker = Checker::new(program);
    checker.run();
    CheckOutput { model: checker.model, diagnostics: checker.diagnostics }
}

/// Symbols the checker needs by name.
struct Known {
    self_: Symbol,
    entity: Symbol,
    requires: Symbol,
    provides: Symbol,
    dataclass: Symbol,
    none: Symbol,
}

pub(crate) struct Checker<'p, 'a> {
    program: &'p mut Program<'a>,
    model: Model<'a>,
    diagnostics: Vec<Diagnostic>,
    known: Known,
    /// Definition statements of each kind, in statement order (main first, then modules in
    /// load order), with the namespace they appear in.
    entity_defs: Vec<(NsId, &'a ast::EntityDef<'a>, EntityId)>,
    typedef_defs: Vec<(NsId, &'a ast::TypedefDef<'a>, TypedefId)>,
    impl_defs: Vec<(NsId, &'a ast::ImplementationDef<'a>, ImplId)>,
    relation_defs: Vec<(NsId, &'a ast::RelationDef<'a>)>,
    index_defs: Vec<(NsId, &'a ast::IndexDef<'a>)>,
    implement_defs: Vec<(NsId, &'a ast::ImplementDef<'a>)>,
    /// Defaults are validated when their entity is normalised, after every type is known;
    /// each entity's in attribute order.
    pending_defaults: HashMap<EntityId, Vec<PendingDefault<'a>>>,
}

impl<'p, 'a> Checker<'p, 'a> {
    fn new(program: &'p mut Program<'a>) -> Self {
        let interner = &mut program.interner;
        let known = Known {
            self_: interner.intern("self"),
            entity: interner.intern("Entity"),
            requires: interner.intern("requires"),
            provides: interner.intern("provides"),
            dataclass: interner.intern("Dataclass"),
            none: interner.intern("none"),
        };
        Checker {
            program,
            model: Model::default(),
            diagnostics: Vec::new(),
            known,
            entity_defs: Vec::new(),
            typedef_defs: Vec::new(),
            impl_defs: Vec::new(),
            relation_defs: Vec::new(),
            index_defs: Vec::new(),
            implement_defs: Vec::new(),
            pending_defaults: HashMap::new(),
        }
    }

    fn run(&mut self) {
        self.create_namespaces();
        self.register();
        self.resolve_typedefs();
        self.define_entities();
        self.define_implementations_and_relations();
        self.define_indexes();
        self.define_implements();
        self.normalize_types();
        self.normalize_root_blocks();
    }

    // ------------------------------------------------------------------ helpers

    pub(crate) fn sym(&self, s: Symbol) -> &str {
        self.program.interner.resolve(s)
    }

    pub(crate) fn intern(&mut self, s: &str) -> Symbol {
        self.program.interner.intern(s)
    }

    pub(crate) fn loc(&self, ns: NsId, span: Span) -> Location {
        Location::new(self.model.namespace(ns).file, span)
    }

    pub(crate) fn ns_name(&self, ns: NsId) -> &str {
        &self.model.namespace(ns).name
    }

    pub(crate) fn entity_name(&self, e: EntityId) -> String {
        let entity = self.model.entity(e);
        format!("{}::{}", self.ns_name(entity.ns), self.sym(entity.name))
    }

    pub(crate) fn path_text(&self, parts: &[ast::Ident]) -> String {
        parts.iter().map(|p| self.sym(p.name)).collect::<Vec<_>>().join("::")
    }

    pub(crate) fn error(
        &mut self,
        kind: ErrorKind,
        code: weft_ir::Code,
        message: impl Into<String>,
        at: Location,
        label: &str,
    ) {
        self.diagnostics.push(Diagnostic::error(kind, code, message).at(at, label));
    }

    pub(crate) fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    // ------------------------------------------------------------------ namespaces

    /// One model namespace per loaded file; the parent of `a::b` is `a` when loaded.
    fn create_namespaces(&mut self) {
        let by_name: HashMap<String, usize> =
            self.program.namespaces.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let std_ns = by_name.get("std").map(|&i| NsId(i as u32));
        for (i, ns) in self.program.namespaces.iter().enumerate() {
            let parent = ns.name.rsplit_once("::").and_then(|(p, _)| by_name.get(p)).map(|&p| NsId(p as u32));
            let mut visible = HashMap::new();
            visible.insert(ns.name.clone(), NsId(i as u32));
            if let Some(std_ns) = std_ns {
                visible.insert("std".to_string(), std_ns);
            }
            self.model.namespaces.push(Namespace {
                name: ns.name.clone(),
                file: ns.file,
                parent,
                types: HashMap::new(),
                visible,
                ast: ns.ast,
            });
        }
    }

    fn ns_ids(&self) -> impl Iterator<Item = NsId> + use<> {
        (0..self.model.namespaces.len() as u32).map(NsId)
    }

    fn find_ns(&self, name: &str) -> Option<NsId> {
        self.model.namespaces.iter().position(|n| n.name == name).map(|i| NsId(i as u32))
    }

    // ------------------------------------------------------------------ 1. register

    fn define_type(&mut self, ns: NsId, name: ast::Ident, item: TypeItem, what: &str) -> bool {
        let existing = self.model.namespaces[ns.index()].types.get(&name.name).copied();
        if let Some(existing) = existing {
            let full = format!("{}::{}", self.ns_name(ns), self.sym(name.name));
            let message = match (item, existing) {
                (TypeItem::Entity(_), _) => format!("Entity {full} is already defined"),
                (TypeItem::Implementation(_), _) => format!("Implementation {full} is already defined"),
                _ => format!("Type {full} is already defined"),
            };
            let mut d = Diagnostic::error(ErrorKind::DuplicateException, codes::DUPLICATE_DEFINITION, message)
                .at(self.loc(ns, name.span), format!("{what} defined again here"));
            if let Some(original) = self.item_location(existing) {
                d = d.with_label(original, "first defined here");
            }
            self.push(d);
            return false;
        }
        self.model.namespaces[ns.index()].types.insert(name.name, item);
        true
    }

    fn item_location(&self, item: TypeItem) -> Option<Location> {
        match item {
            TypeItem::Entity(e) => Some(self.model.entity(e).location),
            TypeItem::Typedef(t) => Some(self.model.typedefs[t.index()].location),
            TypeItem::Implementation(i) => Some(self.model.implementations[i.index()].location),
            TypeItem::Plugin(_) => None,
        }
    }

    fn register(&mut self) {
        for ns in self.ns_ids() {
            let items = self.model.namespace(ns).ast.items;
            for item in items {
                match item {
                    ast::Item::Entity(def) => {
                        let id = EntityId(self.model.entities.len() as u32);
                        self.model.entities.push(Entity {
                            name: def.name.name,
                            ns,
                            location: self.loc(ns, def.name.span),
                            docstring: def.docstring.map(|d| d.text),
                            parents: Vec::new(),
                            children: Vec::new(),
                            attributes: Vec::new(),
                            own_defaults: Vec::new(),
                            indexes: Vec::new(),
                            implements: Vec::new(),
                            implements_inherit: false,
                            is_dataclass: false,
                            invalid: false,
                            def: Some(def),
                        });
                        if self.define_type(ns, def.name, TypeItem::Entity(id), "entity") {
                            self.entity_defs.push((ns, def, id));
                        }
                    }
                    ast::Item::Typedef(def) => {
                        let id = TypedefId(self.model.typedefs.len() as u32);
                        self.model.typedefs.push(Typedef {
                            name: def.name.name,
                            ns,
                            location: self.loc(ns, def.name.span),
                            base: None,
                            constraint: def.constraint,
                            docstring: def.docstring.map(|d| d.text),
                        });
                        if self.define_type(ns, def.name, TypeItem::Typedef(id), "type") {
                            self.typedef_defs.push((ns, def, id));
                        }
                    }
                    ast::Item::Implementation(def) => {
                        let id = ImplId(self.model.implementations.len() as u32);
                        self.model.implementations.push(Implementation {
                            name: def.name.name,
                            ns,
                            location: self.loc(ns, def.name.span),
                            entity: None,
                            body: def.body,
                            docstring: def.docstring.map(|d| d.text),
                        });
                        if self.define_type(ns, def.name, TypeItem::Implementation(id), "implementation") {
                            self.impl_defs.push((ns, def, id));
                        }
                    }
                    ast::Item::Import(import) => self.register_import(ns, import),
                    ast::Item::Relation(def) => self.relation_defs.push((ns, def)),
                    ast::Item::Index(def) => self.index_defs.push((ns, def)),
                    ast::Item::Implement(def) => self.implement_defs.push((ns, def)),
                    ast::Item::Stmt(_) => {}
                }
            }
        }
        self.register_plugins();
        self.register_std_entity();
    }

    fn register_import(&mut self, ns: NsId, import: &ast::Import<'a>) {
        let target_name = self.path_text(import.path.parts);
        let visible_name = match import.alias {
            Some(alias) => self.sym(alias.name).to_string(),
            None => target_name.clone(),
        };
        let Some(target) = self.find_ns(&target_name) else {
            // The loader reported the missing module already.
            return;
        };
        let ns_name = self.ns_name(ns).to_string();
        // The namespace itself and `std` are implicitly visible; importing them again is
        // allowed, any other repeated name is not.
        let implicit = visible_name == ns_name || visible_name == "std";
        let explicit_before = self.model.namespace(ns).visible.contains_key(&visible_name) && !implicit;
        if explicit_before {
            let d = Diagnostic::error(
                ErrorKind::DuplicateException,
                codes::DUPLICATE_IMPORT,
                "Two import statements have the same name",
            )
            .at(self.loc(ns, import.span), format!("`{visible_name}` is already imported in this file"));
            self.push(d);
            return;
        }
        self.model.namespaces[ns.index()].visible.insert(visible_name, target);
    }

    fn register_plugins(&mut self) {
        let signatures = self.program.plugins.clone();
        for signature in signatures {
            let Some(ns) = self.find_ns(&signature.namespace) else { continue };
            let name = self.intern(&signature.name);
            let id = PluginId(self.model.plugins.len() as u32);
            self.model.plugins.push(Plugin { name, ns, signature });
            let ident = ast::Ident { name, span: Span::new(0, 0) };
            self.define_type(ns, ident, TypeItem::Plugin(id), "plugin");
        }
    }

    /// The reference resolves the type of each string annotation of a plugin when it loads the
    /// plugin, called or not, in the plugin's namespace: an unknown type is a
    /// `TypeNotFoundException` (`MissingImportException` for a module the namespace does not
    /// import) at the plugin's `def`. The type language of an annotation is small: `any`,
    /// `expression` or `null` alone, or a name with `[]` or `?` after it (`?` after `[]`:
    /// `int[]?`), taken as written (` int ` is not `int`). Python type annotations (`str`,
    /// `list[str]`) are the bridge's to check.
    fn check_plugin_annotations(&mut self) {
        let plugins: Vec<(NsId, PluginSignature)> =
            self.model.plugins.iter().map(|p| (p.ns, p.signature.clone())).collect();
        let mut files: HashMap<(String, String), FileId> = HashMap::new();
        for (ns, signature) in plugins {
            let key = (signature.namespace.clone(), signature.source_file.clone());
            if !self.program.plugin_files.contains_key(&key) {
                continue;
            }
            let annotations = signature.params.iter().filter_map(|p| p.annotation.as_ref()).chain(&signature.returns);
            // A Python annotation names model types with `ModelType["..."]`, which the
            // reference resolves as it does a string annotation.
            let dsl_annotations: Vec<String> = annotations
                .flat_map(|a| match a {
                    TypeAnnotation::Dsl(text) => vec![text.clone()],
                    TypeAnnotation::Python(text) => crate::python::model_type_names(text),
                })
                .collect();
            for text in &dsl_annotations {
                // `any`, `expression` and `null` are whole annotations only: `any[]` and
                // `null?` name types that do not exist.
                if matches!(text.as_str(), "any" | "expression" | "null") {
                    continue;
                }
                let base = text.strip_suffix('?').unwrap_or(text);
                let base = base.strip_suffix("[]").unwrap_or(base);
                if Primitive::from_name(base).is_some() {
                    continue;
                }
                // A name as the lexer reads one, so that it can be looked up as the model's are.
                let is_name = base.split("::").all(|part| {
                    part.bytes().next().is_some_and(lexer::is_ident_start) && part.bytes().all(lexer::is_ident_continue)
                });
                let mut d = if is_name {
                    let parts: Vec<ast::Ident> = base
                        .split("::")
                        .map(|part| ast::Ident { name: self.intern(part), span: Span::new(0, 0) })
                        .collect();
                    let Err(d) = self.lookup_type(ns, &parts, Span::new(0, 0)) else { continue };
                    d
                } else {
                    // What no type is called, taken whole as the reference takes it: `string?`
                    // of `string?[]`, ` int `, `list[string]`, `string[]` of `string[][]`.
                    Diagnostic::error(
                        ErrorKind::TypeNotFoundException,
                        codes::TYPE_NOT_FOUND,
                        format!("could not find type {base} in namespace {}", self.ns_name(ns)),
                    )
                };
                let file = match files.get(&key) {
                    Some(&file) => file,
                    None => {
                        let source = &self.program.plugin_files[&key];
                        let file =
                            self.program.sources.add(SourceFile::new(source.display.clone(), source.text.as_str()));
                        files.insert(key.clone(), file);
                        file
                    }
                };
                d.labels.clear();
                d.notes.clear();
                let range = self.program.sources.get(file).line_range(signature.source_line).unwrap_or(0..0);
                let at = Location::new(file, Span::new(range.start as u32, range.end as u32));
                d = d.at(at, format!("in an annotation of the plugin `{}`", signature.name));
                self.push(d);
                // The reference stops at the plugin's first unknown type.
                break;
            }
        }
    }

    /// `std::Entity` and its `requires`/`provides` relation are defined by the compiler, after
    /// everything else, as in the reference.
    fn register_std_entity(&mut self) {
        let Some(std_ns) = self.find_ns("std") else { return };
        let id = EntityId(self.model.entities.len() as u32);
        let location = Location::new(self.model.namespace(std_ns).file, Span::new(0, 0));
        self.model.entities.push(Entity {
            name: self.known.entity,
            ns: std_ns,
            location,
            docstring: Some("The entity all other entities inherit from."),
            parents: Vec::new(),
            children: Vec::new(),
            attributes: Vec::new(),
            own_defaults: Vec::new(),
            indexes: Vec::new(),
            implements: Vec::new(),
            implements_inherit: false,
            is_dataclass: false,
            invalid: false,
            def: None,
        });
        let ident = ast::Ident { name: self.known.entity, span: Span::new(0, 0) };
        self.define_type(std_ns, ident, TypeItem::Entity(id), "entity");
        self.model.std_entity = Some(id);
    }

    // ------------------------------------------------------------------ type lookup

    /// The reference's `Namespace.get_type`: a qualified name needs its namespace to be
    /// visible; an unqualified one is a primitive, or is found in the namespace or one of its
    /// parents.
    pub(crate) fn lookup_type(&mut self, ns: NsId, parts: &[ast::Ident], span: Span) -> Result<TypeRef, Diagnostic> {
        let full = self.path_text(parts);
        let at = self.loc(ns, span);
        if parts.len() > 1 {
            let ns_part = self.path_text(&parts[..parts.len() - 1]);
            let name = parts[parts.len() - 1].name;
            let Some(&target) = self.model.namespace(ns).visible.get(&ns_part) else {
                let file = self.program.sources.get(self.model.namespace(ns).file).name.clone();
                let module = ns_part.split("::").next().unwrap_or(&ns_part).to_string();
                return Err(Diagnostic::error(
                    ErrorKind::MissingImportException,
                    codes::MISSING_IMPORT,
                    format!(
                        "could not find type {full} in namespace {}.\nTry importing the module with `import {ns_part}` in ./{file}",
                        self.ns_name(ns)
                    ),
                )
                .at(at, format!("`{ns_part}` is not imported here"))
                .with_help(format!("add `import {ns_part}` to this file (module `{module}`)")));
            };
            return match self.model.namespace(target).types.get(&name) {
                Some(&item) => Ok(TypeRef::Item(item)),
                None => {
                    let known: Vec<&str> = self.model.namespace(target).types.keys().map(|k| self.sym(*k)).collect();
                    let close: Vec<String> = suggest::similar(self.sym(name), known.iter().copied())
                        .into_iter()
                        .map(|n| format!("{ns_part}::{n}"))
                        .collect();
                    let mut d = Diagnostic::error(
                        ErrorKind::TypeNotFoundException,
                        codes::TYPE_NOT_FOUND,
                        format!("could not find type {full} in namespace {}", self.ns_name(target)),
                    )
                    .at(at, "no such type");
                    if let Some(help) = suggest::help(&close.iter().map(String::as_str).collect::<Vec<_>>()) {
                        d = d.with_help(help);
                    }
                    Err(d)
                }
            };
        }
        let name = parts[0].name;
        if let Some(p) = Primitive::from_name(self.sym(name)) {
            if p == Primitive::Number {
                self.push(
                    Diagnostic::warning(
                        ErrorKind::TypeDeprecationWarning,
                        codes::W_NUMBER_DEPRECATED,
                        "Type 'number' is deprecated, use 'float' or 'int' instead",
                    )
                    .at(at, "deprecated type"),
                );
            }
            return Ok(TypeRef::Primitive(p));
        }
        let mut current = Some(ns);
        while let Some(c) = current {
            if let Some(&item) = self.model.namespace(c).types.get(&name) {
                return Ok(TypeRef::Item(item));
            }
            current = self.model.namespace(c).parent;
        }
        let mut known: Vec<String> =
            ["string", "int", "float", "bool", "list", "dict"].iter().map(|s| s.to_string()).collect();
        let mut current = Some(ns);
        while let Some(c) = current {
            known.extend(self.model.namespace(c).types.keys().map(|k| self.sym(*k).to_string()));
            current = self.model.namespace(c).parent;
        }
        let mut d = Diagnostic::error(
            ErrorKind::TypeNotFoundException,
            codes::TYPE_NOT_FOUND,
            format!("could not find type {full} in namespace {}", self.ns_name(ns)),
        )
        .at(at, "no such type");
        if let Some(help) = suggest::help(&suggest::similar(&full, known.iter().map(String::as_str))) {
            d = d.with_help(help);
        }
        Err(d)
    }

    /// Looks up an entity by class reference.
    pub(crate) fn lookup_entity(&mut self, ns: NsId, class: &ast::ClassRef<'a>) -> Result<EntityId, Diagnostic> {
        let mut parts: Vec<ast::Ident> = class.namespace.to_vec();
        parts.push(class.name);
        match self.lookup_type(ns, &parts, class.span)? {
            TypeRef::Item(TypeItem::Entity(e)) => Ok(e),
            other => {
                let what = self.describe_type_ref(other);
                Err(Diagnostic::error(
                    ErrorKind::TypingException,
                    codes::NOT_AN_ENTITY,
                    format!("{} is not an entity but {what}", self.path_text(&parts)),
                )
                .at(self.loc(ns, class.span), "an entity is expected here"))
            }
        }
    }

    pub(crate) fn describe_type_ref(&self, t: TypeRef) -> String {
        match t {
            TypeRef::Primitive(p) => format!("the primitive type {}", p.name()),
            TypeRef::Item(TypeItem::Entity(e)) => format!("the entity {}", self.entity_name(e)),
            TypeRef::Item(TypeItem::Typedef(t)) => {
                format!("the typedef {}", self.sym(self.model.typedefs[t.index()].name))
            }
            TypeRef::Item(TypeItem::Implementation(i)) => {
                format!("the implementation {}", self.sym(self.model.implementations[i.index()].name))
            }
            TypeRef::Item(TypeItem::Plugin(p)) => {
                format!("the plugin {}", self.sym(self.model.plugins[p.index()].name))
            }
        }
    }

    // ------------------------------------------------------------------ 2. typedefs

    fn resolve_typedefs(&mut self) {
        for (ns, def, id) in self.typedef_defs.clone() {
            match self.lookup_type(ns, def.base.parts, def.base.span) {
                Ok(TypeRef::Primitive(p)) => self.model.typedefs[id.index()].base = Some(BaseType::Primitive(p)),
                Ok(TypeRef::Item(TypeItem::Typedef(t))) => {
                    self.model.typedefs[id.index()].base = Some(BaseType::Typedef(t))
                }
                Ok(other) => {
                    let what = self.describe_type_ref(other);
                    self.error(
                        ErrorKind::TypingException,
                        codes::TYPEDEF_BASE,
                        format!(
                            "a typedef can only refine a primitive type or a typedef, {} is {what}",
                            self.path_text(def.base.parts)
                        ),
                        self.loc(ns, def.base.span),
                        "not a value type",
                    );
                }
                Err(d) => self.push(d),
            }
        }
        // A chain of typedefs must end in a primitive type. Each typedef in turn follows its
        // chain; one whose chain comes back to a typedef it has passed is in error, and its
        // base is cut, which ends the chains through it for the typedefs after it. A chain
        // that reaches a typedef already known to end does too: without that, a chain of n
        // typedefs took n^3 steps (each followed to its end, checking a list of the ones
        // passed).
        let count = self.model.typedefs.len();
        let mut ends = vec![false; count];
        let mut on_path = vec![false; count];
        for i in 0..count {
            if ends[i] {
                continue;
            }
            let mut path = vec![i];
            on_path[i] = true;
            let mut looped = false;
            let mut current = self.model.typedefs[i].base;
            while let Some(BaseType::Typedef(t)) = current {
                let t = t.index();
                if ends[t] {
                    break;
                }
                if on_path[t] {
                    looped = true;
                    break;
                }
                on_path[t] = true;
                path.push(t);
                current = self.model.typedefs[t].base;
            }
            for &passed in &path {
                on_path[passed] = false;
            }
            if looped {
                let td = &self.model.typedefs[i];
                let (location, name) = (td.location, self.sym(td.name).to_string());
                self.error(
                    ErrorKind::TypingException,
                    codes::TYPEDEF_BASE,
                    format!("typedef {name} is defined in terms of itself"),
                    location,
                    "this typedef's base type chain loops",
                );
                self.model.typedefs[i].base = None;
                ends[i] = true;
            } else {
                for &passed in &path {
                    ends[passed] = true;
                }
            }
        }
    }

    /// The primitive at the end of a typedef chain.
    pub(crate) fn primitive_of(&self, base: BaseType) -> Option<Primitive> {
        match base {
            BaseType::Primitive(p) => Some(p),
            BaseType::Typedef(t) => self.model.typedefs[t.index()].base.and_then(|b| self.primitive_of(b)),
        }
    }

    // ------------------------------------------------------------------ 3. entities

    fn define_entities(&mut self) {
        let Some(std_entity) = self.model.std_entity else { return };
        // Resolve parents first: the reference sorts entities parents-first and finds unknown
        // parents and cycles while doing so, in the order entities were defined (`std::Entity`
        // last).
        let mut parents_of: HashMap<EntityId, Vec<EntityId>> = HashMap::new();
        let defs = self.entity_defs.clone();
        for &(ns, def, id) in &defs {
            let mut parents = Vec::new();
            let mut ok = true;
            for class in def.parents {
                match self.lookup_entity(ns, class) {
                    Ok(p) => parents.push(p),
                    Err(mut d) => {
                        // The reference attaches the error to the entity definition.
                        d.labels.push(weft_ir::Label {
                            location: self.loc(ns, def.name.span),
                            message: "in the parents of this entity".into(),
                            primary: false,
                        });
                        self.push(d);
                        ok = false;
                    }
                }
            }
            if def.parents.is_empty() {
                parents.push(std_entity);
            }
            if !ok {
                self.model.entities[id.index()].invalid = true;
            }
            parents_of.insert(id, parents);
        }
        let order = self.sort_entities(&defs, &parents_of);
        let by_id: HashMap<EntityId, (NsId, &'a ast::EntityDef<'a>)> =
            defs.iter().map(|&(ns, def, id)| (id, (ns, def))).collect();
        for id in order {
            let Some(&(ns, def)) = by_id.get(&id) else { continue };
            self.define_entity(ns, def, id, parents_of.get(&id).cloned().unwrap_or_default());
        }
    }

    /// Orders entities parents first, reporting inheritance cycles as the reference does.
    fn sort_entities(
        &mut self,
        defs: &[(NsId, &'a ast::EntityDef<'a>, EntityId)],
        parents_of: &HashMap<EntityId, Vec<EntityId>>,
    ) -> Vec<EntityId> {
        let mut remaining: std::collections::HashSet<EntityId> = defs.iter().map(|d| d.2).collect();
        let mut out = Vec::new();
        for &(_, _, first) in defs {
            if !remaining.contains(&first) {
                continue;
            }
            let mut stack = Vec::new();
            if let Err(cycle) = self.sort_visit(first, &mut remaining, &mut stack, &mut out, parents_of) {
                // Reported at the entity where the loop closed, listing the cycle upwards.
                let names: Vec<String> = cycle.iter().rev().map(|&e| self.entity_name(e)).collect();
                let at = self.model.entity(*cycle.last().expect("a cycle has members")).location;
                self.push(
                    Diagnostic::error(
                        ErrorKind::CycleException,
                        codes::INHERITANCE_CYCLE,
                        format!("Entity can not be its own parent {}", names.join(",")),
                    )
                    .at(at, "this entity inherits from itself"),
                );
                for e in cycle {
                    self.model.entities[e.index()].invalid = true;
                }
            }
        }
        out
    }

    fn sort_visit(
        &self,
        id: EntityId,
        remaining: &mut std::collections::HashSet<EntityId>,
        stack: &mut Vec<EntityId>,
        out: &mut Vec<EntityId>,
        parents_of: &HashMap<EntityId, Vec<EntityId>>,
    ) -> Result<(), Vec<EntityId>> {
        crate::with_stack(|| self.sort_visit_inner(id, remaining, stack, out, parents_of))
    }

    fn sort_visit_inner(
        &self,
        id: EntityId,
        remaining: &mut std::collections::HashSet<EntityId>,
        stack: &mut Vec<EntityId>,
        out: &mut Vec<EntityId>,
        parents_of: &HashMap<EntityId, Vec<EntityId>>,
    ) -> Result<(), Vec<EntityId>> {
        remaining.remove(&id);
        stack.push(id);
        for &p in parents_of.get(&id).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(pos) = stack.iter().position(|&s| s == p) {
                return Err(stack[pos..].to_vec());
            }
            if remaining.contains(&p) {
                self.sort_visit(p, remaining, stack, out, parents_of)?;
            }
        }
        stack.pop();
        out.push(id);
        Ok(())
    }

    fn define_entity(&mut self, ns: NsId, def: &'a ast::EntityDef<'a>, id: EntityId, parents: Vec<EntityId>) {
        if self.model.entity(id).invalid {
            return;
        }
        // The entity's own attributes in order, and by name: an entity can have thousands, too
        // many to find a name by a scan for each.
        let mut own: Vec<(Symbol, AttrId)> = Vec::new();
        let mut own_by_name: HashMap<Symbol, AttrId> = HashMap::new();
        for attr in def.attributes {
            let Some(value_type) = self.attribute_type(ns, &attr.ty) else {
                self.model.entities[id.index()].invalid = true;
                return;
            };
            let name = attr.name.name;
            if let Some(&first) = own_by_name.get(&name) {
                // The reference finds this when it adds the second attribute to the entity,
                // and reports it at the first one.
                let first_loc = self.model.attribute(first).location;
                let entity_name = self.sym(def.name.name).to_string();
                self.push(
                    Diagnostic::error(
                        ErrorKind::DuplicateException,
                        codes::DUPLICATE_ATTRIBUTE,
                        format!("attribute '{}' already exists on entity '{entity_name}'", self.sym(name)),
                    )
                    .at(first_loc, "first defined here")
                    .with_label(self.loc(ns, attr.name.span), format!("`{}` is defined again here", self.sym(name))),
                );
                self.model.entities[id.index()].invalid = true;
                return;
            }
            let attr_id = AttrId(self.model.attributes.len() as u32);
            self.model.attributes.push(Attribute {
                name,
                entity: id,
                location: self.loc(ns, attr.name.span),
                kind: AttributeKind::Value(value_type),
            });
            own.push((name, attr_id));
            own_by_name.insert(name, attr_id);
            // Every attribute registers its default; no default removes an inherited one.
            let default = match attr.default {
                ast::AttrDefault::Value(expr) => Some((expr, value_type)),
                ast::AttrDefault::None | ast::AttrDefault::Undef(_) => None,
            };
            self.model.entities[id.index()].own_defaults.push((name, None));
            if let Some((expr, ty)) = default {
                self.pending_defaults.entry(id).or_default().push(PendingDefault { ns, attr: attr_id, expr, ty });
            }
        }
        self.model.entities[id.index()].attributes = own.iter().map(|&(_, a)| a).collect();

        let parent_names: Vec<String> = def.parents.iter().map(|p| self.path_text(&class_parts(p))).collect();
        let unique: std::collections::HashSet<&String> = parent_names.iter().collect();
        if unique.len() != parent_names.len() {
            self.push(
                Diagnostic::error(ErrorKind::TypingException, codes::DUPLICATE_PARENT, "same parent defined twice")
                    .at(self.loc(ns, def.name.span), "this entity lists a parent twice"),
            );
            self.model.entities[id.index()].invalid = true;
            return;
        }
        for &p in &parents {
            if p == id {
                self.push(
                    Diagnostic::error(
                        ErrorKind::TypingException,
                        codes::INHERITANCE_CYCLE,
                        format!("Entity can not be its own parent ({})", self.entity_name(id)),
                    )
                    .at(self.loc(ns, def.name.span), "this entity extends itself"),
                );
                self.model.entities[id.index()].invalid = true;
                return;
            }
        }
        for &p in &parents {
            self.model.entities[p.index()].children.push(id);
        }
        self.model.entities[id.index()].parents = parents;
        if self.model.entity(id).parents.iter().any(|&p| self.model.entity(p).invalid) {
            self.model.entities[id.index()].invalid = true;
            return;
        }

        // Attributes redefined from a parent must keep the same type.
        if !own.is_empty() {
            for ancestor in self.model.ancestors(id) {
                for &parent_attr in &self.model.entity(ancestor).attributes.clone() {
                    let pa = self.model.attribute(parent_attr);
                    let Some(&mine) = own_by_name.get(&pa.name) else { continue };
                    let (mine_kind, parent_kind) = (self.model.attribute(mine).kind, pa.kind);
                    if mine_kind != parent_kind {
                        let parent_loc = pa.location;
                        let my_loc = self.model.attribute(mine).location;
                        self.push(
                            Diagnostic::error(
                                ErrorKind::DuplicateException,
                                codes::INCOMPATIBLE_ATTRIBUTE,
                                "Incompatible attributes",
                            )
                            .at(my_loc, "redefined here with another type")
                            .with_label(parent_loc, "inherited from here"),
                        );
                        self.model.entities[id.index()].invalid = true;
                        return;
                    }
                }
            }
        }
        // Parents are defined before their children, so their flag is final.
        let is_dataclass = self.model.entity(id).parents.iter().any(|&p| {
            let e = self.model.entity(p);
            e.is_dataclass || (e.name == self.known.dataclass && self.model.namespace(e.ns).name == "std")
        });
        self.model.entities[id.index()].is_dataclass = is_dataclass;
        if is_dataclass {
            self.pair_dataclass_stage1(id);
        }
    }

    /// The declared type of a plain attribute.
    fn attribute_type(&mut self, ns: NsId, ty: &ast::TypeExpr<'a>) -> Option<ValueType> {
        let base = match ty.base {
            ast::TypeBase::Dict => BaseType::Primitive(Primitive::Dict),
            ast::TypeBase::Named(path) => match self.lookup_type(ns, path.parts, path.span) {
                Ok(TypeRef::Primitive(p)) => BaseType::Primitive(p),
                Ok(TypeRef::Item(TypeItem::Typedef(t))) => BaseType::Typedef(t),
                Ok(TypeRef::Item(TypeItem::Entity(_))) => {
                    self.error(
                        ErrorKind::TypingException,
                        codes::INVALID_ATTRIBUTE_TYPE,
                        "Attributes can only be a type. Entities need to be defined as relations.",
                        self.loc(ns, path.span),
                        "an entity cannot be an attribute type",
                    );
                    return None;
                }
                Ok(other) => {
                    let what = self.describe_type_ref(other);
                    self.error(
                        ErrorKind::TypingException,
                        codes::INVALID_ATTRIBUTE_TYPE,
                        format!("{} is {what}, not a type", self.path_text(path.parts)),
                        self.loc(ns, path.span),
                        "not a type",
                    );
                    return None;
                }
                Err(d) => {
                    self.push(d);
                    return None;
                }
            },
        };
        Some(ValueType { base, list: ty.list, nullable: ty.nullable })
    }
}

/// A resolved type name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TypeRef {
    Primitive(Primitive),
    Item(TypeItem),
}

pub(crate) fn class_parts(class: &ast::ClassRef<'_>) -> Vec<ast::Ident> {
    let mut parts = class.namespace.to_vec();
    parts.push(class.name);
    parts
}

/// A default value waiting for validation at entity normalisation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingDefault<'a> {
    pub ns: NsId,
    pub attr: AttrId,
    pub expr: &'a ast::Expr<'a>,
    pub ty: ValueType,
}
