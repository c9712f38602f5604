//! The claim's `status.devices`: what each pod's devices became (network data, conditions).

use super::*;

impl NetworkDriver {
    /// Writes the status of the pod's claims in the background: the hook does not wait on the
    /// API server.
    pub(super) fn report_status(
        &self,
        claims: &[Arc<ClaimRecord>],
        attached: &[(String, Attached)],
    ) {
        let Some(writer) = self.status.clone() else {
            return;
        };
        let by_key: HashMap<&str, &Attached> =
            attached.iter().map(|(k, a)| (k.as_str(), a)).collect();
        let now = Time(jiff_now());
        for c in claims {
            let devices: Vec<AllocatedDeviceStatus> = c
                .devices
                .iter()
                .map(|d| device_status(d, by_key.get(d.key(&c.uid).as_str()).copied(), &now))
                .collect();
            let (ns, name) = (c.namespace.clone(), c.name.clone());
            let writer = writer.clone();
            tokio::spawn(async move {
                let backoff = dranet_util::Backoff::new(
                    std::time::Duration::from_millis(200),
                    std::time::Duration::from_secs(10),
                );
                for attempt in 0..STATUS_ATTEMPTS {
                    match writer(ns.clone(), name.clone(), devices.clone()).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::warn!(claim = %format!("{ns}/{name}"), attempt, error = %e, "writing claim status failed");
                            tokio::time::sleep(backoff.delay(attempt)).await;
                        }
                    }
                }
            });
        }
    }
}

pub(super) fn jiff_now() -> dranet_kubeletplugin::k8s_openapi::jiff::Timestamp {
    dranet_kubeletplugin::k8s_openapi::jiff::Timestamp::now()
}

pub(super) fn condition(kind: &str, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: kind.into(),
        status: "True".into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// The status entry of one device: network data when its netdev is in the pod, and conditions.
pub fn device_status(
    d: &DeviceRecord,
    attached: Option<&Attached>,
    now: &Time,
) -> AllocatedDeviceStatus {
    let mut conditions = Vec::new();
    let mut network_data = None;
    match (attached, &d.netdev) {
        (Some(a), Some(_)) => {
            conditions.push(condition(
                "Ready",
                "NetworkDeviceReady",
                format!("{} is {} in the pod", d.device, a.pod_name),
                now,
            ));
            conditions.push(condition(
                "NetworkReady",
                "NetworkReady",
                format!("{} configured", a.pod_name),
                now,
            ));
            network_data = Some(NetworkDeviceData {
                interface_name: Some(a.pod_name.clone()),
                ips: Some(a.addresses.clone()).filter(|v| !v.is_empty()),
                hardware_address: a.mac.clone(),
            });
        }
        (None, None) if d.rdma.is_some() => conditions.push(condition(
            "Ready",
            "RDMAOnlyDeviceReady",
            format!(
                "{} character devices given to the pod",
                d.char_devices.len()
            ),
            now,
        )),
        _ => {}
    }
    if let Some(link) = &d.rdma {
        conditions.push(condition(
            "RDMALinkReady",
            "RDMALinkReady",
            format!("RDMA link {link} available to the pod"),
            now,
        ));
    }
    AllocatedDeviceStatus {
        driver: DRIVER_NAME.into(),
        pool: d.pool.clone(),
        device: d.device.clone(),
        share_id: d.share_id.clone(),
        conditions: Some(conditions).filter(|c| !c.is_empty()),
        network_data,
        data: None,
    }
}
