//! Hot-plug for a daemon: kernel uevents (PCI functions, netdevs, RDMA links) and rtnetlink
//! events (links appearing, going away, going up or down; addresses; default routes) as one
//! stream of [`Change`]s, so that the daemon rescans when the node changes instead of waiting for
//! a poll. Features `udev` and `netlink`.
//!
//! Both listeners run on threads of their own (a blocking uevent socket, a netlink socket on a
//! private runtime) in the network namespace of the thread that calls [`Watcher::start`]: run it
//! in the host's. Changes are not coalesced here; the receiver debounces, since one rescan
//! answers any number of them. When the receiver falls behind, changes are dropped rather than
//! queued: a rescan is pending anyway.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rtnetlink::MulticastGroup;
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::LinkAttribute;
use tokio::sync::mpsc;

use crate::links::nl;
use crate::monitor::Monitor;
use crate::{Error, Result};

/// Where a change was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeSource {
    /// A kernel uevent of subsystem `pci`, `net` or `infiniband`.
    Uevent,
    /// An rtnetlink notification (link, address or default route).
    Netlink,
}

impl ChangeSource {
    /// A metric-label friendly name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeSource::Uevent => "uevent",
            ChangeSource::Netlink => "netlink",
        }
    }
}

/// Something on the node changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// When the listener received it (for hot-plug-to-publish latency).
    pub at: Instant,
    /// Which listener saw it.
    pub source: ChangeSource,
    /// What it was, for logs: `add net veth0`, `link eth1 changed`, `default route removed`.
    pub what: String,
}

/// How many changes wait for the receiver before new ones are dropped.
const QUEUE: usize = 256;
/// How often the listeners look at the stop flag.
const POLL: Duration = Duration::from_millis(200);

/// The running listeners; dropping it stops them (within 200 ms).
#[derive(Debug)]
pub struct Watcher {
    rx: mpsc::Receiver<Change>,
    stop: Arc<AtomicBool>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Watcher {
    /// Starts both listeners in the calling thread's network namespace. Fails if either socket
    /// cannot be opened (no `CAP_NET_ADMIN` is needed; a seccomp profile or a missing netlink
    /// family can refuse it).
    pub fn start() -> Result<Self> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        // Both sockets are opened before this returns, so an error reaches the caller instead
        // of a thread's log. libudev's monitor cannot move between threads: its thread opens it.
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        {
            let (tx, stop) = (tx.clone(), stop.clone());
            std::thread::Builder::new()
                .name("dranet-uevents".into())
                .spawn(move || match Monitor::new() {
                    Ok(monitor) => {
                        let _ = opened_tx.send(Ok(()));
                        uevents(monitor, tx, stop);
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                    }
                })
                .map_err(|e| nl("start the uevent thread", e))?;
        }
        opened_rx
            .recv()
            .map_err(|_| Error::NetlinkUnavailable("the uevent thread ended at start"))??;
        let (conn, _handle, messages) = rtnetlink::new_multicast_connection(&[
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
            MulticastGroup::Ipv4Route,
            MulticastGroup::Ipv6Route,
        ])
        .map_err(|e| {
            stop.store(true, Ordering::Relaxed);
            nl("subscribe to link events", e)
        })?;
        let stop_nl = stop.clone();
        std::thread::Builder::new()
            .name("dranet-netlink-events".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("netlink events: runtime: {e}; link changes are seen only by the periodic rescan");
                        return;
                    }
                };
                rt.block_on(async move {
                    tokio::spawn(conn);
                    netlink_events(messages, tx, stop_nl).await;
                });
            })
            .map_err(|e| nl("start the netlink thread", e))?;
        Ok(Self { rx, stop })
    }

    /// The next change; `None` once both listeners have stopped.
    pub async fn recv(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// A change already waiting, if any.
    pub fn try_recv(&mut self) -> Option<Change> {
        self.rx.try_recv().ok()
    }
}

fn uevents(mut monitor: Monitor, tx: mpsc::Sender<Change>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) && !tx.is_closed() {
        match monitor.next(POLL) {
            Ok(Some(ev)) => {
                let _ = tx.try_send(Change {
                    at: Instant::now(),
                    source: ChangeSource::Uevent,
                    what: format!("{} {} {}", ev.action, ev.subsystem, ev.sysname),
                });
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(
                    "uevent monitor: {e}; hot-plug is seen only by the periodic rescan"
                );
                return;
            }
        }
    }
}

async fn netlink_events(
    mut messages: futures::channel::mpsc::UnboundedReceiver<(
        rtnetlink::packet_core::NetlinkMessage<RouteNetlinkMessage>,
        rtnetlink::sys::SocketAddr,
    )>,
    tx: mpsc::Sender<Change>,
    stop: Arc<AtomicBool>,
) {
    loop {
        if stop.load(Ordering::Relaxed) || tx.is_closed() {
            return;
        }
        let msg = match tokio::time::timeout(POLL, messages.next()).await {
            Err(_) => continue,
            Ok(None) => {
                tracing::error!(
                    "netlink events: the socket closed; link changes are seen only by the periodic rescan"
                );
                return;
            }
            Ok(Some((m, _))) => m,
        };
        let NetlinkPayload::InnerMessage(inner) = msg.payload else {
            continue;
        };
        if let Some(what) = describe(&inner) {
            let _ = tx.try_send(Change {
                at: Instant::now(),
                source: ChangeSource::Netlink,
                what,
            });
        }
    }
}

/// What a notification means for discovery; `None` for what cannot change the inventory
/// (routes other than default routes, neighbours).
fn describe(m: &RouteNetlinkMessage) -> Option<String> {
    let link_name = |attrs: &[LinkAttribute]| {
        attrs
            .iter()
            .find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    Some(match m {
        RouteNetlinkMessage::NewLink(l) => format!("link {} changed", link_name(&l.attributes)),
        RouteNetlinkMessage::DelLink(l) => format!("link {} removed", link_name(&l.attributes)),
        RouteNetlinkMessage::NewAddress(a) => {
            format!("address added on ifindex {}", a.header.index)
        }
        RouteNetlinkMessage::DelAddress(a) => {
            format!("address removed on ifindex {}", a.header.index)
        }
        RouteNetlinkMessage::NewRoute(r) if r.header.destination_prefix_length == 0 => {
            "default route added".into()
        }
        RouteNetlinkMessage::DelRoute(r) if r.header.destination_prefix_length == 0 => {
            "default route removed".into()
        }
        _ => return None,
    })
}
