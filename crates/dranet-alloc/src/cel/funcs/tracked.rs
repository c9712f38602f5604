//! The runtime cost cel-go's trackers add for the lists and sets extensions' functions, over
//! the one unit of the call our evaluator already counts: a sort or `distinct` is charged as
//! n² comparisons, `sets.*` as the product of the sizes, so the scheduler's cost limit cancels
//! the same selectors. Charged before the work, so an over-budget call costs no time.

use crate::cel::activation::Activation;
use crate::cel::value::{R, Value};

/// cel-go's base cost of creating a list.
const LIST_CREATE: u64 = 10;
/// cel-go's cost factor of traversing a string, per byte.
const STRING_TRAVERSAL: f64 = 0.1;

/// A call that allocates a list: `factor` per unit of `size`, and the list's creation.
fn allocating(env: &Activation<'_>, factor: f64, size: u64) -> R<()> {
    env.charge(((size as f64) * factor) as u64 + LIST_CREATE)
}

/// `slice`, `reverse`: the size of the list made.
pub(super) fn output(env: &Activation<'_>, size: usize) -> R<()> {
    allocating(env, 1.0, size as u64)
}

/// `flatten(depth)`: the input's size for each level.
pub(super) fn flatten(env: &Activation<'_>, depth: i64, input: usize) -> R<()> {
    allocating(env, depth as f64, input as u64)
}

/// `sort`, `distinct`, `sortBy`: every element compared with every other (a little more for
/// strings and bytes, by the first element's type).
pub(super) fn self_compare(env: &Activation<'_>, l: &[Value<'_>]) -> R<()> {
    let n = l.len() as u64;
    let factor = match l.first() {
        Some(Value::Str(_) | Value::Bytes(_)) => 2.0 + STRING_TRAVERSAL,
        _ => 2.0,
    };
    allocating(env, factor, n.saturating_mul(n))
}

/// `sets.contains`, `sets.intersects` (`factor` 1) and `sets.equivalent` (2).
pub(super) fn sets(env: &Activation<'_>, a: usize, b: usize, factor: f64) -> R<()> {
    env.charge(((a as u64).saturating_mul(b as u64) as f64 * factor) as u64)
}
