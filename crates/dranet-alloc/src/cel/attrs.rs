//! A device's attributes and capacities indexed for CEL and constraints ([`DeviceAttributes`]),
//! and the key an attribute is looked up by ([`AttrKey`]).

mod arena;

use std::sync::{Arc, OnceLock};

use dranet_core::{AttributeValue, Quantity};

pub(crate) use arena::{Given, NameArena};

use super::hash::{key_hash, same_bytes};

/// Why a device's attributes and capacities cannot be indexed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributesError {
    /// Two attribute names resolve to this qualified name (`numaNode` and `dra.net/numaNode`
    /// of driver `dra.net`).
    #[error("attribute {0} is given twice")]
    DuplicateAttribute(String),
    /// Two capacity names resolve to this qualified name.
    #[error("capacity {0} is given twice")]
    DuplicateCapacity(String),
}

/// A device's attributes and capacities indexed by (domain, name), built once per device so
/// lookups during evaluation are a binary search without allocation.
///
/// Building one is on the allocator's cold path (every device of every slice), so names are
/// not copied per device: the indexes an allocator builds share one string (`NameArena`),
/// which holds a list of names once for all the devices that publish it, and the string
/// values not read yet.
#[derive(Debug, Clone, Default)]
pub struct DeviceAttributes {
    /// The names (and unread string values) the entries point into, shared with other
    /// devices.
    keys: Arc<str>,
    /// Sorted by (hash of domain and name, domain, name): a lookup compares integers, then the
    /// strings of the one entry with that hash.
    attrs: Vec<Entry>,
    /// Sorted by (domain, name).
    capacity: Vec<CapEntry>,
}

/// Where one qualified name is in [`DeviceAttributes::keys`]: `domain` is
/// `keys[domain..domain_end]`, `name` is `keys[name..name_end]`. Offsets are u32: what an
/// allocator's devices put there is bounded by the API (per device, 32 attributes and
/// capacities with names of at most 63 + 1 + 32 bytes and strings of at most 64), kilobytes
/// per device, far below 4 GiB for any set of slices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    domain: u32,
    domain_end: u32,
    name: u32,
    name_end: u32,
}

impl Span {
    fn domain<'k>(&self, keys: &'k str) -> &'k str {
        &keys[self.domain as usize..self.domain_end as usize]
    }
    fn name<'k>(&self, keys: &'k str) -> &'k str {
        &keys[self.name as usize..self.name_end as usize]
    }
    /// `(domain, name)`, the order of entries with one hash and of capacities.
    fn pair<'k>(&self, keys: &'k str) -> (&'k str, &'k str) {
        (self.domain(keys), self.name(keys))
    }
    /// `domain/name`, for messages.
    fn qualified(&self, keys: &str) -> String {
        format!("{}/{}", self.domain(keys), self.name(keys))
    }
}

#[derive(Debug, Clone)]
struct Entry {
    hash: u64,
    span: Span,
    value: Lazy,
}

/// A value as an index holds it. A string the allocator read from a ResourceSlice stays in
/// the index's string of names until something reads it: most string attributes of most
/// devices are never read by a claim's selectors and constraints, and a String each was the
/// largest part of the allocations made per device.
#[derive(Debug, Clone)]
enum Lazy {
    /// Any value given as a value. Not a OnceLock set at build: setting one takes its slow
    /// path, which cost more than the Strings it saved.
    Ready(AttributeValue),
    /// A string at `keys[at.0..at.1]`, made a String in `value` on first read.
    Text {
        at: (u32, u32),
        value: OnceLock<AttributeValue>,
    },
}

// A device has up to 32 attributes, most about 15: at 88 bytes an entry, the index of a device
// with 11 stays below the size (1 KiB) past which glibc's malloc first consolidates its free
// lists, which showed as a tenth of the cold allocation path when versions made entries 104
// bytes.
const _: () = assert!(std::mem::size_of::<Entry>() <= 88);

#[derive(Debug, Clone)]
struct CapEntry {
    span: Span,
    value: Quantity,
}

impl PartialEq for DeviceAttributes {
    /// The same attributes and capacities, whatever order they were given in.
    fn eq(&self, other: &Self) -> bool {
        self.attrs.len() == other.attrs.len()
            && self.capacity.len() == other.capacity.len()
            && self.iter().eq(other.iter())
            && self.capacities().eq(other.capacities())
    }
}

/// A fully qualified attribute name with its hash, computed once (at compile time for CEL, when
/// a claim is compiled for constraints) so lookups need no string hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrKey {
    /// The domain (`dra.net`, `resource.kubernetes.io`).
    pub domain: String,
    /// The name within it.
    pub name: String,
    hash: u64,
    /// `domain/name`, and whether domain and name have a '/', for lookups in a slice's
    /// attribute map, which would otherwise work them out on every device.
    joined: String,
    domain_slash: bool,
    name_slash: bool,
}

impl AttrKey {
    /// The key of `name` in `domain`.
    pub fn new(domain: &str, name: &str) -> AttrKey {
        AttrKey {
            domain: domain.to_string(),
            name: name.to_string(),
            hash: key_hash(domain, name),
            joined: format!("{domain}/{name}"),
            domain_slash: domain.contains('/'),
            name_slash: name.contains('/'),
        }
    }

    /// `domain/name`.
    pub(crate) fn joined(&self) -> &str {
        &self.joined
    }

    /// Whether the domain has a '/' (no published name can be in it).
    pub(crate) fn domain_has_slash(&self) -> bool {
        self.domain_slash
    }

    /// Whether the name has a '/' (it cannot be published unqualified).
    pub(crate) fn name_has_slash(&self) -> bool {
        self.name_slash
    }

    /// The key of a qualified name; an unqualified one is in `driver`'s domain.
    pub fn qualified(name: &str, driver: &str) -> AttrKey {
        let (d, n) = split_qualified(name, driver);
        AttrKey::new(d, n)
    }
}

/// Splits `domain/name`; an unqualified name is in the driver's domain.
pub fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.bytes().position(|b| b == b'/') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (driver, name),
    }
}

impl DeviceAttributes {
    /// Indexes attributes and capacities published by `driver` (names as in the ResourceSlice,
    /// qualified or not). Two names that resolve to the same qualified name are an error.
    pub fn new<A, C, S, T>(
        driver: &str,
        attributes: A,
        capacity: C,
    ) -> Result<Self, AttributesError>
    where
        A: IntoIterator<Item = (S, AttributeValue)>,
        C: IntoIterator<Item = (T, Quantity)>,
        S: AsRef<str>,
        T: AsRef<str>,
    {
        let (names, values): (Vec<S>, Vec<AttributeValue>) = attributes.into_iter().unzip();
        let mut attrs: Vec<(&str, Given)> = names
            .iter()
            .map(AsRef::as_ref)
            .zip(values.into_iter().map(Given::Value))
            .collect();
        let capacity: Vec<(T, Quantity)> = capacity.into_iter().collect();
        let caps: Vec<(&str, Quantity)> = capacity.iter().map(|(n, q)| (n.as_ref(), *q)).collect();
        let mut arena = NameArena::default();
        let mut index = arena.index(driver, &mut attrs, &caps)?;
        index.set_names(&arena.finish());
        Ok(index)
    }

    /// Gives an index built by a [`NameArena`] the arena's names.
    pub(crate) fn set_names(&mut self, keys: &Arc<str>) {
        self.keys = Arc::clone(keys);
    }

    /// The attribute `name` of `domain`.
    pub fn get(&self, domain: &str, name: &str) -> Option<&AttributeValue> {
        self.lookup(key_hash(domain, name), domain, name)
    }

    /// The attribute with this key.
    pub fn get_key(&self, key: &AttrKey) -> Option<&AttributeValue> {
        self.lookup(key.hash, &key.domain, &key.name)
    }

    fn lookup(&self, hash: u64, domain: &str, name: &str) -> Option<&AttributeValue> {
        // Bytes, lengths first: this runs per device and selector, and str slicing checks
        // char boundaries that the spans (made from whole names) cannot break.
        let k = self.keys.as_bytes();
        let (d, n) = (domain.as_bytes(), name.as_bytes());
        let start = self.attrs.partition_point(|e| e.hash < hash);
        for e in &self.attrs[start..] {
            if e.hash != hash {
                break;
            }
            let s = e.span;
            if k.get(s.domain as usize..s.domain_end as usize)
                .is_some_and(|x| same_bytes(x, d))
                && k.get(s.name as usize..s.name_end as usize)
                    .is_some_and(|x| same_bytes(x, n))
            {
                return Some(self.value(e));
            }
        }
        None
    }

    /// An entry's value, made a String now if it is a string not read before.
    fn value<'s>(&'s self, e: &'s Entry) -> &'s AttributeValue {
        match &e.value {
            Lazy::Ready(v) => v,
            Lazy::Text { at, value } => value.get_or_init(|| {
                AttributeValue::String(self.keys[at.0 as usize..at.1 as usize].to_string())
            }),
        }
    }

    /// The attribute with a fully qualified name (`resource.kubernetes.io/pcieRoot`), or an
    /// unqualified one in the driver's domain.
    pub fn get_qualified(&self, name: &str, driver: &str) -> Option<&AttributeValue> {
        let (d, n) = split_qualified(name, driver);
        self.get(d, n)
    }

    /// The capacity `name` of `domain`.
    pub fn capacity(&self, domain: &str, name: &str) -> Option<Quantity> {
        let k = &*self.keys;
        self.capacity
            .binary_search_by(|c| (c.span.domain(k), c.span.name(k)).cmp(&(domain, name)))
            .ok()
            .map(|i| self.capacity[i].value)
    }

    /// All attributes as (domain, name, value), in the index's order (stable for equal
    /// contents, not alphabetical).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &AttributeValue)> {
        let k = &*self.keys;
        self.attrs
            .iter()
            .map(move |e| (e.span.domain(k), e.span.name(k), self.value(e)))
    }

    /// All attribute names as (domain, name), in [`DeviceAttributes::iter`]'s order, without
    /// reading the values.
    pub(crate) fn names(&self) -> impl Iterator<Item = (&str, &str)> {
        let k = &*self.keys;
        self.attrs.iter().map(move |e| e.span.pair(k))
    }

    /// All capacities as (domain, name, quantity), sorted.
    pub fn capacities(&self) -> impl Iterator<Item = (&str, &str, Quantity)> {
        let k = &*self.keys;
        self.capacity
            .iter()
            .map(move |c| (c.span.domain(k), c.span.name(k), c.value))
    }

    /// Names of the attributes in `domain`.
    pub(crate) fn domain_names(&self, domain: &str) -> Vec<&str> {
        self.names()
            .filter(|(d, _)| *d == domain)
            .map(|(_, n)| n)
            .collect()
    }

    /// The capacities of `domain`, sorted by name.
    pub(crate) fn domain_caps(&self, domain: &str) -> impl Iterator<Item = (&str, &str, Quantity)> {
        self.capacities().filter(move |(d, _, _)| *d == domain)
    }
}
