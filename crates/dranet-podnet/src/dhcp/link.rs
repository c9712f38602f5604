//! The host interface DHCP runs on: found by name, brought up for the exchange when it is down,
//! and put back as it was.

use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkFlags, LinkMessage};

use super::DhcpError;
use crate::netns::{Netns, Rtnl};
use crate::podnet::messages::set_up;

/// A host interface, up while this is held; [`UpLink::restore`] puts a link that was down
/// down again.
pub(super) struct UpLink<'a> {
    rtnl: Rtnl,
    name: &'a str,
    /// The link as it was found.
    pub msg: LinkMessage,
    was_down: bool,
}

impl<'a> UpLink<'a> {
    /// Finds `name` in `host` and brings it up if it is down.
    pub async fn up(host: &Netns, name: &'a str) -> Result<UpLink<'a>, DhcpError> {
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
        if was_down {
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
    }
}
