//! A packet socket bound to one interface: the client sends whole Ethernet frames from the
//! unspecified address (it has none yet) and reads the server's answer whatever its IP
//! destination, without a UDP port on the host (the host's own DHCP client may hold port 68)
//! and without an address or route on the interface.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// `ETH_P_IP`, in network order as `socket(2)` and `sockaddr_ll` want it.
fn eth_p_ip() -> u16 {
    (libc::ETH_P_IP as u16).to_be()
}

/// An `AF_PACKET`, `SOCK_RAW` socket receiving the IPv4 frames of one interface.
#[derive(Debug)]
pub(super) struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens it on the interface `ifindex` of the caller's network namespace.
    pub fn open(ifindex: u32) -> io::Result<PacketSocket> {
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(eth_p_ip()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor socket(2) just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ifindex = i32::try_from(ifindex).map_err(|_| io::Error::other("interface index"))?;
        // SAFETY: sockaddr_ll is plain data; all zero is a valid value.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = eth_p_ip();
        sa.sll_ifindex = ifindex;
        // SAFETY: `sa` is a valid sockaddr_ll and its size is passed with it.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::addr_of!(sa).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd })
    }

    /// Sends one whole frame (Ethernet header included) out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: the buffer is valid for its length for the duration of the call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != frame.len() {
            return Err(io::Error::other("the frame was sent in part"));
        }
        Ok(())
    }

    /// Receives one frame into `buf`, waiting until `deadline` at most: `Ok(None)` when none
    /// came.
    pub fn recv(&self, buf: &mut [u8], deadline: Instant) -> io::Result<Option<usize>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // Rounded up so a wait of under a millisecond does not spin.
            let ms = i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd, its count passed with it.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                continue;
            }
            // SAFETY: the buffer is valid for its length; MSG_DONTWAIT as poll said readable.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    continue;
                }
                return Err(e);
            }
            return Ok(Some(n as usize));
        }
    }
}
