//! The publishable network device, GPUs, and the whole node inventory.

use serde::{Deserialize, Serialize};

use crate::{Netdev, NumaTopology, PciDevice, RdmaLink, Relation, topology};

/// One device dranet publishes: a PCI network function with its netdev and/or RDMA link, or a
/// netdev without a PCI function (veth, macvlan, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDevice {
    /// DRA device name (see [`crate::names`]).
    pub name: String,
    /// The PCI function, when there is one.
    pub pci: Option<PciDevice>,
    /// The netdev, when there is one (and it is not moved out of the device, see `ibOnly`).
    pub netdev: Option<Netdev>,
    /// The RDMA link, when there is one.
    pub rdma: Option<RdmaLink>,
}

impl NetworkDevice {
    /// An RDMA link and no netdev: the device is used through `/dev/infiniband` only.
    pub fn is_ib_only(&self) -> bool {
        self.rdma.is_some() && self.netdev.is_none()
    }

    /// The NUMA node, from the PCI function.
    pub fn numa_node(&self) -> Option<u32> {
        self.pci.as_ref().and_then(|p| p.numa_node)
    }
}

/// Everything discovery learned about a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Inventory {
    /// Publishable devices, sorted by name.
    pub devices: Vec<NetworkDevice>,
    /// GPUs and accelerators, for topology only (never published by dranet).
    pub gpus: Vec<PciDevice>,
    /// NUMA layout.
    pub numa: NumaTopology,
    /// What discovery skipped or left out, each naming the path or device concerned.
    pub warnings: Vec<String>,
    /// Devices found and deliberately not published (the uplink, its PCI function and RDMA
    /// link, the interfaces it depends on), each with the reason.
    #[serde(default)]
    pub excluded: Vec<Excluded>,
}

/// A device discovery found and does not publish, and why: what `dranet inventory
/// --show-excluded` lists and the daemon logs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Excluded {
    /// The interface name, PCI address or RDMA link name.
    pub name: String,
    /// Why it is not published, e.g. `uplink: IPv4 default via 10.0.0.1, table main, metric 100`.
    pub reason: String,
}

impl Inventory {
    /// The device with this DRA name.
    pub fn device(&self, name: &str) -> Option<&NetworkDevice> {
        self.devices
            .binary_search_by(|d| d.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.devices[i])
    }

    /// The GPU × NIC relation matrix, labelled: one row per GPU (by PCI address), one column per
    /// device with a PCI function (by DRA device name), as `nvidia-smi topo -m` lays it out.
    pub fn gpu_nic_matrix(&self) -> GpuNicMatrix {
        let nics: Vec<(&NetworkDevice, &PciDevice)> = self
            .devices
            .iter()
            .filter_map(|d| Some((d, d.pci.as_ref()?)))
            .collect();
        GpuNicMatrix {
            gpus: self.gpus.iter().map(|g| g.address.to_string()).collect(),
            nics: nics.iter().map(|(d, _)| d.name.clone()).collect(),
            relations: self
                .gpus
                .iter()
                .map(|g| nics.iter().map(|(_, n)| topology::relation(g, n)).collect())
                .collect(),
        }
    }

    /// The devices with a PCI function, nearest to `target` first (PIX before PXB … before
    /// SYS; by name within a relation): which NICs a GPU should use.
    pub fn nearest_nics(&self, target: &PciDevice) -> Vec<(&NetworkDevice, Relation)> {
        let mut v: Vec<(&NetworkDevice, Relation)> = self
            .devices
            .iter()
            .filter_map(|d| Some((d, topology::relation(target, d.pci.as_ref()?))))
            .collect();
        v.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.name.cmp(&b.0.name)));
        v
    }
}

/// [`Inventory::gpu_nic_matrix`]: relations with the labels of their rows and columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuNicMatrix {
    /// Row labels: the GPUs' PCI addresses.
    pub gpus: Vec<String>,
    /// Column labels: the NICs' DRA device names.
    pub nics: Vec<String>,
    /// `relations[gpu][nic]`.
    pub relations: Vec<Vec<Relation>>,
}

impl GpuNicMatrix {
    /// The relation of the GPU at `gpu_address` to the NIC named `nic`, if both are in it.
    pub fn get(&self, gpu_address: &str, nic: &str) -> Option<Relation> {
        let r = self.gpus.iter().position(|g| g == gpu_address)?;
        let c = self.nics.iter().position(|n| n == nic)?;
        Some(self.relations[r][c])
    }
}

/// A source of node inventories: real host discovery, a fixture tree, or a fixed inventory in a
/// test. The daemon and the CLI depend on this, not on how the host is read.
pub trait Discover {
    /// The source's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Takes a full inventory of the node.
    fn discover(&self) -> Result<Inventory, Self::Error>;
}

/// Live link state that only netlink knows (addresses, default routes, link kinds), behind a
/// trait so discovery can take it from the kernel or from a fixture.
pub trait LinkSource {
    /// The source's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The state of every link.
    fn links(&self) -> Result<Vec<crate::LinkState>, Self::Error>;
}
