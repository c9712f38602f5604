//! Hot-plug: kernel uevents for PCI functions, netdevs and RDMA links.
//!
//! Listens on the kernel's uevent netlink group directly, so it needs no udev daemon (containers
//! rarely run one). Net uevents are delivered in the network namespace the device lives in: run
//! the monitor in the host's (the daemon is `hostNetwork`).

use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The subsystems discovery cares about.
pub const SUBSYSTEMS: [&str; 3] = ["pci", "net", "infiniband"];

/// One uevent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `add`, `remove`, `change`, `move`, `bind`, `unbind`, …
    pub action: String,
    /// `pci`, `net` or `infiniband`.
    pub subsystem: String,
    /// Device name (`eth0`, `0000:03:00.0`, `mlx5_0`).
    pub sysname: String,
}

/// A kernel uevent listener filtered to [`SUBSYSTEMS`].
pub struct Monitor {
    socket: udev::MonitorSocket,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    /// Starts listening (in the calling thread's network namespace).
    pub fn new() -> Result<Self> {
        let mut b = udev::MonitorBuilder::new_kernel().map_err(Error::Udev)?;
        for s in SUBSYSTEMS {
            b = b.match_subsystem(s).map_err(Error::Udev)?;
        }
        Ok(Self {
            socket: b.listen().map_err(Error::Udev)?,
        })
    }

    /// The next event, waiting at most `timeout`; `Ok(None)` when none came.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.socket.iter().next() {
                let subsystem = ev
                    .subsystem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Ok(Some(Event {
                    action: ev
                        .action()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    subsystem,
                    sysname: ev.sysname().to_string_lossy().into_owned(),
                }));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
            let mut fds = [nix::poll::PollFd::new(
                self.socket.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(
                &mut fds,
                nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
            ) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Error::Udev(std::io::Error::from(e))),
            }
        }
    }

    /// Waits up to `timeout` for a change, then keeps collecting until the events stop for
    /// `quiet` (a VF batch or a driver rebind is dozens of uevents; one rediscovery is enough).
    /// Returns the events, empty when nothing happened.
    ///
    /// In a uevent storm the events never stop: collecting ends after [`MAX_EVENTS_PER_CHANGE`]
    /// events or [`MAX_BURST`], and the rest come with the next call.
    pub fn next_change(&mut self, timeout: Duration, quiet: Duration) -> Result<Vec<Event>> {
        let Some(first) = self.next(timeout)? else {
            return Ok(Vec::new());
        };
        collect_burst(
            first,
            |d| self.next(d),
            quiet,
            MAX_EVENTS_PER_CHANGE,
            MAX_BURST,
        )
    }

    /// The raw descriptor, to register with an event loop.
    pub fn as_raw_fd(&self) -> i32 {
        self.socket.as_raw_fd()
    }
}

/// Most events one [`Monitor::next_change`] returns.
pub const MAX_EVENTS_PER_CHANGE: usize = 4096;
/// Longest one [`Monitor::next_change`] keeps collecting after the first event.
pub const MAX_BURST: Duration = Duration::from_secs(2);

/// Collects events after `first` until none comes for `quiet`, or `max_events` or `max_wait`
/// is reached.
fn collect_burst<E>(
    first: Event,
    mut next: impl FnMut(Duration) -> std::result::Result<Option<Event>, E>,
    quiet: Duration,
    max_events: usize,
    max_wait: Duration,
) -> std::result::Result<Vec<Event>, E> {
    let start = std::time::Instant::now();
    let mut events = vec![first];
    while events.len() < max_events {
        let left = max_wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        match next(quiet.min(left))? {
            Some(ev) => events.push(ev),
            None => break,
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: usize) -> Event {
        Event {
            action: "change".into(),
            subsystem: "net".into(),
            sysname: format!("eth{i}"),
        }
    }

    #[test]
    fn a_uevent_storm_is_cut_by_count_and_by_time() {
        // Events that never stop: the count cap ends it.
        let mut i = 0;
        let got = collect_burst::<()>(
            ev(0),
            |_| {
                i += 1;
                Ok(Some(ev(i)))
            },
            Duration::from_millis(100),
            50,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(got.len(), 50);
        // Slow but endless events: the time cap ends it.
        let got = collect_burst::<()>(
            ev(0),
            |d| {
                std::thread::sleep(d.min(Duration::from_millis(5)));
                Ok(Some(ev(1)))
            },
            Duration::from_millis(100),
            usize::MAX,
            Duration::from_millis(50),
        )
        .unwrap();
        assert!(got.len() > 1 && got.len() < 1000, "{}", got.len());
        // A quiet source ends at once with what it had.
        let got = collect_burst::<()>(
            ev(0),
            |_| Ok(None),
            Duration::from_millis(100),
            50,
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(got, vec![ev(0)]);
    }
}
