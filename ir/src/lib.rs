//! The leaf crate of weft.
//!
//! Everything that more than one stage needs to agree on lives here: source positions
//! ([`span`]), interned identifiers ([`symbol`]) and diagnostics as plain data
//! ([`diagnostic`]). The IR itself, its text form and the artifact container join this crate
//! as the evaluator and artifact work lands.
//!
//! Architecture invariant: this crate depends on no other weft crate and renders nothing; it
//! only describes. Its one piece of I/O is [`fs`], the guarded reader of project files that the
//! frontend and the runtime share.

pub mod artifact;
pub mod diagnostic;
pub mod format_spec;
pub mod fs;
pub mod inputs;
pub mod plugin;
pub mod program;
pub mod span;
pub mod symbol;
pub mod value;

pub use diagnostic::{Code, Diagnostic, ErrorKind, Label, Note, NoteKind, Severity};
pub use span::{FileId, LineCol, Location, SourceFile, SourceMap, Span};
pub use symbol::{Interner, Symbol};
