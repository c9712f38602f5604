//! What other claims hold on the node, as the scheduler tracks it: devices allocated whole, and
//! shares of devices that allow multiple allocations with the capacity each share consumes.

use std::collections::BTreeMap;

use crate::allocation::Allocation;
use crate::cel::Quantity;
use crate::device::DeviceId;

/// One allocation of a device that allows multiple allocations (`allowMultipleAllocations`),
/// as a claim's result records it (`shareID`, `consumedCapacity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The device.
    pub device: DeviceId,
    /// The result's `shareID`.
    pub share_id: String,
    /// The result's `consumedCapacity`, by capacity name as the device publishes it.
    pub consumed: BTreeMap<String, Quantity>,
}

/// The devices other claims hold: what the scheduler gathers from the allocated claims before
/// allocating a pod's (`AllocatedState`).
///
/// ```
/// use dranet_alloc::{DeviceId, InUse};
///
/// let id = DeviceId { driver: "dra.net".into(), pool: "node-1".into(), device: "nic0".into() };
/// let in_use = InUse::from(vec![id.clone()]);
/// assert!(in_use.holds(&id));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InUse {
    /// Devices allocated whole (results without a `shareID`).
    pub devices: Vec<DeviceId>,
    /// Shares of devices that allow multiple allocations.
    pub shares: Vec<Share>,
}

impl From<Vec<DeviceId>> for InUse {
    fn from(devices: Vec<DeviceId>) -> InUse {
        InUse {
            devices,
            shares: Vec::new(),
        }
    }
}

impl From<&[DeviceId]> for InUse {
    fn from(devices: &[DeviceId]) -> InUse {
        InUse::from(devices.to_vec())
    }
}

impl InUse {
    /// Whether the device is held in any way: whole or by a share (what decides whether it
    /// consumes shared counters).
    pub fn holds(&self, id: &DeviceId) -> bool {
        self.devices.contains(id) || self.shares.iter().any(|s| s.device == *id)
    }

    /// Adds what an allocation holds, as the scheduler counts an allocated claim: results with
    /// a `shareID` as shares, the others as whole devices, and results with admin access not at
    /// all (they never keep a device from others). `consumable_capacity` is the gate: without
    /// it, a result with a `shareID` holds its device whole.
    pub fn record(&mut self, allocation: &Allocation, consumable_capacity: bool) {
        for r in &allocation.results {
            if r.admin_access == Some(true) {
                continue;
            }
            let device = DeviceId {
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            match &r.share_id {
                Some(share) if consumable_capacity => self.shares.push(Share {
                    device,
                    share_id: share.clone(),
                    consumed: r
                        .consumed_capacity
                        .iter()
                        .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v).ok()?)))
                        .collect(),
                }),
                _ => self.devices.push(device),
            }
        }
    }
}
