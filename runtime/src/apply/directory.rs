//! `fs::Directory`: a directory with mode, owner and group.
//!
//! As the reference's `DirectoryHandler`: the directory is created without its parents (they
//! are resources of their own), only the attributes the model sets are compared, and `purged`
//! removes the directory with everything in it (the reference's `rmdir` proxy call is
//! `shutil.rmtree`).

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use super::handler::{
    Context, Fields, Handler, Permissions, ResourceError, attribute_changes, chmod_path, chown_path, existence_change,
};
use super::report::Change;

pub(super) struct DirectoryHandler;

#[derive(Debug)]
pub(super) struct DesiredDirectory {
    path: PathBuf,
    permissions: Option<Permissions>,
    owner: Option<String>,
    group: Option<String>,
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
