//! The claim's `status.devices`: what each pod's devices became (network data, conditions).

use super::*;
use dranet_core::Addressing;

/// How far a pod's attach has come, for the status of its claims' devices.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stage<'a> {
    /// Some of its netdevs are in the pod; the others are still being attached.
    Attaching,
    /// Every device is in the pod.
    Done,
    /// The attach failed (what was attached was given back); why, in the pod owner's terms,
    /// and whether it was SLAAC's wait for an address.
    Failed(&'a str, bool),
}

impl NetworkDriver {
    /// Writes the status of the pod's claims in the background (the attach does not wait on
    /// the API server): each device's entry as `stage` has it, a device in `attached` as it
    /// is in the pod.
    pub(super) fn report_status(
        &self,
        claims: &[Arc<ClaimRecord>],
        attached: &[(String, Attached)],
        stage: Stage<'_>,
    ) {
        let Some(board) = &self.status else {
            return;
        };
        let by_key: HashMap<&str, &Attached> =
            attached.iter().map(|(k, a)| (k.as_str(), a)).collect();
        let now = Time(jiff_now());
        for c in claims {
            let devices: Vec<AllocatedDeviceStatus> = c
                .devices
                .iter()
                .map(|d| {
                    let a = by_key.get(d.key(&c.uid).as_str()).copied();
                    match (stage, a) {
                        (Stage::Failed(reason, slaac), _) => failed_status(d, reason, slaac, &now),
                        (Stage::Attaching, None) => attaching_status(d, &now),
                        (_, a) => device_status(d, a, &now),
                    }
                })
                .collect();
            board.post(c.namespace.clone(), c.name.clone(), devices);
        }
    }
}

/// The claims' status writes: the newest entries of a claim win, one write in flight per claim,
/// so a pod of 16 NICs attaching one by one costs a few writes, not 16, and an older write
/// retried never lands after a newer one.
pub(super) struct StatusBoard {
    writer: StatusWriter,
    claims: Mutex<HashMap<(String, String), Slot>>,
}

#[derive(Default)]
struct Slot {
    /// Entries not yet written.
    newest: Option<Vec<AllocatedDeviceStatus>>,
    /// A task is writing this claim's entries.
    writing: bool,
}

impl StatusBoard {
    pub(super) fn new(writer: StatusWriter) -> Arc<Self> {
        Arc::new(Self {
            writer,
            claims: Mutex::new(HashMap::new()),
        })
    }

    /// Writes `devices` as claim `namespace/name`'s entries, after (and instead of) any not
    /// yet written.
    pub(super) fn post(
        self: &Arc<Self>,
        namespace: String,
        name: String,
        devices: Vec<AllocatedDeviceStatus>,
    ) {
        let key = (namespace, name);
        let mut claims = lock(&self.claims);
        let slot = claims.entry(key.clone()).or_default();
        slot.newest = Some(devices);
        if slot.writing {
            return;
        }
        slot.writing = true;
        drop(claims);
        tokio::spawn(self.clone().drain(key));
    }

    fn take(&self, key: &(String, String)) -> Option<Vec<AllocatedDeviceStatus>> {
        let mut claims = lock(&self.claims);
        let newest = claims.get_mut(key).and_then(|s| s.newest.take());
        if newest.is_none() {
            claims.remove(key);
        }
        newest
    }

    fn newer(&self, key: &(String, String)) -> bool {
        lock(&self.claims)
            .get(key)
            .is_some_and(|s| s.newest.is_some())
    }

    async fn drain(self: Arc<Self>, key: (String, String)) {
        let backoff = dranet_util::Backoff::new(
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(10),
        );
        while let Some(devices) = self.take(&key) {
            let (ns, name) = key.clone();
            for attempt in 0..STATUS_ATTEMPTS {
                match (self.writer)(ns.clone(), name.clone(), devices.clone()).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(claim = %format!("{ns}/{name}"), attempt, error = %e, "writing claim status failed");
                        tokio::time::sleep(backoff.delay(attempt)).await;
                        if self.newer(&key) {
                            // What would be retried is out of date.
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// A device of a pod whose other devices are attaching or attached: not ready yet.
fn attaching_status(d: &DeviceRecord, now: &Time) -> AllocatedDeviceStatus {
    let mut s = device_status(d, None, now);
    s.conditions = Some(vec![not_ready(
        "NetworkDeviceAttaching",
        format!("{} is being attached to the pod", d.device),
        now,
    )]);
    s
}

/// A device of a pod whose attach failed: not in the pod, and why; a device configured for SLAAC
/// when no address came, also `SLAACReady=False` (upstream's).
fn failed_status(d: &DeviceRecord, reason: &str, slaac: bool, now: &Time) -> AllocatedDeviceStatus {
    let mut s = device_status(d, None, now);
    let mut conditions = vec![not_ready(
        "NetworkDeviceAttachFailed",
        format!("the pod's network devices were not attached: {reason}"),
        now,
    )];
    if slaac && d.config.addressing() == Addressing::Slaac {
        conditions.push(Condition {
            status: "False".into(),
            ..condition(
                "SLAACReady",
                "AutoconfigurationTimedOut",
                reason.to_string(),
                now,
            )
        });
    }
    s.conditions = Some(conditions);
    s
}

fn not_ready(reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        status: "False".into(),
        ..condition("Ready", reason, message, now)
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

/// A device's network data when its netdev is in the pod (`attached`): its name, addresses and
/// MAC there. The claim status and the device metadata say the same.
pub(super) fn network_data(
    d: &DeviceRecord,
    attached: Option<&Attached>,
) -> Option<NetworkDeviceData> {
    let a = attached?;
    d.netdev.as_ref()?;
    Some(NetworkDeviceData {
        interface_name: Some(a.pod_name.clone()),
        ips: Some(a.addresses.clone()).filter(|v| !v.is_empty()),
        hardware_address: a.mac.clone(),
    })
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
            network_data = self::network_data(d, Some(a));
            if d.config.addressing() == Addressing::Slaac {
                // What the kernel autoconfigured: the pod's addresses the claim did not give.
                let auto: Vec<&str> = a
                    .addresses
                    .iter()
                    .filter(|x| !d.config.interface.addresses.contains(x))
                    .map(String::as_str)
                    .collect();
                conditions.push(condition(
                    "SLAACReady",
                    "SLAACReady",
                    format!("autoconfigured addresses: {}", auto.join(",")),
                    now,
                ));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    fn entries(tag: &str) -> Vec<AllocatedDeviceStatus> {
        vec![AllocatedDeviceStatus {
            driver: DRIVER_NAME.into(),
            pool: "node-a".into(),
            device: tag.into(),
            ..Default::default()
        }]
    }

    /// The first write blocks until released and the second fails: newer entries posted
    /// meanwhile replace those not yet written, and a failed write is not retried once newer
    /// entries wait.
    #[test]
    fn the_newest_entries_of_a_claim_win() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let written: Arc<StdMutex<Vec<String>>> = Arc::default();
            let release = Arc::new(tokio::sync::Notify::new());
            let calls = Arc::new(AtomicUsize::new(0));
            let writer: StatusWriter = {
                let (written, release, calls) = (written.clone(), release.clone(), calls.clone());
                Arc::new(move |_ns, _name, devices: Vec<AllocatedDeviceStatus>| {
                    let (written, release) = (written.clone(), release.clone());
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async move {
                        if n == 0 {
                            release.notified().await;
                        }
                        if n == 1 {
                            return Err("conflict".to_string());
                        }
                        lock(&written).push(devices[0].device.clone());
                        Ok(())
                    })
                })
            };
            let board = StatusBoard::new(writer);
            let post = |tag: &str| board.post("ml".into(), "c".into(), entries(tag));
            post("first");
            tokio::task::yield_now().await;
            post("second");
            post("third");
            release.notify_one();
            // "third" fails once (the second call); "fourth", posted while it is retried,
            // replaces it.
            while calls.load(Ordering::SeqCst) < 2 {
                tokio::task::yield_now().await;
            }
            post("fourth");
            for _ in 0..200 {
                if lock(&board.claims).is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert_eq!(*lock(&written), ["first", "fourth"]);
            assert!(lock(&board.claims).is_empty(), "nothing left to write");
        });
    }
}
