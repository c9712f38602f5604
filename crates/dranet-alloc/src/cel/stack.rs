//! Deep selectors continue on a fresh stack segment instead of overflowing the thread's stack.

/// Stack kept free before the parser, checker or evaluator descends another level. The nesting a
/// selector may have is bounded (cel-go's 250 levels), but a level can take tens of KiB of stack in
/// an unoptimised build, more than a 2 MiB thread has; past this mark the work continues on a
/// fresh heap-allocated stack segment instead of overflowing.
const STACK_RED_ZONE: usize = 256 * 1024;
/// The size of each extra stack segment.
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// Runs `f`, on a new stack segment when less than [`STACK_RED_ZONE`] is left.
pub(crate) fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, f)
}
