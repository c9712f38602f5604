//! Publication: what this node offers the scheduler, as one pure function of the scan and the
//! operator's policy.
//!
//! [`publication`] takes the inventory, the cloud's attributes, the [`Policy`] (`--filter`,
//! `--share-filter`, `--share-children`, `--feature-gates`), the devices in use and the state of
//! their links in pods, and gives the devices to publish, the devices left out with their
//! [`Reason`], and typed [`Warning`]s. The daemon, `dranet inventory` and `dranet check --sysfs`
//! all call it, so what the CLI previews is what the daemon publishes. No I/O.

mod filter;
mod policy;
mod report;
mod select;

use std::collections::{BTreeMap, BTreeSet};

use dranet_core::health::Fault;
use dranet_core::k8s_openapi::api::resource::v1::Device;
use dranet_core::slice::{PublishedDevice, published_devices};
use dranet_core::{CloudProvider, DRIVER_NAME, Inventory};

pub use filter::{DEFAULT_FILTER, FilterError, default_filter_leaves_out, keeps};
pub use policy::{
    FEATURE_GATES, FeatureGateError, FeatureGates, Policy, PolicyError, PolicyFlags, Share,
};
pub use report::{Excluded, Reason, Warning};

/// The state of the netdevs of devices in use, in their pods' namespaces, by device: `None` when
/// the link is up there, absent when the pod could not be read.
pub type PodFaults = BTreeMap<String, Option<Fault>>;

/// The devices prepared for claims, and how each was last published.
#[derive(Debug, Clone, Copy)]
pub struct InUse<'a> {
    /// The claim (`namespace/name`) holding each device in use, by device.
    pub claims: &'a BTreeMap<String, String>,
    /// The devices as last published, by name.
    pub previous: &'a BTreeMap<String, PublishedDevice>,
}

static NO_CLAIMS: BTreeMap<String, String> = BTreeMap::new();
static NOTHING_PUBLISHED: BTreeMap<String, PublishedDevice> = BTreeMap::new();

impl InUse<'static> {
    /// Nothing in use, nothing published before: a node seen from outside (`dranet inventory`,
    /// `dranet check --sysfs`) or a daemon's first publication.
    pub fn none() -> Self {
        InUse {
            claims: &NO_CLAIMS,
            previous: &NOTHING_PUBLISHED,
        }
    }
}

/// What a node publishes, and what it leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The devices to publish, by name.
    pub devices: BTreeMap<String, PublishedDevice>,
    /// Those of `devices` offered for sharing (`--share-filter`).
    pub shared: BTreeSet<String>,
    /// How many claims may share each of `shared` (`--share-children`).
    pub children: u32,
    /// The devices found and not published, discovery's first, each with its reason.
    pub excluded: Vec<Excluded>,
    /// What the operator should know, each once.
    pub warnings: BTreeSet<Warning>,
}

/// Devices per ResourceSlice: the API's limit for a slice with a tainted device, always. dranet
/// taints a device whenever its link loses its carrier; slices cut at 64 from the start keep
/// every device in its slice when that happens, so a flapping link rewrites one slice (no
/// devices moving between slices, no new pool generation), and no slice is ever over the limit.
pub const DEVICES_PER_SLICE: usize =
    dranet_core::slice::MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS;

/// The publication of `inv` under `policy`. `cloud` gives the node's and each device's cloud
/// attributes (brought up to date beforehand); `in_use` keeps the devices in use as they were
/// published; `pod_faults` taints a device in use whose link is down in its pod.
pub fn publication(
    inv: &Inventory,
    cloud: &dyn CloudProvider,
    policy: &Policy,
    in_use: &InUse<'_>,
    pod_faults: &PodFaults,
) -> Publication {
    let (scanned, attribute_warnings) = published_devices(inv, policy.attributes, cloud);
    let mut warnings: BTreeSet<Warning> = inv.warnings.iter().cloned().map(Warning::Scan).collect();
    warnings.extend(attribute_warnings.into_iter().map(Warning::Attribute));
    let mut excluded: Vec<Excluded> = inv
        .excluded
        .iter()
        .map(|e| Excluded {
            device: e.name.clone(),
            reason: Reason::Discovery(e.reason.clone()),
        })
        .collect();
    let mut devices = select::select(scanned, policy, in_use, &mut excluded, &mut warnings);
    select::take_pod_faults(&mut devices, in_use.claims, pod_faults);
    let shared = select::shared(&devices, policy, &mut warnings);
    // A shared device also publishes its `children` capacity, counted with the attributes.
    for name in &shared {
        if let Some(d) = devices.get_mut(name) {
            let trimmed = dranet_core::attributes::enforce_limits_beside(
                name,
                &mut d.attributes,
                dranet_core::share::CAPACITIES,
            );
            warnings.extend(trimmed.into_iter().map(Warning::Attribute));
        }
    }
    Publication {
        devices,
        shared,
        children: policy.share.as_ref().map_or(0, |s| s.children),
        excluded,
        warnings,
    }
}

impl Publication {
    /// The devices as the kubelet plugin publishes them, shaped for sharing where offered.
    pub fn k8s_devices(&self) -> Vec<Device> {
        self.devices
            .values()
            .map(|d| self.shape(d.to_k8s()))
            .collect()
    }

    fn shape(&self, d: Device) -> Device {
        if self.shared.contains(&d.name) {
            dranet_core::share::shared(d, self.children)
        } else {
            d
        }
    }

    /// The node's ResourceSlices as API JSON (list-valued attributes included), as `dranet
    /// inventory` prints them and `dranet check` allocates from them.
    pub fn resource_slices(&self, node: &str) -> Vec<serde_json::Value> {
        let devices: Vec<PublishedDevice> = self.devices.values().cloned().collect();
        let pool = dranet_core::slice::NodePool::new(node, DRIVER_NAME)
            .with_max_devices_per_slice(DEVICES_PER_SLICE)
            .unwrap_or_else(|| dranet_core::slice::NodePool::new(node, DRIVER_NAME));
        let mut slices = dranet_core::slice::pool_slices(pool, &devices, 1);
        if self.shared.is_empty() {
            return slices;
        }
        for slice in &mut slices {
            let Some(list) = slice["spec"]["devices"].as_array_mut() else {
                continue;
            };
            for d in list.iter_mut() {
                let name = d["name"].as_str().unwrap_or_default().to_string();
                if !self.shared.contains(&name) {
                    continue;
                }
                let shaped = self.shape(Device {
                    name,
                    ..Device::default()
                });
                let shaped = serde_json::to_value(shaped).unwrap_or_default();
                for key in ["allowMultipleAllocations", "capacity"] {
                    d[key] = shaped[key].clone();
                }
            }
        }
        slices
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dranet_core::attributes::{AttributeValue, names};
    use dranet_core::{Netdev, NetworkDevice, NoCloud};

    /// A published device with an ifName and, maybe, a link type.
    pub(crate) fn published(name: &str, kind: Option<&str>) -> PublishedDevice {
        let mut attributes = dranet_core::attributes::Attributes::new();
        attributes.insert(
            format!("dra.net/{}", names::IF_NAME),
            AttributeValue::String(name.into()),
        );
        if let Some(k) = kind {
            attributes.insert(
                format!("dra.net/{}", names::TYPE),
                AttributeValue::String(k.into()),
            );
        }
        PublishedDevice {
            name: name.into(),
            attributes,
            fault: None,
        }
    }

    fn netdev(name: &str, kind: &str) -> NetworkDevice {
        NetworkDevice {
            name: name.into(),
            pci: None,
            netdev: Some(Netdev {
                name: name.into(),
                kind: Some(kind.into()),
                operstate: Some("up".into()),
                admin_up: Some(true),
                ..Default::default()
            }),
            rdma: None,
        }
    }

    /// A node with an IPoIB interface, a bridge and a veth, and the uplink left out by discovery.
    fn node() -> Inventory {
        let mut devices = vec![
            netdev("ib0", "ipoib"),
            netdev("cni0", "bridge"),
            netdev("veth1", "veth"),
        ];
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        Inventory {
            devices,
            excluded: vec![dranet_core::Excluded {
                name: "eth0".into(),
                reason: "uplink: IPv4 default via 10.0.0.1".into(),
            }],
            warnings: vec!["cannot read x".into(), "cannot read x".into()],
            ..Default::default()
        }
    }

    fn names(p: &Publication) -> Vec<&str> {
        p.devices.keys().map(String::as_str).collect()
    }

    fn policy(filter: &str, share_filter: &str) -> Policy {
        Policy::from_flags(&PolicyFlags {
            filter,
            share_filter,
            share_children: 4,
            feature_gates: "",
        })
        .unwrap()
    }

    fn run(policy: &Policy, in_use: &InUse<'_>, faults: &PodFaults) -> Publication {
        publication(&node(), &NoCloud, policy, in_use, faults)
    }

    #[test]
    fn the_default_filter_leaves_out_virtual_links_with_their_reason() {
        let p = run(
            &Policy::from_flags(&PolicyFlags::default()).unwrap(),
            &InUse::none(),
            &PodFaults::new(),
        );
        assert_eq!(names(&p), ["ib0"]);
        let why: Vec<String> = p.excluded.iter().map(ToString::to_string).collect();
        assert_eq!(why.len(), 3, "{why:?}");
        // Discovery's exclusions first, as it gave them.
        assert_eq!(why[0], "eth0: uplink: IPv4 default via 10.0.0.1");
        assert_eq!(
            p.excluded[1].reason,
            Reason::DefaultFilter {
                kind: "bridge".into()
            }
        );
        assert!(
            why[1].starts_with("cni0: a virtual interface of type bridge, without a PCI function"),
            "{why:?}"
        );
        assert_eq!(p.excluded[2].device, "veth1");
        assert!(p.excluded[0].reason.by_discovery() && !p.excluded[1].reason.by_discovery());
        // Without a filter, every scanned device.
        let all = run(&policy("", ""), &InUse::none(), &PodFaults::new());
        assert_eq!(names(&all), ["cni0", "ib0", "veth1"]);
        assert_eq!(all.excluded.len(), 1);
    }

    #[test]
    fn an_operators_filter_says_so_and_a_failing_one_warns_once_per_device() {
        let p = run(
            &policy(r#"device.attributes["dra.net"].ifName != "veth1""#, ""),
            &InUse::none(),
            &PodFaults::new(),
        );
        assert_eq!(names(&p), ["cni0", "ib0"]);
        assert_eq!(p.excluded[1].reason, Reason::Filter);
        assert_eq!(p.excluded[1].to_string(), "veth1: left out by --filter");

        let p = run(
            &policy(r#"device.attributes["dra.net"].nosuch == 1"#, ""),
            &InUse::none(),
            &PodFaults::new(),
        );
        assert!(p.devices.is_empty());
        assert!(matches!(p.excluded[1].reason, Reason::FilterFailed(_)));
        let failed: Vec<String> = p
            .warnings
            .iter()
            .filter(|w| matches!(w, Warning::Filter { .. }))
            .map(ToString::to_string)
            .collect();
        assert_eq!(failed.len(), 3, "{failed:?}");
        assert!(
            failed[0].starts_with("device cni0 is not published: --filter failed on it: "),
            "{failed:?}"
        );
    }

    #[test]
    fn warnings_are_values_and_each_is_there_once() {
        let p = run(&policy("", ""), &InUse::none(), &PodFaults::new());
        // Discovery gave the same sentence twice.
        assert_eq!(
            p.warnings.iter().collect::<Vec<_>>(),
            [&Warning::Scan("cannot read x".into())]
        );
        assert_eq!(
            Warning::Share {
                device: "a".into(),
                error: "e".into()
            }
            .to_string(),
            "device a is published unshared: --share-filter failed on it: e"
        );
    }

    /// A cloud that gives every device `n` attributes of its own.
    struct Wordy(usize);

    impl CloudProvider for Wordy {
        fn name(&self) -> &str {
            "wordy"
        }
        fn node_attributes(&self) -> dranet_core::Attributes {
            (0..self.0)
                .map(|i| {
                    let key = format!("cloud.example.com/a{i:02}");
                    (key, AttributeValue::Int(i64::try_from(i).unwrap_or(0)))
                })
                .collect()
        }
    }

    /// Issue 47 M7: 30 attributes of a webhook or cloud on every device (named to sort before
    /// dranet's own) push neither `type` nor `ibOnly` out: the vxlan and the veth stay out of
    /// the default filter's publication, with their link type; the IPoIB interface and an RDMA
    /// link without a netdev stay in.
    #[test]
    fn a_webhooks_thirty_attributes_publish_no_vxlan_and_hide_no_rdma_link() {
        struct Early;
        impl CloudProvider for Early {
            fn name(&self) -> &str {
                "early"
            }
            fn node_attributes(&self) -> dranet_core::Attributes {
                (0..30)
                    .map(|i| (format!("a.example.com/a{i:02}"), AttributeValue::Int(i)))
                    .collect()
            }
        }
        let mut inv = node();
        inv.devices.push(netdev("flannel.1", "vxlan"));
        inv.devices.push(NetworkDevice {
            name: "mlx5_3".into(),
            pci: None,
            netdev: None,
            rdma: Some(dranet_core::RdmaLink {
                name: "mlx5_3".into(),
                pci: None,
                parent_netdev: None,
                ports: Vec::new(),
                char_devices: Vec::new(),
            }),
        });
        let default = Policy::from_flags(&PolicyFlags::default()).unwrap();
        let p = publication(&inv, &Early, &default, &InUse::none(), &PodFaults::new());
        assert_eq!(names(&p), ["ib0", "mlx5_3"]);
        let flannel = p.excluded.iter().find(|e| e.device == "flannel.1").unwrap();
        assert_eq!(
            flannel.reason,
            Reason::DefaultFilter {
                kind: "vxlan".into()
            }
        );
        assert!(p.devices.values().all(|d| d.attributes.len() == 32));
    }

    #[test]
    fn a_shared_device_keeps_attributes_and_capacity_within_the_limit() {
        let share = policy("", r#"device.attributes["dra.net"].type == "bridge""#);
        let p = publication(
            &node(),
            &Wordy(40),
            &share,
            &InUse::none(),
            &PodFaults::new(),
        );
        let cni0 = &p.devices["cni0"];
        assert_eq!(
            cni0.attributes.len(),
            31,
            "31 attributes and the children capacity"
        );
        let veth = &p.devices["veth1"];
        assert_eq!(veth.attributes.len(), 32, "not shared: 32 attributes");
        assert!(p.warnings.iter().any(|w| {
            w.to_string()
                .contains("device cni0: attribute \"cloud.example.com/a")
                && w.to_string().contains("and capacities (1)")
        }));
        let k8s = p.k8s_devices();
        let cni0 = k8s.iter().find(|d| d.name == "cni0").unwrap();
        let count = cni0.attributes.as_ref().map_or(0, |a| a.len())
            + cni0.capacity.as_ref().map_or(0, |c| c.len());
        assert_eq!(count, 32);
    }

    #[test]
    fn the_share_filter_offers_its_devices_for_sharing_with_the_children_capacity() {
        let p = run(
            &policy("", r#"device.attributes["dra.net"].type == "bridge""#),
            &InUse::none(),
            &PodFaults::new(),
        );
        assert_eq!(p.shared, BTreeSet::from(["cni0".to_string()]));
        let k8s = p.k8s_devices();
        let cni0 = k8s.iter().find(|d| d.name == "cni0").unwrap();
        assert_eq!(cni0.allow_multiple_allocations, Some(true));
        assert_eq!(cni0.capacity.as_ref().unwrap()["children"].value.0, "4");
        let veth = k8s.iter().find(|d| d.name == "veth1").unwrap();
        assert_eq!(veth.allow_multiple_allocations, None);
        // The JSON slices say the same.
        let slices = p.resource_slices("n1");
        let devs = slices[0]["spec"]["devices"].as_array().unwrap();
        let shared: Vec<&str> = devs
            .iter()
            .filter(|d| d["allowMultipleAllocations"] == true)
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(shared, ["cni0"]);
        assert_eq!(
            devs.iter().find(|d| d["name"] == "cni0").unwrap()["capacity"]["children"]["value"],
            "4"
        );
        // A share filter that fails publishes the device unshared and says so.
        let p = run(
            &policy("", r#"device.attributes["dra.net"].nosuch == 1"#),
            &InUse::none(),
            &PodFaults::new(),
        );
        assert!(p.shared.is_empty() && p.devices.len() == 3);
        assert!(
            p.warnings.contains(&Warning::Share {
                device: "veth1".into(),
                error: p
                    .warnings
                    .iter()
                    .find_map(|w| match w {
                        Warning::Share { device, error } if device == "veth1" =>
                            Some(error.clone()),
                        _ => None,
                    })
                    .unwrap(),
            })
        );
    }

    #[test]
    fn devices_in_use_keep_their_description_and_take_their_pods_faults() {
        let default = Policy::from_flags(&PolicyFlags::default()).unwrap();
        // veth1 was published (another filter, before) and is in a pod; "gone" moved into its
        // pod and the scan no longer sees it.
        let mut before = published("veth1", Some("veth"));
        before
            .attributes
            .insert("dra.net/mark".into(), AttributeValue::Bool(true));
        let gone = published("gone", None);
        let previous = BTreeMap::from([
            ("veth1".to_string(), before.clone()),
            ("gone".to_string(), gone.clone()),
        ]);
        let claims = BTreeMap::from([
            ("veth1".to_string(), "ns/a".to_string()),
            ("gone".to_string(), "ns/b".to_string()),
        ]);
        let in_use = InUse {
            claims: &claims,
            previous: &previous,
        };
        let down = Fault::of_link("net1", "down", Some(true));
        let faults = PodFaults::from([
            ("gone".to_string(), down.clone()),
            // Not in use: ignored.
            ("ib0".to_string(), down.clone()),
        ]);
        let p = run(&default, &in_use, &faults);
        assert_eq!(names(&p), ["gone", "ib0", "veth1"]);
        assert_eq!(p.devices["veth1"], before);
        assert_eq!(p.devices["gone"].fault, down);
        assert_eq!(p.devices["ib0"].fault, None);
        // The fault is the device's taint.
        let k8s = p.k8s_devices();
        let taints = k8s
            .iter()
            .find(|d| d.name == "gone")
            .unwrap()
            .taints
            .clone();
        assert_eq!(taints.map(|t| t.len()), Some(1));
        // veth1 is not listed as left out: it is published.
        assert!(p.excluded.iter().all(|e| e.device != "veth1"));
        // Released: the default filter decides again, and "gone" is gone.
        let p = run(
            &default,
            &InUse {
                claims: &BTreeMap::new(),
                previous: &previous,
            },
            &faults,
        );
        assert_eq!(names(&p), ["ib0"]);
    }

    #[test]
    fn feature_gates_decide_the_attributes() {
        let p = Policy::from_flags(&PolicyFlags {
            feature_gates: "DRAListTypeAttributes=true",
            ..PolicyFlags::default()
        })
        .unwrap();
        assert!(p.attributes.numa_node_list);
    }
}
