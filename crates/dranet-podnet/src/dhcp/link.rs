//! The host interface DHCP runs on: found by name, brought up for the exchange when it is down,
//! and put back as it was.
//!
//! A link brought up for DHCP is up on the host, on the segment of the pod that will get it,
//! whose users may send router advertisements. IPv6 is switched off on it first
//! (`disable_ipv6`), so the host takes no SLAAC address and no default route from that segment
//! while the exchange runs (DHCPv4 needs no IPv6), and switched back after the link is down
//! again.

use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkFlags, LinkMessage};

use super::DhcpError;
use crate::netns::{Netns, Rtnl};

/// The sysctl that switches IPv6 off on one link, under `/proc/sys/net`.
fn disable_ipv6_key(name: &str) -> String {
    format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6")
}
use crate::podnet::messages::set_up;

/// A host interface, up while this is held; [`UpLink::restore`] puts a link that was down
/// down again.
pub(super) struct UpLink<'a> {
    rtnl: Rtnl,
    name: &'a str,
    /// The link as it was found.
    pub msg: LinkMessage,
    was_down: bool,
    host: &'a Netns,
    /// `disable_ipv6` as it was, when this switched IPv6 off (a kernel without IPv6 has none).
    ipv6_was: Option<String>,
}

impl<'a> UpLink<'a> {
    /// Finds `name` in `host` and brings it up if it is down.
    pub async fn up(host: &'a Netns, name: &'a str) -> Result<UpLink<'a>, DhcpError> {
        let rtnl = host.rtnl().await.map_err(|e| DhcpError::Unusable {
            link: name.to_string(),
            reason: format!("the host's links cannot be read: {e}"),
        })?;
        let msg = rtnl
            .link_by_name(name)
            .await
            .map_err(DhcpError::io(name, "read the host's links"))?
            .ok_or_else(|| DhcpError::Unusable {
                link: name.to_string(),
                reason: "the interface is not on the host (still in a pod?)".into(),
            })?;
        let was_down = !msg.header.flags.contains(LinkFlags::Up);
        let mut ipv6_was = None;
        if was_down {
            ipv6_was = ipv6_off(host, name)?;
            rtnl.request(
                RouteNetlinkMessage::SetLink(set_up(msg.header.index, true)),
                0,
            )
            .await
            .map_err(DhcpError::io(name, "bring the interface up"))?;
        }
        Ok(UpLink {
            rtnl,
            name,
            msg,
            was_down,
            host,
            ipv6_was,
        })
    }

    /// Its name on the host.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its index.
    pub fn index(&self) -> u32 {
        self.msg.header.index
    }

    /// Puts it down again if it was down; a failure is logged (the host keeps an up link).
    pub async fn restore(self) {
        if !self.was_down {
            return;
        }
        let down = set_up(self.msg.header.index, false);
        if let Err(e) = self
            .rtnl
            .request(RouteNetlinkMessage::SetLink(down), 0)
            .await
        {
            tracing::warn!(link = self.name, error = %e, "could not put the interface down again after DHCP");
        }
        if let Some(was) = &self.ipv6_was {
            let key = disable_ipv6_key(self.name);
            let put = self
                .host
                .run(|| std::fs::write(&key, was))
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(e) = put {
                tracing::warn!(link = self.name, error = %e, "could not switch IPv6 back on after DHCP");
            }
        }
    }
}

/// Switches IPv6 off on `name` in `host`, returning the value to put back; `None` where the
/// kernel has no IPv6 for the link.
fn ipv6_off(host: &Netns, name: &str) -> Result<Option<String>, DhcpError> {
    let key = disable_ipv6_key(name);
    let unusable = |e: String| DhcpError::Unusable {
        link: name.to_string(),
        reason: format!("IPv6 could not be switched off before bringing it up: {e}"),
    };
    host.run(|| match std::fs::read_to_string(&key) {
        Ok(was) if was.trim() == "1" => Ok(None),
        Ok(was) => std::fs::write(&key, "1").map(|()| Some(was.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    })
    .map_err(|e| unusable(e.to_string()))?
    .map_err(|e| unusable(e.to_string()))
}
