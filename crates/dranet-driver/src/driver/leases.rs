//! A claim's DHCP leases (`interface.addressing: DHCP`), as upstream: taken at prepare on the
//! host for each device's interface, kept in the claim's record, made the device's
//! configuration when the pod starts (with the interface's source table, see `source_tables`)
//! and released at unprepare (see [`dranet_podnet::dhcp`]).
//!
//! A lease is in the claim's record once prepare returns, and the kubelet's checkpoint keeps
//! that record before it answers; a daemon killed between the server's ACK and that write
//! leaves the lease to expire on the server, unreleased.

use dranet_core::Addressing;
use dranet_kubeletplugin::ClaimRef;
use dranet_podnet::dhcp::{self, Timing};
use dranet_podnet::parse_mac;

use super::NetworkDriver;
use crate::record::DeviceRecord;
use crate::{Error, Result};

/// A lease shorter than this is warned of at prepare: the pod may outlive it (no renewal).
const SHORT_LEASE_SECS: u32 = 24 * 3600;

impl NetworkDriver {
    /// Takes a lease for every device whose configuration asks for DHCP, side by side, and
    /// records it with the device. On any failure the leases taken are released and the claim
    /// fails, naming the device.
    pub(super) async fn take_leases(
        &self,
        claim: &ClaimRef,
        devices: &mut [DeviceRecord],
    ) -> Result<()> {
        let cref = claim.to_string();
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        let mut wanted = Vec::new();
        for (i, d) in devices.iter().enumerate() {
            if d.config.addressing() != Addressing::Dhcp {
                continue;
            }
            let Some(link) = d.netdev.clone() else {
                return Err(fail(format!(
                    "device {}: interface.addressing: DHCP needs a network interface, and the \
                     device has none",
                    d.device
                )));
            };
            let mac = match &d.config.interface.hardware_addr {
                Some(m) => Some(
                    parse_mac(m)
                        .ok()
                        .and_then(|b| <[u8; 6]>::try_from(b).ok())
                        .ok_or_else(|| {
                            fail(format!(
                                "device {}: interface.hardwareAddr {m:?} is not an Ethernet \
                                 MAC, which DHCP needs",
                                d.device
                            ))
                        })?,
                ),
                None => None,
            };
            wanted.push((i, link, mac));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let host = self.podnet.host();
        let taken =
            futures::future::join_all(wanted.into_iter().map(|(i, link, mac)| async move {
                let r = dhcp::acquire(host, &link, mac, Timing::default()).await;
                (i, r)
            }))
            .await;
        let mut error = None;
        for (i, r) in taken {
            let d = &mut devices[i];
            match r {
                Ok(lease) => {
                    tracing::info!(claim = %cref, device = %d.device, address = %lease.address, server = %lease.server_id, "DHCP lease taken");
                    if lease.lease_secs.is_some_and(|s| s < SHORT_LEASE_SECS) {
                        tracing::warn!(claim = %cref, device = %d.device, secs = ?lease.lease_secs, "the DHCP lease is shorter than a day and dranet does not renew it: the server may give the address away while the pod runs");
                    }
                    d.dhcp = Some(lease);
                }
                Err(e) => {
                    tracing::warn!(claim = %cref, device = %d.device, error = %e, "DHCP failed");
                    if error.is_none() {
                        error = Some(format!("device {}: {}", d.device, claim_terms(&e)));
                    }
                }
            }
        }
        if let Some(reason) = error {
            self.release_leases(&cref, devices).await;
            return Err(fail(reason));
        }
        Ok(())
    }

    /// Releases the leases of `devices`, and forgets them. Never fails: a lease that cannot be
    /// released (its interface gone, or still in a pod) is logged and left to expire.
    pub(super) async fn release_leases(&self, cref: &str, devices: &mut [DeviceRecord]) {
        for d in devices.iter_mut() {
            let (Some(lease), Some(link)) = (d.dhcp.take(), d.netdev.as_deref()) else {
                continue;
            };
            match dhcp::release(self.podnet.host(), link, &lease).await {
                Ok(()) => {
                    tracing::info!(claim = %cref, device = %d.device, address = %lease.address, server = %lease.server_id, "DHCP lease released");
                }
                Err(e) => {
                    tracing::warn!(claim = %cref, device = %d.device, address = %lease.address, error = %e, "DHCP lease not released; it expires on the server");
                }
            }
        }
    }
}

/// The claim owner's version of a DHCP failure: what happened, without the host's interface.
fn claim_terms(e: &dhcp::DhcpError) -> String {
    match e {
        dhcp::DhcpError::Timeout {
            secs,
            discovers,
            requests,
            naks,
            ..
        } => format!(
            "no DHCP lease within {secs} s ({discovers} DISCOVER and {requests} REQUEST sent, \
             {naks} NAK received): is a DHCP server on the device's network?"
        ),
        dhcp::DhcpError::Unusable { reason, .. } => format!("DHCP: {reason}"),
        dhcp::DhcpError::Io { step, source, .. } => format!("DHCP: {step}: {source}"),
    }
}
