//! `fs::Symlink`: a symbolic link `dst` pointing to `src`.
//!
//! As the reference's `SymlinkProvider`: something other than a symlink at `dst` is an error,
//! a link pointing elsewhere is replaced, and `purged` removes the link. The replacement is
//! atomic (a new link under a temporary name renamed over the old one), where the reference
//! removes and recreates it.

use std::io;
use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use super::atomic;
use super::handler::{Context, Fields, Handler, ResourceError, existence_change};
use super::report::Change;

pub(super) struct SymlinkHandler;

#[derive(Debug)]
pub(super) struct DesiredSymlink {
    /// The link's target as the model writes it, for the report.
    source_in_model: String,
    /// The link's target on the host (under the apply root).
    source: PathBuf,
    link: PathBuf,
    purged: bool,
}

#[derive(Debug)]
pub(super) enum CurrentSymlink {
    Absent,
    PointsTo(PathBuf),
}

impl Handler for SymlinkHandler {
    type Desired = DesiredSymlink;
    type Current = CurrentSymlink;

    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<DesiredSymlink, ResourceError> {
        let source_in_model = fields.string("src")?.to_string();
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
            link: ctx.host_path(fields.string("dst")?),
            purged: fields.flag("purged", false)?,
        })
    }

    fn read_current(&self, desired: &DesiredSymlink, _ctx: &mut Context) -> Result<CurrentSymlink, ResourceError> {
        let link = &desired.link;
        match std::fs::symlink_metadata(link) {
            Ok(metadata) if metadata.file_type().is_symlink() => {}
            Ok(_) => return Err(ResourceError::NotASymlink(link.clone())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(CurrentSymlink::Absent),
            Err(error) => return Err(ResourceError::io("inspect", link, error)),
        }
        let target = std::fs::read_link(link).map_err(|e| ResourceError::io("read the link", link, e))?;
        Ok(CurrentSymlink::PointsTo(target))
    }

    fn diff(&self, desired: &DesiredSymlink, current: &CurrentSymlink, ctx: &Context) -> Vec<Change> {
        match (current, desired.purged) {
            (CurrentSymlink::Absent, false) => vec![existence_change(true)],
            (CurrentSymlink::Absent, true) => Vec::new(),
            (CurrentSymlink::PointsTo(_), true) => vec![existence_change(false)],
            (CurrentSymlink::PointsTo(target), false) if *target != desired.source => {
                let shown = if target.is_absolute() { ctx.model_path(target) } else { target.display().to_string() };
                vec![Change::new("src", shown, desired.source_in_model.as_str())]
            }
            (CurrentSymlink::PointsTo(_), false) => Vec::new(),
        }
    }

    fn apply_changes(
        &self,
        desired: &DesiredSymlink,
        current: &CurrentSymlink,
        _changes: &[Change],
        _ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        let link = &desired.link;
        if desired.purged {
            return std::fs::remove_file(link).map_err(|e| ResourceError::io("delete", link, e));
        }
        let result = match current {
            CurrentSymlink::Absent => std::os::unix::fs::symlink(&desired.source, link),
            CurrentSymlink::PointsTo(_) => atomic::replace_symlink(&desired.source, link),
        };
        result.map_err(|e| ResourceError::io("create the symlink", link, e))
    }
}
