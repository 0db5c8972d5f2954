//! Lowering: the checked model and its syntax trees become the evaluator's [`Program`].
//!
//! Lowering decides everything that the reference decides before it executes a statement:
//! constant folding of list and dict literals, the desugaring of `not in`, `d[k] is defined`
//! and nested comprehensions, the reversed order of nested blocks, the variables each block
//! declares, the eager promises of `if` and `for` bodies, and the split of constructor
//! arguments into direct (index) and indirect attributes. Variable names stay names: the
//! reference resolves them when a statement is emitted, and so does the evaluator.
//!
//! [`parameters`] runs after lowering: it finds the top-level assignments of `main.cf` that
//! `project.yml` declares as parameters and records their constant instructions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use weft_ir::diagnostic::codes;
use weft_ir::program::{
    self as ir, BaseType as IrBase, BinOp, BlockId, Callee, Constraint, CtorId, ExprId, ExprKind, StmtId, StmtKind,
    ValueType as IrValueType, VarRef,
};
use weft_ir::value::{NullId, Value};
use weft_ir::{Diagnostic, ErrorKind, FileId, Location, Span, Symbol};

use crate::ast;
use crate::check::{self, AttributeKind, BaseType, EntityId, Model, NsId, Primitive, Resolved};
use crate::project::Program as Project;

/// Lowers a checked project. Call only when checking reported no errors.
pub fn lower(project: &Project<'_>, model: &Model<'_>) -> ir::Program {
    let mut names: Vec<String> = Vec::with_capacity(project.interner.len());
    for i in 0..project.interner.len() {
        names.push(project.interner.resolve(Symbol::from_u32(i as u32)).to_string());
    }
    let mut lowerer = Lowerer {
        project,
        model,
        out: ir::Program::default(),
        names_by_text: HashMap::new(),
        ctor_count: 0,
        ancestry: check::Ancestry::default(),
    };
    lowerer.out.names = names;
    lowerer.run();
    lowerer.out
}

/// Resolves the parameters `project.yml` declares (`weft: parameters:`) against the lowered
/// program and records them in [`ir::Program::parameters`], in declaration order.
///
/// A parameter must be a top-level variable of `main.cf` (the `__config__` namespace),
/// assigned exactly once, with a value that lowering folded into a single constant (a string,
/// number, bool or null literal, or a list or dict literal of those): that constant is the
/// default, and its instruction is the one a host replaces with the value it sets. Lowering
/// creates a fresh instruction for every literal and never shares one, so replacing it changes
/// nothing else. Every other case is an error, reported at the `project.yml` entry or at the
/// assignment.
pub fn parameters(project: &Project<'_>, program: &mut ir::Program) -> Vec<Diagnostic> {
    let declared = &project.config.parameters;
    let mut diagnostics = Vec::new();
    if declared.is_empty() {
        return diagnostics;
    }
    let error = |message: String, at: Location, label: &str| {
        Diagnostic::error(ErrorKind::CompilerException, codes::PROJECT_INVALID, message).at(at, label.to_string())
    };
    // The top-level assignments of main.cf, by variable name, in source order.
    let mut assignments: HashMap<&str, Vec<(StmtId, ExprId)>> = HashMap::new();
    if let Some(config) = program.namespaces.iter().find(|n| n.name == "__config__") {
        for &sid in &program.block(config.root).stmts {
            if let StmtKind::Assign { var, value } = program.stmt(sid).kind {
                assignments.entry(program.name(var)).or_default().push((sid, value));
            }
        }
    }
    let mut resolved = Vec::new();
    for param in declared {
        let found = assignments.get(param.name.as_str()).map(Vec::as_slice).unwrap_or_default();
        let &[(sid, value), ref again @ ..] = found else {
            diagnostics.push(
                error(
                    format!("parameter `{}` is not a top-level variable of main.cf", param.name),
                    param.location,
                    "declared as a parameter here",
                )
                .with_help(format!(
                    "assign the default at the top level of main.cf, outside any `if` or `for`: `{} = ...`",
                    param.name
                )),
            );
            continue;
        };
        if let Some(&(second, _)) = again.first() {
            diagnostics.push(
                error(
                    format!("parameter `{}` is assigned more than once in main.cf", param.name),
                    program.stmt(second).location,
                    "assigned again here",
                )
                .with_label(program.stmt(sid).location, "first assigned here")
                .with_label(param.location, "declared as a parameter here")
                .with_note("a parameter is assigned exactly once: that constant is its default"),
            );
            continue;
        }
        if !matches!(program.expr(value).kind, ExprKind::Const(_)) {
            diagnostics.push(
                error(
                    format!("the default of parameter `{}` is not a constant", param.name),
                    program.source_extent(value),
                    "not a constant",
                )
                .with_label(param.location, "declared as a parameter here")
                .with_note(
                    "a parameter's default is a literal: a string, number, bool or null, or a list or dict of \
                     such literals",
                ),
            );
            continue;
        }
        resolved.push(ir::Parameter {
            name: param.name.clone(),
            description: param.description.clone(),
            value,
            location: program.stmt(sid).location,
        });
    }
    program.parameters = resolved;
    diagnostics
}

struct Lowerer<'p, 'a> {
    project: &'p Project<'a>,
    model: &'p Model<'a>,
    out: ir::Program,
    names_by_text: HashMap<String, Symbol>,
    ctor_count: u32,
    /// The walks over ancestors of the entities lowered so far, for the next ones.
    ancestry: check::Ancestry,
}

/// What a value is assigned to, for the implicit inverse of constructors.
type LhsCtx = Option<(ExprId, Symbol)>;

/// A file's name as the reference writes it in messages: relative to the project directory
/// with a leading `./`; a file outside the project (a v2 module in a Python environment) by
/// its absolute path, and a name in angle brackets (embedded text) as it is.
pub(crate) fn display_path(name: &str) -> String {
    if name.starts_with('<') || std::path::Path::new(name).is_absolute() {
        name.to_string()
    } else {
        format!("./{name}")
    }
}

fn base(b: BaseType) -> IrBase {
    match b {
        BaseType::Primitive(p) => IrBase::Primitive(p),
        BaseType::Typedef(t) => IrBase::Typedef(ir::TypedefId(t.0)),
    }
}

impl<'p, 'a> Lowerer<'p, 'a> {
    fn run(&mut self) {
        for (_, file) in self.project.sources.files() {
            self.out.files.push(ir::FileInfo::from_source(display_path(&file.name), file));
        }
        self.out.plugins = self.model.plugins.iter().map(|p| p.signature.clone()).collect();
        self.out.std_entity = ir::EntityId(self.model.std_entity.map(|e| e.0).unwrap_or(0));
        for attr in &self.model.attributes {
            let kind = match attr.kind {
                AttributeKind::Value(t) => {
                    ir::AttributeKind::Value(IrValueType { base: base(t.base), list: t.list, nullable: t.nullable })
                }
                AttributeKind::Relation(r) => ir::AttributeKind::Relation(ir::RelationEnd {
                    target: ir::EntityId(r.target.0),
                    lower: r.lower,
                    upper: r.upper,
                    inverse: r.inverse.map(|i| ir::AttrId(i.0)),
                }),
            };
            self.out.attributes.push(ir::Attribute {
                name: attr.name,
                entity: ir::EntityId(attr.entity.0),
                location: attr.location,
                kind,
            });
        }
        for (i, _) in self.model.typedefs.iter().enumerate() {
            let td = &self.model.typedefs[i];
            let constraint = match td.constraint.kind {
                ast::ExprKind::Regex(r) => Constraint::Regex {
                    python: Arc::from(r),
                    engine: Arc::from(crate::regex::anchored_at_start(&crate::regex::translate_python_regex(r))),
                },
                _ => Constraint::Expr {
                    expr: self.expr(td.ns, td.constraint, None),
                    text: Arc::from(crate::check::pretty::expr_text(&self.project.interner, td.constraint)),
                },
            };
            let name = format!("{}::{}", self.model.namespace(td.ns).name, self.sym(td.name));
            self.out.typedefs.push(ir::Typedef {
                name,
                base: base(td.base.unwrap_or(BaseType::Primitive(Primitive::String))),
                constraint,
                location: td.location,
            });
        }
        for (i, ns) in self.model.namespaces.iter().enumerate() {
            self.out.namespaces.push(ir::Namespace { name: ns.name.clone(), root: BlockId(u32::MAX) });
            let _ = i;
        }
        for i in 0..self.model.implementations.len() {
            let imp = &self.model.implementations[i];
            let body = self.block(imp.ns, imp.body.stmts, true, None);
            let name = format!("{}::{}", self.model.namespace(imp.ns).name, self.sym(imp.name));
            self.out.implementations.push(ir::Implementation { name, ns: ir::NsId(imp.ns.0), body });
        }
        for i in 0..self.model.entities.len() {
            let entity = self.entity(EntityId(i as u32));
            self.out.entities.push(entity);
        }
        for i in 0..self.model.namespaces.len() {
            let ns = NsId(i as u32);
            // A relation is a statement of its block too (the reference's `BiStatement`): at its
            // place among the statements, each of its annotations is evaluated as a bare
            // expression is, so a name it does not find or a plugin that fails is an error of
            // the model even though the value is not used.
            let mut stmts: Vec<ast::Stmt<'a>> = Vec::new();
            for item in self.model.namespace(ns).ast.items {
                match item {
                    ast::Item::Stmt(s) => stmts.push(*s),
                    ast::Item::Relation(def) => stmts.extend(def.annotations.iter().map(ast::Stmt::Expr)),
                    _ => {}
                }
            }
            let root = self.block(ns, &stmts, false, None);
            self.out.namespaces[i].root = root;
        }
    }

    fn sym(&self, s: Symbol) -> &str {
        &self.out.names[s.as_u32() as usize]
    }

    fn intern(&mut self, text: &str) -> Symbol {
        if let Some(s) = self.names_by_text.get(text) {
            return *s;
        }
        if let Some(s) = self.project.interner.get(text) {
            return s;
        }
        let s = Symbol::from_u32(self.out.names.len() as u32);
        self.out.names.push(text.to_string());
        self.names_by_text.insert(text.to_string(), s);
        s
    }

    fn file_of(&self, ns: NsId) -> FileId {
        self.model.namespace(ns).file
    }

    fn loc(&self, ns: NsId, span: Span) -> Location {
        Location::new(self.file_of(ns), span)
    }

    fn entity(&mut self, id: EntityId) -> ir::Entity {
        let model = self.model;
        let e = model.entity(id);
        let name = format!("{}::{}", model.namespace(e.ns).name, self.sym(e.name));
        let slots: Vec<(Symbol, ir::AttrId)> = model
            .all_attributes_in(id, &mut self.ancestry)
            .into_iter()
            .map(|(name, attribute)| (name, ir::AttrId(attribute.0)))
            .collect();
        let mut defaults = Vec::new();
        for (n, d) in model.default_values_in(id, &mut self.ancestry) {
            let value = self.push_expr(ExprKind::Const(d.value.clone()), d.location);
            defaults.push((n, value));
        }
        let mut implements = Vec::new();
        for implement in model.implements_of(id) {
            let imp = &model.implements[implement.index()];
            let condition = imp.condition.map(|c| self.expr(imp.ns, c, None));
            implements.push(ir::Implement {
                implementations: imp.implementations.iter().map(|i| ir::ImplId(i.0)).collect(),
                condition,
                ns: ir::NsId(imp.ns.0),
                location: imp.location,
            });
        }
        ir::Entity {
            name,
            location: e.location,
            parents: e.parents.iter().map(|p| ir::EntityId(p.0)).collect(),
            attributes: e.attributes.iter().map(|a| ir::AttrId(a.0)).collect(),
            slots,
            defaults,
            indexes: e.indexes.clone(),
            implements,
        }
    }

    fn push_expr(&mut self, kind: ExprKind, location: Location) -> ExprId {
        let id = ExprId(self.out.exprs.len() as u32);
        self.out.exprs.push(ir::Expr { kind, location });
        id
    }

    fn push_stmt(&mut self, kind: StmtKind, location: Location) -> StmtId {
        let id = StmtId(self.out.stmts.len() as u32);
        self.out.stmts.push(ir::Stmt { kind, location });
        id
    }

    /// Lowers a block. Nested blocks (implementation, `if` and `for` bodies) are emitted in
    /// reverse statement order; `extra_var` is a `for` body's loop variable.
    fn block(&mut self, ns: NsId, stmts: &[ast::Stmt<'a>], nested: bool, extra_var: Option<Symbol>) -> BlockId {
        let id = BlockId(self.out.blocks.len() as u32);
        self.out.blocks.push(ir::Block { ns: ir::NsId(ns.0), variables: vec![], stmts: vec![], promises: vec![] });
        let ordered: Vec<ast::Stmt<'a>> = if nested { stmts.iter().rev().copied().collect() } else { stmts.to_vec() };
        let mut lowered = Vec::new();
        let mut variables = Vec::new();
        let mut promises: Vec<ir::Promise> = Vec::new();
        for stmt in &ordered {
            let (sid, declared, stmt_promises) = crate::with_stack(|| self.stmt(ns, stmt));
            lowered.push(sid);
            variables.extend(declared);
            promises.extend(stmt_promises);
        }
        variables.extend(extra_var);
        // A block may declare hundreds of thousands of variables and assign as many
        // attributes: the names are looked up in a set, not scanned for each promise.
        if !promises.is_empty() {
            let declared: HashSet<Symbol> = variables.iter().copied().collect();
            promises.retain(|p| match self.root_variable(p.instance) {
                Some(root) => !declared.contains(&root),
                None => true,
            });
        }
        let block = &mut self.out.blocks[id.index()];
        block.variables = variables;
        block.stmts = lowered;
        block.promises = promises;
        id
    }

    /// The variable at the root of a reference chain (`a` for `a.b.c`).
    fn root_variable(&self, mut id: ExprId) -> Option<Symbol> {
        loop {
            match self.out.expr(id).kind {
                ExprKind::Attr { base, .. } => id = base,
                ExprKind::Var(VarRef::Name(n)) => return Some(n),
                _ => return None,
            }
        }
    }

    /// Lowers a statement: its id, the variables it declares and its eager promises.
    fn stmt(&mut self, ns: NsId, stmt: &ast::Stmt<'a>) -> (StmtId, Vec<Symbol>, Vec<ir::Promise>) {
        let location = self.loc(ns, stmt.span());
        match stmt {
            ast::Stmt::Assign(assign) => match assign.target.kind {
                ast::ExprKind::Attr { base, attr } => {
                    let instance = self.expr(ns, base, None);
                    let value = self.expr(ns, assign.value, Some((instance, attr.name)));
                    let extend = assign.op == ast::AssignOp::Extend;
                    let sid =
                        self.push_stmt(StmtKind::SetAttr { instance, attribute: attr.name, value, extend }, location);
                    (sid, vec![], vec![ir::Promise { instance, attribute: attr.name, location }])
                }
                ast::ExprKind::Name(path) => {
                    let var = path.last().name;
                    let value = self.expr(ns, assign.value, None);
                    let sid = self.push_stmt(StmtKind::Assign { var, value }, location);
                    (sid, vec![var], vec![])
                }
                _ => {
                    // The parser only builds assignments to names and attribute chains.
                    let value = self.expr(ns, assign.value, None);
                    (self.push_stmt(StmtKind::Expr(value), location), vec![], vec![])
                }
            },
            ast::Stmt::Expr(e) => {
                let value = self.expr(ns, e, None);
                (self.push_stmt(StmtKind::Expr(value), location), vec![], vec![])
            }
            ast::Stmt::For(f) => {
                let iterable = self.expr(ns, f.iterable, None);
                let body = self.block(ns, f.body.stmts, true, Some(f.var.name));
                let promises = self.out.block(body).promises.clone();
                let sid = self.push_stmt(StmtKind::For { var: f.var.name, iterable, body }, location);
                (sid, vec![], promises)
            }
            ast::Stmt::If(i) => {
                let (sid, promises) = self.if_stmt(ns, i);
                (sid, vec![], promises)
            }
        }
    }

    fn if_stmt(&mut self, ns: NsId, i: &ast::If<'a>) -> (StmtId, Vec<ir::Promise>) {
        let location = self.loc(ns, i.span);
        let cond = self.expr(ns, i.cond, None);
        let then = self.block(ns, i.then.stmts, true, None);
        let otherwise = match i.otherwise {
            ast::Else::None => self.block(ns, &[], true, None),
            ast::Else::Else(b) => self.block(ns, b.stmts, true, None),
            ast::Else::Elif(inner) => {
                // An `elif` is an else block holding one `if`.
                let id = BlockId(self.out.blocks.len() as u32);
                self.out.blocks.push(ir::Block {
                    ns: ir::NsId(ns.0),
                    variables: vec![],
                    stmts: vec![],
                    promises: vec![],
                });
                let (sid, promises) = self.if_stmt(ns, inner);
                let block = &mut self.out.blocks[id.index()];
                block.stmts = vec![sid];
                block.promises = promises;
                id
            }
        };
        let mut promises = self.out.block(then).promises.clone();
        promises.extend(self.out.block(otherwise).promises.clone());
        (self.push_stmt(StmtKind::If { cond, then, otherwise }, location), promises)
    }

    fn is_const(&self, id: ExprId) -> bool {
        matches!(self.out.expr(id).kind, ExprKind::Const(_))
    }

    fn const_value(&self, id: ExprId) -> Value {
        match &self.out.expr(id).kind {
            ExprKind::Const(v) => v.clone(),
            _ => unreachable!("checked by is_const"),
        }
    }

    /// A name path (`a`, `a.b.c`, `mod::x.y`) as a reference chain.
    fn reference(&mut self, ns: NsId, path: &[ast::Ident], span: Span) -> ExprId {
        let location = self.loc(ns, span);
        let first = path[0];
        let text = self.sym(first.name).to_string();
        let var = match text.rsplit_once("::") {
            Some((ns_part, name)) => match self.model.namespace(ns).visible.get(ns_part) {
                Some(target) => {
                    let name = self.intern(name);
                    VarRef::Qualified(ir::NsId(target.0), name)
                }
                None => VarRef::Name(first.name),
            },
            None => VarRef::Name(first.name),
        };
        let mut id = self.push_expr(ExprKind::Var(var), location);
        for part in &path[1..] {
            id = self.push_expr(ExprKind::Attr { base: id, name: part.name }, location);
        }
        id
    }

    fn expr(&mut self, ns: NsId, expr: &'a ast::Expr<'a>, lhs: LhsCtx) -> ExprId {
        crate::with_stack(|| self.expr_inner(ns, expr, lhs))
    }

    fn expr_inner(&mut self, ns: NsId, expr: &'a ast::Expr<'a>, lhs: LhsCtx) -> ExprId {
        use ast::ExprKind as K;
        let location = self.loc(ns, expr.span);
        let kind = match &expr.kind {
            K::Int(i) => ExprKind::Const(Value::Int(*i)),
            K::BigInt(text) => {
                ExprKind::Const(text.parse::<num_bigint::BigInt>().map(Value::int).unwrap_or(Value::NULL))
            }
            K::Float(f) => ExprKind::Const(Value::Float(*f)),
            K::Bool(b) => ExprKind::Const(Value::Bool(*b)),
            // Each `null` in the source is an object of its own (see `NullId`).
            K::Null => ExprKind::Const(Value::Null(NullId::literal(location.file.0, expr.span.start))),
            K::RawStr(s) => ExprKind::Const(Value::str(s)),
            K::Regex(r) => ExprKind::Const(Value::str(r)),
            K::Str(lit) => {
                if lit.interpolations.is_empty() {
                    ExprKind::Const(Value::str(lit.value))
                } else {
                    let parts = lit
                        .interpolations
                        .iter()
                        .map(|i| (self.reference(ns, i.path, i.span), Arc::from(i.matched)))
                        .collect();
                    ExprKind::Format { template: Arc::from(lit.value), parts }
                }
            }
            K::FStr(lit) => {
                let fields = lit
                    .fields
                    .iter()
                    .filter(|f| !f.path.is_empty())
                    .map(|f| (self.reference(ns, f.path, f.span), Arc::from(f.key)))
                    .collect();
                ExprKind::FString { template: Arc::from(lit.value), fields }
            }
            K::Name(path) => {
                if path.is_simple() {
                    ExprKind::Var(VarRef::Name(path.last().name))
                } else {
                    let ns_part: Vec<&str> = path.namespace().iter().map(|i| self.sym(i.name)).collect();
                    let ns_part = ns_part.join("::");
                    match self.model.namespace(ns).visible.get(&ns_part) {
                        Some(target) => ExprKind::Var(VarRef::Qualified(ir::NsId(target.0), path.last().name)),
                        None => ExprKind::Var(VarRef::Name(path.last().name)),
                    }
                }
            }
            K::Attr { base, attr } => {
                let base = self.expr(ns, base, None);
                ExprKind::Attr { base, name: attr.name }
            }
            K::Subscript { base, key } => {
                let map = self.expr(ns, base, None);
                let key = self.expr(ns, key, None);
                ExprKind::Subscript { map, key }
            }
            K::Call { func, args } => {
                let callee = match self.model.resolved.get(&check::expr_key(expr)) {
                    Some(Resolved::Plugin(p)) => Callee::Plugin(ir::PluginId(p.0)),
                    Some(Resolved::Cast(p)) => Callee::Cast(*p),
                    _ => Callee::Cast(ir::Primitive::String),
                };
                let name: Vec<&str> = func.parts.iter().map(|i| self.sym(i.name)).collect();
                let name = Arc::from(name.join("::"));
                let mut positional = Vec::new();
                let mut kwargs = Vec::new();
                let mut splats = Vec::new();
                for arg in *args {
                    if let ast::Arg::Positional(v) = arg {
                        positional.push(self.expr(ns, v, None));
                    }
                }
                for arg in *args {
                    if let ast::Arg::Keyword(k, v) = arg {
                        let v = self.expr(ns, v, None);
                        kwargs.push((k.name, v));
                    }
                }
                for arg in *args {
                    if let ast::Arg::Splat(v, _) = arg {
                        splats.push(self.expr(ns, v, None));
                    }
                }
                ExprKind::Call { callee, name, args: positional, kwargs, splats }
            }
            K::Construct { class, args } => {
                let ctor = self.ctor(ns, expr, class, args, lhs);
                ExprKind::Construct(ctor)
            }
            K::IndexLookup { args, .. } => {
                let entity = match self.model.resolved.get(&check::expr_key(expr)) {
                    Some(Resolved::Entity(e)) => ir::EntityId(e.0),
                    _ => self.out.std_entity,
                };
                let (query, splats) = self.kwargs(ns, args);
                ExprKind::IndexLookup { entity, query, splats }
            }
            K::SelectorLookup { base, relation, args } => {
                let (query, splats) = self.kwargs(ns, args);
                let base = self.expr(ns, base, None);
                ExprKind::SelectorLookup { base, relation: relation.name, query, splats }
            }
            K::List(items) => {
                let lowered: Vec<ExprId> = items.iter().map(|i| self.expr(ns, i, lhs)).collect();
                if lowered.iter().all(|i| self.is_const(*i)) {
                    let mut flat = Vec::new();
                    for i in &lowered {
                        match self.const_value(*i) {
                            Value::List(inner) => flat.extend(inner.iter().cloned()),
                            other => flat.push(other),
                        }
                    }
                    ExprKind::Const(Value::List(Arc::from(flat)))
                } else {
                    ExprKind::List(lowered)
                }
            }
            K::Dict(entries) => {
                let lowered: Vec<(Arc<str>, ExprId)> =
                    entries.iter().map(|e| (Arc::from(e.key), self.expr(ns, e.value, None))).collect();
                if lowered.iter().all(|(_, v)| self.is_const(*v)) {
                    let pairs: Vec<(Arc<str>, Value)> =
                        lowered.iter().map(|(k, v)| (k.clone(), self.const_value(*v))).collect();
                    ExprKind::Const(Value::Dict(pairs.into()))
                } else {
                    ExprKind::Dict(lowered)
                }
            }
            K::ListComp { element, fors, guards } => {
                return self.list_comp(ns, expr, element, fors, guards, lhs);
            }
            K::Not(e) => ExprKind::Not(self.expr(ns, e, None)),
            K::Binary { op, op_span, lhs: l, rhs: r } => {
                let a = self.expr(ns, l, None);
                let b = self.expr(ns, r, None);
                // The reference locates an operator's errors at the operator token, which
                // differs from the left operand's line when the expression spans lines.
                let location = self.loc(ns, *op_span);
                let kind = match op {
                    ast::BinOp::And => ExprKind::And { lhs: a, rhs: b },
                    ast::BinOp::Or => ExprKind::Or { lhs: a, rhs: b },
                    ast::BinOp::NotIn => {
                        let inner = self.push_expr(ExprKind::Binary { op: BinOp::In, lhs: a, rhs: b }, location);
                        ExprKind::Not(inner)
                    }
                    other => ExprKind::Binary {
                        op: match other {
                            ast::BinOp::Eq => BinOp::Eq,
                            ast::BinOp::NotEq => BinOp::Ne,
                            ast::BinOp::Lt => BinOp::Lt,
                            ast::BinOp::Gt => BinOp::Gt,
                            ast::BinOp::Le => BinOp::Le,
                            ast::BinOp::Ge => BinOp::Ge,
                            ast::BinOp::In => BinOp::In,
                            ast::BinOp::Add => BinOp::Add,
                            ast::BinOp::Sub => BinOp::Sub,
                            ast::BinOp::Mul => BinOp::Mul,
                            ast::BinOp::Div => BinOp::Div,
                            ast::BinOp::Mod => BinOp::Mod,
                            _ => BinOp::Pow,
                        },
                        lhs: a,
                        rhs: b,
                    },
                };
                return self.push_expr(kind, location);
            }
            K::Conditional { cond, then, otherwise } => {
                let cond = self.expr(ns, cond, None);
                let then = self.expr(ns, then, lhs);
                let otherwise = self.expr(ns, otherwise, lhs);
                ExprKind::Cond { cond, then, otherwise }
            }
            K::IsDefined(inner) => match inner.kind {
                K::Name(path) => ExprKind::IsDefined { base: None, name: path.last().name },
                K::Attr { base, attr } => {
                    let base = self.expr(ns, base, None);
                    ExprKind::IsDefined { base: Some(base), name: attr.name }
                }
                K::Subscript { base, key } => {
                    // `d[k] is defined` is `(k in d) and (d[k] != null) and (d[k] != [])`.
                    let d1 = self.expr(ns, base, None);
                    let k1 = self.expr(ns, key, None);
                    let contains = self.push_expr(ExprKind::Binary { op: BinOp::In, lhs: k1, rhs: d1 }, location);
                    let d2 = self.expr(ns, base, None);
                    let k2 = self.expr(ns, key, None);
                    let get2 = self.push_expr(ExprKind::Subscript { map: d2, key: k2 }, location);
                    let null = self.push_expr(ExprKind::Const(Value::NULL), location);
                    let not_null = self.push_expr(ExprKind::Binary { op: BinOp::Ne, lhs: get2, rhs: null }, location);
                    let first = self.push_expr(ExprKind::And { lhs: contains, rhs: not_null }, location);
                    let d3 = self.expr(ns, base, None);
                    let k3 = self.expr(ns, key, None);
                    let get3 = self.push_expr(ExprKind::Subscript { map: d3, key: k3 }, location);
                    let empty = self.push_expr(ExprKind::Const(Value::List(Arc::from(Vec::new()))), location);
                    let not_empty = self.push_expr(ExprKind::Binary { op: BinOp::Ne, lhs: get3, rhs: empty }, location);
                    ExprKind::And { lhs: first, rhs: not_empty }
                }
                _ => {
                    let e = self.expr(ns, inner, None);
                    return e;
                }
            },
        };
        self.push_expr(kind, location)
    }

    fn kwargs(&mut self, ns: NsId, args: &'a [ast::KwArg<'a>]) -> (Vec<(Symbol, ExprId)>, Vec<ExprId>) {
        let mut query = Vec::new();
        let mut splats = Vec::new();
        for arg in args {
            match arg {
                ast::KwArg::Keyword(k, v) => {
                    let v = self.expr(ns, v, None);
                    query.push((k.name, v));
                }
                ast::KwArg::Splat(v, _) => splats.push(self.expr(ns, v, None)),
            }
        }
        (query, splats)
    }

    fn list_comp(
        &mut self,
        ns: NsId,
        expr: &'a ast::Expr<'a>,
        element: &'a ast::Expr<'a>,
        fors: &'a [ast::CompFor<'a>],
        guards: &'a [ast::Expr<'a>],
        lhs: LhsCtx,
    ) -> ExprId {
        let location = self.loc(ns, expr.span);
        // The innermost comprehension holds the element and every guard (joined with `and`);
        // each outer one yields the inner's list, which the list semantics flatten.
        let mut current = self.expr(ns, element, lhs);
        let mut guard: Option<ExprId> = None;
        for g in guards {
            let g = self.expr(ns, g, None);
            guard = Some(match guard {
                None => g,
                Some(prev) => self.push_expr(ExprKind::And { lhs: prev, rhs: g }, location),
            });
        }
        for (i, f) in fors.iter().enumerate().rev() {
            let iterable = self.expr(ns, f.iterable, None);
            let g = if i == fors.len() - 1 { guard } else { None };
            current =
                self.push_expr(ExprKind::ListComp { element: current, var: f.var.name, iterable, guard: g }, location);
        }
        current
    }

    fn ctor(
        &mut self,
        ns: NsId,
        expr: &'a ast::Expr<'a>,
        class: &ast::ClassRef<'a>,
        args: &'a [ast::KwArg<'a>],
        lhs: LhsCtx,
    ) -> CtorId {
        let model = self.model;
        let entity = match model.resolved.get(&check::expr_key(expr)) {
            Some(Resolved::Entity(e)) => *e,
            _ => model.std_entity.unwrap_or(EntityId(0)),
        };
        let written = {
            let mut parts: Vec<&str> = class.namespace.iter().map(|i| self.sym(i.name)).collect();
            parts.push(self.sym(class.name.name));
            parts.join("::")
        };
        self.ctor_count += 1;
        let self_name = self.intern(&format!("<constructor {}>", self.ctor_count));
        let location = self.loc(ns, expr.span);
        let self_ref = self.push_expr(ExprKind::Var(VarRef::Name(self_name)), location);
        // Defaults first, then explicit arguments (a Python dict updated in that order).
        let mut all: Vec<(Symbol, Option<&'a ast::Expr<'a>>, Option<ExprId>)> = Vec::new();
        for (name, d) in model.default_values_in(entity, &mut self.ancestry) {
            let id = self.push_expr(ExprKind::Const(d.value.clone()), d.location);
            all.push((name, None, Some(id)));
        }
        let mut explicit = Vec::new();
        let mut splats = Vec::new();
        for arg in args {
            match arg {
                ast::KwArg::Keyword(k, v) => {
                    explicit.push(k.name);
                    if let Some(slot) = all.iter_mut().find(|(n, _, _)| *n == k.name) {
                        slot.1 = Some(v);
                        slot.2 = None;
                    } else {
                        all.push((k.name, Some(v), None));
                    }
                }
                ast::KwArg::Splat(..) => {}
            }
        }
        let mut required_dynamic = Vec::new();
        let mut in_index: Vec<Symbol> = Vec::new();
        for index in &model.entity(entity).indexes {
            for attr in index {
                if all.iter().any(|(n, _, _)| n == attr) {
                    in_index.push(*attr);
                } else {
                    required_dynamic.push(*attr);
                }
            }
        }
        let ctor_lhs = if required_dynamic.is_empty() { None } else { lhs };
        let mut direct = Vec::new();
        let mut indirect = Vec::new();
        // Explicit values are lowered in argument order, as the reference normalises them.
        let mut values: HashMap<Symbol, ExprId> = HashMap::new();
        for arg in args {
            if let ast::KwArg::Keyword(k, v) = arg {
                let hint = if in_index.contains(&k.name) { None } else { Some((self_ref, k.name)) };
                let id = self.expr(ns, v, hint);
                values.insert(k.name, id);
            }
        }
        for arg in args {
            if let ast::KwArg::Splat(v, _) = arg {
                splats.push(self.expr(ns, v, None));
            }
        }
        for (name, _, default) in &all {
            let value = match default {
                Some(d) => *d,
                None => values[name],
            };
            if in_index.contains(name) {
                direct.push((*name, value));
            } else {
                indirect.push((*name, value));
            }
        }
        let id = CtorId(self.out.ctors.len() as u32);
        self.out.ctors.push(ir::Ctor {
            entity: ir::EntityId(entity.0),
            written,
            explicit,
            splats,
            direct,
            indirect,
            required_dynamic,
            lhs: ctor_lhs,
            self_name,
        });
        id
    }
}

#[cfg(test)]
mod tests {
    use super::display_path;

    /// Names of files in messages, as the reference writes them.
    #[test]
    fn file_names_in_messages() {
        for (name, shown) in [
            ("main.cf", "./main.cf"),
            ("libs/mod/model/_init.cf", "./libs/mod/model/_init.cf"),
            // A v2 module of a Python environment: the reference shows its absolute path, and
            // `.//venv/...` is not a path anyone can open.
            (
                "/venv/lib/python3.12/site-packages/inmanta_plugins/m/model/_init.cf",
                "/venv/lib/python3.12/site-packages/inmanta_plugins/m/model/_init.cf",
            ),
            ("<weft>/std/_init.cf", "<weft>/std/_init.cf"),
        ] {
            assert_eq!(display_path(name), shown, "{name}");
        }
    }
}
