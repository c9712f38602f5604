//! One device as the allocator sees it: read from its ResourceSlice where it is, indexed only
//! when something needs more than the selector shortcut reads.

use std::sync::OnceLock;

use k8s_openapi::api::resource::v1::DeviceTaint;
use serde::{Deserialize, Serialize};

use crate::cel::{
    AttrKey, AttributeValue, DeviceAttributes, DeviceView, FastDevice, FullDevice, Scalar,
};
use crate::source::{CounterUse, Placement, Source};

/// A device's identity in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceId {
    /// Driver name.
    pub driver: String,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// One device as the engine sees it.
///
/// A device of an allocator built from typed ResourceSlices borrows the slice's device: its
/// names are not copied, and its attributes are indexed ([`Device::attributes`]) only when
/// something needs more than the selector shapes the allocator reads straight from the slice
/// (`device.driver == "x"`, an attribute compared with a literal, a bool attribute, and `&&`,
/// `||`, `!` of those).
#[derive(Debug, Clone)]
pub struct Device<'a> {
    pub(crate) origin: Origin<'a>,
    /// The attribute index, built on first need (boxed: most devices of a cold allocation
    /// never need one, and a small device keeps the list of them below the size from which
    /// glibc's malloc consolidates its free lists).
    pub(crate) attributes: OnceLock<Box<DeviceAttributes>>,
    /// `allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
    /// Reachable from the node (only `false` under `perDeviceNodeSelection`).
    pub(crate) on_node: bool,
    /// `bindingConditions` are set: never selected while their gate is off.
    pub(crate) binding: bool,
    /// Index into the allocator's slice infos.
    pub(crate) slice: u32,
    /// Consumes shared counters (partitionable devices).
    pub(crate) counters: Option<Box<CounterUse>>,
    /// Where it can be used, when given per device (`perDeviceNodeSelection`).
    pub(crate) placement: Option<Box<Placement<'a>>>,
}

/// Where a device's names and taints are read from.
#[derive(Debug, Clone)]
pub(crate) enum Origin<'a> {
    /// The ResourceSlice's device, whose attributes the shortcut also reads.
    Slice(Source<'a>),
    /// Copies, for an allocator that owns its devices ([`Allocator::from_json`](crate::Allocator::from_json)), whose
    /// indexes are then built.
    Owned(Box<OwnedDevice>),
}

#[derive(Debug, Clone)]
pub(crate) struct OwnedDevice {
    pub(crate) driver: String,
    pub(crate) pool: String,
    pub(crate) name: String,
    pub(crate) taints: Vec<DeviceTaint>,
    pub(crate) binds_to_node: bool,
    pub(crate) binding_conditions: Vec<String>,
    pub(crate) binding_failure_conditions: Vec<String>,
}

// A node's devices fit in few bytes each (see `Device::attributes`).
const _: () = assert!(std::mem::size_of::<Device>() <= 64);

impl<'a> Device<'a> {
    fn view(&self) -> DeviceView<'_> {
        DeviceView {
            driver: self.driver(),
            attributes: self.attributes(),
            allow_multiple_allocations: self.allow_multiple_allocations,
        }
    }

    /// (driver, pool, name), the order of [`Allocator::device`](crate::Allocator::device)'s index.
    pub(crate) fn key(&self) -> (&str, &str, &str) {
        (self.driver(), self.pool(), self.name())
    }

    /// Driver, pool and name.
    pub fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.driver().to_string(),
            pool: self.pool().to_string(),
            device: self.name().to_string(),
        }
    }

    /// The driver that publishes the device.
    #[inline]
    pub fn driver(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.driver(),
            Origin::Owned(o) => &o.driver,
        }
    }

    /// The device's pool.
    pub fn pool(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.pool(),
            Origin::Owned(o) => &o.pool,
        }
    }

    /// The device's name in its pool.
    pub fn name(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.name(),
            Origin::Owned(o) => &o.name,
        }
    }

    /// Attributes and capacities, indexed for CEL and constraints (built on first call).
    #[inline]
    pub fn attributes(&self) -> &DeviceAttributes {
        self.attributes.get_or_init(|| {
            Box::new(match &self.origin {
                // The attributes were checked when the allocator was built, so the index
                // builds; were it to fail, an empty index makes every selector that reads the
                // device a "no such key" error, not a wrong match.
                Origin::Slice(s) => s.index().unwrap_or_default(),
                Origin::Owned(_) => DeviceAttributes::default(),
            })
        })
    }

    /// An attribute by fully qualified name (`resource.kubernetes.io/pcieRoot`); unqualified
    /// names are in the driver's domain.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes().get_qualified(name, self.driver())
    }

    /// Whether the node can use this device: `false` only for a device of a
    /// `perDeviceNodeSelection` slice whose own `nodeName`/`nodeSelector`/`allNodes` exclude the
    /// node. Such devices stay in their pool (their selectors are still evaluated, as the
    /// scheduler does) but are never allocated.
    pub fn on_node(&self) -> bool {
        self.on_node
    }

    /// The device's taints (only acted on with [`Features::device_taints`](crate::Features::device_taints)).
    pub fn taints(&self) -> &[DeviceTaint] {
        match &self.origin {
            Origin::Slice(s) => s.taints(),
            Origin::Owned(o) => &o.taints,
        }
    }

    /// `bindsToNode`: an allocation with this device is for the node it was made on.
    pub fn binds_to_node(&self) -> bool {
        match &self.origin {
            Origin::Slice(s) => s.device.binds_to_node == Some(true),
            Origin::Owned(o) => o.binds_to_node,
        }
    }

    /// `bindingConditions`: what must be true before a pod using it is bound.
    pub fn binding_conditions(&self) -> &[String] {
        match &self.origin {
            Origin::Slice(s) => s.device.binding_conditions.as_deref().unwrap_or_default(),
            Origin::Owned(o) => &o.binding_conditions,
        }
    }

    /// `bindingFailureConditions`: what makes binding fail.
    pub fn binding_failure_conditions(&self) -> &[String] {
        match &self.origin {
            Origin::Slice(s) => s
                .device
                .binding_failure_conditions
                .as_deref()
                .unwrap_or_default(),
            Origin::Owned(o) => &o.binding_failure_conditions,
        }
    }

    /// The same device owning its names, its index built.
    pub(crate) fn into_owned(self) -> Device<'static> {
        self.attributes();
        let origin = match &self.origin {
            Origin::Slice(s) => Origin::Owned(Box::new(OwnedDevice {
                driver: s.driver().to_string(),
                pool: s.pool().to_string(),
                name: s.name().to_string(),
                taints: s.taints().to_vec(),
                binds_to_node: s.device.binds_to_node == Some(true),
                binding_conditions: s.device.binding_conditions.clone().unwrap_or_default(),
                binding_failure_conditions: s
                    .device
                    .binding_failure_conditions
                    .clone()
                    .unwrap_or_default(),
            })),
            Origin::Owned(o) => Origin::Owned(o.clone()),
        };
        Device {
            origin,
            attributes: self.attributes,
            allow_multiple_allocations: self.allow_multiple_allocations,
            on_node: self.on_node,
            binding: self.binding,
            slice: self.slice,
            counters: self.counters,
            placement: self.placement.map(|p| Box::new(p.into_owned())),
        }
    }
}

/// An attribute value as constraints read it: a scalar straight from the slice, or a value of
/// the device's index (versions and lists, or once the index is built).
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttrRef<'d> {
    Bool(bool),
    Int(i64),
    Str(&'d str),
    Value(&'d AttributeValue),
}

impl<'a> Device<'a> {
    /// The attribute with this key for constraints, without building the index for a string,
    /// int or bool (a `matchAttribute` over a node's devices reads one attribute of each).
    #[inline]
    pub(crate) fn attr_ref(&self, key: &AttrKey) -> Option<AttrRef<'_>> {
        if let (None, Origin::Slice(s)) = (self.attributes.get(), &self.origin) {
            match s.scalar(key)? {
                Scalar::Bool(b) => return Some(AttrRef::Bool(b)),
                Scalar::Int(i) => return Some(AttrRef::Int(i)),
                Scalar::Str(v) => return Some(AttrRef::Str(v)),
                Scalar::Other => {}
            }
        }
        self.attributes().get_key(key).map(AttrRef::Value)
    }
}

impl FastDevice for Device<'_> {
    fn driver(&self) -> &str {
        Device::driver(self)
    }

    #[inline]
    fn scalar(&self, key: &AttrKey) -> Option<Scalar<'_>> {
        match (self.attributes.get(), &self.origin) {
            (None, Origin::Slice(s)) => s.scalar(key),
            _ => self.attributes().get_key(key).map(Scalar::of),
        }
    }
}

impl FullDevice for Device<'_> {
    fn view(&self) -> DeviceView<'_> {
        Device::view(self)
    }
}
