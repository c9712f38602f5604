//! Where each pod's attach stands, for everything that must wait on it: RunPodSandbox within
//! the runtime's deadline, CreateContainer, the OCI hook, StopPodSandbox.
//!
//! One attach runs per sandbox: whoever comes first ([`AttachGate::begin`] answers
//! [`Begun::Started`]) runs it and settles it with [`AttachGate::finish`]; everyone else waits
//! on the same outcome. An attach that outlives its deadline ([`AttachGate::expire`]) or its
//! sandbox ([`AttachGate::forget`]) is refused when it finishes late: `finish` answers
//! [`Settled::Undo`] and the caller gives the host its devices back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// Where one sandbox's attach stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Running.
    Attaching,
    /// Every device is in the pod, configured.
    Attached,
    /// It failed or timed out; why, in the pod owner's terms.
    Failed(Arc<str>),
}

/// What [`AttachGate::begin`] found.
#[derive(Debug)]
pub enum Begun {
    /// Nothing was known of the sandbox: the caller runs the attach and calls
    /// [`AttachGate::finish`].
    Started,
    /// An attach runs or ran already; wait on it with [`AttachGate::wait`].
    Known(Phase),
}

/// What [`AttachGate::finish`] made of an outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Recorded; the waiters have it.
    Kept,
    /// The sandbox timed out or went away while the attach ran: what was attached must be
    /// given back.
    Undo,
}

/// The attach state of every sandbox the driver is giving devices to.
#[derive(Debug, Default)]
pub struct AttachGate {
    pods: Mutex<HashMap<String, watch::Sender<Phase>>>,
}

impl AttachGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Phase>>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the attach of `sandbox` for the caller, unless one runs or ran already.
    pub fn begin(&self, sandbox: &str) -> Begun {
        let mut pods = self.pods();
        if let Some(tx) = pods.get(sandbox) {
            return Begun::Known(tx.borrow().clone());
        }
        pods.insert(sandbox.to_string(), watch::Sender::new(Phase::Attaching));
        Begun::Started
    }

    /// [`AttachGate::begin`] for a runtime that starts the sandbox again: an attach that
    /// failed is begun anew.
    pub fn restart(&self, sandbox: &str) -> Begun {
        let mut pods = self.pods();
        if let Some(tx) = pods.get(sandbox) {
            let failed = matches!(*tx.borrow(), Phase::Failed(_));
            if !failed {
                return Begun::Known(tx.borrow().clone());
            }
            tx.send_replace(Phase::Attaching);
            return Begun::Started;
        }
        pods.insert(sandbox.to_string(), watch::Sender::new(Phase::Attaching));
        Begun::Started
    }

    /// Records the outcome of the attach [`AttachGate::begin`] gave the caller.
    pub fn finish(&self, sandbox: &str, outcome: Result<(), String>) -> Settled {
        let pods = self.pods();
        let Some(tx) = pods.get(sandbox) else {
            return match outcome {
                Ok(()) => Settled::Undo,
                // Nothing was kept; nothing to give back beyond what the attach rolled back.
                Err(_) => Settled::Kept,
            };
        };
        if *tx.borrow() != Phase::Attaching {
            // Expired: the waiters were told it failed.
            return if outcome.is_ok() {
                Settled::Undo
            } else {
                Settled::Kept
            };
        }
        tx.send_replace(match outcome {
            Ok(()) => Phase::Attached,
            Err(reason) => Phase::Failed(reason.into()),
        });
        Settled::Kept
    }

    /// Fails a sandbox's attach that is still running (its deadline passed); true if it was.
    /// The attach, when it ends, is undone ([`Settled::Undo`]).
    pub fn expire(&self, sandbox: &str, reason: String) -> bool {
        let pods = self.pods();
        let Some(tx) = pods.get(sandbox) else {
            return false;
        };
        tx.send_if_modified(|p| {
            if *p == Phase::Attaching {
                *p = Phase::Failed(reason.into());
                true
            } else {
                false
            }
        })
    }

    /// Where the attach of `sandbox` stands; `None` if none was begun.
    pub fn phase(&self, sandbox: &str) -> Option<Phase> {
        self.pods().get(sandbox).map(|tx| tx.borrow().clone())
    }

    /// Waits at most `limit` for the attach of `sandbox` to end; the phase then (still
    /// [`Phase::Attaching`] if it did not), `None` if none was begun.
    pub async fn wait(&self, sandbox: &str, limit: Duration) -> Option<Phase> {
        let mut rx = self.pods().get(sandbox)?.subscribe();
        let r = tokio::time::timeout(limit, rx.wait_for(|p| *p != Phase::Attaching)).await;
        match r {
            Ok(Ok(p)) => Some(p.clone()),
            // Forgotten while waited on: the sandbox is gone.
            Ok(Err(_)) => Some(Phase::Failed("the pod's sandbox was removed".into())),
            Err(_) => Some(Phase::Attaching),
        }
    }

    /// Forgets `sandbox` (it was removed); an attach still running is undone when it ends.
    pub fn forget(&self, sandbox: &str) -> Option<Phase> {
        self.pods().remove(sandbox).map(|tx| tx.borrow().clone())
    }

    /// How many sandboxes are still attaching.
    pub fn attaching(&self) -> usize {
        self.pods()
            .values()
            .filter(|tx| *tx.borrow() == Phase::Attaching)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn one_attach_a_sandbox_and_everyone_sees_its_end() {
        let g = AttachGate::new();
        assert!(matches!(g.begin("s"), Begun::Started));
        assert!(matches!(g.begin("s"), Begun::Known(Phase::Attaching)));
        assert_eq!(g.attaching(), 1);
        assert_eq!(g.finish("s", Ok(())), Settled::Kept);
        assert!(matches!(g.begin("s"), Begun::Known(Phase::Attached)));
        assert_eq!(g.attaching(), 0);
        assert_eq!(
            rt().block_on(g.wait("s", Duration::ZERO)),
            Some(Phase::Attached)
        );
    }

    #[test]
    fn a_waiter_wakes_when_the_attach_ends() {
        let g = Arc::new(AttachGate::new());
        let _ = g.begin("s");
        let r = rt().block_on(async {
            let g2 = g.clone();
            let w = tokio::spawn(async move { g2.wait("s", Duration::from_secs(30)).await });
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.finish("s", Err("claim a/b device eth1: no such link".into()));
            w.await.unwrap()
        });
        assert_eq!(
            r,
            Some(Phase::Failed("claim a/b device eth1: no such link".into()))
        );
    }

    #[test]
    fn a_wait_past_its_limit_says_still_attaching() {
        let g = AttachGate::new();
        let _ = g.begin("s");
        assert_eq!(
            rt().block_on(g.wait("s", Duration::from_millis(5))),
            Some(Phase::Attaching)
        );
        assert_eq!(rt().block_on(g.wait("other", Duration::ZERO)), None);
    }

    #[test]
    fn an_attach_that_ends_after_its_deadline_is_undone() {
        let g = AttachGate::new();
        let _ = g.begin("s");
        assert!(g.expire("s", "timed out".into()));
        assert!(!g.expire("s", "again".into()), "expires once");
        assert_eq!(g.phase("s"), Some(Phase::Failed("timed out".into())));
        assert_eq!(g.finish("s", Ok(())), Settled::Undo);
        assert_eq!(
            g.phase("s"),
            Some(Phase::Failed("timed out".into())),
            "the late success does not revive it"
        );
        // A late failure rolled itself back.
        let _ = g.begin("t");
        g.expire("t", "timed out".into());
        assert_eq!(g.finish("t", Err("x".into())), Settled::Kept);
    }

    #[test]
    fn a_sandbox_removed_mid_attach_is_undone_and_its_waiters_told() {
        let g = Arc::new(AttachGate::new());
        let _ = g.begin("s");
        let r = rt().block_on(async {
            let g2 = g.clone();
            let w = tokio::spawn(async move { g2.wait("s", Duration::from_secs(30)).await });
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert_eq!(g.forget("s"), Some(Phase::Attaching));
            w.await.unwrap()
        });
        assert!(matches!(r, Some(Phase::Failed(_))));
        assert_eq!(g.finish("s", Ok(())), Settled::Undo);
        assert_eq!(g.finish("s", Err("x".into())), Settled::Kept);
        assert_eq!(g.phase("s"), None);
    }

    #[test]
    fn a_sandbox_started_again_after_a_failure_attaches_anew() {
        let g = AttachGate::new();
        assert!(matches!(g.restart("s"), Begun::Started));
        assert!(matches!(g.restart("s"), Begun::Known(Phase::Attaching)));
        g.finish("s", Err("no".into()));
        assert!(
            matches!(g.begin("s"), Begun::Known(Phase::Failed(_))),
            "a hook waits on it"
        );
        assert!(matches!(g.restart("s"), Begun::Started));
        assert_eq!(g.finish("s", Ok(())), Settled::Kept);
        assert!(matches!(g.restart("s"), Begun::Known(Phase::Attached)));
    }

    #[test]
    fn expiring_a_finished_attach_changes_nothing() {
        let g = AttachGate::new();
        let _ = g.begin("s");
        g.finish("s", Ok(()));
        assert!(!g.expire("s", "late".into()));
        assert_eq!(g.phase("s"), Some(Phase::Attached));
    }
}
