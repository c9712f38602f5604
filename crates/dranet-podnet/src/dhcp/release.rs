//! [`release`]: DHCPRELEASE of a lease, unicast to the server that granted it (RFC 2131 §4.4.6).

use super::frame;
use super::link::UpLink;
use super::message::{Kind, Message, code};
use super::socket::PacketSocket;
use super::{DhcpError, Lease, random_u32};
use crate::netns::Netns;

/// Sends a DHCPRELEASE of `lease` out of the host interface `link` of `host`, from the lease's
/// address and client MAC to the server (at the MAC its ACK came from). The server does not
/// answer a RELEASE, so it is sent once; a lost one leaves the lease to expire. The interface is
/// brought up to send when it is down, and put down again.
pub async fn release(host: &Netns, link: &str, lease: &Lease) -> Result<(), DhcpError> {
    let l = UpLink::up(host, link).await?;
    let index = l.index();
    let mut m = Message::request(Kind::Release, random_u32(), lease.client_mac)
        .with(code::SERVER_ID, lease.server_id.octets());
    m.ciaddr = lease.address;
    let f = frame::build(
        lease.client_mac,
        lease.server_mac,
        lease.address,
        lease.server_id,
        &m.encode(),
    );
    let sent = host
        .run(|| PacketSocket::open(index).and_then(|s| s.send(&f)))
        .map_err(|e| DhcpError::Unusable {
            link: link.to_string(),
            reason: e.to_string(),
        })
        .and_then(|r| r.map_err(DhcpError::io(link, "send DHCPRELEASE")));
    l.restore().await;
    sent
}
