//! RDMA links (`/sys/class/infiniband/*`) and the character devices a pod needs to use one.

use serde::{Deserialize, Serialize};

use crate::PciAddress;

/// What a character device under `/dev/infiniband` is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CharDeviceKind {
    /// `uverbsN`: the verbs interface (one per RDMA link).
    Uverbs,
    /// `umadN`: management datagrams (one per port).
    Umad,
    /// `issmN`: the IB subnet-manager capability (one per port).
    Issm,
    /// `ucmN`: the user-space connection manager (old kernels).
    Ucm,
    /// `rdma_cm`: the RDMA connection manager, shared by all links.
    RdmaCm,
}

/// A character device node a pod must be given to use an RDMA link.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CharDevice {
    /// What it is.
    pub kind: CharDeviceKind,
    /// Path of the node in a container (`/dev/infiniband/uverbs0`).
    pub path: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// The link port it belongs to (`umad`/`issm`).
    pub port: Option<u32>,
}

/// A port of an RDMA link.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RdmaPort {
    /// Port number (from 1).
    pub number: u32,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
    /// Port state as sysfs prints it (`4: ACTIVE`).
    pub state: Option<String>,
    /// Physical port state as sysfs prints it (`5: LinkUp`, `3: Disabled`, `2: Polling`): tells
    /// a port turned off from one that finds no link ([`crate::health::Fault::of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phys_state: Option<String>,
}

/// An RDMA link such as `mlx5_0`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RdmaLink {
    /// Link name.
    pub name: String,
    /// Its PCI function; `None` for software links (rxe, siw).
    pub pci: Option<PciAddress>,
    /// The netdev it is bound to when it has no PCI function (rxe's `parent`).
    pub parent_netdev: Option<String>,
    /// Ports.
    pub ports: Vec<RdmaPort>,
    /// The character devices for this link, `rdma_cm` included, sorted by kind then path.
    pub char_devices: Vec<CharDevice>,
}
