//! Publishing the driver's devices as ResourceSlices.
//!
//! The pool is named after the node; its slices are named `<node>-<driver>-<index>` and hold at most
//! [`MAX_DEVICES_PER_SLICE`] devices each, as `dranet_core::slice::NodePool` builds them. [`plan()`]
//! compares the desired slices with what the API server has and returns the fewest writes that get
//! there; the plugin keeps doing that, triggered by device changes, watch events on our slices and
//! a periodic resync, retrying with backoff.
//!
//! Pool generation: consumers only trust the slices of a pool's highest generation and need all
//! `resourceSliceCount` of them. A single in-place update cannot leave a mix of old and new
//! slices, so it keeps the generation; anything more (new slices, several changed slices) bumps the
//! generation and rewrites every slice, so that a reader never combines old and new contents.
//!
//! - `plan`: the writes from the current slices to the desired ones.
//! - `compare`: whether a stored slice already is what we would write, as the server stores it.
//! - `memory`: what this publisher wrote, and what the server dropped of it.
//! - `reconcile`: the loop that lists, watches, plans and writes until shutdown.

mod compare;
mod memory;
mod plan;
mod reconcile;
#[cfg(test)]
mod tests;

pub use dranet_core::slice::MAX_DEVICES_PER_SLICE;
pub use plan::{PoolParams, SliceDelete, SlicePlan, plan};
pub use reconcile::PublishState;
pub(crate) use reconcile::{DEFAULT_BACKOFF, PublisherConfig, run};
