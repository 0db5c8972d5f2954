//! `std::testing::NullResource`: deploys nothing, or fails on request. It is what large test
//! models and the scheduler benchmark are made of, so it reads one field and allocates nothing.

use serde_json::{Map, Value as Json};

use super::handler::{Context, Fields, Handler, ResourceError};
use super::report::Change;

pub(super) struct NullHandler;

impl Handler for NullHandler {
    /// Whether the resource is set to fail.
    type Desired = bool;
    type Current = ();

    fn desired(&self, fields: &Map<String, Json>, _ctx: &Context) -> Result<bool, ResourceError> {
        fields.flag("fail", false)
    }

    fn read_current(&self, fail: &bool, _ctx: &mut Context) -> Result<(), ResourceError> {
        if *fail { Err(ResourceError::SetToFail) } else { Ok(()) }
    }

    /// Nothing exists on the host, so nothing differs; a purged NullResource has nothing to
    /// delete either.
    fn diff(&self, _fail: &bool, _current: &(), _ctx: &Context) -> Vec<Change> {
        Vec::new()
    }

    fn apply_changes(
        &self,
        _fail: &bool,
        _current: &(),
        _changes: &[Change],
        _ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        Ok(())
    }
}
