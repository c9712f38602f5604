//! The API's limits on a claim, and the search's own.

/// Most devices one claim can be allocated (the API's limit on allocation results).
pub const MAX_ALLOCATED_DEVICES: usize = 32;
/// Most requests in a claim.
pub const MAX_REQUESTS: usize = 32;
/// Search steps before giving up on a pathological claim (the scheduler has no such limit and
/// may search for minutes).
pub const MAX_SEARCH_STEPS: u64 = 20_000_000;
