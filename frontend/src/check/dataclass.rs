//! `std::Dataclass` entities and their Python counterparts.
//!
//! An entity that extends `std::Dataclass` is paired with a frozen Python dataclass of the same
//! name in the Python module of its namespace (`inmanta_plugins.<module>[.<sub>]`). The
//! reference imports that module when the entity is defined (a missing module is a raw
//! `ModuleNotFoundError`) and, if the dataclass exists, checks that both sides match when the
//! entity is normalised. Weft reads the dataclass from the module's source instead of
//! importing it.

use weft_ir::diagnostic::codes;
use weft_ir::plugin::PythonDataclass;
use weft_ir::{Diagnostic, ErrorKind};

use super::*;

impl<'p, 'a> Checker<'p, 'a> {
    /// When the entity is defined: its namespace must have a Python module.
    pub(super) fn pair_dataclass_stage1(&mut self, entity: EntityId) {
        let ns = self.model.entity(entity).ns;
        let ns_name = self.ns_name(ns).to_string();
        if !self.program.python_modules.contains(&ns_name) {
            let module = format!("inmanta_plugins.{}", ns_name.replace("::", "."));
            let location = self.model.entity(entity).location;
            self.push(
                Diagnostic::error(ErrorKind::ModuleNotFoundError, codes::DATACLASS_PYTHON_MISSING, format!("No module named '{module}'"))
                    .at(location, "this dataclass entity needs a Python module for its namespace")
                    .with_note("a std::Dataclass entity is paired with a frozen Python dataclass of the same name in the module's plugins"),
            );
            self.model.entities[entity.index()].invalid = true;
        }
    }

    fn python_dataclass(&self, entity: EntityId) -> Option<PythonDataclass> {
        let e = self.model.entity(entity);
        let ns_name = self.ns_name(e.ns);
        let name = self.sym(e.name);
        self.program.dataclasses.iter().find(|d| d.namespace == ns_name && d.name == name).cloned()
    }

    /// When the entity is normalised: if a Python dataclass of the same name exists, both
    /// sides must match, and the entity may only use `std::none` and have no index.
    pub(super) fn pair_dataclass(&mut self, entity: EntityId) {
        // Without a counterpart the reference checks nothing (it only pairs what it finds).
        let Some(python) = self.python_dataclass(entity) else { return };
        let entity_name = self.entity_name(entity);
        let location = self.model.entity(entity).location;
        let defined_at = self.location_text(location);
        let module = format!("inmanta_plugins.{}", self.ns_name(self.model.entity(entity).ns).replace("::", "."));
        if !python.frozen {
            self.push(
                Diagnostic::error(
                    ErrorKind::DataClassMismatchException,
                    codes::DATACLASS_MISMATCH,
                    format!(
                        "The python object {module}.{} associated to  {entity_name} defined at {defined_at} is not frozen. \
                         Dataclasses must have a python counterpart that is a frozen dataclass.",
                        python.name
                    ),
                )
                .at(location, "paired with a Python dataclass that is not frozen")
                .with_help("declare the Python class with `@dataclasses.dataclass(frozen=True)`"),
            );
            return;
        }
        let mut failures = Vec::new();
        let mut python_fields: Vec<(String, String)> = python.fields.clone();
        for name in self.model.all_attribute_names(entity) {
            let Some(attr) = self.model.find_attribute(entity, name) else { continue };
            let attribute = self.model.attribute(attr);
            let name_text = self.sym(name).to_string();
            match attribute.kind {
                AttributeKind::Relation(_) => {
                    let owner = attribute.entity;
                    if Some(owner) == self.model.std_entity {
                        continue;
                    }
                    let at = self.location_text(attribute.location);
                    failures.push(format!(
                        "a relation called {name_text} is defined at {at}. Dataclasses are not allowed to have relations"
                    ));
                }
                AttributeKind::Value(ty) => {
                    let Some(pos) = python_fields.iter().position(|(f, _)| *f == name_text) else {
                        failures.push(format!(
                            "The attribute {name_text} has no counterpart in the python domain. \
                             All attributes of a dataclasses must be identical in both the python and inmanta domain."
                        ));
                        continue;
                    };
                    let (_, annotation) = python_fields.remove(pos);
                    if !self.python_type_corresponds(&annotation, ty) {
                        failures.push(format!(
                            "The attribute {name_text} does not have the same type as the associated field in the python domain. \
                             All attributes of a dataclasses must be identical in both the python and inmanta domain."
                        ));
                    }
                }
            }
        }
        for (field, _) in python_fields {
            failures.push(format!(
                "The field {field} doesn't exist in the inmanta domain. \
                 All attributes of a dataclasses must be identical in both the python and inmanta domain"
            ));
        }
        if !failures.is_empty() {
            let list: Vec<String> = failures.iter().map(|f| format!("    -{f}")).collect();
            self.push(
                Diagnostic::error(
                    ErrorKind::DataClassMismatchException,
                    codes::DATACLASS_MISMATCH,
                    format!(
                        "The dataclass {entity_name} defined at {defined_at} does not match the corresponding python dataclass at {}:{}. {} errors:\n{}\n",
                        python.source_file,
                        python.source_line,
                        failures.len(),
                        list.join("\n")
                    ),
                )
                .at(location, "this entity and its Python dataclass differ"),
            );
            return;
        }
        for implement in self.model.implements_of(entity) {
            let implement = &self.model.implements[implement.index()];
            let implement_location = implement.location;
            for &implementation in &implement.implementations.clone() {
                let i = &self.model.implementations[implementation.index()];
                let is_none = i.name == self.known.none && self.ns_name(i.ns) == "std";
                if !is_none {
                    let at = self.location_text(implement_location);
                    self.push(
                        Diagnostic::error(
                            ErrorKind::DataClassException,
                            codes::DATACLASS,
                            format!(
                                "The dataclass {entity_name} defined at {defined_at} has an implementation other than 'std::none', \
                                 defined at {at}. Dataclasses can only have std::none as implemenation."
                            ),
                        )
                        .at(location, "a dataclass entity")
                        .with_label(implement_location, "implemented with something other than std::none"),
                    );
                    return;
                }
            }
        }
        if !self.model.entity(entity).indexes.is_empty() {
            self.push(
                Diagnostic::error(
                    ErrorKind::DataClassException,
                    codes::DATACLASS,
                    format!("The dataclass {entity_name} defined at {defined_at} has an indexes. Dataclasses can not have any indexes."),
                )
                .at(location, "a dataclass entity cannot have indexes"),
            );
        }
    }

    /// `file:line:column` of a location, as the reference writes locations in messages.
    pub(crate) fn location_text(&self, location: Location) -> String {
        let file = self.program.sources.get(location.file);
        let lc = file.line_col(location.span.start);
        format!("{}:{}:{}", crate::lower::display_path(&file.name), lc.line, lc.column)
    }

    /// Whether a Python field annotation denotes the same type as an attribute's, with the
    /// reference's correspondence of Python types to DSL types.
    fn python_type_corresponds(&self, annotation: &str, ty: ValueType) -> bool {
        let annotation: String = annotation.chars().filter(|c| !c.is_whitespace()).collect();
        let annotation = annotation.trim_matches(|c| c == '"' || c == '\'');
        if matches!(annotation, "object" | "typing.Any" | "Any") {
            return true;
        }
        // `X | None` and `Optional[X]` are nullable.
        let (inner, nullable) = if let Some(rest) = annotation.strip_suffix("|None") {
            (rest, true)
        } else if let Some(rest) = annotation.strip_prefix("None|") {
            (rest, true)
        } else if let Some(rest) =
            annotation.strip_prefix("Optional[").or_else(|| annotation.strip_prefix("typing.Optional["))
        {
            (rest.strip_suffix(']').unwrap_or(rest), true)
        } else {
            (annotation, false)
        };
        if nullable != ty.nullable {
            return false;
        }
        let (element, list) = match inner
            .strip_prefix("list[")
            .or_else(|| inner.strip_prefix("List["))
            .or_else(|| inner.strip_prefix("typing.List["))
            .or_else(|| inner.strip_prefix("Sequence["))
        {
            Some(rest) => (rest.strip_suffix(']').unwrap_or(rest), true),
            None => (inner, false),
        };
        if list != ty.list {
            return false;
        }
        let Some(primitive) = self.primitive_of(ty.base) else { return false };
        matches!(
            (element, primitive),
            ("int", Primitive::Int)
                | ("str", Primitive::String)
                | ("float", Primitive::Float)
                | ("bool", Primitive::Bool)
                | ("list", Primitive::List)
                | ("dict", Primitive::Dict)
        ) || (primitive == Primitive::Dict && (element.starts_with("dict[") || element.starts_with("Mapping[")))
    }
}
