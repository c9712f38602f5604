//! The record of a prepared claim: which device each of its requests got, configured how, for
//! which pods.
//!
//! # Where it is kept, and why there
//!
//! It is the [`Prepared::state`](dranet_kubeletplugin::Prepared::state) the driver returns from
//! prepare. The kubelet plugin writes it into its checkpoint
//! (`<kubelet root>/plugins/dra.net/checkpoint`, on the kubelet's disk) before it answers the
//! kubelet, and hands it back when it starts
//! ([`Driver::restore_prepared`](dranet_kubeletplugin::Driver::restore_prepared)). So a prepared
//! claim has one record, written by the checkpoint's crash-safe protocol (a claim is "preparing"
//! before the driver runs and "prepared" only with this record), and the record lives exactly as
//! long as the kubelet's view of the claim: through daemon restarts and node reboots alike, the
//! kubelet answers its own retries from the checkpoint without asking the driver again.
//!
//! What describes this boot's kernel objects stays in the driver's state directory
//! (`--state-dir`, `/var/run/dranet`, a tmpfs): which sandbox holds which link (the attach
//! journal) and each sandbox's namespace and moved RDMA devices ([`crate::store`]). A reboot
//! deletes those namespaces, and the records with them.
//!
//! A record carries the boot it was made in (`/proc/sys/kernel/random/boot_id`). One from an
//! earlier boot is not trusted as it stands: interface names, RDMA link names and char device
//! numbers may differ after a reboot, and the device may be gone. Before a pod gets anything, it
//! is checked against the node as it is now ([`ClaimRecord::revalidate`]); a device that is not
//! there is an error on the pod, never a pod started without its NIC.
//!
//! # Profile records
//!
//! What a claim asked the profile provider for ([`ProfileRecord`]) must outlive the claim's own
//! record: it is written before the provider is asked (before the claim is prepared) and kept
//! after the claim is unprepared while the provider has not confirmed the release. It is a
//! driver record in the same checkpoint ([`dranet_kubeletplugin::DriverRecords`], under
//! [`ProfileRecord::key`]), so a reboot, which empties the state directory, does not make the
//! driver forget what the provider allocated.
//!
//! # Size
//!
//! The record holds each distinct configuration of the claim's devices once (devices refer to
//! it by index), in compact JSON, and may take at most [`MAX_RECORD_BYTES`]: prepare refuses a
//! claim whose record would be larger, and one read back larger (written by another version) is
//! set aside, with an error on its pods, rather than trusted.

use std::sync::Arc;

use dranet_core::{
    CharDevice, CloudProvider, Inventory, NetworkConfig, ProfileRequest, RuntimeHook,
};
use dranet_kubeletplugin::ClaimToPrepare;
use dranet_podnet::dhcp::Lease;
use serde::{Deserialize, Serialize};

use crate::claim::{self, PodRef};

/// Format version of the record.
pub const RECORD_VERSION: u32 = 1;

/// The most bytes a claim's record may take (compact JSON). Each device's configuration is
/// bounded ([`dranet_core::limits`]), and each distinct configuration is kept once: a claim of
/// a few NICs with a thousand routes each fits several times over.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// Where the boot's ID is read.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's ID; `None` where the kernel does not say (then no record is taken for one of
/// another boot).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A claim prepared on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRecord {
    /// The boot it was prepared (or last checked) in.
    pub boot_id: Option<String>,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
    /// The pods it is reserved for.
    pub pods: Vec<PodRef>,
    /// Its devices on this node.
    pub devices: Vec<DeviceRecord>,
}

/// One allocated device and what the pod gets of it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRecord {
    /// The claim's request it satisfies.
    pub request: String,
    /// Its pool.
    pub pool: String,
    /// Its device name (`pci-0101-00-00-0`).
    pub device: String,
    /// The allocation's share ID, if shared.
    pub share_id: Option<String>,
    /// The host interface that moves into the pod: none for an IB-only device, nor for a
    /// software RDMA link's netdev ([`crate::claim::software_rdma`]).
    pub netdev: Option<String>,
    /// Its merged, validated configuration; devices of one claim with the same configuration
    /// share it.
    pub config: Arc<NetworkConfig>,
    /// Its RDMA link (`mlx5_0`), if it has one.
    pub rdma: Option<String>,
    /// The RDMA character devices every container of the pod gets.
    pub char_devices: Vec<CharDevice>,
    /// The DHCP lease taken at prepare for a config with DHCP addressing: applied to `config`
    /// when the pod starts ([`dranet_podnet::dhcp::apply`]), released at unprepare.
    pub dhcp: Option<Lease>,
    /// The profile provider's runtime hook for this device, asked at prepare: run once for the
    /// pod ([`crate::attach::runtime`]).
    pub runtime_hook: Option<RuntimeHook>,
}

impl DeviceRecord {
    /// Its interface's name in the pod: the configuration's `interface.name`, else the host
    /// interface's; `None` without a network interface.
    pub fn pod_ifname(&self) -> Option<&str> {
        let netdev = self.netdev.as_deref()?;
        Some(match self.config.interface.name.as_str() {
            "" => netdev,
            named => named,
        })
    }

    /// Its runtime hook, if it has one, with the device as the hook is told of it; `claim` is
    /// `namespace/name`.
    pub fn hook_for_pod(
        &self,
        claim: &str,
        claim_uid: &str,
    ) -> Option<(RuntimeHook, crate::attach::runtime::HookDevice)> {
        let hook = self.runtime_hook.clone()?;
        Some((
            hook,
            crate::attach::runtime::HookDevice {
                claim: claim.to_string(),
                claim_uid: claim_uid.to_string(),
                request: self.request.clone(),
                device: self.device.clone(),
                interface: self.pod_ifname().map(str::to_string),
            },
        ))
    }

    /// The attachment key of this device in `claim_uid`: the podnet journal's key.
    pub fn key(&self, claim_uid: &str) -> String {
        format!("{claim_uid}.{}", self.device)
    }
}

/// Why a record cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Larger than [`MAX_RECORD_BYTES`].
    #[error(
        "its record takes {bytes} bytes (each distinct device configuration counted once), more \
         than the {max} one claim may take on a node: give its devices fewer routes, rules or \
         neighbors, or one configuration they share"
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Not the record's JSON.
    #[error("the record is not readable: {0}")]
    Json(#[source] serde_json::Error),
    /// A format this version does not read.
    #[error("record version {found} (this dranet reads {RECORD_VERSION})")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A device refers to a configuration the record does not have.
    #[error("device {device} refers to configuration {index} of {count}")]
    ConfigIndex {
        /// The device.
        device: String,
        /// The index it gives.
        index: usize,
        /// How many the record has.
        count: usize,
    },
    /// The record of another claim.
    #[error("the record is of claim UID {found}")]
    Uid {
        /// The UID it names.
        found: String,
    },
    /// No record at all (a claim prepared by a dranet that kept its records elsewhere).
    #[error("the checkpoint holds no record of what was prepared")]
    Missing,
    /// A profile record of a format this version does not read.
    #[error("profile record version {found} (this dranet reads {PROFILE_RECORD_VERSION})")]
    ProfileVersion {
        /// The version found.
        found: u32,
    },
}

/// The record as written: each distinct configuration once.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire {
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boot_id: Option<String>,
    namespace: String,
    name: String,
    uid: String,
    pods: Vec<PodRef>,
    configs: Vec<NetworkConfig>,
    devices: Vec<DeviceWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DeviceWire {
    request: String,
    pool: String,
    device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netdev: Option<String>,
    /// Index into `configs`.
    config: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rdma: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    char_devices: Vec<CharDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dhcp: Option<Lease>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    runtime_hook: Option<RuntimeHook>,
}

impl ClaimRecord {
    /// The record as the checkpoint keeps it; an error when it is larger than
    /// [`MAX_RECORD_BYTES`]. CPU work proportional to the configurations: call it off the async
    /// workers.
    pub fn to_state(&self) -> Result<serde_json::Value, RecordError> {
        let mut configs: Vec<&Arc<NetworkConfig>> = Vec::new();
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let config = match configs
                    .iter()
                    .position(|c| Arc::ptr_eq(c, &d.config) || **c == d.config)
                {
                    Some(i) => i,
                    None => {
                        configs.push(&d.config);
                        configs.len() - 1
                    }
                };
                DeviceWire {
                    request: d.request.clone(),
                    pool: d.pool.clone(),
                    device: d.device.clone(),
                    share_id: d.share_id.clone(),
                    netdev: d.netdev.clone(),
                    config,
                    rdma: d.rdma.clone(),
                    char_devices: d.char_devices.clone(),
                    dhcp: d.dhcp.clone(),
                    runtime_hook: d.runtime_hook.clone(),
                }
            })
            .collect();
        let wire = Wire {
            version: RECORD_VERSION,
            boot_id: self.boot_id.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            pods: self.pods.clone(),
            configs: configs.into_iter().map(|c| (**c).clone()).collect(),
            devices,
        };
        let bytes = serde_json::to_vec(&wire).map_err(RecordError::Json)?;
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge {
                bytes: bytes.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        serde_json::from_slice(&bytes).map_err(RecordError::Json)
    }

    /// Reads a record back from the checkpoint: one larger than [`MAX_RECORD_BYTES`], of another
    /// version or not the record's shape is an error.
    pub fn from_state(state: Option<&serde_json::Value>) -> Result<ClaimRecord, RecordError> {
        let state = state.ok_or(RecordError::Missing)?;
        let bytes = serde_json::to_vec(state).map_err(RecordError::Json)?;
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge {
                bytes: bytes.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        // The version first: another version's record may have another shape.
        if let Some(found) = state.get("version").and_then(serde_json::Value::as_u64)
            && found != u64::from(RECORD_VERSION)
        {
            return Err(RecordError::Version {
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        let wire: Wire = serde_json::from_slice(&bytes).map_err(RecordError::Json)?;
        if wire.version != RECORD_VERSION {
            return Err(RecordError::Version {
                found: wire.version,
            });
        }
        let configs: Vec<Arc<NetworkConfig>> = wire.configs.into_iter().map(Arc::new).collect();
        let devices = wire
            .devices
            .into_iter()
            .map(|d| {
                let config =
                    configs
                        .get(d.config)
                        .cloned()
                        .ok_or_else(|| RecordError::ConfigIndex {
                            device: d.device.clone(),
                            index: d.config,
                            count: configs.len(),
                        })?;
                Ok(DeviceRecord {
                    request: d.request,
                    pool: d.pool,
                    device: d.device,
                    share_id: d.share_id,
                    netdev: d.netdev,
                    config,
                    rdma: d.rdma,
                    char_devices: d.char_devices,
                    dhcp: d.dhcp,
                    runtime_hook: d.runtime_hook,
                })
            })
            .collect::<Result<Vec<_>, RecordError>>()?;
        Ok(ClaimRecord {
            boot_id: wire.boot_id,
            namespace: wire.namespace,
            name: wire.name,
            uid: wire.uid,
            pods: wire.pods,
            devices,
        })
    }

    /// Whether the record was made in the boot `now` (an unknown boot is never this one).
    pub fn of_boot(&self, now: Option<&str>) -> bool {
        now.is_some() && self.boot_id.as_deref() == now
    }

    /// The record of an earlier boot, checked against `inventory` (the node as it is now): each
    /// device must be there and take its configuration, and its interface, RDMA link and char
    /// devices are the ones it has now. The error says, in the claim's terms, what is missing.
    pub fn revalidate(&self, inventory: &Inventory, boot: Option<&str>) -> Result<Self, String> {
        let mut out = self.clone();
        for d in &mut out.devices {
            let dev = inventory.device(&d.device).ok_or_else(|| {
                format!(
                    "device {} (pool {}) was prepared before the node restarted and is not on the \
                     node now",
                    d.device, d.pool
                )
            })?;
            claim::check_device(&d.config, dev, inventory).map_err(|e| {
                format!(
                    "device {} was prepared before the node restarted and no longer takes its \
                     configuration: {e}",
                    d.device
                )
            })?;
            d.netdev = claim::pod_netdev(dev, &d.config).map(str::to_string);
            d.rdma = dev.rdma.as_ref().map(|l| l.name.clone());
            d.char_devices = dev
                .rdma
                .as_ref()
                .map(|l| l.char_devices.clone())
                .unwrap_or_default();
        }
        out.boot_id = boot.map(str::to_string);
        Ok(out)
    }
}

/// Format version of a [`ProfileRecord`] (the state directory's profile files of earlier
/// versions had the same shape and version).
pub const PROFILE_RECORD_VERSION: u32 = 1;

/// The profiles a claim asked the profile provider for (see [Profile records](self#profile-records)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileRecord {
    /// [`PROFILE_RECORD_VERSION`].
    pub version: u32,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
    /// One per device with a profile, as asked.
    pub leases: Vec<ProfileLease>,
    /// Set once the claim is unprepared (or its prepare failed): what is left here is owed to
    /// the provider, and released again until it is.
    #[serde(default)]
    pub releasing: bool,
}

/// One device's profile, as asked of the provider (and as released).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileLease {
    /// The device's name.
    pub device: String,
    /// The request the provider was sent.
    pub request: ProfileRequest,
}

/// The prefix of every profile record's key among the driver's records.
pub const PROFILE_KEY_PREFIX: &str = "profiles/";

impl ProfileRecord {
    /// The key of claim `uid`'s profile record among the driver's records.
    pub fn key(uid: &str) -> String {
        format!("{PROFILE_KEY_PREFIX}{uid}")
    }

    /// `namespace/name`, for messages.
    pub fn claim(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The record as the checkpoint keeps it.
    pub fn to_value(&self) -> Result<serde_json::Value, RecordError> {
        serde_json::to_value(self).map_err(RecordError::Json)
    }

    /// Reads a record back: one of another version or not the record's shape is an error.
    pub fn from_value(v: &serde_json::Value) -> Result<Self, RecordError> {
        if let Some(found) = v.get("version").and_then(serde_json::Value::as_u64)
            && found != u64::from(PROFILE_RECORD_VERSION)
        {
            return Err(RecordError::ProfileVersion {
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        let r: ProfileRecord = serde_json::from_value(v.clone()).map_err(RecordError::Json)?;
        if r.version != PROFILE_RECORD_VERSION {
            return Err(RecordError::ProfileVersion { found: r.version });
        }
        Ok(r)
    }
}

/// What each allocated device of `claim` gets: its configuration (the cloud's, then the claim's
/// and its DeviceClass's entries, merged and validated: [`claim::config_for`]) checked against the
/// device in `inventory`, and its interface, RDMA link and char devices. Devices with the same
/// configuration share one. CPU work that grows with what the claim's author wrote: call it off
/// the async workers. The error names the device, in the claim's terms.
pub fn device_records(
    claim: &ClaimToPrepare,
    inventory: &Inventory,
    cloud: &dyn CloudProvider,
) -> Result<Vec<DeviceRecord>, String> {
    let mut out: Vec<DeviceRecord> = Vec::with_capacity(claim.results.len());
    for r in &claim.results {
        let dev = inventory.device(&r.device).ok_or_else(|| {
            format!(
                "device {} (pool {}) is not on this node: it may have been unplugged or renamed \
                 since it was allocated",
                r.device, r.pool
            )
        })?;
        let base = claim::cloud_config(cloud, dev);
        let config =
            claim::config_for(claim, r, base).map_err(|e| format!("device {}: {e}", r.device))?;
        // A configuration naming a profile is checked whole, once the profile is under it.
        if config.profile.is_empty() {
            claim::check_device(&config, dev, inventory)
                .map_err(|e| format!("device {}: {e}", r.device))?;
        }
        let config = match out.iter().find(|d| *d.config == config) {
            Some(same) => same.config.clone(),
            None => Arc::new(config),
        };
        out.push(DeviceRecord {
            request: r.request.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            share_id: r.share_id.clone(),
            netdev: claim::pod_netdev(dev, &config).map(str::to_string),
            config,
            rdma: dev.rdma.as_ref().map(|l| l.name.clone()),
            char_devices: dev
                .rdma
                .as_ref()
                .map(|l| l.char_devices.clone())
                .unwrap_or_default(),
            dhcp: None,
            runtime_hook: None,
        });
    }
    Ok(out)
}

/// The pods of a record that cannot be read whole (best effort: its `pods` list alone), so the
/// error reaches them.
pub fn pods_of_unreadable(state: Option<&serde_json::Value>) -> Vec<PodRef> {
    state
        .and_then(|s| s.get("pods"))
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_core::RouteConfig;

    fn record(configs: [NetworkConfig; 3], shared: bool) -> ClaimRecord {
        let first = Arc::new(configs[0].clone());
        let devices = configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| DeviceRecord {
                request: "nic".into(),
                pool: "node".into(),
                device: format!("pci-0000-0{i}-00-0"),
                share_id: None,
                netdev: Some(format!("eth{i}")),
                config: if shared { first.clone() } else { Arc::new(c) },
                rdma: None,
                char_devices: vec![],
                dhcp: None,
                runtime_hook: None,
            })
            .collect();
        ClaimRecord {
            boot_id: Some("b1".into()),
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u".into(),
            pods: vec![PodRef {
                name: "p".into(),
                uid: "pu".into(),
            }],
            devices,
        }
    }

    fn routes(n: usize, gw: &str) -> NetworkConfig {
        NetworkConfig {
            routes: (0..n)
                .map(|i| RouteConfig {
                    destination: format!("10.{}.{}.0/24", i >> 8, i & 0xff),
                    gateway: gw.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_configuration_shared_by_devices_is_kept_once() {
        let big = routes(1000, "10.0.0.1");
        let r = record([big.clone(), big.clone(), big.clone()], false);
        let state = r.to_state().unwrap();
        assert_eq!(state["configs"].as_array().unwrap().len(), 1);
        let one = serde_json::to_vec(&state).unwrap().len();
        let back = ClaimRecord::from_state(Some(&state)).unwrap();
        assert_eq!(back, r);
        // Shared in memory too.
        assert!(Arc::ptr_eq(
            &back.devices[0].config,
            &back.devices[2].config
        ));
        // Three distinct configurations take three times the room.
        let other = record(
            [
                big.clone(),
                routes(1000, "10.0.0.2"),
                routes(1000, "10.0.0.3"),
            ],
            false,
        );
        let three = serde_json::to_vec(&other.to_state().unwrap())
            .unwrap()
            .len();
        assert!(three > 2 * one, "{one} vs {three}");
    }

    #[test]
    fn a_record_past_the_limit_is_neither_written_nor_read() {
        // 1,024 routes with long IPv6 destinations, three distinct ones: ~250 KB each in the
        // old pretty per-device form, still over 1 MiB for 8 devices if never shared.
        let v6 = |gw: u16| NetworkConfig {
            routes: (0..1024u16)
                .map(|i| RouteConfig {
                    destination: format!("2001:db8:{i:x}:{gw:x}:ffff:ffff:ffff:0/112"),
                    gateway: format!("2001:db8::{gw:x}"),
                    source: format!("2001:db8::{i:x}:{gw:x}"),
                    table: 1000,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut r = record([v6(1), v6(2), v6(3)], false);
        for i in 3..10 {
            let mut d = r.devices[0].clone();
            d.device = format!("pci-0000-{i:02}-00-0");
            d.config = Arc::new(v6(i));
            r.devices.push(d);
        }
        let e = r.to_state().unwrap_err();
        assert!(
            matches!(e, RecordError::TooLarge { bytes, max } if bytes > max && max == MAX_RECORD_BYTES),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("1048576") && msg.contains("fewer routes"),
            "{msg}"
        );
        // The same record read back (another version wrote it) is refused, not trusted.
        let state = serde_json::json!({
            "version": RECORD_VERSION, "namespace": "ns", "name": "c", "uid": "u",
            "pods": [], "configs": [{"interface": {"name": "x".repeat(MAX_RECORD_BYTES)}}],
            "devices": [],
        });
        assert!(matches!(
            ClaimRecord::from_state(Some(&state)),
            Err(RecordError::TooLarge { .. })
        ));
    }

    #[test]
    fn unreadable_records_say_why() {
        assert!(matches!(
            ClaimRecord::from_state(None),
            Err(RecordError::Missing)
        ));
        let mut state = record(Default::default(), true).to_state().unwrap();
        state["version"] = 9.into();
        let e = ClaimRecord::from_state(Some(&state)).unwrap_err();
        assert!(e.to_string().contains("record version 9"), "{e}");
        state["version"] = RECORD_VERSION.into();
        state["devices"][1]["config"] = 7.into();
        let e = ClaimRecord::from_state(Some(&state)).unwrap_err();
        assert!(e.to_string().contains("configuration 7 of 1"), "{e}");
        assert_eq!(pods_of_unreadable(Some(&state))[0].uid, "pu");
        state["extra"] = 1.into();
        assert!(matches!(
            ClaimRecord::from_state(Some(&state)),
            Err(RecordError::Json(_))
        ));
    }
}
