//! Async locks by name, so that work on different things runs side by side while two
//! operations on one thing never interleave: attachment keys, host links and the routing tables
//! of a pod. A lock exists while someone holds or waits for it.
//!
//! The order, so that no two operations wait on each other: the key first, then the links,
//! sorted, then the pod.

use dranet_util::{NamedGuard, NamedLocks};

use crate::netns::NetnsId;

/// Podnet's locks, named by what they guard.
#[derive(Debug, Default)]
pub(crate) struct Locks {
    named: NamedLocks,
}

/// A held lock; released, and forgotten when nobody else wants it, on drop.
pub(crate) type Held<'a> = NamedGuard<'a>;

impl Locks {
    /// The lock of attachment `key`.
    pub(crate) async fn key(&self, key: &str) -> Held<'_> {
        self.named.lock(format!("key:{key}")).await
    }

    /// The locks of host links `names`, in name order (taken after the key's).
    pub(crate) async fn links(&self, names: &[&str]) -> Vec<Held<'_>> {
        let mut names: Vec<&str> = names.to_vec();
        names.sort_unstable();
        names.dedup();
        let mut held = Vec::with_capacity(names.len());
        for n in names {
            held.push(self.named.lock(format!("link:{n}")).await);
        }
        held
    }

    /// The lock of the routing tables of the pod namespace `pod` (taken last): held from the
    /// choice of a child's source table until its routes and rules are in.
    pub(crate) async fn pod(&self, pod: NetnsId) -> Held<'_> {
        self.named
            .lock(format!("pod:{}:{}", pod.dev, pod.ino))
            .await
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.named.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_name_serializes_different_names_do_not_and_released_locks_are_forgotten() {
        let locks = Locks::default();
        let a = locks.key("a").await;
        // Another key is free while `a` is held.
        let b = locks.key("b").await;
        // `a` again waits.
        let again = tokio::time::timeout(std::time::Duration::from_millis(50), locks.key("a"));
        assert!(again.await.is_err(), "key a taken twice");
        drop(b);
        drop(a);
        assert_eq!(locks.len(), 0);
        // Links in any order come back sorted, each once.
        let held = locks.links(&["eth2", "eth1", "eth2"]).await;
        let names: Vec<&str> = held.iter().map(|h| h.name()).collect();
        assert_eq!(names, ["link:eth1", "link:eth2"]);
        drop(held);
        assert_eq!(locks.len(), 0);
    }
}
