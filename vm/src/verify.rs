//! The check of a program's tables before the machine trusts them.
//!
//! The frontend's output is consistent by construction; a program read from an artifact is
//! only as consistent as the file, and a checksum does not stop a crafted one. The machine
//! indexes its tables without checks and walks inheritance and block nesting recursively, so
//! every index is bounded here, and the two relations it recurses on (entity parents and
//! nested blocks) are checked to be acyclic. A program that passes can not make the machine
//! index out of bounds or recurse without end.

use weft_ir::Location;
use weft_ir::program::{AttributeKind, BaseType, Constraint, Program, StmtKind};
use weft_ir::value::Value;

use crate::bytecode::{CodeError, CodeTables};

/// Checks every index of `program` against its tables; `code_len` is the number of
/// instructions of its code.
pub fn verify_program(program: &Program, tables: &CodeTables, code_len: usize) -> Result<(), CodeError> {
    Verifier { program, code_len }.run(tables).map_err(CodeError::Program)
}

struct Verifier<'p> {
    program: &'p Program,
    code_len: usize,
}

type Checked = Result<(), String>;

fn below(what: &str, value: u32, limit: usize) -> Checked {
    if (value as usize) < limit { Ok(()) } else { Err(format!("{what} {value} is out of range (there are {limit})")) }
}

impl Verifier<'_> {
    fn expr(&self, id: weft_ir::program::ExprId) -> Checked {
        below("instruction", id.0, self.code_len)
    }

    fn name(&self, symbol: weft_ir::Symbol) -> Checked {
        below("name", symbol.as_u32(), self.program.names.len())
    }

    fn location(&self, location: &Location) -> Checked {
        below("source file", location.file.0, self.program.files.len())
    }

    fn run(&self, tables: &CodeTables) -> Checked {
        let p = self.program;
        let (entities, attributes, blocks, stmts) =
            (p.entities.len(), p.attributes.len(), p.blocks.len(), p.stmts.len());
        for value in &tables.consts {
            no_instances(value)?;
        }
        for ns in &p.namespaces {
            below("block", ns.root.0, blocks)?;
        }
        if !p.entities.is_empty() {
            below("entity", p.std_entity.0, entities)?;
        }
        // Cells keep an entity or an attribute index in 18 bits.
        use crate::machine::{MAX_ATTRIBUTES, MAX_ENTITIES};
        if entities > MAX_ENTITIES {
            return Err(format!("{entities} entities: the machine supports at most {MAX_ENTITIES}"));
        }
        if attributes > MAX_ATTRIBUTES {
            return Err(format!("{attributes} attributes: the machine supports at most {MAX_ATTRIBUTES}"));
        }
        // A task's requirements are keyed by an instruction or a name in 29 bits.
        let max_keyed = crate::machine::MAX_KEY_INDEX as usize + 1;
        if self.code_len > max_keyed {
            return Err(format!("{} instructions: the machine supports at most {max_keyed}", self.code_len));
        }
        if p.names.len() > max_keyed {
            return Err(format!("{} names: the machine supports at most {max_keyed}", p.names.len()));
        }
        // Scopes keep a block, a name or a namespace index in 29 bits; names are within that
        // once they are within a key's (asserted below).
        const { assert!(crate::machine::MAX_SCOPE_INDEX >= crate::machine::MAX_KEY_INDEX) };
        let max_scoped = crate::machine::MAX_SCOPE_INDEX as usize + 1;
        for (what, count) in [("blocks", blocks), ("namespaces", p.namespaces.len())] {
            if count > max_scoped {
                return Err(format!("{count} {what}: the machine supports at most {max_scoped}"));
            }
        }
        for entity in &p.entities {
            self.location(&entity.location)?;
            for parent in &entity.parents {
                below("entity", parent.0, entities)?;
            }
            for attribute in &entity.attributes {
                below("attribute", attribute.0, attributes)?;
            }
            for (name, attribute) in &entity.slots {
                self.name(*name)?;
                below("attribute", attribute.0, attributes)?;
            }
            for (name, value) in &entity.defaults {
                self.name(*name)?;
                self.expr(*value)?;
            }
            for name in entity.indexes.iter().flatten() {
                self.name(*name)?;
            }
            for implement in &entity.implements {
                for implementation in &implement.implementations {
                    below("implementation", implementation.0, p.implementations.len())?;
                }
                if let Some(condition) = implement.condition {
                    self.expr(condition)?;
                }
                below("namespace", implement.ns.0, p.namespaces.len())?;
                self.location(&implement.location)?;
            }
        }
        acyclic("entity inheritance", entities, |i| p.entities[i].parents.iter().map(|e| e.index()).collect())?;
        for attribute in &p.attributes {
            self.name(attribute.name)?;
            below("entity", attribute.entity.0, entities)?;
            self.location(&attribute.location)?;
            match attribute.kind {
                AttributeKind::Value(t) => self.base_type(t.base)?,
                AttributeKind::Relation(end) => {
                    below("entity", end.target.0, entities)?;
                    if let Some(inverse) = end.inverse {
                        below("attribute", inverse.0, attributes)?;
                    }
                }
            }
        }
        for typedef in &p.typedefs {
            self.base_type(typedef.base)?;
            self.location(&typedef.location)?;
            if let Constraint::Expr { expr: e, .. } = typedef.constraint {
                self.expr(e)?;
            }
        }
        acyclic("typedef bases", p.typedefs.len(), |i| match p.typedefs[i].base {
            BaseType::Typedef(t) => vec![t.index()],
            BaseType::Primitive(_) => Vec::new(),
        })?;
        for implementation in &p.implementations {
            below("namespace", implementation.ns.0, p.namespaces.len())?;
            below("block", implementation.body.0, blocks)?;
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); blocks];
        for (index, block) in p.blocks.iter().enumerate() {
            below("namespace", block.ns.0, p.namespaces.len())?;
            for name in &block.variables {
                self.name(*name)?;
            }
            for promise in &block.promises {
                self.expr(promise.instance)?;
                self.name(promise.attribute)?;
                self.location(&promise.location)?;
            }
            for stmt in &block.stmts {
                below("statement", stmt.0, stmts)?;
                match p.stmts[stmt.index()].kind {
                    StmtKind::If { then, otherwise, .. } => {
                        below("block", then.0, blocks)?;
                        below("block", otherwise.0, blocks)?;
                        children[index].extend([then.index(), otherwise.index()]);
                    }
                    StmtKind::For { body, .. } => {
                        below("block", body.0, blocks)?;
                        children[index].push(body.index());
                    }
                    _ => {}
                }
            }
        }
        acyclic("block nesting", blocks, |i| children[i].clone())?;
        for stmt in &p.stmts {
            self.location(&stmt.location)?;
            match stmt.kind {
                StmtKind::Assign { var, value } => {
                    self.name(var)?;
                    self.expr(value)?;
                }
                StmtKind::SetAttr { instance, attribute, value, .. } => {
                    self.expr(instance)?;
                    self.name(attribute)?;
                    self.expr(value)?;
                }
                StmtKind::If { cond, then, otherwise } => {
                    self.expr(cond)?;
                    below("block", then.0, blocks)?;
                    below("block", otherwise.0, blocks)?;
                }
                StmtKind::For { var, iterable, body } => {
                    self.name(var)?;
                    self.expr(iterable)?;
                    below("block", body.0, blocks)?;
                }
                StmtKind::Expr(e) => self.expr(e)?,
            }
        }
        for ctor in &p.ctors {
            below("entity", ctor.entity.0, entities)?;
            for name in ctor.explicit.iter().chain(&ctor.required_dynamic).chain([&ctor.self_name]) {
                self.name(*name)?;
            }
            for splat in &ctor.splats {
                self.expr(*splat)?;
            }
            for (name, value) in ctor.direct.iter().chain(&ctor.indirect) {
                self.name(*name)?;
                self.expr(*value)?;
            }
            if let Some((instance, name)) = ctor.lhs {
                self.expr(instance)?;
                self.name(name)?;
            }
        }
        Ok(())
    }

    fn base_type(&self, base: BaseType) -> Checked {
        match base {
            BaseType::Typedef(t) => below("typedef", t.0, self.program.typedefs.len()),
            BaseType::Primitive(_) => Ok(()),
        }
    }
}

/// Constants are literals: an instance can only come into being by evaluation.
fn no_instances(value: &Value) -> Checked {
    match value {
        Value::Instance(_) => Err("a constant holds an entity instance".to_string()),
        Value::List(items) => items.iter().try_for_each(no_instances),
        Value::Dict(items) => items.iter().try_for_each(|(_, v)| no_instances(v)),
        _ => Ok(()),
    }
}

/// Checks that the relation `edges` over `0..count` has no cycle (iterative depth-first
/// search, so a long chain can not overflow the stack here either).
fn acyclic(what: &str, count: usize, edges: impl Fn(usize) -> Vec<usize>) -> Checked {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut marks = vec![Mark::New; count];
    for start in 0..count {
        if marks[start] != Mark::New {
            continue;
        }
        let mut stack = vec![(start, edges(start), 0usize)];
        marks[start] = Mark::Open;
        while let Some((node, next, position)) = stack.last_mut() {
            if let Some(&child) = next.get(*position) {
                *position += 1;
                match marks.get(child) {
                    Some(Mark::Open) => return Err(format!("{what} has a cycle through {child}")),
                    Some(Mark::New) => {
                        marks[child] = Mark::Open;
                        let grandchildren = edges(child);
                        stack.push((child, grandchildren, 0));
                    }
                    _ => {}
                }
            } else {
                marks[*node] = Mark::Done;
                stack.pop();
            }
        }
    }
    Ok(())
}
