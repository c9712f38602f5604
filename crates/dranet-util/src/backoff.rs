//! Retry timing shared by the crates that retry: doubling from an initial delay up to a cap.

use std::time::Duration;

/// Exponential backoff: `initial`, doubled after each failure, never above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First delay after a failure.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Backoff {
    /// A backoff from `initial` up to `max` (`max` is raised to `initial` if smaller).
    pub const fn new(initial: Duration, max: Duration) -> Self {
        let max = if max.as_nanos() < initial.as_nanos() {
            initial
        } else {
            max
        };
        Self { initial, max }
    }

    /// The delay before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        self.initial
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_max() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(2), Duration::from_millis(400));
        assert_eq!(b.delay(10), Duration::from_secs(1));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
        assert_eq!(
            Backoff::new(Duration::from_secs(2), Duration::from_secs(1)).max,
            Duration::from_secs(2)
        );
    }
}
