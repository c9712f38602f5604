//! Ethernet frames carrying IPv4 UDP datagrams between the client's port 68 and the server's
//! port 67: what a packet socket sends and receives before the interface has an address.

use std::net::Ipv4Addr;

/// The client's UDP port.
pub(super) const CLIENT_PORT: u16 = 68;
/// The server's UDP port.
pub(super) const SERVER_PORT: u16 = 67;
/// The Ethernet broadcast address.
pub(super) const BROADCAST_MAC: [u8; 6] = [0xff; 6];

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETH_HEADER: usize = 14;
const IP_HEADER: usize = 20;
const UDP_HEADER: usize = 8;
const PROTO_UDP: u8 = 17;

/// A DHCP datagram as it came from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Received<'a> {
    /// The frame's source: the server, or the relay that forwarded its answer.
    pub src_mac: [u8; 6],
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// One frame from `src_mac`/`src_ip`:68 to `dst_mac`/`dst_ip`:67.
pub(super) fn build(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = UDP_HEADER + payload.len();
    let ip_len = IP_HEADER + udp_len;
    let mut f = Vec::with_capacity(ETH_HEADER + ip_len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    // IPv4: version 4, 20-byte header, TTL 64 (RFC 1700's default), UDP.
    let mut ip = [0u8; IP_HEADER];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = PROTO_UDP;
    ip[12..16].copy_from_slice(&src_ip.octets());
    ip[16..20].copy_from_slice(&dst_ip.octets());
    let sum = checksum(&[&ip]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut udp = [0u8; UDP_HEADER];
    udp[0..2].copy_from_slice(&CLIENT_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&SERVER_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    // The UDP checksum covers a pseudo-header of the addresses, protocol and length.
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src_ip.octets());
    pseudo[4..8].copy_from_slice(&dst_ip.octets());
    pseudo[9] = PROTO_UDP;
    pseudo[10..12].copy_from_slice(&(udp_len as u16).to_be_bytes());
    let sum = match checksum(&[&pseudo, &udp, payload]) {
        // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
        0 => 0xffff,
        s => s,
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&udp);
    f.extend_from_slice(payload);
    f
}

/// The DHCP payload of a frame sent from port 67 to port 68; `None` for any other frame (the
/// packet socket sees all of the interface's IPv4 traffic). Fragments are not reassembled: DHCP
/// servers answer in one datagram.
pub(super) fn parse(f: &[u8]) -> Option<Received<'_>> {
    if f.len() < ETH_HEADER + IP_HEADER + UDP_HEADER
        || u16::from_be_bytes([f[12], f[13]]) != ETHERTYPE_IPV4
    {
        return None;
    }
    let ip = &f[ETH_HEADER..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let more_or_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
    if ip[0] >> 4 != 4
        || ihl < IP_HEADER
        || ip[9] != PROTO_UDP
        || more_or_offset != 0
        || total > ip.len()
        || total < ihl + UDP_HEADER
    {
        return None;
    }
    let udp = &ip[ihl..total];
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if src_port != SERVER_PORT || dst_port != CLIENT_PORT || len < UDP_HEADER || len > udp.len() {
        return None;
    }
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&f[6..12]);
    Some(Received {
        src_mac,
        payload: &udp[UDP_HEADER..len],
    })
}

/// The Internet checksum (RFC 1071) of the parts taken as one byte string.
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in *p {
            match odd.take() {
                Some(hi) => sum += u32::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u32::from(hi) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_header_checksum_verifies() {
        let f = build(
            [2, 0, 0, 0, 0, 1],
            BROADCAST_MAC,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            b"hello",
        );
        // A header with its checksum in place sums to zero.
        assert_eq!(checksum(&[&f[14..34]]), 0);
        let mut pseudo = [0u8; 12];
        pseudo[4..8].copy_from_slice(&[255; 4]);
        pseudo[9] = PROTO_UDP;
        pseudo[11] = 13;
        assert_eq!(checksum(&[&pseudo, &f[34..]]), 0);
    }

    #[test]
    fn parses_a_servers_answer_only() {
        // A frame as the server sends it: ports swapped relative to ours.
        let mut f = build(
            [2, 0, 0, 0, 0, 9],
            BROADCAST_MAC,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::BROADCAST,
            b"payload",
        );
        assert!(parse(&f).is_none(), "client to server is not an answer");
        f[34..36].copy_from_slice(&SERVER_PORT.to_be_bytes());
        f[36..38].copy_from_slice(&CLIENT_PORT.to_be_bytes());
        let r = parse(&f).unwrap();
        assert_eq!(r.payload, b"payload");
        assert_eq!(r.src_mac, [2, 0, 0, 0, 0, 9]);
        // A fragment, a truncated frame and ARP are not.
        let mut frag = f.clone();
        frag[20] = 0x20;
        assert!(parse(&frag).is_none());
        assert!(parse(&f[..40]).is_none());
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(parse(&arp).is_none());
    }
}
