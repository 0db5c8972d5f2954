//! Setting values: plain cells, relation ends and their inverses, attribute assignments, the
//! errors of setting twice or after a freeze, and how values and instances are shown in
//! messages.

use super::*;

impl Machine {
    pub(super) fn instance_of(&self, v: &Value) -> Option<InstanceId> {
        match v {
            Value::Instance(i) => Some(*i),
            _ => None,
        }
    }

    /// Sets a value into a cell (the reference's `set_value`), with type checks, double
    /// binding of relations and listener notification. `recur` sets the inverse end too.
    pub(super) fn set_cell(&mut self, cell: CellId, value: Value, location: Location, recur: bool) -> R<()> {
        let kind = self.cells[cell as usize].kind();
        match kind {
            CellKind::Sink => Ok(()),
            // A proxy stands for the cell it is connected to, which is where values are set
            // (and read from): nothing sets a proxy itself, and its payload holds the target.
            CellKind::Proxy => {
                debug_assert!(false, "a proxy is never set");
                Err(rt("internal error: a value set on a proxy instead of the cell it stands for"))
            }
            CellKind::Plain | CellKind::Single | CellKind::Element => {
                if self.cells[cell as usize].has_value() {
                    let old = self.cells[cell as usize].value_cloned().unwrap_or(Value::NULL);
                    if !old.py_eq(&value) {
                        return Err(self.double_set(cell, &old, &value, location));
                    }
                    return Ok(());
                }
                self.prefetch_first_waiter(cell);
                if !matches!(value, Value::Unknown) {
                    self.validate_cell(cell, &value)?;
                }
                // Only a relation end needs the value afterwards, and its value is an
                // instance (or null), which copies without touching a reference count.
                let inverse = (kind == CellKind::Single && recur).then(|| value.clone());
                // The waiters first: their word takes the location once the cell has its value.
                let mut waiters = self.take_waiters(cell);
                let location_index = self.locations.intern(location);
                let c = &mut self.cells[cell as usize];
                c.fill(value);
                c.set_has_value(true);
                c.set_location_index(&mut self.exts, location_index);
                if let Some(value) = inverse {
                    self.set_inverse(cell, &value, location)?;
                }
                while let Some(w) = self.wait_nodes.pop(&mut waiters) {
                    self.ready(w);
                }
                Ok(())
            }
            CellKind::Option => {
                if self.cells[cell as usize].has_value() {
                    let old = self.cells[cell as usize].value_cloned();
                    match old {
                        None | Some(Value::Null(_)) => {
                            if matches!(value, Value::Null(_)) {
                                return Ok(());
                            }
                            return Err(self.modified_after_freeze(cell, &value, location));
                        }
                        Some(old) => {
                            if !old.py_eq(&value) {
                                return Err(self.double_set(cell, &old, &value, location));
                            }
                            // Equal value: the reference sets it again, which changes nothing.
                            return Ok(());
                        }
                    }
                }
                if !matches!(value, Value::Unknown | Value::Null(_)) {
                    self.validate_cell(cell, &value)?;
                }
                if recur && self.instance_of(&value).is_some() {
                    self.set_inverse(cell, &value, location)?;
                }
                self.cells[cell as usize].set_value(value);
                // The freeze releases the waiters, whose word then takes the location.
                self.freeze(cell);
                let location_index = self.locations.intern(location);
                self.cells[cell as usize].set_location_index(&mut self.exts, location_index);
                Ok(())
            }
            CellKind::List | CellKind::ListLiteral => {
                if kind == CellKind::List && matches!(value, Value::Null(_)) {
                    if !self.x(cell).items.is_empty() {
                        let (inst, attr) = self.cell_owner(cell).expect("relation");
                        let values: Vec<String> = self.x(cell).items.iter().map(|v| self.display_value(&v)).collect();
                        return Err(rt(format!(
                            "Trying to set relation attribute `{}` of instance `{}` to null but it has values `{}` assigned already",
                            self.program.name(self.program.attribute(attr).name),
                            self.instance_display(inst),
                            values.join(", ")
                        ))
                        .at(location));
                    }
                    self.freeze(cell);
                    return Ok(());
                }
                if let Value::List(items) = &value {
                    if self.cells[cell as usize].has_value() {
                        if items.is_empty() {
                            return Ok(());
                        }
                        for v in items.iter() {
                            if !self.contains_item(cell, v) {
                                return Err(self.list_frozen_error(cell, v, location));
                            }
                        }
                    }
                    if items.is_empty() {
                        if self.can_get(cell) {
                            self.queue(cell);
                        }
                        return Ok(());
                    }
                    for v in items.iter() {
                        self.set_cell(cell, v.clone(), location, recur)?;
                    }
                    return Ok(());
                }
                if self.cells[cell as usize].has_value() {
                    if self.contains_item(cell, &value) {
                        return Ok(());
                    }
                    return Err(self.list_frozen_error(cell, &value, location));
                }
                self.validate_cell(cell, &value)?;
                if self.contains_item(cell, &value) {
                    if self.can_get(cell) {
                        self.queue(cell);
                    }
                    return Ok(());
                }
                self.push_item(cell, &value);
                self.notify_listeners(cell, &value, location)?;
                if kind == CellKind::List {
                    if recur {
                        self.set_inverse(cell, &value, location)?;
                    }
                    if let Some((_, Some(high))) = self.relation_bounds(cell)
                        && self.x(cell).items.len() as i64 >= high
                    {
                        self.freeze(cell);
                    }
                }
                if self.can_get(cell) {
                    self.queue(cell);
                }
                Ok(())
            }
        }
    }

    pub(super) fn contains_item(&self, cell: CellId, v: &Value) -> bool {
        let items = &self.x(cell).items;
        if let Value::Instance(inst) = v
            && items.len() > MEMBER_SET_THRESHOLD
        {
            return self.list_members[&cell].contains(inst);
        }
        items.contains(v)
    }

    /// Appends an element the list cell does not hold yet, keeping `list_members`.
    pub(super) fn push_item(&mut self, cell: CellId, value: &Value) {
        let items = &mut self.xm(cell).items;
        items.push(value.clone());
        let len = items.len();
        if len == MEMBER_SET_THRESHOLD + 1 {
            let members = self.x(cell).items.iter().filter_map(|v| self.instance_of(&v)).collect();
            self.list_members.insert(cell, members);
        } else if len > MEMBER_SET_THRESHOLD
            && let Value::Instance(inst) = value
        {
            self.list_members.get_mut(&cell).expect("made when the list outgrew a scan").insert(*inst);
        }
    }

    pub(super) fn list_frozen_error(&self, cell: CellId, value: &Value, location: Location) -> EvalError {
        if let Some((inst, attr)) = self.cell_owner(cell)
            && let Some((_, Some(high))) = self.relation_bounds(cell)
            && self.x(cell).items.len() as i64 == high
        {
            return rt(format!(
                "Exceeded relation arity on attribute '{}' of instance '{}'",
                self.program.name(self.program.attribute(attr).name),
                self.instance_display(inst)
            ))
            .at(location);
        }
        self.modified_after_freeze(cell, value, location)
    }

    pub(super) fn modified_after_freeze(&self, cell: CellId, value: &Value, location: Location) -> EvalError {
        let what = match self.cell_owner(cell) {
            Some((inst, attr)) => format!(
                " The compiler guessed that the relation '{}' on {} would be complete, but the value {} was added at {}.",
                self.program.name(self.program.attribute(attr).name),
                self.instance_display(inst),
                self.display_value(value),
                self.program.location_text(location)
            ),
            None => String::new(),
        };
        EvalError::new(ErrorKind::ModifiedAfterFreezeException, format!("List modified after freeze.{what}"))
            .at(location)
    }

    pub(super) fn double_set(&self, cell: CellId, old: &Value, new: &Value, location: Location) -> EvalError {
        let old_at = self.cell_location(cell).map(|l| self.program.location_text(l)).unwrap_or_default();
        EvalError::new(
            ErrorKind::DoubleSetException,
            format!(
                "value set twice:\n\told value: {}\n\t\tset at {}\n\tnew value: {}\n\t\tset at {}\n",
                self.display_value(old),
                old_at,
                self.display_value(new),
                self.program.location_text(location)
            ),
        )
        .at(location)
    }

    pub(super) fn set_inverse(&mut self, cell: CellId, value: &Value, location: Location) -> R<()> {
        let Some((me, attr)) = self.cell_owner(cell) else { return Ok(()) };
        let AttributeKind::Relation(end) = self.program.attribute(attr).kind else { return Ok(()) };
        let Some(inverse) = end.inverse else { return Ok(()) };
        let Some(other) = self.instance_of(value) else { return Ok(()) };
        let name = self.program.attribute(inverse).name;
        self.set_attribute(other, name, Value::Instance(me), location, false)
    }

    /// `instance.set_attribute`: failures are wrapped in an `AttributeException`.
    pub(super) fn set_attribute(
        &mut self,
        inst: InstanceId,
        name: Symbol,
        value: Value,
        location: Location,
        recur: bool,
    ) -> R<()> {
        let Some(cell) = self.slot(inst, name) else {
            return Err(EvalError::new(
                ErrorKind::NotFoundException,
                format!(
                    "cannot set attribute with name {} on type {}",
                    self.program.name(name),
                    self.program.entity(self.instances[inst as usize].entity).name
                ),
            ));
        };
        match self.set_cell(cell, value, location, recur) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.attribute_error(inst, name, e, None)),
        }
    }

    /// Wraps a failure to set an attribute. The reference locates the wrapper at the statement
    /// that assigned (`location`), or at the instance when the instance itself raised it.
    pub(super) fn attribute_error(
        &self,
        inst: InstanceId,
        name: Symbol,
        cause: EvalError,
        location: Option<Location>,
    ) -> EvalError {
        let location = location.unwrap_or_else(|| self.last_location(inst));
        // The reference wraps its own exceptions only; a raw Python error (a `RecursionError`)
        // escapes as it is. weft still says where.
        if !cause.kind.is_a(ErrorKind::CompilerException) {
            return cause.at(location);
        }
        let message = format!(
            "Could not set attribute `{}` on instance `{}`",
            self.program.name(name),
            self.instance_display(inst)
        );
        let mut e = EvalError::wrap(ErrorKind::AttributeException, message, cause);
        e.location = Some(location);
        e
    }

    #[inline]
    pub fn slot(&self, inst: InstanceId, name: Symbol) -> Option<CellId> {
        let i = &self.instances[inst as usize];
        match self.slot_tables[i.entity.index()].position(name) {
            Some(position) => Some(i.first_cell + position as CellId),
            // The reference's instance keeps `self` among its slots, a variable holding the
            // instance: `x.self` reads `x` on any entity, and setting it to another value is a
            // double set.
            None if name == self.symbols.self_ => Some(self.self_cell(inst)),
            None => None,
        }
    }

    /// An instance's attribute cells, in its entity's slot order.
    pub fn instance_slots(&self, inst: InstanceId) -> impl Iterator<Item = (Symbol, CellId)> + '_ {
        let entity = self.instances[inst as usize].entity;
        self.program.entity(entity).slots.iter().zip(self.instance_cells(inst)).map(|(&(name, _), cell)| (name, cell))
    }

    /// The attribute cells of an instance, in its entity's slot order (the order of
    /// [`Machine::instance_slots`]).
    pub fn instance_cells(&self, inst: InstanceId) -> std::ops::Range<CellId> {
        let i = &self.instances[inst as usize];
        i.first_cell..i.first_cell + self.program.entity(i.entity).slots.len() as CellId
    }

    /// The instance whose `self` cell this is, if it is one: a self cell holds its instance
    /// from its creation.
    pub(super) fn self_cell_owner(&self, cell: CellId) -> Option<InstanceId> {
        let c = &self.cells[cell as usize];
        if c.kind() != CellKind::Plain || c.attribute_of().is_some() {
            return None;
        }
        match c.value().as_deref() {
            Some(Value::Instance(inst)) if self.self_cell(*inst) == cell => Some(*inst),
            _ => None,
        }
    }

    /// The cell holding the instance itself (`self`).
    pub fn self_cell(&self, inst: InstanceId) -> CellId {
        let i = &self.instances[inst as usize];
        i.first_cell + self.program.entity(i.entity).slots.len() as CellId
    }

    /// Every constructor call that created or matched the instance, in order.
    pub fn instance_locations(&self, inst: InstanceId) -> impl Iterator<Item = Location> + '_ {
        let i = &self.instances[inst as usize];
        let more: &[Location] = match i.more_locations {
            NONE => &[],
            n => &self.more_locations[n as usize],
        };
        std::iter::once(self.loc(i.location)).chain(more.iter().copied())
    }

    /// The last constructor call that created or matched the instance (the one the reference
    /// reports).
    pub fn last_location(&self, inst: InstanceId) -> Location {
        let i = &self.instances[inst as usize];
        match i.more_locations {
            NONE => self.loc(i.location),
            n => *self.more_locations[n as usize].last().expect("a list of more locations is never empty"),
        }
    }

    pub(super) fn add_location(&mut self, inst: InstanceId, location: Location) {
        match self.instances[inst as usize].more_locations {
            NONE => {
                self.instances[inst as usize].more_locations = self.more_locations.len() as u32;
                self.more_locations.push(vec![location]);
            }
            n => self.more_locations[n as usize].push(location),
        }
    }

    pub fn instance_display(&self, inst: InstanceId) -> String {
        let locations: Vec<String> = self.instance_locations(inst).map(|l| self.program.location_text(l)).collect();
        let entity = self.instances[inst as usize].entity;
        format!("{} (instantiated at {})", self.program.entity(entity).name, locations.join(","))
    }

    /// What an operand is, for the label under it in a diagnostic: its type as the language
    /// names it (`null`, an entity's name), not Python's.
    pub(super) fn operand_type(&self, v: &Value) -> &str {
        match v {
            Value::Null(_) => "null",
            Value::Instance(i) => &self.program.entity(self.instances[*i as usize].entity).name,
            other => other.type_name(),
        }
    }

    /// Labels each operand of a failed operator with its type, under its whole source (an
    /// operand that is itself an operation spans both of its own operands).
    pub(super) fn with_operand_labels(&self, mut error: EvalError, operands: &[(ExprId, &str)]) -> EvalError {
        let c = self.code();
        error.labels = operands.iter().map(|&(e, ty)| (operand_extent(&c, e), format!("`{ty}`"))).collect();
        error
    }

    /// Python `str()` of a value, instances as the reference prints them.
    pub fn display_value(&self, v: &Value) -> String {
        self.display_value_with_null(v, "null").into_owned()
    }

    /// Python `str()` of a value as the reference's exporter and plugins see it: through its
    /// proxies, which turn its `NoneValue` into Python's `None`.
    pub fn display_python_value(&self, v: &Value) -> String {
        self.display_value_with_null(v, "None").into_owned()
    }

    /// Python `str()` of a value with `null` for null; a string (and null) is lent, not
    /// copied.
    pub(super) fn display_value_with_null<'v>(&self, v: &'v Value, null: &'static str) -> Cow<'v, str> {
        match v {
            Value::Null(_) => Cow::Borrowed(null),
            Value::Str(s) => Cow::Borrowed(s),
            Value::Instance(i) => Cow::Owned(self.instance_display(*i)),
            other => Cow::Owned(other.repr_with(null, &|i| self.instance_display(i))),
        }
    }
}
