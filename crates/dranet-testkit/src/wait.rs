//! Polling until a condition holds.

use std::time::{Duration, Instant};

/// Polls `f` every 100 ms until it returns `Some`, for at most `limit`; panics naming `what`
/// (and `context()` for the diagnosis) when it never does.
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    f: impl FnMut() -> Option<T>,
    context: impl FnOnce() -> String,
) -> T {
    poll(what, limit, Duration::from_millis(100), f, context)
}

/// [`wait_for`] polling every `every`.
pub fn poll<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
    context: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {limit:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(every);
    }
}

/// The last `n` lines of `s`, for failure messages.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
