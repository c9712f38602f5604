//! A DHCPv4 client for claims with `interface.addressing: DHCP` (or the deprecated `dhcp: true`).
//!
//! As upstream dranet does, the lease is obtained at prepare, on the host, for the interface
//! that will move into the pod: the driver runs [`acquire`] and keeps the [`Lease`] in the
//! claim's record (the kubelet's checkpoint), so [`release`] at unprepare works after a restart
//! of the daemon. When the pod's sandbox starts, the lease's address, routes and MTU become the
//! device's configuration ([`apply`]), applied like any claim's: only then are the pod's other
//! interfaces known, which the lease's default route must not share a table with
//! ([`crate::plan_source_tables`]). Nothing of the lease is configured on the host.
//!
//! Why on the host, at prepare: the interface is on the host then, and an error (no server, no
//! answer) is the claim's, seen on the claim before a pod waits on it; the runtime's hook that
//! moves the interface has a deadline of seconds, too short for DHCP's retransmissions.
//!
//! The client speaks over a packet socket bound to the interface: it has no address
//! to send from, its answers may come to an address it does not have yet, and the host's own
//! DHCP client may hold UDP port 68. The exchange is RFC 2131 §3.1 and §4.1: DISCOVER, OFFER,
//! REQUEST, ACK, each message retransmitted on silence after 4, 8, 16… seconds (each ±1 s,
//! capped at 64) until the deadline ([`Timing`]); a NAK starts over. The server answers to the
//! broadcast address (the `BROADCAST` flag), as the interface cannot take unicast yet.
//!
//! The lease is not renewed: at T1 and T2 nothing is sent, and when it expires the server may
//! give the address to another client while the pod still uses it. Pods live for the lease's
//! length or the server's leases are made longer than the pods (or infinite); the driver warns
//! at prepare of a lease shorter than a day. Upstream dranet does not renew either.

mod acquire;
mod apply;
mod frame;
mod link;
mod message;
mod release;
mod socket;

use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use acquire::acquire;
pub use apply::{apply, uses_source_table};
pub use release::release;

/// A lease, as the claim's record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lease {
    /// The address leased (`yiaddr`).
    pub address: Ipv4Addr,
    /// Its prefix length, from the subnet mask (option 1); 32 when the server sent none.
    pub prefix_len: u8,
    /// The server that granted it (option 54): RELEASE goes to it.
    pub server_id: Ipv4Addr,
    /// The MAC the ACK came from (the server's, or its relay's): RELEASE is unicast to it.
    pub server_mac: [u8; 6],
    /// The MAC the lease was taken for (`chaddr`): the pod's interface's.
    pub client_mac: [u8; 6],
    /// Routes of option 121 (RFC 3442), or the default route via the first router of option 3
    /// when the server sent no option 121.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<LeaseRoute>,
    /// The interface MTU of option 26, when the server sent one of at least 68.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
    /// The lease time in seconds (option 51; `u32::MAX` is infinite), when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u32>,
    /// When it was granted, in seconds since the Unix epoch.
    pub granted_at: u64,
}

/// A route a lease gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseRoute {
    /// The destination network.
    pub destination: Ipv4Addr,
    /// Its prefix length.
    pub prefix_len: u8,
    /// The router; `0.0.0.0` for a destination on the link.
    pub gateway: Ipv4Addr,
}

/// The unit tests' lease: 10.9.0.50/24 from server 10.9.0.1, with `routes`, no MTU nor time.
#[cfg(test)]
pub(crate) fn test_lease(routes: Vec<LeaseRoute>) -> Lease {
    Lease {
        address: Ipv4Addr::new(10, 9, 0, 50),
        prefix_len: 24,
        server_id: Ipv4Addr::new(10, 9, 0, 1),
        server_mac: [9; 6],
        client_mac: [2; 6],
        routes,
        mtu: None,
        lease_secs: None,
        granted_at: 0,
    }
}

/// The unit tests' default route of a lease: via 10.9.0.1.
#[cfg(test)]
pub(crate) fn test_default_route() -> LeaseRoute {
    LeaseRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        prefix_len: 0,
        gateway: Ipv4Addr::new(10, 9, 0, 1),
    }
}

/// The client's timing: RFC 2131 §4.1's retransmission and the whole exchange's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The wait before the first retransmission (RFC 2131: 4 s), doubled after each.
    pub first_retransmit: Duration,
    /// The longest wait between two retransmissions (RFC 2131: 64 s).
    pub max_retransmit: Duration,
    /// The whole exchange, DISCOVER to ACK.
    pub deadline: Duration,
}

impl Default for Timing {
    /// 4 s, then 8 s…, and 20 s in all: three DISCOVERs when the server stays silent (at 0,
    /// ~4 and ~12 s), inside the 45 s the kubelet gives a prepare, with room for the rest of
    /// it (reading the claim, the checks, the checkpoint).
    fn default() -> Self {
        Timing {
            first_retransmit: Duration::from_secs(4),
            max_retransmit: Duration::from_secs(64),
            deadline: Duration::from_secs(20),
        }
    }
}

/// Why DHCP failed on an interface.
#[derive(Debug, thiserror::Error)]
pub enum DhcpError {
    /// A step failed on the host.
    #[error("DHCP on {link}: {step}: {source}")]
    Io {
        /// The host interface.
        link: String,
        /// What was being done.
        step: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The interface is not one DHCP can run on.
    #[error("DHCP on {link}: {reason}")]
    Unusable {
        /// The host interface.
        link: String,
        /// Why.
        reason: String,
    },
    /// No lease before the deadline.
    #[error(
        "DHCP on {link}: no lease within {secs} s ({discovers} DISCOVER and {requests} REQUEST \
         sent, {naks} NAK received): is a DHCP server on the interface's network?"
    )]
    Timeout {
        /// The host interface.
        link: String,
        /// The deadline.
        secs: u64,
        /// DISCOVERs sent, retransmissions included.
        discovers: u32,
        /// REQUESTs sent, retransmissions included.
        requests: u32,
        /// NAKs received.
        naks: u32,
    },
}

impl DhcpError {
    fn io(link: &str, step: &'static str) -> impl FnOnce(io::Error) -> DhcpError {
        let link = link.to_string();
        move |source| DhcpError::Io { link, step, source }
    }
}

/// A random 32-bit number from the kernel, for transaction IDs and jitter.
fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom(2) writes at most the buffer's length into it.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // Without entropy (never on Linux ≥ 3.17 once booted), the clock still makes two
        // clients' transaction IDs differ.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.subsec_nanos() ^ (t.as_secs() as u32);
    }
    u32::from_ne_bytes(b)
}
