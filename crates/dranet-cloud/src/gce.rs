//! GCE: the metadata server (`/computeMetadata/v1/`, every request with `Metadata-Flavor:
//! Google`, every answer with it too).
//!
//! Read once at start, as upstream dranet: the machine type, the VM's NICs and the
//! `physical_host` attribute (`/<block>/<sub-block>/<host>`: where an A3/A4 GPU VM sits in the
//! cluster's network, the placement compact placement policies align on).

use std::collections::BTreeMap;

use dranet_core::{AttributeValue, Attributes, CloudProvider, DeviceIdentifiers};
use serde::Deserialize;

use crate::client::MetadataClient;
use crate::http::{Error, Request, Result, json_object};
use crate::retry::RetryPolicy;

/// Attribute names (upstream's, in the `gce.dra.net` domain).
pub mod attr {
    /// Machine type (`a3-megagpu-8g`), on every device.
    pub const MACHINE_TYPE: &str = "gce.dra.net/machineType";
    /// The cluster block of the VM's host, on every device.
    pub const BLOCK: &str = "gce.dra.net/block";
    /// The sub-block of the VM's host, on every device.
    pub const SUB_BLOCK: &str = "gce.dra.net/subBlock";
    /// The VM's host, on every device.
    pub const HOST: &str = "gce.dra.net/host";
    /// The VPC network of a NIC (matched by MAC).
    pub const NETWORK_NAME: &str = "gce.dra.net/networkName";
    /// The project number of a NIC's network (int).
    pub const NETWORK_PROJECT_NUMBER: &str = "gce.dra.net/networkProjectNumber";
    /// A NIC's alias IP ranges, comma-separated.
    pub const IP_ALIASES: &str = "gce.dra.net/ipAliases";
}

/// The header every request and answer carries.
pub const METADATA_FLAVOR: (&str, &str) = ("Metadata-Flavor", "Google");

const MACHINE_TYPE: &str = "/computeMetadata/v1/instance/machine-type";
const INTERFACES: &str = "/computeMetadata/v1/instance/network-interfaces/?recursive=true&alt=json";
const PHYSICAL_HOST: &str = "/computeMetadata/v1/instance/attributes/physical_host";

/// One NIC as the metadata server describes it (the fields dranet uses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GceInterface {
    /// MAC address (`42:01:c0:a8:01:02`).
    pub mac: String,
    /// `projects/<number>/networks/<name>`.
    pub network: String,
    /// Alias IP ranges (`10.24.3.0/24`).
    pub ip_aliases: Vec<String>,
}

/// Where the VM sits: the three parts of `physical_host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Cluster block.
    pub block: String,
    /// Sub-block.
    pub sub_block: String,
    /// Host.
    pub host: String,
}

/// What the metadata server said about this VM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GceInstance {
    /// Machine type, its last path segment (`a3-megagpu-8g`).
    pub machine_type: String,
    /// NICs, in the server's order.
    pub interfaces: Vec<GceInterface>,
    /// Placement, when the VM has a `physical_host` the three parts of which parse.
    pub placement: Option<Placement>,
}

impl GceInstance {
    /// The instance from the server's values; a `physical_host` that does not parse is a
    /// warning and no placement (upstream's rule: it may be unsupported for the VM).
    pub fn new(
        machine_type: &str,
        interfaces: Vec<GceInterface>,
        physical_host: Option<&str>,
    ) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let placement = physical_host.and_then(|t| {
            let parts: Vec<&str> = t.trim().trim_start_matches('/').splitn(3, '/').collect();
            match parts.as_slice() {
                [b, s, h] if !b.is_empty() && !s.is_empty() && !h.is_empty() => Some(Placement {
                    block: b.to_string(),
                    sub_block: s.to_string(),
                    host: h.to_string(),
                }),
                _ => {
                    warnings.push(format!(
                        "GCE physical_host {t:?} is not /<block>/<sub-block>/<host>; no placement attributes"
                    ));
                    None
                }
            }
        });
        let inst = Self {
            machine_type: machine_type
                .trim()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string(),
            interfaces,
            placement,
        };
        (inst, warnings)
    }
}

/// The instance document an operator saves on the node
/// (`curl -H Metadata-Flavor:Google "http://169.254.169.254/computeMetadata/v1/instance/?recursive=true&alt=json"`).
pub fn parse_instance_document(body: &[u8]) -> Result<(GceInstance, Vec<String>)> {
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase", default)]
    struct Doc {
        machine_type: String,
        network_interfaces: Vec<GceInterface>,
        attributes: BTreeMap<String, serde_json::Value>,
    }
    let doc: Doc = json_object("GCE instance document", body)?;
    if doc.machine_type.is_empty() {
        return Err(Error::Invalid {
            what: "GCE instance document",
            reason: "no machineType (save instance/?recursive=true&alt=json)".into(),
        });
    }
    let host = doc.attributes.get("physical_host").and_then(|v| v.as_str());
    Ok(GceInstance::new(
        &doc.machine_type,
        doc.network_interfaces,
        host,
    ))
}

/// Reads the machine type, the NICs and the placement, retrying within `policy`.
pub async fn read(
    client: &MetadataClient,
    policy: RetryPolicy,
) -> Result<(GceInstance, Vec<String>)> {
    let s = client
        .session(policy)?
        .with_header(METADATA_FLAVOR.0, METADATA_FLAVOR.1);
    let machine_type = s.get(MACHINE_TYPE).await?.text();
    let body = s.get(INTERFACES).await?.body;
    let interfaces: Vec<GceInterface> =
        serde_json::from_slice(&body).map_err(|source| Error::Json {
            what: "GCE network-interfaces document",
            source,
        })?;
    let host = s.get_optional(PHYSICAL_HOST).await?.map(|r| r.text());
    Ok(GceInstance::new(&machine_type, interfaces, host.as_deref()))
}

/// Whether a GCE metadata server answers at `client`'s endpoint: one request, which the server
/// must answer with its flavor header.
pub async fn probe(client: &MetadataClient) -> bool {
    let req = Request::get(MACHINE_TYPE).header(METADATA_FLAVOR.0, METADATA_FLAVOR.1);
    client
        .probe(req)
        .await
        .is_some_and(|r| r.header(METADATA_FLAVOR.0) == Some(METADATA_FLAVOR.1))
}

/// `projects/<number>/networks/<name>`.
fn network_parts(network: &str) -> Option<(i64, &str)> {
    let (number, name) = network
        .strip_prefix("projects/")?
        .split_once("/networks/")?;
    (!name.is_empty() && !name.contains('/')).then_some(())?;
    Some((number.parse().ok()?, name))
}

impl CloudProvider for GceInstance {
    fn name(&self) -> &str {
        "gce"
    }

    fn node_attributes(&self) -> Attributes {
        let p = self.placement.as_ref();
        let part = |f: fn(&Placement) -> &str| p.map_or("", f);
        crate::attrs::strings([
            (attr::MACHINE_TYPE, self.machine_type.as_str()),
            (attr::BLOCK, part(|p| &p.block)),
            (attr::SUB_BLOCK, part(|p| &p.sub_block)),
            (attr::HOST, part(|p| &p.host)),
        ])
    }

    fn device_attributes(&self, id: &DeviceIdentifiers) -> Attributes {
        let mut a = Attributes::new();
        let Some(mac) = id.mac.as_deref() else {
            return a;
        };
        let Some(nic) = self
            .interfaces
            .iter()
            .find(|n| n.mac.eq_ignore_ascii_case(mac))
        else {
            return a;
        };
        if !nic.ip_aliases.is_empty() {
            a.insert(
                attr::IP_ALIASES.into(),
                AttributeValue::String(nic.ip_aliases.join(",")),
            );
        }
        match network_parts(&nic.network) {
            Some((number, name)) => {
                a.insert(
                    attr::NETWORK_NAME.into(),
                    AttributeValue::String(name.into()),
                );
                a.insert(
                    attr::NETWORK_PROJECT_NUMBER.into(),
                    AttributeValue::Int(number),
                );
            }
            None => tracing::debug!(
                mac,
                network = nic.network,
                "GCE network is not projects/<number>/networks/<name>"
            ),
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_and_placements_parse_as_the_server_writes_them() {
        assert_eq!(
            network_parts("projects/628944397724/networks/aojea-dra-net-1"),
            Some((628944397724, "aojea-dra-net-1"))
        );
        for bad in [
            "",
            "projects/x/networks/n",
            "projects/1/networks/",
            "global/networks/n",
            "projects/1/networks/a/b",
        ] {
            assert_eq!(network_parts(bad), None, "{bad}");
        }
        let (g, w) = GceInstance::new(
            "projects/1/machineTypes/a4-highgpu-8g",
            vec![],
            Some("/b1/sb2/h3"),
        );
        assert!(w.is_empty());
        assert_eq!(g.machine_type, "a4-highgpu-8g");
        assert_eq!(
            g.placement,
            Some(Placement {
                block: "b1".into(),
                sub_block: "sb2".into(),
                host: "h3".into()
            })
        );
        let (g, w) = GceInstance::new("a3-highgpu-8g", vec![], Some("/only-two/parts"));
        assert!(g.placement.is_none());
        assert!(w[0].contains("only-two"), "{w:?}");
    }
}
