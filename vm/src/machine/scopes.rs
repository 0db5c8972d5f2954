//! Scopes and name lookup: blocks, namespaces, variables and the values the runtime reads
//! back after the evaluation.

use super::*;

impl Machine {
    pub(super) fn push_scope(&mut self, scope: Scope) -> ScopeId {
        self.scopes.push(PackedScope::pack(scope)) as ScopeId
    }

    /// The scope of a nested block's namespace (an `if` branch, a `for` iteration) over
    /// `parent`. When `parent` reaches a scope of the same namespace through blocks alone, the
    /// new scope would resolve every name as `parent` does, and `parent` serves: an
    /// instance's attributes, or a variable bound by name, in between would be seen
    /// differently from below a namespace scope (`lookup_in`'s `root`), so those stop the walk.
    /// (69k of the 205k scopes of the 93k-instance benchmark.)
    pub(super) fn nested_ns_scope(&mut self, ns: NsId, parent: ScopeId) -> ScopeId {
        let mut scope = parent;
        loop {
            match self.scopes[scope as usize].unpack() {
                Scope::Block { parent: above, .. } => scope = above,
                Scope::Ns { ns: outer, .. } | Scope::Root { ns: outer } if outer == ns => return parent,
                _ => return self.push_scope(Scope::Ns { ns, parent }),
            }
        }
    }

    /// A new execution context for a block: one fresh cell per declared variable.
    pub(super) fn block_context(&mut self, block: BlockId, parent: ScopeId) -> ScopeId {
        let count = self.block_variables[block.index()].len();
        // A block that declares nothing resolves every name in its parent.
        if count == 0 {
            return parent;
        }
        let first = self.new_cell(CellKind::Plain);
        for _ in 1..count {
            self.new_cell(CellKind::Plain);
        }
        self.push_scope(Scope::Block { block, first, parent })
    }

    /// [`Self::lookup_in`] from the top of a scope; a plain name goes through
    /// [`LookupCache`].
    #[inline]
    pub(super) fn lookup_var(&mut self, scope: ScopeId, name: VarRef) -> R<CellId> {
        let VarRef::Name(name) = name else { return self.lookup_in(scope, name, None) };
        let slot = LookupCache::slot(scope, name);
        let (s, n, cell) = self.lookups.entries[slot];
        if s == scope && n == name {
            return Ok(cell);
        }
        let cell = self.lookup_in(scope, VarRef::Name(name), None)?;
        self.lookups.entries[slot] = (scope, name, cell);
        Ok(cell)
    }

    /// Resolves a name as the reference's resolvers do.
    pub(super) fn lookup_in(&self, scope: ScopeId, name: VarRef, root: Option<NsId>) -> R<CellId> {
        let name_sym = match name {
            VarRef::Qualified(ns, sym) => return self.ns_lookup(ns, sym, name),
            VarRef::Name(sym) => sym,
        };
        match self.scopes[scope as usize].unpack() {
            Scope::Block { block, first, parent } => match self.block_variables[block.index()].position(name_sym) {
                Some(i) => Ok(first + i as CellId),
                None => self.lookup_in(parent, name, root),
            },
            Scope::Var { name: n, cell, parent } => {
                if root.is_none() && n == name_sym {
                    Ok(cell)
                } else {
                    self.lookup_in(parent, name, root)
                }
            }
            Scope::Ns { ns, parent } => self.lookup_in(parent, name, Some(root.unwrap_or(ns))),
            Scope::Instance { instance } => {
                if name_sym == self.symbols.self_ {
                    return Ok(self.self_cell(instance));
                }
                match (self.slot(instance, name_sym), root) {
                    (Some(c), _) => Ok(c),
                    (None, Some(ns)) => self.ns_lookup(ns, name_sym, name),
                    // An instance scope is always entered through a namespace scope.
                    (None, None) => Err(EvalError::new(
                        ErrorKind::NotFoundException,
                        format!("variable {} not found", self.sym_name(name_sym)),
                    )),
                }
            }
            Scope::Root { ns } => self.ns_lookup(root.unwrap_or(ns), name_sym, name),
        }
    }

    pub(super) fn ns_lookup(&self, ns: NsId, sym: Symbol, name: VarRef) -> R<CellId> {
        let scope = self.ns_scopes[ns.index()];
        if let Scope::Block { block, first, .. } = self.scopes[scope as usize].unpack()
            && let Some(i) = self.block_variables[block.index()].position(sym)
        {
            return Ok(first + i as CellId);
        }
        Err(EvalError::new(ErrorKind::NotFoundException, format!("variable {} not found", self.var_text(name))))
    }

    /// A variable reference as the source wrote it: `name` or `ns::name`.
    pub(super) fn var_text(&self, name: VarRef) -> String {
        match name {
            VarRef::Qualified(ns, s) => {
                format!("{}::{}", self.program.namespaces[ns.index()].name, self.program.name(s))
            }
            VarRef::Name(s) => self.sym_name(s).to_string(),
        }
    }

    /// The namespace whose code a scope belongs to (for plugins that resolve `./` paths in the
    /// caller's module); `None` inside an instance's scope.
    pub fn scope_namespace(&self, scope: ScopeId) -> Option<NsId> {
        let mut scope = scope;
        loop {
            match self.scopes.get(scope as usize)?.unpack() {
                Scope::Block { parent, .. } | Scope::Var { parent, .. } => scope = parent,
                Scope::Ns { ns, .. } | Scope::Root { ns } => return Some(ns),
                Scope::Instance { .. } => return None,
            }
        }
    }

    /// For plugins (templates): the value of a variable as seen from a scope.
    pub fn lookup_value(&mut self, scope: ScopeId, name: &str) -> R<Value> {
        let sym = self.symbol(name);
        let cell = self.lookup_in(scope, VarRef::Name(sym), None)?;
        if !self.is_ready(cell) {
            return Err(EvalError::unset(cell));
        }
        self.get_value(cell)
    }

    /// For plugins: an instance attribute, or the cell to wait for.
    pub fn attribute_value(&mut self, inst: InstanceId, name: &str) -> R<Value> {
        let Some(cell) = self.instance_slots(inst).find(|(n, _)| self.program.name(*n) == name).map(|s| s.1) else {
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!(
                    "could not find attribute with name: {name} in type {}",
                    self.program.entity(self.instances[inst as usize].entity).name
                ),
            ));
        };
        if !self.is_ready(cell) {
            return Err(EvalError::unset(cell));
        }
        self.get_value(cell)
    }
}
