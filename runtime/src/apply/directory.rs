//! `fs::Directory` and `files::Directory`: a directory with mode, owner and group.
//!
//! As the reference's `DirectoryHandler`: the directory is created without its parents (they
//! are resources of their own), only the attributes the model sets are compared, and `purged`
//! removes the directory with everything in it (the reference's `rmdir` proxy call is
//! `shutil.rmtree`). A `files::Directory` with `create_parents` makes its missing parents
//! first, as the files module's handler does: each with the mode, owner and group of the
//! nearest parent that exists (the owner and group only when the apply runs as root).

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use super::handler::{
    Context, Fields, Handler, Permissions, ResourceError, attribute_changes, chmod_path, chown_path, effective_uid,
    existence_change,
};
use super::report::Change;

pub(super) struct DirectoryHandler;

#[derive(Debug)]
pub(super) struct DesiredDirectory {
    path: PathBuf,
    permissions: Option<Permissions>,
    owner: Option<String>,
    group: Option<String>,
    /// Make the missing parents too (`files::Directory`; fs's has no such field).
    create_parents: bool,
    purged: bool,
}

#[derive(Debug)]
pub(super) enum CurrentDirectory {
    Absent,
    Present { mode: u32, uid: u32, gid: u32 },
}

impl Handler for DirectoryHandler {
    type Desired = DesiredDirectory;
    type Current = CurrentDirectory;

    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<DesiredDirectory, ResourceError> {
        Ok(DesiredDirectory {
            path: ctx.host_path(fields.string("path")?),
            permissions: Permissions::from_field(fields)?,
            owner: fields.optional_string("owner")?.map(str::to_string),
            group: fields.optional_string("group")?.map(str::to_string),
            create_parents: fields.flag("create_parents", false)?,
            purged: fields.flag("purged", false)?,
        })
    }

    fn read_current(&self, desired: &DesiredDirectory, _ctx: &mut Context) -> Result<CurrentDirectory, ResourceError> {
        let path = &desired.path;
        match std::fs::symlink_metadata(path) {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(CurrentDirectory::Absent),
            Err(error) => return Err(ResourceError::io("inspect", path, error)),
        }
        let metadata = std::fs::metadata(path).map_err(|e| ResourceError::io("inspect", path, e))?;
        if !metadata.is_dir() {
            return Err(ResourceError::NotADirectory(path.clone()));
        }
        Ok(CurrentDirectory::Present { mode: metadata.mode(), uid: metadata.uid(), gid: metadata.gid() })
    }

    fn diff(&self, desired: &DesiredDirectory, current: &CurrentDirectory, ctx: &Context) -> Vec<Change> {
        let (mode, uid, gid) = match (current, desired.purged) {
            (CurrentDirectory::Absent, false) => return vec![existence_change(true)],
            (CurrentDirectory::Absent, true) => return Vec::new(),
            (CurrentDirectory::Present { .. }, true) => return vec![existence_change(false)],
            (CurrentDirectory::Present { mode, uid, gid }, false) => (*mode, *uid, *gid),
        };
        let mut changes = Vec::new();
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
        desired: &DesiredDirectory,
        current: &CurrentDirectory,
        changes: &[Change],
        ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        let path = &desired.path;
        if desired.purged {
            return std::fs::remove_dir_all(path).map_err(|e| ResourceError::io("delete", path, e));
        }
        let (owner, group) = (desired.owner.as_deref(), desired.group.as_deref());
        let changed = |field: &str| changes.iter().any(|c| c.field == field);
        let created = matches!(current, CurrentDirectory::Absent);
        if created && desired.create_parents {
            create_parents(path)?;
        }
        if created {
            // The mode given to mkdir is reduced by the umask; an explicit chmod below makes
            // the desired mode exact.
            std::fs::DirBuilder::new()
                .mode(desired.permissions.map_or(0o777, |p| p.mode))
                .create(path)
                .map_err(|e| ResourceError::io("create directory", path, e))?;
        }
        // Ownership before mode: chown clears set-id bits the mode may set.
        if (created && (owner.is_some() || group.is_some())) || changed("owner") || changed("group") {
            chown_path(path, owner, group, ctx)?;
        }
        if let Some(permissions) = desired.permissions {
            chmod_path(path, permissions)?;
        }
        Ok(())
    }
}

/// Makes the missing parents of `path`, from the top: each gets the mode, and when this process
/// runs as root the owner and group, of the parent above it.
fn create_parents(path: &std::path::Path) -> Result<(), ResourceError> {
    let mut ancestors: Vec<&std::path::Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    // The files module's defaults, for a parent above which nothing exists (never the case
    // for an absolute path: `/` exists).
    let (mut mode, mut uid, mut gid) = (0o555, 0, 0);
    let is_root = effective_uid() == 0;
    for parent in ancestors {
        if parent.as_os_str().is_empty() {
            continue;
        }
        match std::fs::metadata(parent) {
            Ok(metadata) => {
                (mode, uid, gid) = (metadata.mode() & 0o7777, metadata.uid(), metadata.gid());
                continue;
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(ResourceError::io("inspect", parent, error)),
        }
        std::fs::create_dir(parent).map_err(|e| ResourceError::io("create directory", parent, e))?;
        if is_root {
            std::os::unix::fs::chown(parent, Some(uid), Some(gid))
                .map_err(|e| ResourceError::io("chown", parent, e))?;
        }
        chmod_path(parent, Permissions::from_mode(mode))?;
    }
    Ok(())
}
