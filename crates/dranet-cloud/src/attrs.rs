//! Building a provider's attributes.

use dranet_core::{AttributeValue, Attributes};

/// String attributes from `(name, value)` pairs; empty values are left out (a field the service
/// does not fill is no attribute, not an empty one).
pub(crate) fn strings<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Attributes {
    pairs
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), AttributeValue::String(v.to_string())))
        .collect()
}
