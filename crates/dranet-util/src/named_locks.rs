//! Async locks by name: work on different names runs side by side, two holders of one name
//! never overlap (feature `tokio`). The kubelet plugin serializes the calls for one claim with
//! them; podnet serializes the work on one attachment and one host link, the driver a claim's
//! profile work. A name's lock exists only while someone holds
//! or waits for it, so a node's history of claims does not accumulate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

/// A set of async locks, one per name, created on first use and forgotten when released.
#[derive(Debug, Default)]
pub struct NamedLocks {
    named: Mutex<HashMap<String, Lock>>,
}

/// A held lock of [`NamedLocks`]; released, and forgotten when nobody else wants it, on drop.
#[derive(Debug)]
pub struct NamedGuard<'a> {
    locks: &'a NamedLocks,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl NamedLocks {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Lock>> {
        // The map is consistent after any panic (each step is one insert or remove).
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for and takes the lock of `name`.
    pub async fn lock(&self, name: impl Into<String>) -> NamedGuard<'_> {
        let name = name.into();
        let lock = self.map().entry(name.clone()).or_default().clone();
        let guard = lock.lock_owned().await;
        NamedGuard {
            locks: self,
            name,
            guard: Some(guard),
        }
    }

    /// How many names are held or waited for now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no name is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl NamedGuard<'_> {
    /// The name this guard holds.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NamedGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map();
        // Only the map's own reference left: nobody holds or waits for it. A waiter holds a
        // clone of the Arc, so its entry stays.
        if map
            .get(&self.name)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_name_serializes_other_names_do_not_and_released_names_are_forgotten() {
        let locks = NamedLocks::default();
        let a = locks.lock("a").await;
        let b = locks.lock("b").await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), locks.lock("a"))
                .await
                .is_err(),
            "a taken twice"
        );
        assert_eq!(locks.len(), 2);
        drop(b);
        drop(a);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_waiter_keeps_the_name_when_the_holder_releases() {
        let locks = Arc::new(NamedLocks::default());
        let held = locks.lock("c").await;
        let l2 = Arc::clone(&locks);
        let waiter = tokio::spawn(async move {
            let g = l2.lock("c").await;
            g.name().to_string()
        });
        // Let the waiter reach the lock.
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap(), "c");
        assert!(locks.is_empty());
    }
}
