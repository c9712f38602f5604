//! Which published devices are offered for sharing (`--share-filter`) and how many children each
//! carries (`--share-children`): a device the expression keeps is published with
//! `allowMultipleAllocations` and a `children` capacity ([`dranet_core::share::shared`]), so the
//! scheduler can allocate it to several claims of a child type.
//!
//! On an API server without `DRAConsumableCapacity` (1.34 unless turned on by hand) the server
//! drops those fields from the stored slice: the device stays exclusive, as before, and the
//! publisher warns once that the gate is off. Upstream dranet has no such flag.

use std::collections::BTreeMap;

use dranet_alloc::cel::Program;
use dranet_core::k8s_openapi::api::resource::v1::Device;
use dranet_core::slice::PublishedDevice;

use super::devices::keeps;

/// The operator's choice of shareable devices.
pub struct Share {
    /// `--share-filter`: CEL over a device's attributes, like `--filter`.
    pub filter: Program,
    /// `--share-children`: how many claims may share one device at once.
    pub children: u32,
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share")
            .field("filter", &self.filter.source())
            .field("children", &self.children)
            .finish()
    }
}

/// The slice's devices: each published device, shaped for sharing when `share` keeps it, and a
/// warning for each device the expression could not decide (it is published unshared).
pub fn devices(
    published: &BTreeMap<String, PublishedDevice>,
    share: Option<&Share>,
) -> (Vec<Device>, Vec<String>) {
    let mut warnings = Vec::new();
    let list = published
        .values()
        .map(|d| {
            let k = d.to_k8s();
            let Some(share) = share else { return k };
            match keeps(&share.filter, d) {
                Ok(true) => dranet_core::share::shared(k, share.children),
                Ok(false) => k,
                Err(e) => {
                    warnings.push(format!(
                        "device {} is published unshared: --share-filter failed on it: {e}",
                        d.name
                    ));
                    k
                }
            }
        })
        .collect();
    (list, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_core::attributes::AttributeValue;

    fn published(name: &str, ifname: &str) -> PublishedDevice {
        PublishedDevice {
            name: name.into(),
            attributes: [(
                "dra.net/ifName".to_string(),
                AttributeValue::String(ifname.into()),
            )]
            .into_iter()
            .collect(),
        }
    }

    fn set() -> BTreeMap<String, PublishedDevice> {
        [published("a", "eth1"), published("b", "eth2")]
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect()
    }

    fn share(expr: &str, children: u32) -> Share {
        Share {
            filter: Program::compile(expr).unwrap(),
            children,
        }
    }

    #[test]
    fn only_what_the_share_filter_keeps_is_shared() {
        let share = share(r#"device.attributes["dra.net"].ifName == "eth2""#, 4);
        let (list, warnings) = devices(&set(), Some(&share));
        assert!(warnings.is_empty());
        let a = list.iter().find(|d| d.name == "a").unwrap();
        let b = list.iter().find(|d| d.name == "b").unwrap();
        assert_eq!(a.allow_multiple_allocations, None);
        assert!(
            a.capacity
                .as_ref()
                .is_none_or(|c| !c.contains_key("children"))
        );
        assert_eq!(b.allow_multiple_allocations, Some(true));
        assert_eq!(
            b.capacity.as_ref().unwrap()["children"].value.0,
            "4".to_string()
        );
    }

    #[test]
    fn without_a_share_filter_nothing_changes() {
        let (list, warnings) = devices(&set(), None);
        assert!(warnings.is_empty());
        let want: Vec<Device> = set().values().map(PublishedDevice::to_k8s).collect();
        assert_eq!(list, want);
    }

    #[test]
    fn a_share_filter_error_publishes_unshared_and_names_the_device() {
        let share = share(r#"device.attributes["dra.net"].nosuch == "x""#, 2);
        let (list, warnings) = devices(&set(), Some(&share));
        assert!(list.iter().all(|d| d.allow_multiple_allocations.is_none()));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("device a") && warnings[0].contains("--share-filter"));
    }
}
