//! [`acquire`]: DISCOVER, OFFER, REQUEST, ACK on a host interface, retransmitting on silence.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rtnetlink::packet_route::link::{LinkAttribute, LinkLayerType};

use super::frame::{self, BROADCAST_MAC};
use super::link::UpLink;
use super::message::{self, FLAG_BROADCAST, Kind, Message, code};
use super::socket::PacketSocket;
use super::{DhcpError, Lease, LeaseRoute, Timing, random_u32};
use crate::netns::Netns;

/// What the client asks the server for (option 55).
const PARAMETERS: [u8; 8] = [
    code::SUBNET_MASK,
    code::ROUTER,
    code::INTERFACE_MTU,
    code::LEASE_TIME,
    code::SERVER_ID,
    code::RENEWAL_TIME,
    code::REBINDING_TIME,
    code::CLASSLESS_ROUTES,
];
/// The largest DHCP message the client takes (option 57): an Ethernet frame's IP payload.
const MAX_MESSAGE: u16 = 1500;
/// RFC 2132 §5.1: the smallest MTU option value.
const MIN_MTU: u16 = 68;

/// Obtains a lease on the host interface `link` of `host` for `client_mac` (the MAC the pod's
/// interface will have; the link's own when `None`). The interface is brought up for the
/// exchange when it is down, and put down again after. Nothing is configured on it.
pub async fn acquire(
    host: &Netns,
    link: &str,
    client_mac: Option<[u8; 6]>,
    timing: Timing,
) -> Result<Lease, DhcpError> {
    let l = UpLink::up(host, link).await?;
    let result = exchange_on(host, &l, client_mac, timing).await;
    l.restore().await;
    result
}

/// Checks the link and runs the exchange on it.
async fn exchange_on(
    host: &Netns,
    l: &UpLink<'_>,
    client_mac: Option<[u8; 6]>,
    timing: Timing,
) -> Result<Lease, DhcpError> {
    let link = l.name();
    let unusable = |reason: String| DhcpError::Unusable {
        link: link.to_string(),
        reason,
    };
    if l.msg.header.link_layer_type != LinkLayerType::Ether {
        return Err(unusable(format!(
            "the interface is not Ethernet ({:?}); dranet-rs runs DHCP on Ethernet only",
            l.msg.header.link_layer_type
        )));
    }
    let own_mac = l.msg.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(m) => <[u8; 6]>::try_from(m.as_slice()).ok(),
        _ => None,
    });
    let mac = client_mac
        .or(own_mac)
        .ok_or_else(|| unusable("the interface has no MAC address".into()))?;
    let index = l.index();
    let sock = host
        .run(|| PacketSocket::open(index))
        .map_err(|e| unusable(e.to_string()))?
        .map_err(DhcpError::io(link, "open a packet socket"))?;
    let name = link.to_string();
    tokio::task::spawn_blocking(move || exchange(&sock, &name, mac, timing))
        .await
        .unwrap_or_else(|e| Err(unusable(format!("the DHCP exchange stopped: {e}"))))
}

/// What was sent and received, for the error when no lease comes.
#[derive(Debug, Default)]
struct Counts {
    discovers: u32,
    requests: u32,
    naks: u32,
}

/// The exchange, blocking, until an ACK or the deadline.
fn exchange(
    sock: &PacketSocket,
    link: &str,
    mac: [u8; 6],
    timing: Timing,
) -> Result<Lease, DhcpError> {
    let start = Instant::now();
    let end = start + timing.deadline;
    let mut counts = Counts::default();
    let mut out = Exchange {
        sock,
        link,
        mac,
        start,
        end,
        timing,
    };
    while Instant::now() < end {
        // A new transaction for each DISCOVER round (RFC 2131 §4.4.1).
        let xid = random_u32();
        let ask = |kind: Kind| {
            let mut m = Message::request(kind, xid, mac)
                .with(code::PARAMETER_LIST, PARAMETERS)
                .with(code::MAX_MESSAGE_SIZE, MAX_MESSAGE.to_be_bytes());
            m.flags = FLAG_BROADCAST;
            m
        };
        let discover = ask(Kind::Discover);
        let offer = out.transact(&discover, &mut counts.discovers, |m, _| {
            let server = m.ipv4(code::SERVER_ID)?;
            (m.kind() == Some(Kind::Offer) && !m.yiaddr.is_unspecified())
                .then_some((m.yiaddr, server))
        })?;
        let Some((offered, server)) = offer else {
            break;
        };
        let request = ask(Kind::Request)
            .with(code::REQUESTED_ADDRESS, offered.octets())
            .with(code::SERVER_ID, server.octets());
        let answer = out.transact(&request, &mut counts.requests, |m, src| {
            if m.ipv4(code::SERVER_ID).is_some_and(|s| s != server) {
                return None;
            }
            match m.kind()? {
                Kind::Ack => Some(Some((m.clone(), src))),
                Kind::Nak => Some(None),
                _ => None,
            }
        })?;
        match answer {
            Some(Some((ack, server_mac))) => return lease(link, &ack, server, server_mac, mac),
            Some(None) => {
                counts.naks += 1;
                tracing::debug!(link, %offered, %server, "DHCPNAK; starting over");
            }
            None => break,
        }
    }
    Err(DhcpError::Timeout {
        link: link.to_string(),
        secs: timing.deadline.as_secs(),
        discovers: counts.discovers,
        requests: counts.requests,
        naks: counts.naks,
    })
}

struct Exchange<'a> {
    sock: &'a PacketSocket,
    link: &'a str,
    mac: [u8; 6],
    start: Instant,
    end: Instant,
    timing: Timing,
}

impl Exchange<'_> {
    /// Sends `msg` (broadcast) and waits for an answer `accept` takes, retransmitting with
    /// RFC 2131 §4.1's backoff; `None` at the deadline.
    fn transact<T>(
        &mut self,
        msg: &Message,
        sent: &mut u32,
        mut accept: impl FnMut(&Message, [u8; 6]) -> Option<T>,
    ) -> Result<Option<T>, DhcpError> {
        let mut wait = self.timing.first_retransmit;
        let mut buf = vec![0u8; 2048];
        loop {
            let now = Instant::now();
            if now >= self.end {
                return Ok(None);
            }
            let mut m = msg.clone();
            m.secs = u16::try_from(now.duration_since(self.start).as_secs()).unwrap_or(u16::MAX);
            let f = frame::build(
                self.mac,
                BROADCAST_MAC,
                Ipv4Addr::UNSPECIFIED,
                Ipv4Addr::BROADCAST,
                &m.encode(),
            );
            self.sock
                .send(&f)
                .map_err(DhcpError::io(self.link, "send a DHCP message"))?;
            *sent += 1;
            let until = (now + jittered(wait)).min(self.end);
            while let Some(n) = self
                .sock
                .recv(&mut buf, until)
                .map_err(DhcpError::io(self.link, "receive a DHCP message"))?
            {
                let Some((answer, src)) =
                    buf.get(..n).and_then(|f| answer_of(f, msg.xid, self.mac))
                else {
                    continue;
                };
                if let Some(t) = accept(&answer, src) {
                    return Ok(Some(t));
                }
            }
            wait = (wait * 2).min(self.timing.max_retransmit);
        }
    }
}

/// The DHCP message of a received frame and the frame's source MAC, if the frame is a server's
/// answer (port 67 to 68, one datagram) to transaction `xid` of the client `mac`; `None` for any
/// other frame, foreign or malformed.
fn answer_of(frame: &[u8], xid: u32, mac: [u8; 6]) -> Option<(Message, [u8; 6])> {
    let r = frame::parse(frame)?;
    let answer = Message::decode(r.payload)?;
    (answer.reply && answer.xid == xid && answer.chaddr == mac).then_some((answer, r.src_mac))
}

/// `wait` moved by a uniform random amount of up to a second either way (RFC 2131 §4.1), or a
/// quarter of it when shorter, so short test timings keep their order.
fn jittered(wait: Duration) -> Duration {
    let span = (wait / 4).min(Duration::from_secs(1));
    let span_ms = u32::try_from(span.as_millis()).unwrap_or(u32::MAX);
    if span_ms == 0 {
        return wait;
    }
    let r = random_u32() % (2 * span_ms + 1);
    (wait + Duration::from_millis(u64::from(r))).saturating_sub(span)
}

/// The lease an ACK grants.
fn lease(
    link: &str,
    ack: &Message,
    server_id: Ipv4Addr,
    server_mac: [u8; 6],
    client_mac: [u8; 6],
) -> Result<Lease, DhcpError> {
    let unusable = |reason: String| DhcpError::Unusable {
        link: link.to_string(),
        reason,
    };
    if ack.yiaddr.is_unspecified() {
        return Err(unusable(format!(
            "the server {server_id} acknowledged no address"
        )));
    }
    // RFC 2131 §4.3.1: an ACK names its server; the release at unprepare goes to it.
    if ack.ipv4(code::SERVER_ID).is_none() {
        return Err(unusable(format!(
            "the server {server_id}'s DHCPACK has no server identifier (option 54)"
        )));
    }
    let prefix_len = ack
        .ipv4(code::SUBNET_MASK)
        .and_then(message::prefix_len)
        .ok_or_else(|| {
            unusable(format!(
                "the server {server_id} gave {} without a valid subnet mask (option 1)",
                ack.yiaddr
            ))
        })?;
    // RFC 3442 §2: with option 121, option 3 is ignored.
    let classless = ack
        .option(code::CLASSLESS_ROUTES)
        .and_then(|v| message::classless_routes(&v));
    let routes = match classless {
        Some(rs) => rs
            .into_iter()
            .map(|(destination, prefix_len, gateway)| LeaseRoute {
                destination,
                prefix_len,
                gateway,
            })
            .collect(),
        None => ack
            .ipv4(code::ROUTER)
            .map(|gateway| LeaseRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
                gateway,
            })
            .into_iter()
            .collect(),
    };
    let granted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let lease = Lease {
        address: ack.yiaddr,
        prefix_len,
        server_id,
        server_mac,
        client_mac,
        routes,
        mtu: ack.u16(code::INTERFACE_MTU).filter(|m| *m >= MIN_MTU),
        lease_secs: ack.u32(code::LEASE_TIME),
        granted_at,
    };
    check(&lease).map_err(|why| unusable(format!("the server {server_id} gave {why}")))?;
    Ok(lease)
}

/// What a lease must be for the pod's interface to take it, as a claim's static addresses and
/// routes must: a unicast host address in a subnet, routers on that subnet, route destinations
/// without host bits. Refused at prepare, a bad lease never reaches a sandbox start.
fn check(l: &Lease) -> Result<(), String> {
    let a = l.address;
    if a.is_multicast() || a.is_broadcast() || a.is_loopback() || a.is_unspecified() {
        return Err(format!("{a}, which is not a unicast address"));
    }
    if l.prefix_len == 0 {
        return Err(format!("{a} with the subnet mask 0.0.0.0"));
    }
    let mask = crate::podnet::ipv4_mask;
    let net = u32::from(a) & mask(l.prefix_len);
    if l.prefix_len < 31 && (u32::from(a) == net || u32::from(a) == net | !mask(l.prefix_len)) {
        return Err(format!(
            "{a}/{}, the network or broadcast address of its subnet",
            l.prefix_len
        ));
    }
    for r in &l.routes {
        let dest = u32::from(r.destination);
        if dest & !mask(r.prefix_len) != 0 {
            return Err(format!(
                "the route {}/{} with host bits set (option 121)",
                r.destination, r.prefix_len
            ));
        }
        let g = r.gateway;
        if g.is_unspecified() {
            continue;
        }
        if u32::from(g) & mask(l.prefix_len) != net || g == a {
            return Err(format!(
                "the router {g} for {}/{}, which is not another address of the leased subnet \
                 {}/{}",
                r.destination,
                r.prefix_len,
                Ipv4Addr::from(net),
                l.prefix_len
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack() -> Message {
        let mut m = Message::request(Kind::Ack, 7, [2, 0, 0, 0, 0, 1])
            .with(code::SUBNET_MASK, [255, 255, 255, 0])
            .with(code::ROUTER, [10, 9, 0, 1])
            .with(code::INTERFACE_MTU, 1400u16.to_be_bytes())
            .with(code::LEASE_TIME, 3600u32.to_be_bytes())
            .with(code::SERVER_ID, [10, 9, 0, 1]);
        m.reply = true;
        m.yiaddr = Ipv4Addr::new(10, 9, 0, 50);
        m
    }

    /// Issue 47, held: 605 and more malformed or foreign replies (every truncation of a good
    /// ACK's frame, every byte of its Ethernet, IP, UDP and BOOTP headers inverted, every
    /// message type, option lengths past the end, other transactions, clients and ports) are
    /// ignored, or reach `lease`, which refuses what a pod cannot take; none panics, none of
    /// another transaction or client is taken.
    #[test]
    fn held_47_malformed_and_foreign_replies_are_ignored_or_refused() {
        let client = [2, 0, 0, 0, 0, 1];
        let server = Ipv4Addr::new(10, 9, 0, 1);
        let reply_frame = |m: &Message| {
            let mut f = frame::build([9; 6], client, server, Ipv4Addr::BROADCAST, &m.encode());
            // `build` writes a client's frame (68 to 67): a server's goes the other way.
            f.swap(34, 36);
            f.swap(35, 37);
            f
        };
        let good = reply_frame(&ack());
        assert!(
            answer_of(&good, 7, client).is_some(),
            "the good ACK is read"
        );
        let headers = 14 + 20 + 8 + 240;
        let mut cases: Vec<(String, Vec<u8>, bool)> = Vec::new();
        for n in 0..good.len() {
            cases.push((format!("cut at {n}"), good[..n].to_vec(), true));
        }
        for i in 0..headers.min(good.len()) {
            let mut f = good.clone();
            f[i] ^= 0xff;
            // op, xid and chaddr (at 42, 46..50, 70..76): never someone else's answer.
            let foreign = i == 42 || (46..50).contains(&i) || (70..76).contains(&i);
            cases.push((format!("byte {i} inverted"), f, foreign));
        }
        for kind in 0..=255u8 {
            let mut m = ack();
            m.options.retain(|(c, _)| *c != code::MESSAGE_TYPE);
            cases.push((
                format!("type {kind}"),
                reply_frame(&m.with(code::MESSAGE_TYPE, [kind])),
                false,
            ));
        }
        // Each option's length byte set past the end of the message.
        let options_at = 14 + 20 + 8 + 240;
        let mut at = options_at;
        while at + 1 < good.len() && good[at] != code::END {
            let mut f = good.clone();
            f[at + 1] = 255;
            cases.push((format!("option {} overlong", good[at]), f, true));
            at += 2 + usize::from(good[at + 1]);
        }
        let mut other = ack();
        other.xid = 8;
        cases.push(("another transaction".into(), reply_frame(&other), true));
        let mut other = ack();
        other.chaddr = [2, 0, 0, 0, 0, 2];
        cases.push(("another client".into(), reply_frame(&other), true));
        let mut other = ack();
        other.reply = false;
        cases.push(("a request".into(), reply_frame(&other), true));
        cases.push((
            "a client's frame".into(),
            frame::build([9; 6], client, server, Ipv4Addr::BROADCAST, &ack().encode()),
            true,
        ));
        assert!(cases.len() >= 605, "{} cases", cases.len());
        let (mut taken, mut leased) = (0, 0);
        for (what, f, never) in &cases {
            let Some((m, src)) = answer_of(f, 7, client) else {
                continue;
            };
            assert!(!never, "{what}: taken");
            assert!(m.reply && m.xid == 7 && m.chaddr == client, "{what}");
            taken += 1;
            if m.kind() == Some(Kind::Ack) && lease("eth1", &m, server, src, client).is_ok() {
                leased += 1;
            }
        }
        // Some mutations (a field the client does not read) still make a good lease.
        assert!(
            taken > 0 && leased > 0 && taken < cases.len(),
            "{taken} {leased}"
        );
    }

    #[test]
    fn a_lease_from_an_ack() {
        let l = lease("eth1", &ack(), Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).unwrap();
        assert_eq!(l.address, Ipv4Addr::new(10, 9, 0, 50));
        assert_eq!(l.prefix_len, 24);
        assert_eq!(l.mtu, Some(1400));
        assert_eq!(l.lease_secs, Some(3600));
        assert_eq!(
            l.routes,
            vec![LeaseRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
                gateway: Ipv4Addr::new(10, 9, 0, 1)
            }]
        );
    }

    #[test]
    fn classless_routes_replace_the_router() {
        let m = ack().with(code::CLASSLESS_ROUTES, [8, 10, 10, 9, 0, 2]);
        let l = lease("eth1", &m, Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).unwrap();
        assert_eq!(l.routes.len(), 1);
        assert_eq!(l.routes[0].destination, Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(l.routes[0].gateway, Ipv4Addr::new(10, 9, 0, 2));
    }

    #[test]
    fn an_ack_without_a_mask_or_address_is_refused() {
        let mut m = ack();
        m.options.retain(|(c, _)| *c != code::SUBNET_MASK);
        let e = lease("eth1", &m, Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).unwrap_err();
        assert!(e.to_string().contains("subnet mask"), "{e}");
        let mut m = ack();
        m.yiaddr = Ipv4Addr::UNSPECIFIED;
        assert!(lease("eth1", &m, Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).is_err());
    }

    #[test]
    fn leases_a_pod_cannot_take_are_refused_naming_the_value() {
        let refused = |m: &Message, says: &str| {
            let e = lease("eth1", m, Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        };
        for (addr, says) in [
            (
                Ipv4Addr::new(224, 0, 0, 5),
                "224.0.0.5, which is not a unicast",
            ),
            (Ipv4Addr::BROADCAST, "not a unicast"),
            (
                Ipv4Addr::new(127, 0, 0, 9),
                "127.0.0.9, which is not a unicast",
            ),
            (
                Ipv4Addr::new(10, 9, 0, 255),
                "broadcast address of its subnet",
            ),
            (Ipv4Addr::new(10, 9, 0, 0), "network or broadcast"),
        ] {
            let mut m = ack();
            m.yiaddr = addr;
            refused(&m, says);
        }
        let mut m = ack();
        m.options.retain(|(c, _)| *c != code::SUBNET_MASK);
        refused(
            &m.with(code::SUBNET_MASK, [0, 0, 0, 0]),
            "subnet mask 0.0.0.0",
        );
        let mut m = ack();
        m.options.retain(|(c, _)| *c != code::ROUTER);
        refused(
            &m.with(code::ROUTER, [192, 168, 1, 1]),
            "the router 192.168.1.1 for 0.0.0.0/0, which is not another address of the leased subnet 10.9.0.0/24",
        );
        // Option 121: a /9 whose second (significant) octet has a bit past the prefix.
        refused(
            &ack().with(code::CLASSLESS_ROUTES, [9, 10, 192, 10, 9, 0, 2]),
            "the route 10.192.0.0/9 with host bits set",
        );
        let mut m = ack();
        m.options.retain(|(c, _)| *c != code::SERVER_ID);
        refused(&m, "no server identifier (option 54)");
        // A router of the subnet and a host bit-free route pass.
        let ok = ack().with(code::CLASSLESS_ROUTES, [16, 172, 16, 10, 9, 0, 7]);
        assert!(lease("eth1", &ok, Ipv4Addr::new(10, 9, 0, 1), [9; 6], [2; 6]).is_ok());
    }

    #[test]
    fn jitter_stays_within_a_second_or_a_quarter() {
        for _ in 0..200 {
            let j = jittered(Duration::from_secs(4));
            assert!(
                j >= Duration::from_secs(3) && j <= Duration::from_secs(5),
                "{j:?}"
            );
            let j = jittered(Duration::from_millis(400));
            assert!(j >= Duration::from_millis(300) && j <= Duration::from_millis(500));
        }
    }
}
