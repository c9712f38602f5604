//! One lock per claim, for the work that must not interleave within a claim (asking a profile
//! provider and releasing what it gave) but may run beside other claims': a provider that takes
//! its time with one claim must not hold up every other pod on the node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use super::lock;

/// Locks by claim UID; an entry lives while someone holds or waits for it.
#[derive(Debug, Default)]
pub(super) struct ClaimLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held while a claim's work runs; dropping it lets the next one of the same claim in.
pub(super) struct ClaimGuard<'a> {
    locks: &'a ClaimLocks,
    uid: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl ClaimLocks {
    /// Waits for claim `uid`'s lock.
    pub(super) async fn lock(&self, uid: &str) -> ClaimGuard<'_> {
        let one = lock(&self.locks)
            .entry(uid.to_string())
            .or_default()
            .clone();
        ClaimGuard {
            locks: self,
            uid: uid.to_string(),
            guard: Some(one.lock_owned().await),
        }
    }

    /// How many claims have an entry (held or waited for).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.locks).len()
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The map holds one reference; a waiter holds another and keeps the entry alive.
        let mut locks = lock(&self.locks.locks);
        if locks
            .get(&self.uid)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn other_claims_go_on_while_one_is_held_and_the_same_claim_waits() {
        let locks = Arc::new(ClaimLocks::default());
        let held = locks.lock("a").await;
        // Another claim is not held up.
        let other = tokio::time::timeout(Duration::from_secs(5), locks.lock("b")).await;
        assert!(other.is_ok(), "claim b waited for claim a");
        drop(other);
        // The same claim waits until the first guard goes.
        let l = locks.clone();
        let second = tokio::spawn(async move {
            let _g = l.lock("a").await;
        });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "claim a was locked twice at once");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the waiter got the lock")
            .expect("the waiter ran");
        // Nothing is left behind once nobody holds or waits.
        assert_eq!(locks.len(), 0);
    }
}
