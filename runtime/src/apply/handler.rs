//! The handler interface and the driver that runs one resource through it.
//!
//! A [`Handler`] follows the reference's CRUD handler: it parses the desired state from the
//! fields, reads the current state, diffs the two into [`Change`]s, and applies them (create,
//! update or delete). A handler that can reload (exec::Run) runs its reload after its own
//! deploy when the resource was notified. [`Engine::deploy`] does all of that for one resource,
//! after resolving its references, and turns the outcome into a [`ResourceReport`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use super::accounts::Accounts;
use super::report::{Change, ResourceReport, Status};
use super::secrets::{self, ReferenceError, Resolved};
use super::{ApplyOptions, EnvironmentReader};
use crate::graph::{ResourceGraph, ResourceId};

/// Shown instead of a value a reference filled in.
pub(super) const SECRET: &str = "<secret>";

/// Resolved values shorter than this are not scrubbed from messages: replacing every `1` or
/// `a` in a message would make it unreadable and hide nothing a reader could not guess.
const SHORTEST_SCRUBBED_SECRET: usize = 3;

/// Why a resource could not be deployed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ResourceError {
    #[error("no handler for resource type {0}")]
    NoHandler(String),
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("field `{field}` {problem}")]
    Field { field: &'static str, problem: &'static str },
    #[error("field `{field}`: {problem}")]
    FieldValue { field: &'static str, problem: String },
    #[error("cannot {action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("This resource is set to fail")]
    SetToFail,
    #[error("File with hash {0} is not available")]
    FileNotAvailable(String),
    #[error("the stored content for hash {expected} has hash {actual}")]
    HashMismatch { expected: String, actual: String },
    #[error("Invalid resource desired state, hash or content should be provided")]
    NoContent,
    #[error("cannot create {path}: its directory {directory} does not exist")]
    MissingDirectory { path: PathBuf, directory: PathBuf },
    #[error("no user named {0}")]
    UnknownUser(String),
    #[error("no group named {0}")]
    UnknownGroup(String),
    #[error("{0} already exists but is not a symlink")]
    NotASymlink(PathBuf),
    #[error("{0} already exists but is not a directory")]
    NotADirectory(PathBuf),
    /// The path holds a directory, a named pipe, a device or a socket.
    #[error("{} is {what}, not a file", path.display())]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("cannot parse the command: {0}")]
    CommandSyntax(#[from] super::shlex::SplitError),
    #[error("the command is empty")]
    EmptyCommand,
    #[error("cannot run {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("the command did not finish within {0} seconds and was killed")]
    Timeout(u64),
    #[error("Failed to execute command ({status}){}", colon_then(.stderr))]
    CommandFailed { status: String, stderr: String },
    /// The handler asked to skip the resource (exec::Run's `skip_on_fail`).
    #[error("{0}")]
    Skip(Box<ResourceError>),
}

/// `: text`, or nothing when `text` is empty.
fn colon_then(text: &str) -> String {
    if text.is_empty() { String::new() } else { format!(": {text}") }
}

impl ResourceError {
    /// An I/O error on `path`, while trying to `action` it.
    pub fn io(action: &'static str, path: &Path, source: std::io::Error) -> ResourceError {
        ResourceError::Io { action, path: path.to_path_buf(), source }
    }
}

/// What every handler may use while deploying one resource.
pub(super) struct Context<'e> {
    pub engine: &'e Engine<'e>,
    /// The resource's `report_only`: compare, but change nothing.
    pub report_only: bool,
    /// Notes for the report's message (what a dry run would do, which command ran).
    pub notes: Vec<String>,
}

impl Context<'_> {
    /// Whether this is a dry run.
    pub fn dry_run(&self) -> bool {
        self.engine.dry_run
    }

    /// A path from the model, placed under the apply root.
    pub fn host_path(&self, path: &str) -> PathBuf {
        self.engine.host_path(path)
    }

    /// The apply root when it is not `/`: commands run there by default.
    pub fn scratch_root(&self) -> Option<&Path> {
        (!self.engine.root_is_host_root).then_some(self.engine.root.as_path())
    }

    /// A path on the host as the model would write it: the root prefix removed.
    pub fn model_path(&self, path: &Path) -> String {
        if !self.engine.root_is_host_root
            && let Ok(inside) = path.strip_prefix(&self.engine.root)
        {
            return format!("/{}", inside.display());
        }
        path.display().to_string()
    }

    /// File contents by sha1 hash.
    pub fn stored_file(&self, hash: &str) -> Option<&[u8]> {
        self.engine.graph.files.get(hash).map(Vec::as_slice)
    }

    pub fn accounts(&self) -> &Accounts {
        &self.engine.accounts
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

/// Deploys one resource type, following the reference's CRUD handlers.
pub(super) trait Handler {
    /// The desired state, parsed from the fields.
    type Desired;
    /// What [`Handler::read_current`] observed, kept for [`Handler::apply_changes`].
    type Current;
    /// Whether the handler reloads when notified.
    const CAN_RELOAD: bool = false;

    /// Parses the desired state; a missing or ill-typed field is an error.
    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<Self::Desired, ResourceError>;

    /// Observes the current state on the host.
    fn read_current(&self, desired: &Self::Desired, ctx: &mut Context) -> Result<Self::Current, ResourceError>;

    /// The fields that differ; empty when the host is up to date. A resource that does not
    /// exist yet, or should not, is the reference's `purged` change.
    fn diff(&self, desired: &Self::Desired, current: &Self::Current, ctx: &Context) -> Vec<Change>;

    /// Makes the changes; called only outside dry runs, with a non-empty `changes`.
    fn apply_changes(
        &self,
        desired: &Self::Desired,
        current: &Self::Current,
        changes: &[Change],
        ctx: &mut Context,
    ) -> Result<(), ResourceError>;

    /// Reloads after the deploy of a notified resource (in a dry run: notes what it would
    /// do). Returns whether anything ran (or would run).
    fn reload(
        &self,
        _desired: &Self::Desired,
        _current: &Self::Current,
        _ctx: &mut Context,
    ) -> Result<bool, ResourceError> {
        Ok(false)
    }
}

/// What a handler run produced, before secrets are masked.
struct Deployed {
    status: Status,
    changes: Vec<Change>,
}

/// The state shared by all workers of one apply.
pub(super) struct Engine<'g> {
    pub graph: &'g ResourceGraph,
    pub root: PathBuf,
    /// Whether the root is `/`, so paths are used as they are.
    pub root_is_host_root: bool,
    pub dry_run: bool,
    pub environment: EnvironmentReader,
    pub accounts: Accounts,
}

impl<'g> Engine<'g> {
    pub fn new(graph: &'g ResourceGraph, options: &ApplyOptions) -> Engine<'g> {
        let root_is_host_root = options.root.as_os_str().is_empty() || options.root == Path::new("/");
        Engine {
            graph,
            root: options.root.clone(),
            root_is_host_root,
            dry_run: options.dry_run,
            environment: options.environment.clone(),
            accounts: Accounts::default(),
        }
    }

    /// A path from the model, placed under the root. Relative paths are placed under it too,
    /// so nothing a scratch-root apply does lands outside the root by accident.
    pub fn host_path(&self, path: &str) -> PathBuf {
        if self.root_is_host_root { PathBuf::from(path) } else { self.root.join(path.trim_start_matches('/')) }
    }

    /// Deploys one resource whose requirements all succeeded.
    pub fn deploy(&self, id: &ResourceId, fields: &crate::graph::Fields, notified: bool) -> ResourceReport {
        let id_text = id.to_string();
        // The handlers read a JSON object; one resource's copy lives only for its deployment.
        let object = fields.to_map();
        let resolved = match secrets::resolve(&object, &self.environment) {
            Ok(resolved) => resolved,
            Err(error) => return failure(id_text, ResourceError::from(error), notified),
        };
        // The reference's `report_only` resources are only compared with the host, never
        // changed; reading the raw field is enough, as no reference can fill it.
        let report_only = fields.value_text("report_only") == Some("true");
        let mut ctx = Context { engine: self, report_only, notes: Vec::new() };
        let result = match id.entity_type.as_str() {
            "std::testing::NullResource" => run(&super::null::NullHandler, &resolved.fields, notified, &mut ctx),
            // The files module's text files, directories and symlinks have the fields of fs's
            // (its text files keep their content inline, which the file handler reads when
            // there is no hash; its directories may create their parents; its symlinks name
            // their fields otherwise and have an owner and group).
            "fs::File" | "files::TextFile" => run(&super::file::FileHandler, &resolved.fields, notified, &mut ctx),
            "fs::Directory" | "files::Directory" => {
                run(&super::directory::DirectoryHandler, &resolved.fields, notified, &mut ctx)
            }
            "fs::Symlink" => run(&super::symlink::SymlinkHandler::FS, &resolved.fields, notified, &mut ctx),
            "files::Symlink" => run(&super::symlink::SymlinkHandler::FILES, &resolved.fields, notified, &mut ctx),
            "exec::Run" => run(&super::exec::RunHandler, &resolved.fields, notified, &mut ctx),
            other => Err(ResourceError::NoHandler(other.to_string())),
        };
        let notes = std::mem::take(&mut ctx.notes);
        let mut report = match result {
            Ok(deployed) => ResourceReport {
                id: id_text,
                status: deployed.status,
                changes: mask_changes(deployed.changes, &resolved),
                message: (!notes.is_empty()).then(|| notes.join("; ")),
                notified,
            },
            Err(error) => {
                let mut report = failure(id_text, error, notified);
                if !notes.is_empty() {
                    let message = report.message.take().unwrap_or_default();
                    report.message = Some(format!("{}; {message}", notes.join("; ")));
                }
                report
            }
        };
        if let Some(message) = &mut report.message {
            scrub(message, &resolved);
        }
        report
    }
}

/// Drives one handler through read, diff, apply and reload (only read and diff for a
/// report-only resource).
fn run<H: Handler>(
    handler: &H,
    fields: &Map<String, Json>,
    notified: bool,
    ctx: &mut Context,
) -> Result<Deployed, ResourceError> {
    let desired = handler.desired(fields, ctx)?;
    let current = handler.read_current(&desired, ctx)?;
    let changes = handler.diff(&desired, &current, ctx);
    if ctx.report_only {
        // The reference calls such a resource non-compliant and does not deploy what depends
        // on it; skipping it does the same here.
        if changes.is_empty() {
            return Ok(Deployed { status: Status::Unchanged, changes });
        }
        ctx.note("report only: the resource differs from its desired state and was left as it is");
        return Ok(Deployed { status: Status::Skipped, changes });
    }
    if !changes.is_empty() && !ctx.dry_run() {
        handler.apply_changes(&desired, &current, &changes, ctx)?;
    }
    let reloaded = if notified && H::CAN_RELOAD { handler.reload(&desired, &current, ctx)? } else { false };
    let status = if changes.is_empty() && !reloaded { Status::Unchanged } else { Status::Changed };
    Ok(Deployed { status, changes })
}

/// The report of a resource whose deploy failed (or that the handler skipped).
fn failure(id: String, error: ResourceError, notified: bool) -> ResourceReport {
    let status = if matches!(error, ResourceError::Skip(_)) { Status::Skipped } else { Status::Failed };
    ResourceReport { id, status, changes: Vec::new(), message: Some(error.to_string()), notified }
}

/// Replaces both sides of every change to a field a reference filled by `<secret>`.
fn mask_changes(mut changes: Vec<Change>, resolved: &Resolved) -> Vec<Change> {
    if resolved.secret_fields.is_empty() {
        return changes;
    }
    for change in &mut changes {
        if resolved.is_secret(&change.field) {
            change.current = Json::String(SECRET.to_string());
            change.desired = Json::String(SECRET.to_string());
        }
    }
    changes
}

/// Removes resolved values from a message (a command's stderr may echo one, for example).
fn scrub(message: &mut String, resolved: &Resolved) {
    for secret in &resolved.secret_texts {
        if secret.len() >= SHORTEST_SCRUBBED_SECRET && message.contains(secret.as_str()) {
            *message = message.replace(secret.as_str(), SECRET);
        }
    }
}

/// Typed access to the fields of a resource, with errors naming the field.
pub(super) trait Fields {
    /// A string field that must be present.
    fn string(&self, field: &'static str) -> Result<&str, ResourceError>;
    /// A string field that may be absent or null; an empty string counts as absent.
    fn optional_string(&self, field: &'static str) -> Result<Option<&str>, ResourceError>;
    /// A boolean field; absent or null is `default`.
    fn flag(&self, field: &'static str, default: bool) -> Result<bool, ResourceError>;
    /// An integer field that may be absent or null.
    fn optional_int(&self, field: &'static str) -> Result<Option<i64>, ResourceError>;
}

impl Fields for Map<String, Json> {
    fn string(&self, field: &'static str) -> Result<&str, ResourceError> {
        match self.get(field) {
            Some(Json::String(text)) => Ok(text),
            None => Err(ResourceError::Field { field, problem: "is missing" }),
            Some(_) => Err(ResourceError::Field { field, problem: "is not a string" }),
        }
    }

    fn optional_string(&self, field: &'static str) -> Result<Option<&str>, ResourceError> {
        match self.get(field) {
            Some(Json::String(text)) if text.is_empty() => Ok(None),
            Some(Json::String(text)) => Ok(Some(text)),
            None | Some(Json::Null) => Ok(None),
            Some(_) => Err(ResourceError::Field { field, problem: "is not a string" }),
        }
    }

    fn flag(&self, field: &'static str, default: bool) -> Result<bool, ResourceError> {
        match self.get(field) {
            Some(Json::Bool(value)) => Ok(*value),
            None | Some(Json::Null) => Ok(default),
            Some(_) => Err(ResourceError::Field { field, problem: "is not a boolean" }),
        }
    }

    fn optional_int(&self, field: &'static str) -> Result<Option<i64>, ResourceError> {
        match self.get(field) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Number(n)) => match n.as_i64() {
                Some(value) => Ok(Some(value)),
                None => Err(ResourceError::Field { field, problem: "is not an integer" }),
            },
            Some(_) => Err(ResourceError::Field { field, problem: "is not an integer" }),
        }
    }
}

/// Permissions as the model writes them: the octal digits of the mode read as a decimal
/// number (`644` for `rw-r--r--`), as the reference's `file_stat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Permissions {
    /// The mode bits (`0o644`).
    pub mode: u32,
}

impl Permissions {
    /// Reads the `permissions` field.
    pub fn from_field(fields: &Map<String, Json>) -> Result<Option<Permissions>, ResourceError> {
        let Some(digits) = fields.optional_int("permissions")? else { return Ok(None) };
        let invalid = || ResourceError::FieldValue {
            field: "permissions",
            problem: format!("{digits} is not a mode of at most four octal digits"),
        };
        if !(0..=7777).contains(&digits) {
            return Err(invalid());
        }
        let mode = u32::from_str_radix(&digits.to_string(), 8).map_err(|_| invalid())?;
        Ok(Some(Permissions { mode }))
    }

    /// The permissions of a file's `st_mode`.
    pub fn from_mode(mode: u32) -> Permissions {
        Permissions { mode: mode & 0o7777 }
    }

    /// The model's rendering: the octal digits as a decimal number.
    pub fn as_model_value(self) -> Json {
        let digits: u64 = format!("{:o}", self.mode).parse().unwrap_or_default();
        Json::from(digits)
    }
}

/// Compares a file's or directory's permissions, owner and group with the desired ones (an
/// unset desired value is not compared), and reports the differences as the reference does:
/// permissions as octal digits, the current owner by name (by number when it has no name).
pub(super) fn attribute_changes(
    desired: (Option<Permissions>, Option<&str>, Option<&str>),
    (mode, uid, gid): (u32, u32, u32),
    ctx: &Context,
    changes: &mut Vec<Change>,
) {
    let (permissions, owner, group) = desired;
    if let Some(permissions) = permissions {
        let current = Permissions::from_mode(mode);
        if current != permissions {
            changes.push(Change::new("permissions", current.as_model_value(), permissions.as_model_value()));
        }
    }
    let accounts = ctx.accounts();
    if let Some(owner) = owner
        && !accounts.user_matches(owner, uid)
    {
        changes.push(Change::new("owner", accounts.user_name(uid), owner));
    }
    if let Some(group) = group
        && !accounts.group_matches(group, gid)
    {
        changes.push(Change::new("group", accounts.group_name(gid), group));
    }
}

/// The numeric ids for a chown to the desired owner and group (`None` leaves one as it is).
pub(super) fn ownership_ids(
    owner: Option<&str>,
    group: Option<&str>,
    ctx: &Context,
) -> Result<(Option<u32>, Option<u32>), ResourceError> {
    let accounts = ctx.accounts();
    let uid =
        owner.map(|name| accounts.uid(name).ok_or_else(|| ResourceError::UnknownUser(name.to_string()))).transpose()?;
    let gid = group
        .map(|name| accounts.gid(name).ok_or_else(|| ResourceError::UnknownGroup(name.to_string())))
        .transpose()?;
    Ok((uid, gid))
}

/// Changes the owner and group of `path` in place (following symlinks, as `shutil.chown`).
pub(super) fn chown_path(
    path: &Path,
    owner: Option<&str>,
    group: Option<&str>,
    ctx: &Context,
) -> Result<(), ResourceError> {
    let (uid, gid) = ownership_ids(owner, group, ctx)?;
    if uid.is_none() && gid.is_none() {
        return Ok(());
    }
    std::os::unix::fs::chown(path, uid, gid).map_err(|e| ResourceError::io("chown", path, e))
}

/// Sets the mode of `path` in place.
/// The user this process acts as.
pub(super) fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

pub(super) fn chmod_path(path: &Path, permissions: Permissions) -> Result<(), ResourceError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(permissions.mode))
        .map_err(|e| ResourceError::io("chmod", path, e))
}

/// The `purged` change of a resource that should exist and does not (`create`), or the reverse.
pub(super) fn existence_change(should_exist: bool) -> Change {
    Change::new("purged", should_exist, !should_exist)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn permissions_read_octal_digits_as_decimal() {
        let read = |value: Json| {
            let Json::Object(map) = json!({ "permissions": value }) else { unreachable!() };
            Permissions::from_field(&map).map_err(|e| e.to_string())
        };
        assert_eq!(read(json!(644)), Ok(Some(Permissions { mode: 0o644 })));
        assert_eq!(read(json!(4755)), Ok(Some(Permissions { mode: 0o4755 })));
        assert_eq!(read(json!(null)), Ok(None));
        assert_eq!(read(json!(689)), Err("field `permissions`: 689 is not a mode of at most four octal digits".into()));
        assert_eq!(read(json!("644")), Err("field `permissions` is not an integer".into()));
        assert_eq!(Permissions::from_mode(0o100640).as_model_value(), json!(640));
    }
}
