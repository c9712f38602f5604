//! AWS: the EC2 instance metadata service, IMDSv2 only (a session token from
//! `PUT /latest/api/token`, then `X-aws-ec2-metadata-token` on every request).
//!
//! What upstream dranet publishes — on Neuron (Trainium) instances, the device groups of each EFA
//! function (see [`neuron`]) — plus what a claim needs to align EFA: the instance type and
//! placement group on every device, whether a function is EFA (bound to the `efa` driver), and
//! the network card of each NIC (matched by MAC).

pub mod neuron;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dranet_core::{AttributeValue, Attributes, CloudProvider, DeviceIdentifiers};
use serde::Deserialize;

use crate::client::MetadataClient;
use crate::http::{Error, Result};
use crate::paths::PathMap;
use crate::retry::RetryPolicy;

/// Attribute names (dranet-rs's, in the `aws.dra.net` domain; upstream publishes none there).
pub mod attr {
    /// Instance type (`p5.48xlarge`), on every device.
    pub const INSTANCE_TYPE: &str = "aws.dra.net/instanceType";
    /// The placement group's name, on every device, when the instance is in one.
    pub const PLACEMENT_GROUP_NAME: &str = "aws.dra.net/placementGroupName";
    /// `true` on a PCI function bound to the `efa` driver.
    pub const EFA: &str = "aws.dra.net/efa";
    /// The network card index of a NIC (int; matched by MAC).
    pub const NETWORK_CARD_INDEX: &str = "aws.dra.net/networkCardIndex";
}

/// The token request and headers of IMDSv2.
pub const TOKEN_PATH: &str = "/latest/api/token";
/// The TTL header of the token request.
pub const TOKEN_TTL_HEADER: &str = "X-aws-ec2-metadata-token-ttl-seconds";
/// The header that carries the token.
pub const TOKEN_HEADER: &str = "X-aws-ec2-metadata-token";

/// Paths read, relative to `/latest/` (the keys of `--aws-metadata-file`).
pub mod path {
    /// The instance identity document (JSON: `instanceType`, `region`, …).
    pub const IDENTITY: &str = "dynamic/instance-identity/document";
    /// The placement group's name (absent outside one).
    pub const PLACEMENT_GROUP: &str = "meta-data/placement/group-name";
    /// The MACs of the instance's interfaces, one `<mac>/` a line.
    pub const MACS: &str = "meta-data/network/interfaces/macs/";

    /// The network card index of the interface with `mac`.
    pub fn network_card(mac: &str) -> String {
        format!("{MACS}{mac}/network-card")
    }
}

/// Most interfaces read (a p5.48xlarge has 32 network cards).
const MAX_INTERFACES: usize = 256;

/// What IMDS said about this instance, and where its sysfs is (for the `efa` driver binding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsInstance {
    /// Instance type.
    pub instance_type: String,
    /// Placement group name, when in one.
    pub placement_group: Option<String>,
    /// Network card index by MAC (lower case).
    pub network_cards: BTreeMap<String, i64>,
    /// The sysfs root of the node.
    pub sysfs: PathBuf,
}

impl AwsInstance {
    /// The instance from IMDS's answers (a live read's, or a saved file's).
    pub fn from_paths(m: &PathMap, sysfs: &Path) -> Result<(Self, Vec<String>)> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Identity {
            instance_type: String,
        }
        let what = "AWS instance identity document";
        let doc = m.get(path::IDENTITY).ok_or_else(|| Error::Invalid {
            what,
            reason: format!("missing ({} is required)", path::IDENTITY),
        })?;
        let id: Identity = crate::http::json_object(what, doc.as_bytes())?;
        let mut warnings = Vec::new();
        let mut network_cards = BTreeMap::new();
        for mac in macs(m.get(path::MACS).unwrap_or_default()) {
            if let Some(card) = m.get(&path::network_card(mac)) {
                match card.trim().parse::<i64>() {
                    Ok(i) => {
                        network_cards.insert(mac.to_ascii_lowercase(), i);
                    }
                    Err(_) => warnings.push(format!(
                        "AWS IMDS: network card {card:?} of {mac} is not a number; left out"
                    )),
                }
            }
        }
        let inst = Self {
            instance_type: id.instance_type,
            placement_group: m
                .get(path::PLACEMENT_GROUP)
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            network_cards,
            sysfs: sysfs.to_path_buf(),
        };
        Ok((inst, warnings))
    }

    /// Whether the PCI function at `pci` is bound to the `efa` driver.
    pub fn is_efa(&self, pci: &str) -> bool {
        std::fs::read_link(self.sysfs.join("bus/pci/devices").join(pci).join("driver"))
            .is_ok_and(|d| d.file_name().is_some_and(|n| n == "efa"))
    }
}

/// The MACs of the `macs/` listing (`0e:…:01/` lines); anything else in it is skipped.
fn macs(listing: &str) -> impl Iterator<Item = &str> {
    listing
        .lines()
        .map(|l| l.trim().trim_end_matches('/'))
        .filter(|m| {
            m.len() == 17
                && m.split(':').count() == 6
                && m.split(':')
                    .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .take(MAX_INTERFACES)
}

/// Reads the identity document, the placement group and each interface's network card, with an
/// IMDSv2 token, within `policy`.
pub async fn read(
    client: &MetadataClient,
    policy: RetryPolicy,
    sysfs: &Path,
) -> Result<(AwsInstance, Vec<String>)> {
    let s = client
        .session(policy)?
        .with_token(TOKEN_PATH, TOKEN_TTL_HEADER, TOKEN_HEADER)
        .await?;
    let get = |p: &str| format!("/latest/{p}");
    let mut m = PathMap::default();
    m.insert(path::IDENTITY, s.get(&get(path::IDENTITY)).await?.text());
    // A document that is not the identity fails here, before the interfaces are asked for.
    AwsInstance::from_paths(&m, sysfs)?;
    if let Some(r) = s.get_optional(&get(path::PLACEMENT_GROUP)).await? {
        m.insert(path::PLACEMENT_GROUP, r.text());
    }
    if let Some(r) = s.get_optional(&get(path::MACS)).await? {
        let listing = r.text();
        for mac in macs(&listing) {
            let p = path::network_card(mac);
            if let Some(r) = s.get_optional(&get(&p)).await? {
                m.insert(p, r.text());
            }
        }
        m.insert(path::MACS, listing);
    }
    AwsInstance::from_paths(&m, sysfs)
}

/// Whether an IMDSv2 service answers at `client`'s endpoint: one token request.
pub async fn probe(client: &MetadataClient) -> bool {
    client.token_probe(TOKEN_PATH, TOKEN_TTL_HEADER).await
}

impl CloudProvider for AwsInstance {
    fn name(&self) -> &str {
        "aws"
    }

    fn node_attributes(&self) -> Attributes {
        crate::attrs::strings([
            (attr::INSTANCE_TYPE, self.instance_type.as_str()),
            (
                attr::PLACEMENT_GROUP_NAME,
                self.placement_group.as_deref().unwrap_or_default(),
            ),
        ])
    }

    fn device_attributes(&self, id: &DeviceIdentifiers) -> Attributes {
        let mut a = Attributes::new();
        if let Some(card) = id
            .mac
            .as_deref()
            .and_then(|m| self.network_cards.get(&m.to_ascii_lowercase()))
        {
            a.insert(attr::NETWORK_CARD_INDEX.into(), AttributeValue::Int(*card));
        }
        if let Some(pci) = id.pci_address.map(|p| p.to_string())
            && self.is_efa(&pci)
        {
            a.insert(attr::EFA.into(), AttributeValue::Bool(true));
            if neuron::is_neuron_instance(&self.instance_type) {
                for (k, v) in neuron::device_groups(&self.instance_type, &pci) {
                    a.insert(k.into(), AttributeValue::String(v));
                }
            }
        }
        a
    }
}
