//! OCI (OKE's nodes): the instance metadata service v2 (`/opc/v2/…`, every request with
//! `Authorization: Bearer Oracle`).
//!
//! The host document (`/opc/v2/host/`) says where a bare-metal GPU host sits in the RDMA
//! network: HPC island, network block, local block, rack, and on GB200/GB300 shapes the GPU
//! memory fabric. Upstream's attributes, node-wide: OCI gives no per-NIC topology.

use dranet_core::{Attributes, CloudProvider};
use serde::Deserialize;

use crate::client::MetadataClient;
use crate::http::{Request, Result, json_object};
use crate::retry::RetryPolicy;

/// Attribute names (upstream's, in the `oke.dra.net` domain), on every device.
pub mod attr {
    /// HPC island.
    pub const HPC_ISLAND_ID: &str = "oke.dra.net/hpcIslandId";
    /// Network block.
    pub const NETWORK_BLOCK_ID: &str = "oke.dra.net/networkBlockId";
    /// Local block.
    pub const LOCAL_BLOCK_ID: &str = "oke.dra.net/localBlockId";
    /// Rack.
    pub const RACK_ID: &str = "oke.dra.net/rackId";
    /// GPU memory fabric (GB200, GB300 shapes).
    pub const GPU_MEMORY_FABRIC_ID: &str = "oke.dra.net/gpuMemoryFabricId";
}

/// The header every request carries.
pub const AUTHORIZATION: (&str, &str) = ("Authorization", "Bearer Oracle");

const HOST: &str = "/opc/v2/host/";
const INSTANCE: &str = "/opc/v2/instance/";

/// The fields of the host document dranet uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HostDocument {
    network_block_id: String,
    rack_id: String,
    rdma_topology_data: Option<RdmaTopology>,
}

/// Present when RDMA topology data is enabled for the tenancy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RdmaTopology {
    #[serde(rename = "customerGpuMemoryFabric")]
    gpu_memory_fabric: String,
    #[serde(rename = "customerHPCIslandId")]
    hpc_island: String,
    #[serde(rename = "customerLocalBlock")]
    local_block: String,
    #[serde(rename = "customerNetworkBlock")]
    network_block: String,
}

/// What the host document said about this node (each empty when not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OkeInstance {
    /// HPC island.
    pub hpc_island_id: String,
    /// Network block.
    pub network_block_id: String,
    /// Local block.
    pub local_block_id: String,
    /// Rack.
    pub rack_id: String,
    /// GPU memory fabric.
    pub gpu_memory_fabric_id: String,
}

/// The unique part of an OCID (`ocid1.<type>.oc1.<region>.<unique>`), as upstream publishes
/// it: the segment after the last `.`, at most its last 60 characters (attribute values are at
/// most 64 bytes; a whole OCID is 90 or more). `None` for what is not an OCID.
pub fn ocid_suffix(s: &str) -> Option<String> {
    if !s.contains("ocid") {
        return None;
    }
    let (_, suffix) = s.rsplit_once('.')?;
    let start = suffix.len().saturating_sub(60);
    suffix.get(start..).map(str::to_string)
}

/// Parses the host document (`/opc/v2/host/`, or a saved copy for `--oke-metadata-file`).
pub fn parse_host_document(body: &[u8]) -> Result<(OkeInstance, Vec<String>)> {
    let doc: HostDocument = json_object("OCI host document", body)?;
    let mut warnings = Vec::new();
    let Some(topo) = doc.rdma_topology_data else {
        // Shapes without a GPU fabric (H100): the top-level ids only, as upstream.
        let id = |v: String| ocid_suffix(&v).unwrap_or(v);
        return Ok((
            OkeInstance {
                network_block_id: id(doc.network_block_id),
                rack_id: id(doc.rack_id),
                ..OkeInstance::default()
            },
            warnings,
        ));
    };
    let mut suffix = |field: &str, v: &str| {
        if v.is_empty() {
            return String::new();
        }
        ocid_suffix(v).unwrap_or_else(|| {
            warnings.push(format!(
                "OCI host document: rdmaTopologyData.{field} {v:?} is not an OCID; left out"
            ));
            String::new()
        })
    };
    let inst = OkeInstance {
        hpc_island_id: suffix("customerHPCIslandId", &topo.hpc_island),
        network_block_id: suffix("customerNetworkBlock", &topo.network_block),
        local_block_id: suffix("customerLocalBlock", &topo.local_block),
        gpu_memory_fabric_id: suffix("customerGpuMemoryFabric", &topo.gpu_memory_fabric),
        rack_id: doc.rack_id,
    };
    Ok((inst, warnings))
}

/// Reads the host document within `policy`.
pub async fn read(
    client: &MetadataClient,
    policy: RetryPolicy,
) -> Result<(OkeInstance, Vec<String>)> {
    let s = client
        .session(policy)?
        .with_header(AUTHORIZATION.0, AUTHORIZATION.1);
    parse_host_document(&s.get(HOST).await?.body)
}

/// Whether OCI's metadata service answers at `client`'s endpoint: one instance request.
pub async fn probe(client: &MetadataClient) -> bool {
    let req = Request::get(INSTANCE).header(AUTHORIZATION.0, AUTHORIZATION.1);
    client.probe(req).await.is_some()
}

impl CloudProvider for OkeInstance {
    fn name(&self) -> &str {
        "oke"
    }

    fn node_attributes(&self) -> Attributes {
        crate::attrs::strings([
            (attr::HPC_ISLAND_ID, self.hpc_island_id.as_str()),
            (attr::NETWORK_BLOCK_ID, &self.network_block_id),
            (attr::LOCAL_BLOCK_ID, &self.local_block_id),
            (attr::RACK_ID, &self.rack_id),
            (attr::GPU_MEMORY_FABRIC_ID, &self.gpu_memory_fabric_id),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ocids_keep_their_unique_part() {
        let unique = "a".repeat(70);
        assert_eq!(
            ocid_suffix(&format!("ocid1.hpcisland.oc1.iad.{unique}")).map(|s| s.len()),
            Some(60)
        );
        assert_eq!(
            ocid_suffix("ocid1.computenetworkblock.oc1.iad.abc").as_deref(),
            Some("abc")
        );
        assert_eq!(ocid_suffix("rack-7"), None);
        assert_eq!(ocid_suffix("ocid-without-dot"), None);
    }
}
