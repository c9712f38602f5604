//! The `device` variable of a selector: what one evaluation reads of a device, in full
//! ([`DeviceView`]) or only what the shortcut for common shapes compares ([`FastDevice`]).

use dranet_core::AttributeValue;

use super::attrs::{AttrKey, DeviceAttributes};

/// The `device` variable for one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct DeviceView<'a> {
    /// The driver that publishes the device.
    pub driver: &'a str,
    /// Its attributes and capacities.
    pub attributes: &'a DeviceAttributes,
    /// `device.allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
}

/// A scalar attribute as the shortcut compares it; `Other` for any other type (a version, a
/// list), which the evaluator decides.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'s> {
    Bool(bool),
    Int(i64),
    Str(&'s str),
    Other,
}

impl<'s> Scalar<'s> {
    /// The scalar of an indexed value.
    pub(crate) fn of(v: &'s AttributeValue) -> Scalar<'s> {
        match v {
            AttributeValue::Bool(b) => Scalar::Bool(*b),
            AttributeValue::Int(i) => Scalar::Int(*i),
            AttributeValue::String(s) => Scalar::Str(s),
            _ => Scalar::Other,
        }
    }
}

/// What the shortcut reads of a device: its driver and attributes by key. The allocator reads
/// them straight from the ResourceSlice's device, so a selector of a common shape needs no
/// attribute index; [`DeviceView`] reads them from its index.
pub(crate) trait FastDevice {
    /// The driver that publishes the device.
    fn driver(&self) -> &str;
    /// The attribute with this key, `None` when the device has none.
    fn scalar(&self, key: &AttrKey) -> Option<Scalar<'_>>;
}

/// A device the shortcut reads directly, with its full view for the evaluator.
pub(crate) trait FullDevice: FastDevice {
    /// The `device` variable, attribute index included.
    fn view(&self) -> DeviceView<'_>;
}

impl FullDevice for DeviceView<'_> {
    fn view(&self) -> DeviceView<'_> {
        *self
    }
}

impl FastDevice for DeviceView<'_> {
    fn driver(&self) -> &str {
        self.driver
    }
    fn scalar(&self, key: &AttrKey) -> Option<Scalar<'_>> {
        self.attributes.get_key(key).map(Scalar::of)
    }
}
