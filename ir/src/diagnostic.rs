//! Diagnostics as data.
//!
//! Every stage reports problems as [`Diagnostic`] values: a severity, a stable [`Code`], the
//! reference compiler's exception class as [`ErrorKind`] (so that conformance tests can compare
//! outcomes), a message, labelled source spans and notes. Rendering them, for people or as
//! JSON, is the CLI's business.

use serde::Serialize;

use crate::span::Location;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// A stable identifier for one kind of diagnostic, such as `E0101`.
///
/// Codes are listed, with what triggers them, in [`codes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Code(pub &'static str);

macro_rules! error_kinds {
    ($($(#[$doc:meta])* $name:ident : $parent:ident),* $(,)?) => {
        /// The reference compiler's exception class a diagnostic corresponds to.
        ///
        /// The names are the Python class names, so `as_str` can be compared with the `kind`
        /// recorded in the conformance corpus.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum ErrorKind {
            $($(#[$doc])* $name,)*
        }

        impl ErrorKind {
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$name,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorKind::$name => stringify!($name),)*
                }
            }

            /// The kind of this name (the reference's exception class), if weft has one.
            pub fn from_name(name: &str) -> Option<ErrorKind> {
                Self::ALL.iter().copied().find(|k| k.as_str() == name)
            }

            /// The class this one derives from in the reference's hierarchy (itself for roots).
            pub fn parent(self) -> ErrorKind {
                match self {
                    $(ErrorKind::$name => ErrorKind::$parent,)*
                }
            }
        }
    };
}

error_kinds! {
    /// Root of every compiler error.
    CompilerException: CompilerException,
    /// A syntax error.
    ParserException: CompilerException,
    /// `.` used where `::` is required.
    InvalidNamespaceAccess: ParserException,
    /// A parser warning, such as an invalid escape sequence.
    ParserWarning: ParserException,
    /// Generic evaluation error.
    RuntimeException: CompilerException,
    /// `-` in the name of something being defined.
    HyphenException: RuntimeException,
    /// Wrong operand or target type.
    TypingException: RuntimeException,
    /// Something defined twice.
    DuplicateException: TypingException,
    /// An entity is its own ancestor.
    CycleException: TypingException,
    /// An unknown type, entity, typedef, implementation or plugin.
    TypeNotFoundException: RuntimeException,
    /// A type of a module that is not imported.
    MissingImportException: TypeNotFoundException,
    /// Constructor type inference found several candidates.
    AmbiguousTypeException: TypeNotFoundException,
    /// Unknown variable, attribute, namespace or index.
    NotFoundException: RuntimeException,
    /// An invalid index definition.
    IndexException: RuntimeException,
    /// An index attribute is missing from a constructor.
    IndexAttributeMissingInConstructorException: TypingException,
    /// Two indexes match different instances.
    IndexCollisionException: RuntimeException,
    /// A second, different value for a single-assignment variable.
    DoubleSetException: RuntimeException,
    /// Storing a value into an attribute failed.
    WrappingRuntimeException: RuntimeException,
    AttributeException: WrappingRuntimeException,
    /// A relation was extended after it was frozen.
    ModifiedAfterFreezeException: RuntimeException,
    /// An optional relation without a value was read.
    OptionalValueException: RuntimeException,
    /// An attribute is not set at the end of the compile.
    UnsetException: RuntimeException,
    /// Several errors reported together.
    MultiException: CompilerException,
    /// A missing dict key.
    KeyException: RuntimeException,
    /// A typedef constraint holds an expression that can not be evaluated with only `self`
    /// bound (an f-string, a constructor).
    DirectExecuteException: RuntimeException,
    /// A plugin failed.
    ExternalException: RuntimeException,
    ExplicitPluginException: RuntimeException,
    /// A plugin argument or return value has the wrong type.
    PluginTypeException: WrappingRuntimeException,
    /// A reference where a plain value is required.
    UnexpectedReference: RuntimeException,
    /// A module or namespace cannot be loaded.
    ModuleLoadingException: WrappingRuntimeException,
    /// A module is malformed: a v1 module's `plugins/` is not a Python package.
    InvalidModuleException: CompilerException,
    /// A dataclass entity breaks a dataclass rule.
    DataClassException: TypingException,
    DataClassMismatchException: DataClassException,
    /// Invalid relation precedence policy.
    InvalidRelationPrecedenceRuleError: CompilerException,
    CycleInRelationPrecedencePolicyError: CompilerException,
    /// A cycle in the `requires` graph of exported resources.
    DependencyCycleException: CompilerException,
    /// Division or modulo by zero (a raw Python error in the reference).
    ZeroDivisionError: ZeroDivisionError,
    /// A float out of range (a raw Python error in the reference).
    OverflowError: OverflowError,
    /// An int of more than 4,300 decimal digits converted to or from text (CPython's
    /// `sys.int_max_str_digits`; a raw Python error in the reference).
    ValueError: ValueError,
    /// A value formatted with a spec its type has none for, in an f-string (a raw Python error
    /// in the reference).
    TypeError: TypeError,
    /// A dataclass entity without a Python counterpart (a raw Python error in the reference).
    ModuleNotFoundError: ModuleNotFoundError,
    /// The export found a resource it cannot build (`inmanta.resources.ResourceException`).
    ResourceException: ResourceException,
    /// A raw Python `RuntimeError`, such as a dependency manager's.
    RuntimeError: RuntimeError,
    /// Raw Python errors a module's Python code lets through where the reference does not wrap
    /// them (a dependency manager of the export).
    AttributeError: AttributeError,
    KeyError: KeyError,
    IndexError: IndexError,
    /// Python's `RecursionError`: a value nested too deeply for the reference's recursive checks.
    RecursionError: RuntimeError,
    /// weft's own: the evaluation outgrew its memory limit (`--max-memory`).
    MemoryLimitException: CompilerException,
    /// Warnings.
    VariableShadowWarning: VariableShadowWarning,
    TypeDeprecationWarning: TypeDeprecationWarning,
    CompilerRuntimeWarning: CompilerRuntimeWarning,
}

impl ErrorKind {
    /// Whether this kind is `other` or one of its subclasses.
    pub fn is_a(self, other: ErrorKind) -> bool {
        let mut k = self;
        loop {
            if k == other {
                return true;
            }
            let p = k.parent();
            if p == k {
                return false;
            }
            k = p;
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A source span with a message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Label {
    pub location: Location,
    pub message: String,
    /// The primary label is where the problem is; secondary labels give context.
    pub primary: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NoteKind {
    Note,
    Help,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Note {
    pub kind: NoteKind,
    pub message: String,
}

/// One problem found in a program.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub kind: ErrorKind,
    pub message: String,
    pub labels: Vec<Label>,
    pub notes: Vec<Note>,
}

impl Diagnostic {
    pub fn error(kind: ErrorKind, code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            kind,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn warning(kind: ErrorKind, code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            code,
            kind,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds the primary label: where the problem is.
    pub fn at(mut self, location: Location, label: impl Into<String>) -> Self {
        self.labels.push(Label { location, message: label.into(), primary: true });
        self
    }

    /// Adds a secondary label that gives context.
    pub fn with_label(mut self, location: Location, label: impl Into<String>) -> Self {
        self.labels.push(Label { location, message: label.into(), primary: false });
        self
    }

    pub fn with_note(mut self, message: impl Into<String>) -> Self {
        self.notes.push(Note { kind: NoteKind::Note, message: message.into() });
        self
    }

    pub fn with_help(mut self, message: impl Into<String>) -> Self {
        self.notes.push(Note { kind: NoteKind::Help, message: message.into() });
        self
    }

    /// The location of the first primary label, if any.
    pub fn primary_location(&self) -> Option<Location> {
        self.labels.iter().find(|l| l.primary).or(self.labels.first()).map(|l| l.location)
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// The catalogue of diagnostic codes.
///
/// Codes are grouped by stage: `E00xx` lexing and parsing, `E01xx` loading projects and
/// modules, `E02xx` static checks of definitions, `E03xx` static checks of statements and
/// expressions, `W0xxx` warnings.
pub mod codes {
    use super::Code;

    // Lexing and parsing.
    pub const ILLEGAL_CHARACTER: Code = Code("E0001");
    pub const UNTERMINATED_STRING: Code = Code("E0002");
    pub const INVALID_ESCAPE: Code = Code("E0003");
    pub const INVALID_NUMBER: Code = Code("E0004");
    pub const INVALID_REGEX: Code = Code("E0005");
    pub const UNEXPECTED_TOKEN: Code = Code("E0010");
    pub const UNEXPECTED_EOF: Code = Code("E0011");
    pub const RESERVED_KEYWORD: Code = Code("E0012");
    pub const INVALID_IDENTIFIER: Code = Code("E0013");
    pub const INVALID_NAMESPACE_ACCESS: Code = Code("E0014");
    pub const PLUS_ASSIGN_ON_VARIABLE: Code = Code("E0015");
    pub const DICT_KEY_INTERPOLATION: Code = Code("E0016");
    pub const NULL_DICT_DEFAULT: Code = Code("E0017");
    pub const INVALID_FSTRING: Code = Code("E0018");
    pub const DEFAULT_CONSTRUCTOR: Code = Code("E0019");
    pub const DUPLICATE_DICT_KEY: Code = Code("E0020");
    pub const HYPHEN_IN_NAME: Code = Code("E0021");
    pub const INVALID_UTF8: Code = Code("E0022");
    pub const NESTED_TOO_DEEPLY: Code = Code("E0023");
    pub const INT_TOO_LONG: Code = Code("E0024");

    // Projects and modules.
    pub const PROJECT_INVALID: Code = Code("E0101");
    pub const MODULE_NOT_FOUND: Code = Code("E0102");
    pub const NAMESPACE_NOT_FOUND: Code = Code("E0103");
    pub const MODULE_INVALID: Code = Code("E0104");
    pub const DUPLICATE_IMPORT: Code = Code("E0105");
    pub const PLUGIN_SOURCE: Code = Code("E0106");

    // Definitions.
    pub const DUPLICATE_DEFINITION: Code = Code("E0201");
    pub const TYPE_NOT_FOUND: Code = Code("E0202");
    pub const MISSING_IMPORT: Code = Code("E0203");
    pub const INHERITANCE_CYCLE: Code = Code("E0204");
    pub const DUPLICATE_PARENT: Code = Code("E0205");
    pub const INCOMPATIBLE_ATTRIBUTE: Code = Code("E0206");
    pub const DUPLICATE_ATTRIBUTE: Code = Code("E0207");
    pub const INVALID_ATTRIBUTE_TYPE: Code = Code("E0208");
    pub const INVALID_DEFAULT: Code = Code("E0209");
    pub const DEFAULT_NOT_CONSTANT: Code = Code("E0210");
    pub const RELATION_NAME_CLASH: Code = Code("E0211");
    pub const INVALID_INDEX: Code = Code("E0212");
    pub const INDEX_ATTRIBUTE_NOT_FOUND: Code = Code("E0213");
    pub const IMPLEMENTATION_TYPE_MISMATCH: Code = Code("E0214");
    pub const CONDITIONAL_PARENTS: Code = Code("E0215");
    pub const TYPEDEF_WITHOUT_SELF: Code = Code("E0216");
    pub const TYPEDEF_BASE: Code = Code("E0217");
    pub const NOT_AN_ENTITY: Code = Code("E0218");
    pub const DATACLASS: Code = Code("E0219");
    pub const DATACLASS_MISMATCH: Code = Code("E0220");
    pub const DATACLASS_PYTHON_MISSING: Code = Code("E0221");

    // Statements and expressions.
    pub const UNKNOWN_ATTRIBUTE: Code = Code("E0301");
    pub const DUPLICATE_ARGUMENT: Code = Code("E0302");
    pub const INDEX_ATTRIBUTE_MISSING: Code = Code("E0303");
    pub const NOT_CALLABLE: Code = Code("E0304");
    pub const NAMESPACE_NOT_IMPORTED: Code = Code("E0305");
    pub const INCOMPATIBLE_CONSTRUCTOR: Code = Code("E0306");
    pub const AMBIGUOUS_TYPE: Code = Code("E0307");
    pub const CONSTANT_TYPE: Code = Code("E0308");

    // Warnings.
    /// Evaluation: a runtime error raised while a statement executed.
    pub const EVAL_ERROR: Code = Code("E0400");
    /// Evaluation: an instance is incomplete when the compile finishes.
    pub const EVAL_UNSET: Code = Code("E0401");
    /// Export: a resource cannot be built, or a module's export code failed.
    pub const EXPORT_ERROR: Code = Code("E0500");
    /// Export: a cycle in the `requires` graph.
    pub const EXPORT_CYCLE: Code = Code("E0501");
    /// Export: a resource type registered by Python code weft does not implement.
    pub const EXPORT_UNSUPPORTED: Code = Code("E0502");
    pub const W_INVALID_ESCAPE: Code = Code("W0001");
    pub const W_NUMBER_DEPRECATED: Code = Code("W0002");
    pub const W_BUILTIN_OVERRIDE: Code = Code("W0003");
    pub const W_SHADOWED_VARIABLE: Code = Code("W0004");
    /// Export: what the reference's exporter logs as a warning.
    pub const W_EXPORT: Code = Code("W0500");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_reference_hierarchy() {
        assert!(ErrorKind::InvalidNamespaceAccess.is_a(ErrorKind::ParserException));
        assert!(ErrorKind::DataClassMismatchException.is_a(ErrorKind::TypingException));
        assert!(ErrorKind::AttributeException.is_a(ErrorKind::RuntimeException));
        assert!(!ErrorKind::ParserException.is_a(ErrorKind::RuntimeException));
        assert_eq!(
            ErrorKind::IndexAttributeMissingInConstructorException.as_str(),
            "IndexAttributeMissingInConstructorException"
        );
    }
}
