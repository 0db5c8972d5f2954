//! `fs::Symlink` (a symbolic link `dst` pointing to `src`) and `files::Symlink` (a link `path`
//! pointing to `target`, with an optional owner and group).
//!
//! As the reference's `SymlinkProvider` and the files module's `SymlinkHandler`: something other
//! than a symlink at the link's path is an error, a link pointing elsewhere is replaced, and
//! `purged` removes the link; the owner and group, when the model sets them, are the link's own
//! (`chown --no-dereference`). The replacement is atomic (a new link under a temporary name
//! renamed over the old one), where the reference removes and recreates it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use super::atomic;
use super::handler::{Context, Fields, Handler, ResourceError, attribute_changes, existence_change, ownership_ids};
use super::report::Change;

/// The handler of a symlink type, by the names its fields have.
pub(super) struct SymlinkHandler {
    /// The field with where the link points (`src`, `target`).
    pub target: &'static str,
    /// The field with the link's own path (`dst`, `path`).
    pub link: &'static str,
}

impl SymlinkHandler {
    pub(super) const FS: SymlinkHandler = SymlinkHandler { target: "src", link: "dst" };
    pub(super) const FILES: SymlinkHandler = SymlinkHandler { target: "target", link: "path" };
}

#[derive(Debug)]
pub(super) struct DesiredSymlink {
    /// The link's target as the model writes it, for the report.
    source_in_model: String,
    /// The link's target on the host (under the apply root).
    source: PathBuf,
    link: PathBuf,
    owner: Option<String>,
    group: Option<String>,
    purged: bool,
}

#[derive(Debug)]
pub(super) enum CurrentSymlink {
    Absent,
    PointsTo { target: PathBuf, uid: u32, gid: u32 },
}

impl Handler for SymlinkHandler {
    type Desired = DesiredSymlink;
    type Current = CurrentSymlink;

    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<DesiredSymlink, ResourceError> {
        let source_in_model = fields.string(self.target)?.to_string();
        // Only absolute targets move under the root: a relative target is relative to the
        // link's directory, which is already under it.
        let source = if source_in_model.starts_with('/') {
            ctx.host_path(&source_in_model)
        } else {
            PathBuf::from(&source_in_model)
        };
        Ok(DesiredSymlink {
            source,
            source_in_model,
            link: ctx.host_path(fields.string(self.link)?),
            owner: fields.optional_string("owner")?.map(str::to_string),
            group: fields.optional_string("group")?.map(str::to_string),
            purged: fields.flag("purged", false)?,
        })
    }

    fn read_current(&self, desired: &DesiredSymlink, _ctx: &mut Context) -> Result<CurrentSymlink, ResourceError> {
        let link = &desired.link;
        let metadata = match std::fs::symlink_metadata(link) {
            Ok(metadata) if metadata.file_type().is_symlink() => metadata,
            Ok(_) => return Err(ResourceError::NotASymlink(link.clone())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(CurrentSymlink::Absent),
            Err(error) => return Err(ResourceError::io("inspect", link, error)),
        };
        let target = std::fs::read_link(link).map_err(|e| ResourceError::io("read the link", link, e))?;
        Ok(CurrentSymlink::PointsTo { target, uid: metadata.uid(), gid: metadata.gid() })
    }

    fn diff(&self, desired: &DesiredSymlink, current: &CurrentSymlink, ctx: &Context) -> Vec<Change> {
        let (target, uid, gid) = match (current, desired.purged) {
            (CurrentSymlink::Absent, false) => return vec![existence_change(true)],
            (CurrentSymlink::Absent, true) => return Vec::new(),
            (CurrentSymlink::PointsTo { .. }, true) => return vec![existence_change(false)],
            (CurrentSymlink::PointsTo { target, uid, gid }, false) => (target, *uid, *gid),
        };
        let mut changes = Vec::new();
        if *target != desired.source {
            let shown = if target.is_absolute() { ctx.model_path(target) } else { target.display().to_string() };
            changes.push(Change::new(self.target, shown, desired.source_in_model.as_str()));
        }
        // A link has no mode of its own to compare.
        attribute_changes((None, desired.owner.as_deref(), desired.group.as_deref()), (0, uid, gid), ctx, &mut changes);
        changes
    }

    fn apply_changes(
        &self,
        desired: &DesiredSymlink,
        current: &CurrentSymlink,
        changes: &[Change],
        ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        let link = &desired.link;
        if desired.purged {
            return std::fs::remove_file(link).map_err(|e| ResourceError::io("delete", link, e));
        }
        let changed = |field: &str| changes.iter().any(|c| c.field == field);
        let result = match current {
            CurrentSymlink::Absent => std::os::unix::fs::symlink(&desired.source, link),
            CurrentSymlink::PointsTo { .. } if changed(self.target) => atomic::replace_symlink(&desired.source, link),
            CurrentSymlink::PointsTo { .. } => Ok(()),
        };
        result.map_err(|e| ResourceError::io("create the symlink", link, e))?;
        let (owner, group) = (desired.owner.as_deref(), desired.group.as_deref());
        let created = matches!(current, CurrentSymlink::Absent) || changed(self.target);
        if (created && (owner.is_some() || group.is_some())) || changed("owner") || changed("group") {
            let (uid, gid) = ownership_ids(owner, group, ctx)?;
            std::os::unix::fs::lchown(link, uid, gid).map_err(|e| ResourceError::io("chown", link, e))?;
        }
        Ok(())
    }
}
