//! Normalisation of statements and expressions: the static part of the reference's
//! `normalize()` pass over blocks.
//!
//! Names of namespaces, plugins and entity types used in code are resolved here; constructor
//! calls are checked (unknown attributes, missing index attributes) and their entity type is
//! inferred from the relation they are assigned to. Variable names are *not* resolved: the
//! reference resolves them when a statement is emitted, so an unknown variable in a branch
//! that never runs is not an error.
//!
//! Blocks nested in an implementation, `for` or `if` are visited in reverse statement order,
//! because the reference's parser builds them reversed and its first error must be ours.

use weft_ir::diagnostic::codes;
use weft_ir::{Diagnostic, ErrorKind, Span};

use super::definitions::Scope;
use super::*;

/// What an expression is assigned to, as far as constructor type inference is concerned.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lhs {
    /// Not the right-hand side of an attribute assignment.
    None,
    /// The right-hand side of `x.attr = ...`: no type hint, but an instance to fill an index
    /// relation from (the implicit inverse).
    Untyped,
    /// The value of a constructor argument: the attribute's type.
    Entity(EntityId),
    /// The value of a constructor argument for a plain attribute of this type.
    Value(ValueType),
}

impl Lhs {
    fn is_some(self) -> bool {
        !matches!(self, Lhs::None)
    }
}

impl<'p, 'a> Checker<'p, 'a> {
    pub(super) fn normalize_block(&mut self, ns: NsId, block: ast::Block<'a>, scope: Scope, nested: bool) {
        crate::with_stack(|| self.normalize_block_inner(ns, block, scope, nested))
    }

    fn normalize_block_inner(&mut self, ns: NsId, block: ast::Block<'a>, scope: Scope, nested: bool) {
        if nested {
            for stmt in block.stmts.iter().rev() {
                self.normalize_stmt(ns, stmt, scope, true);
            }
        } else {
            for stmt in block.stmts {
                self.normalize_stmt(ns, stmt, scope, false);
            }
        }
    }

    pub(super) fn normalize_stmt(&mut self, ns: NsId, stmt: &ast::Stmt<'a>, scope: Scope, _nested: bool) {
        match stmt {
            ast::Stmt::Assign(assign) => {
                let lhs =
                    if matches!(assign.target.kind, ast::ExprKind::Attr { .. }) { Lhs::Untyped } else { Lhs::None };
                self.normalize_expr(ns, assign.value, lhs, scope);
            }
            ast::Stmt::For(f) => {
                self.normalize_expr(ns, f.iterable, Lhs::None, scope);
                self.normalize_block(ns, f.body, scope, true);
            }
            ast::Stmt::If(i) => self.normalize_if(ns, i, scope),
            ast::Stmt::Expr(e) => self.normalize_expr(ns, e, Lhs::None, scope),
        }
    }

    fn normalize_if(&mut self, ns: NsId, i: &ast::If<'a>, scope: Scope) {
        crate::with_stack(|| self.normalize_if_inner(ns, i, scope))
    }

    fn normalize_if_inner(&mut self, ns: NsId, i: &ast::If<'a>, scope: Scope) {
        self.normalize_expr(ns, i.cond, Lhs::None, scope);
        self.normalize_block(ns, i.then, scope, true);
        match i.otherwise {
            ast::Else::None => {}
            ast::Else::Else(block) => self.normalize_block(ns, block, scope, true),
            ast::Else::Elif(nested) => self.normalize_if(ns, nested, scope),
        }
    }

    /// Checks that the namespace of a qualified name is visible.
    fn check_namespace_visible(&mut self, ns: NsId, ns_part: &str, span: Span) -> bool {
        if self.model.namespace(ns).visible.contains_key(ns_part) {
            return true;
        }
        self.push(
            Diagnostic::error(
                ErrorKind::NotFoundException,
                codes::NAMESPACE_NOT_IMPORTED,
                format!("Namespace {ns_part} not found.\nTry importing it with `import {ns_part}`"),
            )
            .at(self.loc(ns, span), format!("`{ns_part}` is not imported in this file"))
            .with_help(format!("add `import {ns_part}`")),
        );
        false
    }

    pub(super) fn normalize_expr(&mut self, ns: NsId, expr: &'a ast::Expr<'a>, lhs: Lhs, scope: Scope) {
        crate::with_stack(|| self.normalize_expr_inner(ns, expr, lhs, scope))
    }

    fn normalize_expr_inner(&mut self, ns: NsId, expr: &'a ast::Expr<'a>, lhs: Lhs, scope: Scope) {
        use ast::ExprKind as K;
        match &expr.kind {
            K::Int(_) | K::BigInt(_) | K::Float(_) | K::Bool(_) | K::Null | K::RawStr(_) | K::Regex(_) | K::Str(_) => {}
            K::FStr(lit) => {
                for field in lit.fields {
                    if let Some(first) = field.path.first() {
                        let text = self.sym(first.name).to_string();
                        if let Some((ns_part, _)) = text.rsplit_once("::") {
                            self.check_namespace_visible(ns, ns_part, field.span);
                        }
                    }
                }
            }
            K::Name(path) => {
                if !path.is_simple() {
                    let ns_part = self.path_text(path.namespace());
                    self.check_namespace_visible(ns, &ns_part, path.span);
                }
            }
            K::Attr { base, .. } => self.normalize_expr(ns, base, Lhs::None, scope),
            K::Subscript { base, key } => {
                self.normalize_expr(ns, base, Lhs::None, scope);
                self.normalize_expr(ns, key, Lhs::None, scope);
            }
            K::Call { func, args } => self.normalize_call(ns, expr, func, args, scope),
            K::Construct { class, args } => self.normalize_construct(ns, expr, class, args, lhs, scope),
            K::IndexLookup { class, args } => {
                for arg in *args {
                    let (ast::KwArg::Keyword(_, v) | ast::KwArg::Splat(v, _)) = arg;
                    self.normalize_expr(ns, v, Lhs::None, scope);
                }
                let parts = class_parts(class);
                match self.lookup_type(ns, &parts, class.span) {
                    Ok(TypeRef::Item(TypeItem::Entity(e))) => {
                        self.model.resolved.insert(expr_key(expr), Resolved::Entity(e));
                    }
                    Ok(_) => {}
                    Err(d) => self.push(d),
                }
            }
            K::SelectorLookup { base, args, .. } => {
                self.normalize_expr(ns, base, Lhs::None, scope);
                for arg in *args {
                    let (ast::KwArg::Keyword(_, v) | ast::KwArg::Splat(v, _)) = arg;
                    self.normalize_expr(ns, v, Lhs::None, scope);
                }
            }
            K::List(items) => {
                for item in *items {
                    self.normalize_expr(ns, item, lhs, scope);
                }
            }
            K::ListComp { element, fors, guards } => {
                // The reference nests comprehensions, the first `for` outermost: the element,
                // the innermost iterable and the guards come first.
                self.normalize_expr(ns, element, lhs, scope);
                if let Some(last) = fors.last() {
                    self.normalize_expr(ns, last.iterable, Lhs::None, scope);
                }
                for guard in *guards {
                    self.normalize_expr(ns, guard, Lhs::None, scope);
                }
                for f in fors.iter().rev().skip(1) {
                    self.normalize_expr(ns, f.iterable, Lhs::None, scope);
                }
            }
            K::Dict(entries) => {
                for entry in *entries {
                    self.normalize_expr(ns, entry.value, Lhs::None, scope);
                }
            }
            K::Not(e) | K::IsDefined(e) => self.normalize_expr(ns, e, Lhs::None, scope),
            K::Binary { lhs: l, rhs: r, .. } => {
                self.normalize_expr(ns, l, Lhs::None, scope);
                self.normalize_expr(ns, r, Lhs::None, scope);
            }
            K::Conditional { cond, then, otherwise } => {
                self.normalize_expr(ns, cond, Lhs::None, scope);
                self.normalize_expr(ns, then, lhs, scope);
                self.normalize_expr(ns, otherwise, lhs, scope);
            }
        }
    }

    fn normalize_call(
        &mut self,
        ns: NsId,
        expr: &'a ast::Expr<'a>,
        func: &ast::NsRef<'a>,
        args: &'a [ast::Arg<'a>],
        scope: Scope,
    ) {
        // The reference visits positional arguments, then keyword arguments, then `**` ones.
        for arg in args {
            if let ast::Arg::Positional(v) = arg {
                self.normalize_expr(ns, v, Lhs::None, scope);
            }
        }
        for arg in args {
            if let ast::Arg::Keyword(_, v) = arg {
                self.normalize_expr(ns, v, Lhs::None, scope);
            }
        }
        for arg in args {
            if let ast::Arg::Splat(v, _) = arg {
                self.normalize_expr(ns, v, Lhs::None, scope);
            }
        }
        match self.lookup_type(ns, func.parts, func.span) {
            Ok(TypeRef::Primitive(p)) if !matches!(p, Primitive::List | Primitive::Dict) => {
                self.model.resolved.insert(expr_key(expr), Resolved::Cast(p));
            }
            Ok(TypeRef::Item(TypeItem::Plugin(plugin))) => {
                self.model.resolved.insert(expr_key(expr), Resolved::Plugin(plugin));
            }
            Ok(_) => {
                let name = self.path_text(func.parts);
                self.push(
                    Diagnostic::error(
                        ErrorKind::RuntimeException,
                        codes::NOT_CALLABLE,
                        format!("Can not call '{name}', can only call plugin or primitive type cast"),
                    )
                    .at(self.loc(ns, func.span), "not a plugin"),
                );
            }
            Err(d) => self.push(d),
        }
    }

    fn normalize_construct(
        &mut self,
        ns: NsId,
        expr: &'a ast::Expr<'a>,
        class: &ast::ClassRef<'a>,
        args: &'a [ast::KwArg<'a>],
        lhs: Lhs,
        scope: Scope,
    ) {
        let Some(entity) = self.constructor_type(ns, class, lhs) else { return };
        self.model.resolved.insert(expr_key(expr), Resolved::Entity(entity));
        if self.model.entity(entity).invalid {
            return;
        }
        let at = self.loc(ns, expr.span);
        let defaults: Vec<Symbol> = self.model.default_values(entity).into_iter().map(|(n, _)| n).collect();
        let explicit: Vec<(ast::Ident, &'a ast::Expr<'a>)> = args
            .iter()
            .filter_map(|a| match a {
                ast::KwArg::Keyword(name, value) => Some((*name, *value)),
                ast::KwArg::Splat(..) => None,
            })
            .collect();
        let has_splat = args.iter().any(|a| matches!(a, ast::KwArg::Splat(..)));
        let given = |n: Symbol| defaults.contains(&n) || explicit.iter().any(|(i, _)| i.name == n);
        let mut missing: Vec<Symbol> = Vec::new();
        let mut in_index: Vec<Symbol> = Vec::new();
        for index in self.model.entity(entity).indexes.clone() {
            for attr in index {
                if given(attr) {
                    in_index.push(attr);
                } else {
                    missing.push(attr);
                }
            }
        }
        // A missing index attribute can still come from a `**dict` or, for one relation, from
        // the instance this constructor is assigned to (the implicit inverse).
        if !missing.is_empty() && !has_splat && (!lhs.is_some() || missing.len() > 1) {
            let entity_name = self.entity_name(entity);
            let mut message = "Invalid Constructor call:".to_string();
            for attr in &missing {
                let kind = match self.model.find_attribute(entity, *attr).map(|a| self.model.attribute(a).kind) {
                    Some(AttributeKind::Relation(_)) => "relation",
                    _ => "attribute",
                };
                let name = self.sym(*attr);
                message.push_str(&format!(
                    "\n\t* Missing {kind} '{name}'. The {kind} {entity_name}.{name} is part of an index."
                ));
            }
            let missing_names: Vec<&str> = missing.iter().map(|a| self.sym(*a)).collect();
            self.push(
                Diagnostic::error(
                    ErrorKind::IndexAttributeMissingInConstructorException,
                    codes::INDEX_ATTRIBUTE_MISSING,
                    message,
                )
                .at(at, format!("missing {}", missing_names.join(", ")))
                .with_note("attributes of an index identify the instance, so a constructor must set them"),
            );
            return;
        }
        for (name, value) in &explicit {
            let Some(attr) = self.model.find_attribute(entity, name.name) else {
                let entity_name = self.entity_name(entity);
                let attributes: Vec<String> =
                    self.model.all_attribute_names(entity).iter().map(|a| self.sym(*a).to_string()).collect();
                let mut d = Diagnostic::error(
                    ErrorKind::TypingException,
                    codes::UNKNOWN_ATTRIBUTE,
                    format!("no attribute {} on type {entity_name}", self.sym(name.name)),
                )
                .at(self.loc(ns, name.span), format!("`{entity_name}` has no attribute `{}`", self.sym(name.name)));
                if let Some(help) = super::suggest::help(&super::suggest::similar(
                    self.sym(name.name),
                    attributes.iter().map(String::as_str),
                )) {
                    d = d.with_help(help);
                }
                self.push(d);
                return;
            };
            // Index attributes are evaluated before the instance exists, so they get no
            // left-hand side.
            let hint = if in_index.contains(&name.name) {
                Lhs::None
            } else {
                match self.model.attribute(attr).kind {
                    AttributeKind::Relation(end) => Lhs::Entity(end.target),
                    AttributeKind::Value(ty) => Lhs::Value(ty),
                }
            };
            self.normalize_expr(ns, value, hint, scope);
        }
        for arg in args {
            if let ast::KwArg::Splat(value, _) = arg {
                self.normalize_expr(ns, value, Lhs::None, scope);
            }
        }
    }

    /// The entity a constructor creates: resolved normally, then checked against (or inferred
    /// from) the type of the relation it is the value of.
    fn constructor_type(&mut self, ns: NsId, class: &ast::ClassRef<'a>, lhs: Lhs) -> Option<EntityId> {
        let parts = class_parts(class);
        let local = match self.lookup_type(ns, &parts, class.span) {
            Ok(TypeRef::Item(TypeItem::Entity(e))) => Ok(e),
            Ok(other) => {
                let what = self.describe_type_ref(other);
                Err(Diagnostic::error(
                    ErrorKind::TypingException,
                    codes::NOT_AN_ENTITY,
                    format!("{} is {what}, not an entity", self.path_text(&parts)),
                )
                .at(self.loc(ns, class.span), "not an entity"))
            }
            Err(d) => Err(d),
        };
        let written = self.path_text(&parts);
        let at = self.loc(ns, class.span);
        match lhs {
            Lhs::Value(ty) => {
                let ty_name = self.value_type_name(ty);
                self.push(
                    Diagnostic::error(
                        ErrorKind::TypingException,
                        codes::INCOMPATIBLE_CONSTRUCTOR,
                        format!("Can not assign a value of type {written} to a variable of type {ty_name}"),
                    )
                    .at(at, format!("an instance cannot be a `{ty_name}`")),
                );
                None
            }
            Lhs::Entity(hint) => match local {
                Ok(e) => {
                    if self.model.is_subclass(e, hint) {
                        Some(e)
                    } else {
                        let (have, want) = (self.entity_name(e), self.entity_name(hint));
                        self.push(
                            Diagnostic::error(
                                ErrorKind::TypingException,
                                codes::INCOMPATIBLE_CONSTRUCTOR,
                                format!("Can not assign a value of type {have} to a variable of type {want}"),
                            )
                            .at(at, format!("the relation expects `{want}`")),
                        );
                        None
                    }
                }
                Err(original) if class.namespace.is_empty() => {
                    let mut candidates = vec![hint];
                    candidates.extend(self.model.descendants(hint));
                    candidates.retain(|&c| self.model.entity(c).name == class.name.name);
                    match candidates.len() {
                        1 => Some(candidates[0]),
                        0 => {
                            self.push(original);
                            None
                        }
                        _ => {
                            let mut names: Vec<String> = candidates.iter().map(|&c| self.entity_name(c)).collect();
                            names.sort();
                            self.push(
                                Diagnostic::error(
                                    ErrorKind::AmbiguousTypeException,
                                    codes::AMBIGUOUS_TYPE,
                                    format!(
                                        "Could not determine namespace for type {written}. {} possible candidates exists: [{}]. \
                                         To resolve this, use the fully qualified name instead of the short name.",
                                        names.len(),
                                        names.join(", ")
                                    ),
                                )
                                .at(at, "ambiguous entity name"),
                            );
                            None
                        }
                    }
                }
                Err(original) => {
                    self.push(original);
                    None
                }
            },
            Lhs::None | Lhs::Untyped => match local {
                Ok(e) => Some(e),
                Err(d) => {
                    self.push(d);
                    None
                }
            },
        }
    }

    pub(crate) fn value_type_name(&self, ty: ValueType) -> String {
        let base = match ty.base {
            BaseType::Primitive(p) => p.name().to_string(),
            BaseType::Typedef(t) => {
                let td = &self.model.typedefs[t.index()];
                format!("{}::{}", self.ns_name(td.ns), self.sym(td.name))
            }
        };
        let with_list = if ty.list { format!("{base}[]") } else { base };
        if ty.nullable { format!("{with_list}?") } else { with_list }
    }
}
