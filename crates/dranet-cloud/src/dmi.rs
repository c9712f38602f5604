//! Which cloud the machine says it is on, from its DMI strings (and Xen's hypervisor UUID): read
//! from sysfs, no network, so that a node off a cloud decides at once and asks nothing.

use std::path::Path;

/// A cloud with a metadata service dranet reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cloud {
    /// Microsoft Azure.
    Azure,
    /// Google Compute Engine.
    Gce,
    /// Amazon EC2.
    Aws,
    /// Oracle Cloud Infrastructure (OKE's nodes).
    Oke,
    /// Alibaba Cloud ECS.
    Alibaba,
}

impl Cloud {
    /// Every cloud, in upstream's detection order.
    pub const ALL: [Cloud; 5] = [
        Cloud::Gce,
        Cloud::Aws,
        Cloud::Azure,
        Cloud::Oke,
        Cloud::Alibaba,
    ];

    /// The name used in flags, logs and attribute domains (`oke` for OCI, as upstream).
    pub fn name(self) -> &'static str {
        match self {
            Cloud::Azure => "azure",
            Cloud::Gce => "gce",
            Cloud::Aws => "aws",
            Cloud::Oke => "oke",
            Cloud::Alibaba => "alibaba",
        }
    }
}

impl std::fmt::Display for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The DMI chassis asset tag of every Azure VM.
pub const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085";
/// The DMI chassis asset tag of every OCI instance, VM and bare metal.
pub const OCI_ASSET_TAG: &str = "OracleCloud.com";

/// The DMI strings that name a cloud (`<sysfs>/class/dmi/id/*`), and Xen's UUID
/// (`<sysfs>/hypervisor/uuid`, older EC2 instances).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dmi {
    /// `sys_vendor` (`Google`, `Amazon EC2`, `Alibaba Cloud`, `Microsoft Corporation`).
    pub sys_vendor: String,
    /// `product_name` (`Google Compute Engine`, `Alibaba Cloud ECS`, an EC2 instance type).
    pub product_name: String,
    /// `product_version` (`4.11.amazon` on EC2's Xen instances).
    pub product_version: String,
    /// `bios_vendor`.
    pub bios_vendor: String,
    /// `chassis_asset_tag` (Azure's and OCI's fixed tags).
    pub chassis_asset_tag: String,
    /// `hypervisor/uuid` (`ec2…` on EC2's Xen instances).
    pub hypervisor_uuid: String,
}

impl Dmi {
    /// Reads the strings; `None` when none is readable (a container without the host's sysfs):
    /// then only a probe of the metadata services can tell.
    pub fn read(sysfs: &Path) -> Option<Dmi> {
        let id = sysfs.join("class/dmi/id");
        let mut any = false;
        let mut read = |p: std::path::PathBuf| match std::fs::read_to_string(p) {
            Ok(s) => {
                any = true;
                s.trim().to_string()
            }
            Err(_) => String::new(),
        };
        let dmi = Dmi {
            sys_vendor: read(id.join("sys_vendor")),
            product_name: read(id.join("product_name")),
            product_version: read(id.join("product_version")),
            bios_vendor: read(id.join("bios_vendor")),
            chassis_asset_tag: read(id.join("chassis_asset_tag")),
            hypervisor_uuid: read(sysfs.join("hypervisor/uuid")),
        };
        any.then_some(dmi)
    }

    /// The cloud these strings name, if any.
    pub fn cloud(&self) -> Option<Cloud> {
        Cloud::ALL.into_iter().find(|c| self.is(*c))
    }

    /// Whether these strings are `cloud`'s.
    pub fn is(&self, cloud: Cloud) -> bool {
        match cloud {
            Cloud::Azure => self.chassis_asset_tag == AZURE_ASSET_TAG,
            Cloud::Gce => {
                self.product_name == "Google Compute Engine"
                    || self.product_name == "Google"
                    || self.sys_vendor == "Google"
            }
            Cloud::Aws => {
                self.sys_vendor == "Amazon EC2"
                    || self.bios_vendor.starts_with("Amazon EC2")
                    || self.product_version.to_ascii_lowercase().contains("amazon")
                    || self.hypervisor_uuid.to_ascii_lowercase().starts_with("ec2")
            }
            Cloud::Oke => self.chassis_asset_tag == OCI_ASSET_TAG,
            Cloud::Alibaba => {
                self.product_name == "Alibaba Cloud ECS" || self.sys_vendor == "Alibaba Cloud"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cloud_is_named_by_its_own_strings_only() {
        let cases = [
            (
                Dmi {
                    chassis_asset_tag: AZURE_ASSET_TAG.into(),
                    sys_vendor: "Microsoft Corporation".into(),
                    ..Dmi::default()
                },
                Some(Cloud::Azure),
            ),
            (
                Dmi {
                    product_name: "Google Compute Engine".into(),
                    sys_vendor: "Google".into(),
                    ..Dmi::default()
                },
                Some(Cloud::Gce),
            ),
            (
                Dmi {
                    sys_vendor: "Amazon EC2".into(),
                    product_name: "p5.48xlarge".into(),
                    ..Dmi::default()
                },
                Some(Cloud::Aws),
            ),
            (
                Dmi {
                    product_version: "4.11.amazon".into(),
                    sys_vendor: "Xen".into(),
                    ..Dmi::default()
                },
                Some(Cloud::Aws),
            ),
            (
                Dmi {
                    chassis_asset_tag: OCI_ASSET_TAG.into(),
                    ..Dmi::default()
                },
                Some(Cloud::Oke),
            ),
            (
                Dmi {
                    product_name: "Alibaba Cloud ECS".into(),
                    ..Dmi::default()
                },
                Some(Cloud::Alibaba),
            ),
            (
                Dmi {
                    sys_vendor: "Supermicro".into(),
                    product_name: "AS -8125GS-TNMR2".into(),
                    chassis_asset_tag: "To be filled by O.E.M.".into(),
                    ..Dmi::default()
                },
                None,
            ),
        ];
        for (dmi, want) in cases {
            assert_eq!(dmi.cloud(), want, "{dmi:?}");
        }
    }
}
