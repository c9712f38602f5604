//! Where a value comes from, as cel-go tracks it for sizes (a path of names built with Go's
//! `append`, sharing included), and what the DRA size estimator declares of `device`.

use super::{ATTRIBUTE_VALUE_MAX, ATTRIBUTES_MAX, DOMAIN_MAX, DRIVER_NAME_MAX, ID_MAX, Size};

/// Where a value comes from: a variable, then field names, `@items`, `@keys`, `@values` or
/// `@indices`. Kept as Go keeps a slice (a window on a backing array in [`Paths`], a length and
/// a capacity) so two paths appended to one parent share their last element when the parent had
/// room, as in the API server (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Path {
    start: usize,
    len: usize,
    cap: usize,
}

/// The backing arrays of all paths, one after the other.
#[derive(Debug, Default)]
pub(super) struct Paths<'a> {
    names: Vec<&'a str>,
}

impl<'a> Paths<'a> {
    pub(super) fn root(&mut self, name: &'a str) -> Path {
        let start = self.names.len();
        self.names.push(name);
        Path {
            start,
            len: 1,
            cap: 1,
        }
    }

    /// Go's `append(path, name)`: in place when there is capacity left, else into a new array
    /// of twice the capacity.
    pub(super) fn append(&mut self, p: Path, name: &'a str) -> Path {
        if p.len < p.cap {
            if let Some(slot) = self.names.get_mut(p.start + p.len) {
                *slot = name;
            }
            return Path {
                len: p.len + 1,
                ..p
            };
        }
        let start = self.names.len();
        let cap = (2 * p.cap).max(p.len + 1);
        self.names.extend_from_within(p.start..p.start + p.len);
        self.names.push(name);
        self.names.resize(start + cap, "");
        Path {
            start,
            len: p.len + 1,
            cap,
        }
    }

    pub(super) fn get(&self, p: Path) -> &[&'a str] {
        self.names.get(p.start..p.start + p.len).unwrap_or_default()
    }

    /// The DRA size estimate of the path, followed by `extra` when given.
    pub(super) fn declared(&self, p: Path, extra: Option<&str>) -> Option<Size> {
        device_size(self.get(p).iter().copied().chain(extra))
    }
}

/// What the DRA size estimator knows about a part of `device` (the declared types of the API
/// server's DRA CEL environment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decl {
    Device,
    Driver,
    AllowMultipleAllocations,
    Attributes,
    DomainAttributes,
    AttributeValue,
    Capacity,
    DomainCapacity,
    Quantity,
    Domain,
    Name,
}

impl Decl {
    /// The declared maximum size; 0 where none is declared.
    fn max_elements(self) -> u64 {
        match self {
            Decl::Device | Decl::Quantity => 0,
            Decl::Driver => DRIVER_NAME_MAX,
            Decl::AllowMultipleAllocations => 1,
            Decl::Attributes | Decl::DomainAttributes | Decl::Capacity | Decl::DomainCapacity => {
                ATTRIBUTES_MAX
            }
            Decl::AttributeValue => ATTRIBUTE_VALUE_MAX,
            Decl::Domain => DOMAIN_MAX,
            Decl::Name => ID_MAX,
        }
    }
    fn elem(self) -> Option<Decl> {
        match self {
            Decl::Attributes => Some(Decl::DomainAttributes),
            Decl::DomainAttributes => Some(Decl::AttributeValue),
            Decl::Capacity => Some(Decl::DomainCapacity),
            Decl::DomainCapacity => Some(Decl::Quantity),
            _ => None,
        }
    }
    fn key(self) -> Option<Decl> {
        match self {
            Decl::Attributes | Decl::Capacity => Some(Decl::Domain),
            Decl::DomainAttributes | Decl::DomainCapacity => Some(Decl::Name),
            _ => None,
        }
    }
    fn field(self, name: &str) -> Option<Decl> {
        match (self, name) {
            (Decl::Device, "driver") => Some(Decl::Driver),
            (Decl::Device, "attributes") => Some(Decl::Attributes),
            (Decl::Device, "capacity") => Some(Decl::Capacity),
            (Decl::Device, "allowMultipleAllocations") => Some(Decl::AllowMultipleAllocations),
            // Any name selected from a domain's attributes is an attribute value.
            (Decl::DomainAttributes, _) => Some(Decl::AttributeValue),
            _ => None,
        }
    }
}

/// The DRA size estimator: the declared maximum size of what a path reaches from `device`.
pub(super) fn device_size<'n>(mut path: impl Iterator<Item = &'n str>) -> Option<Size> {
    if path.next()? != "device" {
        return None;
    }
    let mut d = Decl::Device;
    for name in path {
        d = match name {
            "@items" | "@values" => d.elem()?,
            "@keys" => d.key()?,
            n => d.field(n)?,
        };
    }
    Some(Size::up_to(d.max_elements()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_slice_sharing_of_paths() {
        let mut a = Paths::default();
        let device = a.root("device");
        let attrs = a.append(device, "attributes");
        let parent = a.append(attrs, "@values");
        assert_eq!((parent.len, parent.cap), (3, 4));
        let key = a.append(parent, "@keys");
        let _value = a.append(parent, "@values");
        // The key's last element was overwritten by the value's, as in Go.
        assert_eq!(a.get(key), ["device", "attributes", "@values", "@values"]);
        assert_eq!(
            a.declared(key, None),
            Some(Size::up_to(ATTRIBUTE_VALUE_MAX))
        );
        let full = a.append(key, "x");
        let other = a.append(key, "y");
        assert_eq!(a.get(full)[4], "x");
        assert_eq!(a.get(other)[4], "y");
        // A parent without room: the children do not share.
        let k2 = a.append(attrs, "@keys");
        let _v2 = a.append(attrs, "@values");
        assert_eq!(a.declared(k2, None), Some(Size::up_to(DOMAIN_MAX)));
    }
}
