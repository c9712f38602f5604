//! ResourceSlice objects for a node's pool, as dranet publishes them (`resource.k8s.io/v1`).

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{Device, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::attributes::{
    AttributeNameError, AttributeOptions, AttributeValue, Attributes, DRIVER_NAME,
    MAX_ATTRIBUTES_PER_DEVICE, MAX_VALUE_LEN, check_attribute_name, device_attributes,
    enforce_limits,
};
use crate::health::Fault;
use crate::{CloudProvider, DeviceIdentifiers, Inventory};

/// Most devices the API accepts in one ResourceSlice; larger pools are split.
pub const MAX_DEVICES_PER_SLICE: usize = 128;

/// Most devices the API accepts in a ResourceSlice in which any device has taints or consumes
/// counters (Kubernetes 1.35 on; 1.34 drops the taints instead). A node that taints one link of
/// a 65-device slice would otherwise have its whole slice refused, and lose every device.
pub const MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS: usize = 64;

/// A device as the slice limits see it: whether it lowers its slice's limit to
/// [`MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS`].
pub trait SliceDevice {
    /// True when the device has taints or consumes counters.
    fn has_taints_or_counters(&self) -> bool;
}

impl SliceDevice for Device {
    fn has_taints_or_counters(&self) -> bool {
        self.taints.as_ref().is_some_and(|t| !t.is_empty())
            || self
                .consumes_counters
                .as_ref()
                .is_some_and(|c| !c.is_empty())
    }
}

impl SliceDevice for PublishedDevice {
    fn has_taints_or_counters(&self) -> bool {
        self.fault.is_some()
    }
}

/// A device as it will be published: its name and final attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedDevice {
    /// DRA device name.
    pub name: String,
    /// Attributes after the API limits were applied.
    pub attributes: Attributes,
    /// Why the device cannot carry traffic now, if it cannot: published as its taint
    /// ([`Fault::taint`]), which a cluster without `DRADeviceTaints` drops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

impl PublishedDevice {
    /// The API's JSON for this device (list-valued attributes included).
    pub fn to_json(&self) -> serde_json::Value {
        let attrs: serde_json::Map<String, serde_json::Value> = self
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect();
        let mut v = serde_json::json!({ "name": self.name, "attributes": attrs });
        if let Some(f) = &self.fault {
            v["taints"] = serde_json::to_value([f.taint()]).unwrap_or_default();
        }
        v
    }

    /// The device as `k8s-openapi` v1 `Device`; list-valued attributes, which the v1.34 types
    /// cannot carry, are absent (use [`PublishedDevice::to_json`] to publish them).
    pub fn to_k8s(&self) -> Device {
        Device {
            name: self.name.clone(),
            attributes: Some(
                self.attributes
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.to_k8s()?)))
                    .collect::<BTreeMap<_, _>>(),
            ),
            taints: self.fault.as_ref().map(|f| vec![f.taint()]),
            ..Device::default()
        }
    }
}

/// The devices of an inventory with their final attributes, plus one warning per attribute left
/// out. The cloud's node-wide and per-device attributes are added before the limits are applied;
/// a device whose link or RDMA port is down carries its [`Fault`] (published as a taint).
pub fn published_devices(
    inv: &Inventory,
    opts: AttributeOptions,
    cloud: &dyn CloudProvider,
) -> (Vec<PublishedDevice>, Vec<String>) {
    let mut warnings = Vec::new();
    let node = cloud.node_attributes();
    let devices = inv
        .devices
        .iter()
        .map(|d| {
            let mut attributes = device_attributes(d, &inv.numa, opts);
            // A provider's name in dra.net's own domain is the same attribute as the name
            // alone: published alone, as the API's helper wants from 1.38.
            let short = |(k, v): (String, AttributeValue)| match own_domain(DRIVER_NAME, &k) {
                Some(s) => (s.to_string(), v),
                None => (k, v),
            };
            attributes.extend(node.iter().map(|(k, v)| (k.clone(), v.clone())).map(short));
            attributes.extend(
                cloud
                    .device_attributes(&DeviceIdentifiers::of(d))
                    .into_iter()
                    .map(short),
            );
            warnings.extend(enforce_limits(&d.name, &mut attributes));
            PublishedDevice {
                name: d.name.clone(),
                attributes,
                fault: Fault::of(d),
            }
        })
        .collect();
    (devices, warnings)
}

/// Why the API server would refuse a device of a ResourceSlice ([`validate_device`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device name is not a DNS label.
    #[error(
        "device name {device:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"
    )]
    NameNotDnsLabel {
        /// The device name.
        device: String,
    },
    /// More attributes and capacities than [`MAX_ATTRIBUTES_PER_DEVICE`].
    #[error(
        "device {device:?} has {attributes} attributes and {capacities} capacities; at most \
         {MAX_ATTRIBUTES_PER_DEVICE} together"
    )]
    TooManyAttributes {
        /// The device name.
        device: String,
        /// How many attributes it has.
        attributes: usize,
        /// How many capacities it has.
        capacities: usize,
    },
    /// An attribute name the API does not accept.
    #[error("device {device:?} attribute {attribute:?}: {error}")]
    AttributeName {
        /// The device name.
        device: String,
        /// The attribute name.
        attribute: String,
        /// What is wrong with it.
        #[source]
        error: AttributeNameError,
    },
    /// An attribute or capacity name qualified with the driver's own domain: the same name
    /// unqualified is already in that domain, and the kubelet plugin helper of Kubernetes 1.38
    /// refuses the qualified form.
    #[error(
        "device {device:?} {kind} {name:?} is qualified with the driver's own domain {driver:?}: \
         publish it as {short:?}"
    )]
    OwnDomain {
        /// The device name.
        device: String,
        /// `attribute` or `capacity`.
        kind: &'static str,
        /// The name as given.
        name: String,
        /// The driver.
        driver: String,
        /// The name without the domain.
        short: String,
    },
    /// An attribute with no value or with more than one.
    #[error(
        "device {device:?} attribute {attribute:?} must have exactly one of bool, int, string, version"
    )]
    NotOneValue {
        /// The device name.
        device: String,
        /// The attribute name.
        attribute: String,
    },
    /// A string or version value longer than [`MAX_VALUE_LEN`].
    #[error("device {device:?} attribute {attribute:?} is {len} bytes, more than {MAX_VALUE_LEN}")]
    ValueTooLong {
        /// The device name.
        device: String,
        /// The attribute name.
        attribute: String,
        /// The value's length in bytes.
        len: usize,
    },
    /// A capacity name the API does not accept.
    #[error("device {device:?} capacity {capacity:?}: {error}")]
    CapacityName {
        /// The device name.
        device: String,
        /// The capacity name.
        capacity: String,
        /// What is wrong with it.
        #[source]
        error: AttributeNameError,
    },
}

/// Why the API server would refuse this device in a `resource.k8s.io/v1` ResourceSlice, if it
/// would: the name must be a DNS label; attributes and capacities together at most
/// [`MAX_ATTRIBUTES_PER_DEVICE`], with valid (optionally domain-qualified) names; each attribute
/// exactly one value; strings and versions at most [`MAX_VALUE_LEN`] bytes.
pub fn validate_device(d: &Device) -> Result<(), DeviceError> {
    let label = !d.name.is_empty()
        && d.name.len() <= 63
        && d.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !d.name.starts_with('-')
        && !d.name.ends_with('-');
    if !label {
        return Err(DeviceError::NameNotDnsLabel {
            device: d.name.clone(),
        });
    }
    let attrs = d.attributes.as_ref().map_or(0, BTreeMap::len);
    let caps = d.capacity.as_ref().map_or(0, BTreeMap::len);
    if attrs + caps > MAX_ATTRIBUTES_PER_DEVICE {
        return Err(DeviceError::TooManyAttributes {
            device: d.name.clone(),
            attributes: attrs,
            capacities: caps,
        });
    }
    for (name, a) in d.attributes.iter().flatten() {
        check_attribute_name(name).map_err(|error| DeviceError::AttributeName {
            device: d.name.clone(),
            attribute: name.clone(),
            error,
        })?;
        let set = [
            a.bool.is_some(),
            a.int.is_some(),
            a.string.is_some(),
            a.version.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if set != 1 {
            return Err(DeviceError::NotOneValue {
                device: d.name.clone(),
                attribute: name.clone(),
            });
        }
        for v in [&a.string, &a.version].into_iter().flatten() {
            if v.len() > MAX_VALUE_LEN {
                return Err(DeviceError::ValueTooLong {
                    device: d.name.clone(),
                    attribute: name.clone(),
                    len: v.len(),
                });
            }
        }
    }
    for name in d.capacity.iter().flat_map(|c| c.keys()) {
        check_attribute_name(name).map_err(|error| DeviceError::CapacityName {
            device: d.name.clone(),
            capacity: name.clone(),
            error,
        })?;
    }
    Ok(())
}

/// [`validate_device`] for a device of `driver`: also refuses attribute and capacity names
/// qualified with the driver's own domain ([`DeviceError::OwnDomain`]), as the kubelet plugin
/// helper does from Kubernetes 1.38.
pub fn validate_device_of(driver: &str, d: &Device) -> Result<(), DeviceError> {
    validate_device(d)?;
    let attrs = d
        .attributes
        .iter()
        .flat_map(|a| a.keys())
        .map(|n| ("attribute", n));
    let caps = d
        .capacity
        .iter()
        .flat_map(|c| c.keys())
        .map(|n| ("capacity", n));
    for (kind, name) in attrs.chain(caps) {
        if let Some(short) = own_domain(driver, name) {
            return Err(DeviceError::OwnDomain {
                device: d.name.clone(),
                kind,
                name: name.clone(),
                driver: driver.to_string(),
                short: short.to_string(),
            });
        }
    }
    Ok(())
}

/// `name` without its domain, when the domain is `driver`'s own.
pub fn own_domain<'a>(driver: &str, name: &'a str) -> Option<&'a str> {
    name.strip_prefix(driver)?.strip_prefix('/')
}

/// One node's pool of one driver's devices (pool name = node name) and how it is cut into
/// ResourceSlices: slice `i` is named `<node>-<driver>-<i>` and holds at most
/// [`NodePool::max_devices_per_slice`] devices, and a node with no devices still gets one empty
/// slice, so the scheduler sees the pool.
///
/// The one builder of these slices, for any driver: [`resource_slices`] (what `dranet inventory`
/// previews) and `dranet-kubeletplugin`'s publisher both build with it. Owner references are the
/// publisher's to add: they need the Node's UID.
#[derive(Debug, Clone, Copy)]
pub struct NodePool<'a> {
    node: &'a str,
    driver: &'a str,
    max_devices_per_slice: usize,
}

impl<'a> NodePool<'a> {
    /// The pool of `driver`'s devices on `node`, [`MAX_DEVICES_PER_SLICE`] devices per slice.
    pub fn new(node: &'a str, driver: &'a str) -> Self {
        Self {
            node,
            driver,
            max_devices_per_slice: MAX_DEVICES_PER_SLICE,
        }
    }

    /// The same pool with at most `max` devices per slice; `None` unless `max` is
    /// 1..=[`MAX_DEVICES_PER_SLICE`].
    pub fn with_max_devices_per_slice(self, max: usize) -> Option<Self> {
        (1..=MAX_DEVICES_PER_SLICE).contains(&max).then_some(Self {
            max_devices_per_slice: max,
            ..self
        })
    }

    /// Most devices in one slice of this pool.
    pub fn max_devices_per_slice(&self) -> usize {
        self.max_devices_per_slice
    }

    /// The name of slice `index`: `<node>-<driver>-<index>`.
    pub fn slice_name(&self, index: usize) -> String {
        format!("{}-{}-{index}", self.node, self.driver)
    }

    /// The index of the slice named `name`, if it is one of this pool's names (`-01` is not:
    /// it is not how this pool names slice 1).
    pub fn slice_index(&self, name: &str) -> Option<usize> {
        name.strip_prefix(self.node)?
            .strip_prefix('-')?
            .strip_prefix(self.driver)?
            .strip_prefix('-')?
            .parse::<usize>()
            .ok()
            .filter(|i| self.slice_name(*i) == name)
    }

    /// `devices` cut into the pool's slices, in order: one empty slice when there are none.
    /// A slice holds at most [`NodePool::max_devices_per_slice`] devices, and at most
    /// [`MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS`] once one of them has taints or consumes
    /// counters: a slice is closed before the device that would break its limit.
    pub fn chunks<'d, T: SliceDevice>(&self, devices: &'d [T]) -> Vec<&'d [T]> {
        if devices.is_empty() {
            return vec![&[]];
        }
        let restricted_max = self
            .max_devices_per_slice
            .min(MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS);
        let mut out = Vec::new();
        let (mut start, mut restricted) = (0, false);
        for (i, d) in devices.iter().enumerate() {
            let with = restricted || d.has_taints_or_counters();
            let max = if with {
                restricted_max
            } else {
                self.max_devices_per_slice
            };
            if i - start + 1 > max {
                out.push(&devices[start..i]);
                start = i;
                restricted = d.has_taints_or_counters();
            } else {
                restricted = with;
            }
        }
        out.push(&devices[start..]);
        out
    }

    /// The spec of one slice of the pool at `generation`, of `slice_count` slices in all.
    pub fn spec(
        &self,
        generation: i64,
        slice_count: usize,
        devices: Vec<Device>,
    ) -> ResourceSliceSpec {
        ResourceSliceSpec {
            driver: self.driver.to_string(),
            node_name: Some(self.node.to_string()),
            pool: ResourcePool {
                name: self.node.to_string(),
                generation,
                resource_slice_count: i64::try_from(slice_count).unwrap_or(i64::MAX),
            },
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        }
    }

    /// Slice `index` of the pool at `generation`, of `slice_count` slices in all: its name and
    /// [`NodePool::spec`].
    pub fn slice(
        &self,
        index: usize,
        generation: i64,
        slice_count: usize,
        devices: Vec<Device>,
    ) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(self.slice_name(index)),
                ..ObjectMeta::default()
            },
            spec: self.spec(generation, slice_count, devices),
        }
    }
}

/// The ResourceSlices of one node's pool ([`NodePool`]) as API JSON: list-valued attributes
/// included, which the `k8s-openapi` v1.34 types cannot carry.
pub fn resource_slices(
    node: &str,
    driver: &str,
    devices: &[PublishedDevice],
    generation: i64,
) -> Vec<serde_json::Value> {
    pool_slices(NodePool::new(node, driver), devices, generation)
}

/// [`resource_slices`] of a pool cut as `pool` says ([`NodePool::with_max_devices_per_slice`]).
pub fn pool_slices(
    pool: NodePool<'_>,
    devices: &[PublishedDevice],
    generation: i64,
) -> Vec<serde_json::Value> {
    let chunks = pool.chunks(devices);
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let slice = pool.slice(i, generation, chunks.len(), Vec::new());
            let mut v = serde_json::to_value(&slice).unwrap_or_default();
            v["spec"]["devices"] = chunk.iter().map(PublishedDevice::to_json).collect();
            v
        })
        .collect()
}

#[cfg(test)]
mod validate_tests {
    use super::validate_device;
    use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

    fn dev(name: &str) -> Device {
        Device {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn names_in_the_drivers_own_domain_are_refused_with_the_short_form() {
        use super::validate_device_of;
        let mut d = dev("x");
        d.attributes = Some(
            [(
                "dra.net/model".to_string(),
                DeviceAttribute {
                    string: Some("m".into()),
                    ..Default::default()
                },
            )]
            .into(),
        );
        assert!(validate_device(&d).is_ok(), "the API server takes it");
        let e = validate_device_of("dra.net", &d).unwrap_err().to_string();
        assert!(
            e.contains("\"dra.net/model\"") && e.contains("publish it as \"model\""),
            "{e}"
        );
        // Another domain, or a domain that only starts like the driver's, is not the driver's.
        for other in ["azure.dra.net/model", "dra.network/model", "model"] {
            let mut d = dev("x");
            d.attributes = Some(
                [(
                    other.to_string(),
                    DeviceAttribute {
                        string: Some("m".into()),
                        ..Default::default()
                    },
                )]
                .into(),
            );
            assert!(validate_device_of("dra.net", &d).is_ok(), "{other}");
        }
        let mut d = dev("x");
        d.capacity = Some(
            [(
                "dra.net/children".to_string(),
                k8s_openapi::api::resource::v1::DeviceCapacity::default(),
            )]
            .into(),
        );
        let e = validate_device_of("dra.net", &d).unwrap_err().to_string();
        assert!(e.contains("capacity \"dra.net/children\""), "{e}");
    }

    #[test]
    fn what_the_api_server_refuses_is_named() {
        assert!(validate_device(&dev("pci-0101-00-00-0")).is_ok());
        for bad in ["", "Eth0", "eth_0", "-x", &"a".repeat(64)] {
            let e = validate_device(&dev(bad)).unwrap_err().to_string();
            assert!(e.contains("DNS label"), "{e}");
        }
        let mut d = dev("x");
        d.attributes = Some(
            (0..33)
                .map(|i| {
                    (
                        format!("a{i}"),
                        DeviceAttribute {
                            int: Some(i),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        );
        assert!(
            validate_device(&d)
                .unwrap_err()
                .to_string()
                .contains("at most 32")
        );
        let mut d = dev("x");
        d.attributes = Some(
            [(
                "dra.net/model".to_string(),
                DeviceAttribute {
                    string: Some("y".repeat(65)),
                    ..Default::default()
                },
            )]
            .into(),
        );
        assert!(
            validate_device(&d)
                .unwrap_err()
                .to_string()
                .contains("65 bytes")
        );
        d.attributes = Some([("9bad".to_string(), DeviceAttribute::default())].into());
        assert!(
            validate_device(&d)
                .unwrap_err()
                .to_string()
                .contains("\"9bad\"")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttributeValue;

    fn dev(i: usize) -> PublishedDevice {
        let mut attributes = Attributes::new();
        attributes.insert("rdma".into(), AttributeValue::Bool(true));
        attributes.insert(
            "resource.kubernetes.io/numaNode".into(),
            AttributeValue::Ints(vec![0, 1]),
        );
        PublishedDevice {
            name: format!("dev{i}"),
            attributes,
            fault: None,
        }
    }

    #[test]
    fn pools_are_split_at_128_and_named_stably() {
        let devs: Vec<_> = (0..300).map(dev).collect();
        let slices = resource_slices("node-a", "dra.net", &devs, 3);
        assert_eq!(slices.len(), 3);
        for (i, s) in slices.iter().enumerate() {
            assert_eq!(s["metadata"]["name"], format!("node-a-dra.net-{i}"));
            assert_eq!(s["spec"]["pool"]["resourceSliceCount"], 3);
            assert_eq!(s["spec"]["pool"]["generation"], 3);
            let parsed: ResourceSlice = serde_json::from_value(s.clone()).unwrap();
            assert_eq!(parsed.spec.node_name.as_deref(), Some("node-a"));
        }
        assert_eq!(slices[0]["spec"]["devices"].as_array().unwrap().len(), 128);
        assert_eq!(slices[2]["spec"]["devices"].as_array().unwrap().len(), 44);
        assert_eq!(
            slices[0]["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/numaNode"],
            serde_json::json!({"ints": [0, 1]})
        );
        assert_eq!(resource_slices("n", "dra.net", &[], 1).len(), 1);
    }

    #[test]
    fn a_pool_knows_its_own_slice_names_only() {
        let pool = NodePool::new("node-a", "dra.net");
        assert_eq!(pool.slice_index("node-a-dra.net-12"), Some(12));
        for foreign in [
            "node-a-dra.net-012",
            "node-a-dra.net-",
            "node-a-dra.net-x",
            "node-a-dra.netx-1",
            "node-ab-dra.net-1",
        ] {
            assert_eq!(pool.slice_index(foreign), None, "{foreign}");
        }
        assert!(pool.with_max_devices_per_slice(0).is_none());
        assert!(pool.with_max_devices_per_slice(129).is_none());
        let small = pool.with_max_devices_per_slice(2).unwrap();
        let three = [Dev(false), Dev(false), Dev(false)];
        assert_eq!(small.chunks(&three), vec![&three[..2], &three[2..]]);
        let empty: &[Dev] = &[];
        assert_eq!(small.chunks(empty), vec![empty]);
    }

    /// A device for chunking: tainted or not.
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Dev(bool);

    impl super::SliceDevice for Dev {
        fn has_taints_or_counters(&self) -> bool {
            self.0
        }
    }

    /// The sizes of the slices `devices` is cut into, checking each holds what its devices allow
    /// and that together they are `devices` in order.
    fn slice_sizes(pool: &NodePool<'_>, devices: &[Dev]) -> Vec<usize> {
        let chunks = pool.chunks(devices);
        let joined: Vec<Dev> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(joined, devices);
        for c in &chunks {
            let limit = if c.iter().any(|d| d.0) { 64 } else { 128 };
            assert!(c.len() <= limit, "{} devices, limit {limit}", c.len());
        }
        chunks.iter().map(|c| c.len()).collect()
    }

    #[test]
    fn a_tainted_device_lowers_its_slice_to_64() {
        let pool = NodePool::new("node-a", "dra.net");
        let node = |n: usize, tainted: &[usize]| -> Vec<Dev> {
            (0..n).map(|i| Dev(tainted.contains(&i))).collect()
        };
        // 65 devices, one link down: one slice of 65 is refused by the 1.36 API server.
        assert_eq!(slice_sizes(&pool, &node(65, &[])), [65]);
        assert_eq!(slice_sizes(&pool, &node(65, &[40])), [64, 1]);
        assert_eq!(slice_sizes(&pool, &node(65, &[64])), [64, 1]);
        assert_eq!(slice_sizes(&pool, &node(200, &[])), [128, 72]);
        // The taint closes the untainted run before it when the run is already past 63.
        assert_eq!(slice_sizes(&pool, &node(200, &[100])), [100, 64, 36]);
        assert_eq!(slice_sizes(&pool, &node(200, &[0, 199])), [64, 128, 8]);
        assert_eq!(slice_sizes(&pool, &node(64, &[0, 63])), [64]);
        // A smaller maximum stays the maximum.
        let small = pool.with_max_devices_per_slice(10).unwrap();
        assert_eq!(slice_sizes(&small, &node(25, &[3])), [10, 10, 5]);
    }

    #[test]
    fn a_faulty_device_is_published_tainted_and_a_healthy_one_is_not() {
        let healthy = dev(0);
        assert_eq!(healthy.to_k8s().taints, None);
        assert!(healthy.to_json().get("taints").is_none());
        let mut down = dev(1);
        down.fault = Fault::of_link("eth1", "down", Some(true));
        let taints = down.to_k8s().taints.unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, crate::health::UNHEALTHY_TAINT_KEY);
        assert_eq!(taints[0].effect, "NoSchedule");
        assert_eq!(
            down.to_json()["taints"],
            serde_json::json!([{"key": "dra.net/unhealthy", "value": "link-down", "effect": "NoSchedule"}])
        );
        // What the daemon saved before faults were published still reads back.
        let old: PublishedDevice =
            serde_json::from_value(serde_json::json!({"name": "d", "attributes": {}})).unwrap();
        assert_eq!(old.fault, None);
        let back: PublishedDevice =
            serde_json::from_value(serde_json::to_value(&down).unwrap()).unwrap();
        assert_eq!(back, down);
    }

    /// A provider naming an attribute in dra.net's own domain: published under the name alone,
    /// which the kubelet plugin's check (1.38's rule) takes.
    #[test]
    fn a_providers_name_in_the_drivers_domain_is_published_alone() {
        struct Rack;
        impl CloudProvider for Rack {
            fn name(&self) -> &str {
                "rack"
            }
            fn node_attributes(&self) -> Attributes {
                [
                    (
                        "dra.net/rack".to_string(),
                        AttributeValue::String("r7".into()),
                    ),
                    (
                        "azure.dra.net/zone".to_string(),
                        AttributeValue::String("z".into()),
                    ),
                ]
                .into()
            }
        }
        let mut inv = Inventory::default();
        inv.devices.push(crate::NetworkDevice {
            name: "eth1".into(),
            pci: None,
            netdev: Some(crate::Netdev {
                name: "eth1".into(),
                ..Default::default()
            }),
            rdma: None,
        });
        let (devs, warnings) = published_devices(&inv, AttributeOptions::default(), &Rack);
        assert!(warnings.is_empty(), "{warnings:?}");
        let a = &devs[0].attributes;
        assert_eq!(a.get("rack"), Some(&AttributeValue::String("r7".into())));
        assert!(!a.contains_key("dra.net/rack"));
        assert!(a.contains_key("azure.dra.net/zone"));
        assert!(super::validate_device_of(DRIVER_NAME, &devs[0].to_k8s()).is_ok());
    }

    #[test]
    fn published_devices_carry_the_fault_of_the_scan() {
        let mut inv = Inventory::default();
        // An admin-down link (a NIC nobody configured on the host) is not a fault; an up link
        // without carrier is.
        for (name, st, up) in [
            ("up0", "up", true),
            ("down0", "down", true),
            ("off0", "down", false),
        ] {
            inv.devices.push(crate::NetworkDevice {
                name: name.into(),
                pci: None,
                netdev: Some(crate::Netdev {
                    name: name.into(),
                    operstate: Some(st.into()),
                    admin_up: Some(up),
                    ..Default::default()
                }),
                rdma: None,
            });
        }
        let (devs, _) = published_devices(&inv, AttributeOptions::default(), &crate::NoCloud);
        assert_eq!(devs[0].fault, None);
        assert_eq!(devs[1].fault, Fault::of_link("down0", "down", Some(true)));
        assert_eq!(devs[2].fault, None);
    }

    #[test]
    fn k8s_device_drops_only_list_values() {
        let d = dev(0).to_k8s();
        let attrs = d.attributes.unwrap();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs["rdma"].bool, Some(true));
    }
}
