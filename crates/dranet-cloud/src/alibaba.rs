//! Alibaba Cloud ECS: the instance metadata service at `100.100.100.200` (a session token from
//! `PUT /latest/api/token`, then `X-aliyun-ecs-metadata-token` on every request), and eRDMA
//! devices from sysfs, as upstream dranet.

use std::collections::BTreeSet;
use std::path::Path;

use dranet_core::{AttributeValue, Attributes, CloudProvider, DeviceIdentifiers};

use crate::client::MetadataClient;
use crate::http::{Error, Result};
use crate::paths::PathMap;
use crate::retry::RetryPolicy;

/// Attribute names (upstream's, in the `alibaba.dra.net` domain).
pub mod attr {
    /// Instance type (`ecs.ebmgn8v.48xlarge`), on every device.
    pub const INSTANCE_TYPE: &str = "alibaba.dra.net/instanceType";
    /// `true` on the PCI function of an eRDMA device.
    pub const ERDMA: &str = "alibaba.dra.net/erdma";
}

/// Alibaba's metadata address.
pub const DEFAULT_ENDPOINT: &str = "http://100.100.100.200";
/// The token request.
pub const TOKEN_PATH: &str = "/latest/api/token";
/// The TTL header of the token request.
pub const TOKEN_TTL_HEADER: &str = "X-aliyun-ecs-metadata-token-ttl-seconds";
/// The header that carries the token.
pub const TOKEN_HEADER: &str = "X-aliyun-ecs-metadata-token";
/// The instance type's path, relative to `/latest/` (the key of `--alibaba-metadata-file`).
pub const INSTANCE_TYPE_PATH: &str = "meta-data/instance/instance-type";

/// The instance type, and the PCI functions of the node's eRDMA devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlibabaInstance {
    /// Instance type (empty when IMDS did not say).
    pub instance_type: String,
    /// PCI addresses of the `erdma*` RDMA devices.
    pub erdma: BTreeSet<String>,
}

impl AlibabaInstance {
    /// The instance from IMDS's answers and the node's sysfs.
    pub fn from_paths(m: &PathMap, sysfs: &Path) -> Result<Self> {
        let instance_type = m
            .get(INSTANCE_TYPE_PATH)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::Invalid {
                what: "Alibaba metadata",
                reason: format!("no {INSTANCE_TYPE_PATH}"),
            })?;
        Ok(Self {
            instance_type: instance_type.to_string(),
            erdma: erdma_functions(sysfs),
        })
    }
}

/// The PCI functions of `<sysfs>/class/infiniband/erdma*`: each link resolves to
/// `…/<pci address>/infiniband/erdma_N`.
pub fn erdma_functions(sysfs: &Path) -> BTreeSet<String> {
    crate::rdma_functions(sysfs)
        .into_iter()
        .filter(|(device, _)| device.starts_with("erdma"))
        .map(|(_, pci)| pci)
        .collect()
}

/// Reads the instance type with a session token within `policy`. As upstream, IMDS failing is a
/// warning: the eRDMA devices are still known from sysfs.
pub async fn read(
    client: &MetadataClient,
    policy: RetryPolicy,
    sysfs: &Path,
) -> (AlibabaInstance, Vec<String>) {
    let answer = async {
        let s = client
            .session(policy)?
            .with_token(TOKEN_PATH, TOKEN_TTL_HEADER, TOKEN_HEADER)
            .await?;
        let mut m = PathMap::default();
        m.insert(
            INSTANCE_TYPE_PATH,
            s.get(&format!("/latest/{INSTANCE_TYPE_PATH}"))
                .await?
                .text(),
        );
        AlibabaInstance::from_paths(&m, sysfs)
    };
    match answer.await {
        Ok(i) => (i, Vec::new()),
        Err(e) => (
            AlibabaInstance {
                instance_type: String::new(),
                erdma: erdma_functions(sysfs),
            },
            vec![format!("{e}; no alibaba.dra.net/instanceType")],
        ),
    }
}

/// Whether Alibaba's metadata service answers at `client`'s endpoint: one token request.
pub async fn probe(client: &MetadataClient) -> bool {
    client.token_probe(TOKEN_PATH, TOKEN_TTL_HEADER).await
}

impl CloudProvider for AlibabaInstance {
    fn name(&self) -> &str {
        "alibaba"
    }

    fn node_attributes(&self) -> Attributes {
        crate::attrs::strings([(attr::INSTANCE_TYPE, self.instance_type.as_str())])
    }

    fn device_attributes(&self, id: &DeviceIdentifiers) -> Attributes {
        let mut a = Attributes::new();
        if id
            .pci_address
            .is_some_and(|p| self.erdma.contains(&p.to_string()))
        {
            a.insert(attr::ERDMA.into(), AttributeValue::Bool(true));
        }
        a
    }
}
