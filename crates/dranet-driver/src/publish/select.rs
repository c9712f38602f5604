//! The steps of a publication after the scan: the filter, the devices in use, their links in
//! pods, sharing.

use std::collections::{BTreeMap, BTreeSet};

use dranet_core::slice::PublishedDevice;

use super::filter::{default_filter_leaves_out, keeps};
use super::{Excluded, InUse, PodFaults, Policy, Reason, Warning};

/// The devices to publish, by name; each device the filter leaves out goes to `excluded`, and a
/// device it could not decide to `warnings` too.
///
/// A device in use by a prepared claim is published as it was before (`in_use.previous`), even
/// when the scan now sees it differently or not at all: its netdev is in a pod's namespace, out
/// of the host's sight, and the scheduler must keep seeing the device it allocated.
pub(super) fn select(
    scanned: Vec<PublishedDevice>,
    policy: &Policy,
    in_use: &InUse<'_>,
    excluded: &mut Vec<Excluded>,
    warnings: &mut BTreeSet<Warning>,
) -> BTreeMap<String, PublishedDevice> {
    let mut out = BTreeMap::new();
    let default = policy.default_filter();
    for d in scanned {
        if in_use.claims.contains_key(&d.name)
            && let Some(p) = in_use.previous.get(&d.name)
        {
            out.insert(d.name.clone(), p.clone());
            continue;
        }
        let reason = match &policy.filter {
            None => None,
            Some(f) => match keeps(f, &d) {
                Ok(true) => None,
                Ok(false) => Some(
                    default
                        .then(|| default_filter_leaves_out(&d))
                        .flatten()
                        .map_or(Reason::Filter, |kind| Reason::DefaultFilter { kind }),
                ),
                Err(e) => {
                    warnings.insert(Warning::Filter {
                        device: d.name.clone(),
                        error: e.to_string(),
                    });
                    Some(Reason::FilterFailed(e.to_string()))
                }
            },
        };
        match reason {
            None => {
                out.insert(d.name.clone(), d);
            }
            Some(reason) => excluded.push(Excluded {
                device: d.name,
                reason,
            }),
        }
    }
    for name in in_use.claims.keys() {
        if !out.contains_key(name)
            && let Some(p) = in_use.previous.get(name)
        {
            out.insert(name.clone(), p.clone());
        }
    }
    out
}

/// Gives each device in use whose netdev is in a pod (`in_pods`: its state there) the fault it
/// has there, so that its taint follows the link in the pod instead of staying as it was when
/// the claim was prepared. A device whose pod could not be read keeps its published fault.
pub(super) fn take_pod_faults(
    devices: &mut BTreeMap<String, PublishedDevice>,
    in_use: &BTreeMap<String, String>,
    in_pods: &PodFaults,
) {
    for (name, fault) in in_pods {
        if in_use.contains_key(name)
            && let Some(d) = devices.get_mut(name)
        {
            d.fault.clone_from(fault);
        }
    }
}

/// The published devices `--share-filter` offers for sharing; a device it could not decide is
/// published unshared, with a warning.
pub(super) fn shared(
    devices: &BTreeMap<String, PublishedDevice>,
    policy: &Policy,
    warnings: &mut BTreeSet<Warning>,
) -> BTreeSet<String> {
    let Some(share) = &policy.share else {
        return BTreeSet::new();
    };
    devices
        .values()
        .filter(|d| match keeps(&share.filter, d) {
            Ok(k) => k,
            Err(e) => {
                warnings.insert(Warning::Share {
                    device: d.name.clone(),
                    error: e.to_string(),
                });
                false
            }
        })
        .map(|d| d.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::tests::published;
    use dranet_core::health::Fault;

    #[test]
    fn a_device_in_use_takes_the_fault_of_its_link_in_the_pod() {
        let down = Fault::of_link("net1", "lowerlayerdown", Some(true));
        let mut tainted = published("a", None);
        tainted.fault = down.clone();
        let mut devices = BTreeMap::from([
            ("a".to_string(), tainted.clone()),
            ("b".to_string(), published("b", None)),
            ("c".to_string(), tainted.clone()),
        ]);
        let in_use = BTreeMap::from([
            ("a".to_string(), "ns/c1".to_string()),
            ("b".to_string(), "ns/c2".to_string()),
        ]);
        let in_pods = BTreeMap::from([
            // Carrier back in the pod: the taint goes.
            ("a".to_string(), None),
            // Lost in the pod: the taint comes.
            ("b".to_string(), down.clone()),
            // Not in use (a journal entry on its way out): left as scanned.
            ("c".to_string(), None),
        ]);
        take_pod_faults(&mut devices, &in_use, &in_pods);
        assert_eq!(devices["a"].fault, None);
        assert_eq!(devices["b"].fault, down);
        assert_eq!(devices["c"], tainted);
        // A pod that could not be read: the device keeps what it had.
        take_pod_faults(&mut devices, &in_use, &BTreeMap::new());
        assert_eq!(devices["b"].fault, down);
    }
}
