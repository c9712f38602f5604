//! Where each pod's attach stands, for everything that must wait on it: RunPodSandbox within
//! the runtime's deadline, CreateContainer, the OCI hook, StopPodSandbox.
//!
//! One attach runs per sandbox at any time: whoever comes first ([`AttachGate::begin`] answers
//! [`Begun::Started`] with a [`Ticket`]) runs it and settles it with [`AttachGate::finish`];
//! everyone else waits on the same outcome. An attach that outlives its deadline
//! ([`AttachGate::expire`]) or its sandbox ([`AttachGate::forget`]) is refused when it finishes
//! late: `finish` answers [`Settled::Undo`] and the caller gives the host its devices back. A
//! new attach of the sandbox is not begun until the refused one has ended, so two never run
//! side by side on the same links.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// Why the waiters of a sandbox removed mid-attach are told it failed.
const REMOVED: &str = "the pod's sandbox was removed";

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

/// The right to settle one attach: [`AttachGate::finish`] takes it back.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an attach begun must be finished"]
pub struct Ticket(u64);

/// What [`AttachGate::begin`] found.
#[derive(Debug)]
pub enum Begun {
    /// Nothing was known of the sandbox: the caller runs the attach and calls
    /// [`AttachGate::finish`] with the ticket.
    Started(Ticket),
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

/// One sandbox: its phase for the waiters, and the attach running for it, if any.
#[derive(Debug)]
struct Entry {
    phase: watch::Sender<Phase>,
    /// The ticket of the attach still running.
    running: Option<u64>,
    /// Removed while its attach ran: dropped when that attach ends.
    removed: bool,
}

#[derive(Debug, Default)]
struct Pods {
    by_id: HashMap<String, Entry>,
    /// The last ticket handed out.
    tickets: u64,
}

/// The attach state of every sandbox the driver is giving devices to.
#[derive(Debug, Default)]
pub struct AttachGate {
    pods: Mutex<Pods>,
}

impl AttachGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, Pods> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the attach of `sandbox` for the caller, unless one runs or ran already.
    pub fn begin(&self, sandbox: &str) -> Begun {
        self.start(sandbox, false)
    }

    /// [`AttachGate::begin`] for a runtime that starts the sandbox again: an attach that
    /// failed is begun anew, once the one that failed has ended.
    pub fn restart(&self, sandbox: &str) -> Begun {
        self.start(sandbox, true)
    }

    fn start(&self, sandbox: &str, again: bool) -> Begun {
        let mut pods = self.pods();
        let ticket = pods.tickets + 1;
        match pods.by_id.get_mut(sandbox) {
            Some(e) => {
                let phase = e.phase.borrow().clone();
                let anew =
                    again && e.running.is_none() && !e.removed && matches!(phase, Phase::Failed(_));
                if !anew {
                    return Begun::Known(phase);
                }
                e.running = Some(ticket);
                e.phase.send_replace(Phase::Attaching);
            }
            None => {
                pods.by_id.insert(
                    sandbox.to_string(),
                    Entry {
                        phase: watch::Sender::new(Phase::Attaching),
                        running: Some(ticket),
                        removed: false,
                    },
                );
            }
        }
        pods.tickets = ticket;
        Begun::Started(Ticket(ticket))
    }

    /// Records the outcome of the attach [`AttachGate::begin`] gave the caller.
    pub fn finish(&self, sandbox: &str, ticket: Ticket, outcome: Result<(), String>) -> Settled {
        // What a refused attach leaves: a success must be given back; a failure rolled
        // itself back.
        let refused = if outcome.is_ok() {
            Settled::Undo
        } else {
            Settled::Kept
        };
        let mut pods = self.pods();
        let Some(e) = pods.by_id.get_mut(sandbox) else {
            return refused;
        };
        if e.running != Some(ticket.0) {
            return refused;
        }
        e.running = None;
        if e.removed {
            pods.by_id.remove(sandbox);
            return refused;
        }
        if *e.phase.borrow() != Phase::Attaching {
            // Expired: the waiters were told it failed.
            return refused;
        }
        e.phase.send_replace(match outcome {
            Ok(()) => Phase::Attached,
            Err(reason) => Phase::Failed(reason.into()),
        });
        Settled::Kept
    }

    /// Fails a sandbox's attach that is still running (its deadline passed); true if it was.
    /// The attach, when it ends, is undone ([`Settled::Undo`]).
    pub fn expire(&self, sandbox: &str, reason: String) -> bool {
        let pods = self.pods();
        let Some(e) = pods.by_id.get(sandbox) else {
            return false;
        };
        e.phase.send_if_modified(|p| {
            if *p == Phase::Attaching {
                *p = Phase::Failed(reason.into());
                true
            } else {
                false
            }
        })
    }

    /// Where the attach of `sandbox` stands; `None` if none was begun, or the sandbox was
    /// removed and its attach has ended.
    pub fn phase(&self, sandbox: &str) -> Option<Phase> {
        self.pods()
            .by_id
            .get(sandbox)
            .map(|e| e.phase.borrow().clone())
    }

    /// Waits at most `limit` for the attach of `sandbox` to end; the phase then (still
    /// [`Phase::Attaching`] if it did not), `None` if none was begun.
    pub async fn wait(&self, sandbox: &str, limit: Duration) -> Option<Phase> {
        let mut rx = self.pods().by_id.get(sandbox)?.phase.subscribe();
        let r = tokio::time::timeout(limit, rx.wait_for(|p| *p != Phase::Attaching)).await;
        match r {
            Ok(Ok(p)) => Some(p.clone()),
            // Forgotten while waited on: the sandbox is gone.
            Ok(Err(_)) => Some(Phase::Failed(REMOVED.into())),
            Err(_) => Some(Phase::Attaching),
        }
    }

    /// Forgets `sandbox` (it was removed); an attach still running is undone when it ends, and
    /// its waiters are told the sandbox is gone. The phase it had.
    pub fn forget(&self, sandbox: &str) -> Option<Phase> {
        let mut pods = self.pods();
        let e = pods.by_id.get_mut(sandbox)?;
        let was = e.phase.borrow().clone();
        if e.running.is_some() {
            e.removed = true;
            e.phase.send_replace(Phase::Failed(REMOVED.into()));
        } else {
            pods.by_id.remove(sandbox);
        }
        Some(was)
    }

    /// How many sandboxes are still attaching.
    pub fn attaching(&self) -> usize {
        self.pods()
            .by_id
            .values()
            .filter(|e| *e.phase.borrow() == Phase::Attaching)
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

    /// The ticket of an attach the caller must run.
    fn started(b: Begun) -> Ticket {
        match b {
            Begun::Started(t) => t,
            Begun::Known(p) => panic!("not started: {p:?}"),
        }
    }

    #[test]
    fn one_attach_a_sandbox_and_everyone_sees_its_end() {
        let g = AttachGate::new();
        let t = started(g.begin("s"));
        assert!(matches!(g.begin("s"), Begun::Known(Phase::Attaching)));
        assert_eq!(g.attaching(), 1);
        assert_eq!(g.finish("s", t, Ok(())), Settled::Kept);
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
        let t = started(g.begin("s"));
        let r = rt().block_on(async {
            let g2 = g.clone();
            let w = tokio::spawn(async move { g2.wait("s", Duration::from_secs(30)).await });
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.finish("s", t, Err("claim a/b device eth1: no such link".into()));
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
        let _t = started(g.begin("s"));
        assert_eq!(
            rt().block_on(g.wait("s", Duration::from_millis(5))),
            Some(Phase::Attaching)
        );
        assert_eq!(rt().block_on(g.wait("other", Duration::ZERO)), None);
    }

    #[test]
    fn an_attach_that_ends_after_its_deadline_is_undone() {
        let g = AttachGate::new();
        let t = started(g.begin("s"));
        assert!(g.expire("s", "timed out".into()));
        assert!(!g.expire("s", "again".into()), "expires once");
        assert_eq!(g.phase("s"), Some(Phase::Failed("timed out".into())));
        assert_eq!(g.finish("s", t, Ok(())), Settled::Undo);
        assert_eq!(
            g.phase("s"),
            Some(Phase::Failed("timed out".into())),
            "the late success does not revive it"
        );
        // A late failure rolled itself back.
        let t = started(g.begin("t"));
        g.expire("t", "timed out".into());
        assert_eq!(g.finish("t", t, Err("x".into())), Settled::Kept);
    }

    #[test]
    fn a_sandbox_removed_mid_attach_is_undone_and_its_waiters_told() {
        let g = Arc::new(AttachGate::new());
        let t = started(g.begin("s"));
        let r = rt().block_on(async {
            let g2 = g.clone();
            let w = tokio::spawn(async move { g2.wait("s", Duration::from_secs(30)).await });
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert_eq!(g.forget("s"), Some(Phase::Attaching));
            w.await.unwrap()
        });
        assert!(matches!(r, Some(Phase::Failed(_))));
        assert!(
            matches!(g.begin("s"), Begun::Known(Phase::Failed(_))),
            "no second attach while the first runs"
        );
        assert_eq!(g.finish("s", t, Ok(())), Settled::Undo);
        assert_eq!(g.phase("s"), None);
    }

    #[test]
    fn a_sandbox_started_again_after_a_failure_attaches_anew() {
        let g = AttachGate::new();
        let t = started(g.restart("s"));
        assert!(matches!(g.restart("s"), Begun::Known(Phase::Attaching)));
        g.finish("s", t, Err("no".into()));
        assert!(
            matches!(g.begin("s"), Begun::Known(Phase::Failed(_))),
            "a hook waits on it"
        );
        let t = started(g.restart("s"));
        assert_eq!(g.finish("s", t, Ok(())), Settled::Kept);
        assert!(matches!(g.restart("s"), Begun::Known(Phase::Attached)));
    }

    #[test]
    fn a_timed_out_attach_still_running_is_not_begun_again() {
        let g = AttachGate::new();
        let first = started(g.restart("s"));
        g.expire("s", "timed out".into());
        assert!(
            matches!(g.restart("s"), Begun::Known(Phase::Failed(_))),
            "the first still holds the links"
        );
        assert_eq!(g.finish("s", first, Ok(())), Settled::Undo);
        let second = started(g.restart("s"));
        assert_eq!(g.finish("s", second, Ok(())), Settled::Kept);
    }

    #[test]
    fn expiring_a_finished_attach_changes_nothing() {
        let g = AttachGate::new();
        let t = started(g.begin("s"));
        g.finish("s", t, Ok(()));
        assert!(!g.expire("s", "late".into()));
        assert_eq!(g.phase("s"), Some(Phase::Attached));
    }

    mod model {
        //! The gate against its promises, over any sequence of begins, restarts, ends,
        //! expiries and removals on two sandboxes: never two attaches of one sandbox at once;
        //! a success is given back exactly when its sandbox timed out or went away while it
        //! ran; a sandbox shows Attached only after an attach of its own was kept.

        use super::super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Begin(usize),
            Restart(usize),
            /// Ends the `n`-th running attach (modulo how many run), successfully or not.
            Finish(usize, bool),
            Expire(usize),
            Forget(usize),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0..2usize).prop_map(Op::Begin),
                (0..2usize).prop_map(Op::Restart),
                (0..4usize, any::<bool>()).prop_map(|(n, ok)| Op::Finish(n, ok)),
                (0..2usize).prop_map(Op::Expire),
                (0..2usize).prop_map(Op::Forget),
            ]
        }

        /// An attach the test runs: its sandbox, its ticket, and whether its sandbox timed out
        /// or was removed since it began.
        struct Running {
            sandbox: usize,
            ticket: Ticket,
            refused: bool,
        }

        const NAMES: [&str; 2] = ["a", "b"];

        proptest! {
            #[test]
            fn the_gate_keeps_its_promises(ops in proptest::collection::vec(op(), 1..40)) {
                let g = AttachGate::new();
                let mut running: Vec<Running> = Vec::new();
                // Per sandbox: the last attach kept a success.
                let mut kept_ok = [false; 2];
                for op in ops {
                    match op {
                        Op::Begin(s) | Op::Restart(s) => {
                            let b = if matches!(op, Op::Begin(_)) {
                                g.begin(NAMES[s])
                            } else {
                                g.restart(NAMES[s])
                            };
                            if let Begun::Started(ticket) = b {
                                prop_assert!(
                                    running.iter().all(|r| r.sandbox != s),
                                    "a second attach of {} while one runs", NAMES[s]
                                );
                                kept_ok[s] = false;
                                running.push(Running { sandbox: s, ticket, refused: false });
                            }
                        }
                        Op::Finish(n, ok) => {
                            if running.is_empty() {
                                continue;
                            }
                            let r = running.remove(n % running.len());
                            let outcome = if ok { Ok(()) } else { Err("failed".to_string()) };
                            let settled = g.finish(NAMES[r.sandbox], r.ticket, outcome);
                            let want = if ok && r.refused { Settled::Undo } else { Settled::Kept };
                            prop_assert_eq!(settled, want);
                            if ok && !r.refused {
                                kept_ok[r.sandbox] = true;
                            }
                        }
                        Op::Expire(s) => {
                            let live = running.iter_mut().find(|r| r.sandbox == s && !r.refused);
                            let expired = g.expire(NAMES[s], "timed out".into());
                            prop_assert_eq!(expired, live.is_some());
                            if let Some(r) = live {
                                r.refused = true;
                            }
                        }
                        Op::Forget(s) => {
                            let _ = g.forget(NAMES[s]);
                            kept_ok[s] = false;
                            for r in running.iter_mut().filter(|r| r.sandbox == s) {
                                r.refused = true;
                            }
                        }
                    }
                    for s in 0..2 {
                        let live = running.iter().any(|r| r.sandbox == s && !r.refused);
                        let phase = g.phase(NAMES[s]);
                        prop_assert_eq!(phase == Some(Phase::Attaching), live);
                        prop_assert_eq!(phase == Some(Phase::Attached), kept_ok[s]);
                    }
                    let live = running.iter().filter(|r| !r.refused).count();
                    prop_assert_eq!(g.attaching(), live);
                }
            }
        }
    }
}
