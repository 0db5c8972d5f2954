//! Reading a cell's value, and what reading an unset one means.

use super::*;

impl Machine {
    pub(super) fn get_value(&mut self, cell: CellId) -> R<Value> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::Proxy => {
                let target = self.cells[cell as usize].target().ok_or_else(|| rt("proxy not connected"))?;
                let value = self.get_value(target)?;
                if self.cells[cell as usize].is_set(Cell::LISTENED)
                    && let Some(&ProxyListener { collector, location, notify: true }) = self.proxy_listeners.get(&cell)
                {
                    self.remove_proxy_listener(cell);
                    self.receive_flatten(collector, value.clone(), location)?;
                }
                Ok(value)
            }
            CellKind::List | CellKind::ListLiteral => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                if c.ext_index().is_none() {
                    return Ok(Value::List(Arc::from([])));
                }
                Ok(Value::List(self.xm(cell).items.share()))
            }
            CellKind::Option => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                match c.value() {
                    Some(v) if !matches!(*v, Value::Null(_)) => Ok(Value::clone(&v)),
                    _ => {
                        let (inst, attr) = self.cell_owner(cell).expect("relation cell");
                        let p = self.prog();
                        let a = p.attribute(attr);
                        let mut error = EvalError::new(
                            ErrorKind::OptionalValueException,
                            format!(
                                "Optional variable accessed that has no value (attribute `{}.{}` of `{}`)",
                                p.entity(a.entity).name,
                                p.name(a.name),
                                self.instance_display(inst)
                            ),
                        );
                        let relation = format!("the relation `{}` of this instance holds no value", p.name(a.name));
                        error.shown_at = Some((self.last_location(inst), relation));
                        Err(error)
                    }
                }
            }
            _ => {
                let c = &self.cells[cell as usize];
                if !c.has_value() {
                    return Err(EvalError::unset(cell));
                }
                Ok(c.value_cloned().unwrap_or(Value::NULL))
            }
        }
    }

    /// [`Self::peek`] without a copy: `f` sees the value where the cell keeps it, or a list
    /// cell's elements, which `peek` would copy into a new list (a relation's that are kept
    /// as instance ids are lent as values made for the call: see `Items::with_values`).
    pub fn peek_with<T>(&self, cell: CellId, f: impl FnOnce(Peeked<'_>) -> T) -> T {
        let c = &self.cells[cell as usize];
        match c.kind() {
            CellKind::List | CellKind::ListLiteral => self.x(cell).items.with_values(|items| f(Peeked::Items(items))),
            CellKind::Proxy => match c.target() {
                Some(target) => self.peek_with(target, f),
                None => f(Peeked::Empty),
            },
            _ => match c.value() {
                Some(value) => f(Peeked::Value(&value)),
                None => f(Peeked::Empty),
            },
        }
    }

    /// The value of a ready cell for the final checks and plugins (lists for relations).
    pub fn peek(&self, cell: CellId) -> Option<Value> {
        let c = &self.cells[cell as usize];
        match c.kind() {
            CellKind::List | CellKind::ListLiteral => Some(self.x(cell).items.to_list()),
            CellKind::Proxy => c.target().and_then(|t| self.peek(t)),
            _ => c.value_cloned(),
        }
    }
}
