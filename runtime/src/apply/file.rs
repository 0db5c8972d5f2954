//! `fs::File`: a regular file with content, mode, owner and group.
//!
//! As the reference's `PosixFileProvider`: the content comes from the file store by `hash`
//! (or from `content` when the hash is null, which is how a reference-filled content arrives),
//! only the attributes the model sets are compared, the parent directory must exist, and
//! `purged` deletes the file. Unlike the reference, content is written atomically (see
//! `atomic`), and when only the mode or owner differ the file is fixed in place.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};
use sha1::{Digest, Sha1};

use super::atomic::{self, FileAttributes};
use super::handler::{
    Context, Fields, Handler, Permissions, ResourceError, attribute_changes, chmod_path, chown_path, effective_uid,
    existence_change, ownership_ids,
};
use super::report::Change;

pub(super) struct FileHandler;

/// Where the desired content comes from.
#[derive(Debug)]
pub(super) enum DesiredContent {
    /// The file store's content for this sha1 hash.
    Stored(String),
    /// The `content` field itself.
    Inline(String),
    /// Neither is set: the content is not managed (and a new file cannot be created).
    Unspecified,
}

#[derive(Debug)]
pub(super) struct DesiredFile {
    path: PathBuf,
    content: DesiredContent,
    permissions: Option<Permissions>,
    owner: Option<String>,
    group: Option<String>,
    purged: bool,
}

/// How the file's content compares with the desired one.
#[derive(Debug)]
pub(super) enum ContentState {
    Same,
    /// Different; `current` is what the report shows (the current sha1, or the current text).
    Differs {
        current: Json,
    },
    /// Not compared: the content is not managed, or the file is to be deleted.
    NotCompared,
}

#[derive(Debug)]
pub(super) enum CurrentFile {
    Absent,
    Present { mode: u32, uid: u32, gid: u32, content: ContentState },
}

impl Handler for FileHandler {
    type Desired = DesiredFile;
    type Current = CurrentFile;

    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<DesiredFile, ResourceError> {
        let content = match (fields.optional_string("hash")?, fields.get("content")) {
            (Some(hash), _) => DesiredContent::Stored(hash.to_string()),
            (None, Some(Json::String(text))) => DesiredContent::Inline(text.clone()),
            (None, None | Some(Json::Null)) => DesiredContent::Unspecified,
            (None, Some(_)) => return Err(ResourceError::Field { field: "content", problem: "is not a string" }),
        };
        Ok(DesiredFile {
            path: ctx.host_path(fields.string("path")?),
            content,
            permissions: Permissions::from_field(fields)?,
            owner: fields.optional_string("owner")?.map(str::to_string),
            group: fields.optional_string("group")?.map(str::to_string),
            purged: fields.flag("purged", false)?,
        })
    }

    fn read_current(&self, desired: &DesiredFile, ctx: &mut Context) -> Result<CurrentFile, ResourceError> {
        let path = &desired.path;
        match std::fs::symlink_metadata(path) {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(CurrentFile::Absent),
            Err(error) => return Err(ResourceError::io("inspect", path, error)),
        }
        // Like the reference, the attributes are those of what a symlink points to.
        let metadata = std::fs::metadata(path).map_err(|e| ResourceError::io("inspect", path, e))?;
        // Reading a named pipe or a device to compare its content could block or never end,
        // and replacing one is not what a file resource means.
        if !metadata.is_file() {
            return Err(ResourceError::NotAFile { path: path.clone(), what: weft_ir::fs::describe(&metadata) });
        }
        let content =
            if desired.purged { ContentState::NotCompared } else { compare_content(desired, &metadata, ctx)? };
        Ok(CurrentFile::Present { mode: metadata.mode(), uid: metadata.uid(), gid: metadata.gid(), content })
    }

    fn diff(&self, desired: &DesiredFile, current: &CurrentFile, ctx: &Context) -> Vec<Change> {
        let (mode, uid, gid, content) = match (current, desired.purged) {
            (CurrentFile::Absent, false) => return vec![existence_change(true)],
            (CurrentFile::Absent, true) => return Vec::new(),
            (CurrentFile::Present { .. }, true) => return vec![existence_change(false)],
            (CurrentFile::Present { mode, uid, gid, content }, false) => (*mode, *uid, *gid, content),
        };
        let mut changes = Vec::new();
        if let ContentState::Differs { current } = content {
            match &desired.content {
                DesiredContent::Stored(hash) => changes.push(Change::new("hash", current.clone(), hash.as_str())),
                DesiredContent::Inline(text) => changes.push(Change::new("content", current.clone(), text.as_str())),
                DesiredContent::Unspecified => {}
            }
        }
        attribute_changes(
            (desired.permissions, desired.owner.as_deref(), desired.group.as_deref()),
            (mode, uid, gid),
            ctx,
            &mut changes,
        );
        changes
    }

    fn apply_changes(
        &self,
        desired: &DesiredFile,
        current: &CurrentFile,
        changes: &[Change],
        ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        let path = &desired.path;
        if desired.purged {
            return std::fs::remove_file(path).map_err(|e| ResourceError::io("delete", path, e));
        }
        let (owner, group) = (desired.owner.as_deref(), desired.group.as_deref());
        let CurrentFile::Present { mode, uid, gid, .. } = *current else {
            let data = desired_bytes(desired, ctx)?;
            let (uid, gid) = ownership_ids(owner, group, ctx)?;
            let attributes = FileAttributes { mode: desired.permissions.map(|p| p.mode), uid, gid };
            return write(path, &data, attributes);
        };
        let changed = |field: &str| changes.iter().any(|c| c.field == field);
        if changed("hash") || changed("content") {
            // The new file replaces the old one, so it takes over whatever the model does not
            // set: the old mode, owner and group.
            let data = desired_bytes(desired, ctx)?;
            let (desired_uid, desired_gid) = ownership_ids(owner, group, ctx)?;
            let attributes = FileAttributes {
                mode: Some(desired.permissions.map_or(mode & 0o7777, |p| p.mode)),
                uid: unless_own(desired_uid.unwrap_or(uid), effective_uid()),
                gid: unless_own(desired_gid.unwrap_or(gid), effective_gid()),
            };
            return write(path, &data, attributes);
        }
        // Only attributes differ: fix them in place. Ownership first, because chown clears
        // the set-id bits that the mode may set.
        if changed("owner") || changed("group") {
            chown_path(path, owner, group, ctx)?;
        }
        if let Some(permissions) = desired.permissions
            && (changed("permissions") || changed("owner") || changed("group"))
        {
            chmod_path(path, permissions)?;
        }
        Ok(())
    }
}

/// Compares the file's content with the desired content: by length first, then byte by byte.
/// When the store lacks the desired content (a graph read back from an export file), the
/// current file's sha1 is compared with the desired hash instead, as the reference does.
fn compare_content(desired: &DesiredFile, metadata: &Metadata, ctx: &Context) -> Result<ContentState, ResourceError> {
    let path = &desired.path;
    let read_error = |e| ResourceError::io("read", path, e);
    match &desired.content {
        DesiredContent::Unspecified => Ok(ContentState::NotCompared),
        DesiredContent::Stored(hash) => {
            let same = match ctx.stored_file(hash) {
                Some(data) => same_content(path, metadata.len(), data).map_err(read_error)?,
                None => sha1_of_file(path).map_err(read_error)? == *hash,
            };
            if same {
                return Ok(ContentState::Same);
            }
            Ok(ContentState::Differs { current: Json::String(sha1_of_file(path).map_err(read_error)?) })
        }
        DesiredContent::Inline(text) => {
            if same_content(path, metadata.len(), text.as_bytes()).map_err(read_error)? {
                return Ok(ContentState::Same);
            }
            let bytes = std::fs::read(path).map_err(read_error)?;
            Ok(ContentState::Differs { current: Json::String(String::from_utf8_lossy(&bytes).into_owned()) })
        }
    }
}

/// Whether the file at `path` (of `length` bytes) holds exactly `expected`, reading it in
/// blocks so a large file is never held in memory twice.
fn same_content(path: &Path, length: u64, expected: &[u8]) -> io::Result<bool> {
    if length != expected.len() as u64 {
        return Ok(false);
    }
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut remaining = expected;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok(remaining.is_empty());
        }
        if read > remaining.len() || buffer[..read] != remaining[..read] {
            return Ok(false);
        }
        remaining = &remaining[read..];
    }
}

/// The sha1 of some bytes, in lower-case hex (the reference's file store key).
pub(super) fn sha1_hex(data: &[u8]) -> String {
    hex(&Sha1::digest(data))
}

fn sha1_of_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha1::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buffer[..read]);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes to write, checked against their hash when they come from the store.
fn desired_bytes(desired: &DesiredFile, ctx: &Context) -> Result<Vec<u8>, ResourceError> {
    match &desired.content {
        DesiredContent::Stored(hash) => {
            let data = ctx.stored_file(hash).ok_or_else(|| ResourceError::FileNotAvailable(hash.clone()))?;
            let actual = sha1_hex(data);
            if actual != *hash {
                return Err(ResourceError::HashMismatch { expected: hash.clone(), actual });
            }
            Ok(data.to_vec())
        }
        DesiredContent::Inline(text) => Ok(text.as_bytes().to_vec()),
        DesiredContent::Unspecified => Err(ResourceError::NoContent),
    }
}

/// Writes the file atomically; a missing parent directory gets its own message, since the
/// directory should be a resource of its own.
fn write(path: &Path, data: &[u8], attributes: FileAttributes) -> Result<(), ResourceError> {
    atomic::write_file(path, data, attributes).map_err(|error| {
        let directory = path.parent().unwrap_or(Path::new("/"));
        if error.kind() == io::ErrorKind::NotFound && !directory.exists() {
            ResourceError::MissingDirectory { path: path.to_path_buf(), directory: directory.to_path_buf() }
        } else {
            ResourceError::io("write", path, error)
        }
    })
}

/// `None` when `id` is what a file the process creates gets anyway, so no chown is attempted
/// (an unprivileged process can then still rewrite its own files).
fn unless_own(id: u32, own: u32) -> Option<u32> {
    (id != own).then_some(id)
}

fn effective_gid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory of ours.
    unsafe { libc::getegid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_comparison_checks_length_then_bytes() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("f");
        let big: Vec<u8> = (0..200_000u32).map(|n| (n % 251) as u8).collect();
        std::fs::write(&path, &big).unwrap();
        assert!(same_content(&path, big.len() as u64, &big).unwrap());
        let mut other = big.clone();
        *other.last_mut().unwrap() ^= 1;
        assert!(!same_content(&path, big.len() as u64, &other).unwrap());
        assert!(!same_content(&path, big.len() as u64, &big[1..]).unwrap());
        assert_eq!(sha1_of_file(&path).unwrap(), sha1_hex(&big));
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
