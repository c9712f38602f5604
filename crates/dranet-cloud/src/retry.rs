//! How long to keep asking a service known to be there: transient errors are retried with
//! backoff within a time budget.

use std::future::Future;
use std::time::{Duration, Instant};

use dranet_util::Backoff;

use crate::http::{Error, Result};

/// How long to keep trying.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// First backoff; doubled after each failure.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
    /// Total time allowed, requests included.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            budget: Duration::from_secs(15),
        }
    }
}

impl RetryPolicy {
    /// The wait between attempts: `initial_backoff`, doubled after each failure up to
    /// `max_backoff`.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }

    /// One attempt, no retry.
    pub fn once() -> Self {
        Self {
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            budget: Duration::ZERO,
        }
    }

    /// Runs `attempt(timeout)` until it succeeds, fails for good, or the budget (counted from
    /// now) is spent; each attempt gets `request_timeout`, or what is left of the budget.
    pub async fn run<T, F, Fut>(
        &self,
        request_timeout: Duration,
        what: &str,
        attempt: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.run_from(Instant::now(), request_timeout, what, attempt)
            .await
    }

    /// [`RetryPolicy::run`] with the budget counted from `start`: the requests of one read share
    /// one budget, so a service that stops answering halfway costs the budget once, not once per
    /// request.
    pub async fn run_from<T, F, Fut>(
        &self,
        start: Instant,
        request_timeout: Duration,
        what: &str,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let backoff = self.backoff();
        let mut n = 0u32;
        // The last error the service itself gave: an attempt cut short by the budget's end
        // says nothing new about the service and must not hide it (a 503 stays the reason).
        let mut answered: Option<Error> = None;
        loop {
            let wait = backoff.delay(n);
            let left = self.budget.saturating_sub(start.elapsed());
            let timeout = if self.budget.is_zero() {
                request_timeout
            } else {
                request_timeout.min(left.max(Duration::from_millis(1)))
            };
            match attempt(timeout).await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && start.elapsed() + wait < self.budget => {
                    tracing::debug!("{what}: {e}; retrying in {wait:?}");
                    if !matches!(e, Error::Timeout { .. }) {
                        answered = Some(e);
                    }
                    tokio::time::sleep(wait).await;
                    n = n.saturating_add(1);
                }
                Err(e) if e.is_transient() && !self.budget.is_zero() => {
                    let cut = timeout < request_timeout && matches!(e, Error::Timeout { .. });
                    let last = match answered {
                        Some(earlier) if cut => earlier,
                        _ => e,
                    };
                    return Err(Error::GaveUp {
                        after: start.elapsed(),
                        last: Box::new(last),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service that answers 503 while it has the whole request timeout, and "times out"
    /// whenever the budget's end cut the timeout short: the service's 503 is the reason given,
    /// not the cut.
    #[tokio::test]
    async fn a_timeout_cut_by_the_budget_does_not_hide_the_service_answer() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(30),
            max_backoff: Duration::from_millis(30),
            budget: Duration::from_millis(100),
        };
        let full = Duration::from_millis(50);
        let url = "http://169.254.169.254/x".to_string();
        let mut cut = 0;
        let err = policy
            .run(full, "test", |timeout| {
                let url = url.clone();
                if timeout < full {
                    cut += 1;
                }
                async move {
                    if timeout < full {
                        Err::<(), _>(Error::Timeout {
                            url,
                            after: timeout,
                        })
                    } else {
                        Err(Error::Status {
                            url,
                            status: 503,
                            body: String::new(),
                        })
                    }
                }
            })
            .await
            .unwrap_err();
        assert!(cut > 0, "the budget cut no attempt short: {err}");
        assert_eq!(err.status(), Some(503), "{err}");
    }
}
