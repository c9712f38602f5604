//! CEL for DRA device selectors: the Kubernetes DRA environment, compiled once, evaluated per
//! device without building a map for each device.
//!
//! The environment is the one the Kubernetes scheduler gives `selectors[].cel.expression`:
//!
//! - `device.driver` (string), `device.allowMultipleAllocations` (bool; only for the scheduler,
//!   see below);
//! - `device.attributes["<domain>"].<name>` or `["<name>"]`: unqualified attribute names are in
//!   the driver's domain (`rdmaDevice` of driver `dra.net` is `device.attributes["dra.net"]
//!   .rdmaDevice`), qualified ones (`resource.kubernetes.io/pcieRoot`) under their own domain;
//!   a domain without attributes is an empty map, and reading a missing attribute is a runtime
//!   error, which makes the selector fail for that device only;
//! - `device.capacity["<domain>"].<name>`: quantities;
//! - the Kubernetes semver library (`semver("1.2.3")`, `isSemver`, `major()`, `minor()`,
//!   `patch()`, `compareTo`, `isGreaterThan`, `isLessThan`) and quantity library (`quantity`,
//!   `isQuantity`, `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`, `asInteger`,
//!   `asApproximateFloat`, `isInteger`, `sign`);
//! - standard CEL: literals, lists, maps, arithmetic with overflow errors, comparisons, `in`,
//!   `&&`/`||` with CEL's error absorption, `?:`, `has()`, `all`/`exists`/`exists_one`/`map`/
//!   `filter`, `size`, `startsWith`/`endsWith`/`contains`, `lowerAscii`/`upperAscii`/`trim`,
//!   conversions `int`/`uint`/`double`/`string`.
//!
//! Expressions are type-checked at compile time against the scheduler's declarations (cel-go's
//! standard definitions, optionals, the strings/lists/sets/two-variable-comprehension
//! extensions, and the Kubernetes quantity, semver, IP/CIDR, URL, regex, lists and format
//! libraries), so a selector the API server rejects is a compile error here too.
//!
//! The API server checks a selector of a new claim, claim template or device class in an older
//! environment than the one the scheduler compiles stored selectors in: Kubernetes 1.33's, with
//! default feature gates, so without cel-go's lists extension (`sort`, `sortBy`, `distinct`,
//! `flatten`, `slice`, `reverse`, `lists.range`) and without `device.allowMultipleAllocations`
//! (gated by DRAConsumableCapacity). [`Program::compile`] checks as the API server does at
//! creation, [`Program::compile_for_scheduler`] as the scheduler does.
//!
//! ```
//! use dranet_alloc::cel::{AttributeValue, DeviceAttributes, DeviceView, Program, Quantity};
//!
//! let p = Program::compile(r#"device.attributes["dra.net"].numaNode == 0"#).unwrap();
//! let no_capacity: [(&str, Quantity); 0] = [];
//! let attrs = DeviceAttributes::new("dra.net", [("numaNode", AttributeValue::Int(0))], no_capacity)
//!     .unwrap();
//! let view = DeviceView { driver: "dra.net", attributes: &attrs, allow_multiple_allocations: false };
//! assert!(p.matches(&view).unwrap());
//! ```

mod ast;
mod cache;
mod check;
mod cost;
mod decls;
mod eval;
mod explain;
mod fast;
pub(crate) use fast::{FastDevice, Scalar};
mod format;
mod funcs;
mod parse;
mod types;
mod url;
mod validate;
mod value;

pub use cost::{CostEstimate, MAX_SELECTOR_COST};
use decls::Env;
pub use eval::MAX_EVAL_STEPS;

/// Stack kept free before the parser, checker or evaluator descends another level. The nesting a
/// selector may have is bounded (cel-go's 250 levels), but a level can take tens of KiB of stack in
/// an unoptimised build, more than a 2 MiB thread has; past this mark the work continues on a
/// fresh heap-allocated stack segment instead of overflowing.
const STACK_RED_ZONE: usize = 256 * 1024;
/// The size of each extra stack segment.
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// Runs `f`, on a new stack segment when less than [`STACK_RED_ZONE`] is left.
fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, f)
}
pub use cache::{CacheStats, ProgramCache};
pub use dranet_core::{Quantity, Semver};

use std::sync::{Arc, OnceLock};

/// Longest expression accepted, as the Kubernetes API validation allows.
pub const MAX_EXPRESSION_LEN: usize = 10 * 1024;

/// What can go wrong compiling or evaluating an expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse, or names something the environment does not declare.
    #[error("at offset {position}: {message}")]
    Syntax {
        /// Byte offset in the expression.
        position: usize,
        /// What is wrong.
        message: String,
    },
    /// The expression is longer than [`MAX_EXPRESSION_LEN`].
    #[error("expression is {0} bytes long, the limit is {MAX_EXPRESSION_LEN}")]
    TooLong(usize),
    /// The expression cannot produce a bool.
    #[error("expression must evaluate to a bool, not {0}")]
    NotBool(String),
    /// Evaluation failed for one device (a missing attribute, a type mismatch, an overflow).
    #[error("{0}")]
    Runtime(String),
    /// The worst-case cost the API server estimates for the expression is over its limit: it
    /// refuses the ResourceClaim, ResourceClaimTemplate or DeviceClass ("too complex, exceeds
    /// cost limit").
    #[error("{}", too_complex_message(*estimated, *limit))]
    TooComplex {
        /// The estimated worst-case cost.
        estimated: u64,
        /// [`MAX_SELECTOR_COST`].
        limit: u64,
    },
}

/// Estimates from this size up come from a value the estimate cannot bound (cel-go saturates at
/// `u64::MAX`, a tenth of it for a string traversal).
const UNBOUNDED_COST: u64 = 1 << 60;

fn too_complex_message(estimated: u64, limit: u64) -> String {
    let estimate = if estimated >= UNBOUNDED_COST {
        "has no bound: it uses a value whose size the API server cannot bound (such as the \
         result of split, or the strings of a list literal) where the cost depends on that size"
            .to_string()
    } else {
        format!("is {estimated}")
    };
    format!(
        "expression is too complex: the API server's compile-time estimate of its worst-case \
         cost {estimate}, over the limit of {limit} for selectors, so it refuses the object; \
         iterate over fewer or smaller lists, or do less work per element"
    )
}

/// The value type of `device.attributes`: the one attribute type of this crate.
pub use dranet_core::AttributeValue;

/// The former name of [`AttributeValue`], kept so existing callers build; new code uses
/// [`AttributeValue`].
#[doc(hidden)]
pub type AttrValue = AttributeValue;

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

/// A multiplicative hash over 8-byte words of domain, its length, and name: every attribute
/// of every device is hashed on the cold path, where a byte-at-a-time hash showed in profiles.
/// Not keyed: a collision costs one string comparison, never a wrong answer.
fn key_hash(domain: &str, name: &str) -> u64 {
    let h = hash_words(0, domain.as_bytes());
    // The length separates ("ab", "c") from ("a", "bc").
    let h = mix(h, domain.len() as u64);
    hash_words(h, name.as_bytes())
}

/// One step of [`hash_words`].
#[inline]
fn mix(h: u64, word: u64) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    (h.rotate_left(5) ^ word).wrapping_mul(K)
}

/// `h` with the bytes of `b` mixed in 8 at a time (the last word zero-padded): the hash of
/// attribute names and of the CEL cache's expressions, both on the cold allocation path.
pub(crate) fn hash_words(mut h: u64, b: &[u8]) -> u64 {
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        h = mix(h, word_at(c, 0));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(w));
    }
    h
}

/// The 8 bytes of `s` from `at` as a little-endian word (`s` holds them: callers index within
/// its length).
#[inline]
fn word_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// `a == b` for the short strings attribute names are, in 8-byte words (the last one
/// overlapping) rather than a call to `memcmp`, which was a third of a lookup.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        if n < 4 {
            return a.iter().zip(b).all(|(x, y)| x == y);
        }
        let half = |s: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&s[at..at + 4]);
            u32::from_le_bytes(w)
        };
        return half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4);
    }
    let mut at = 0;
    while at + 8 < n {
        if word_at(a, at) != word_at(b, at) {
            return false;
        }
        at += 8;
    }
    word_at(a, n - 8) == word_at(b, n - 8)
}

/// Splits `domain/name`; an unqualified name is in the driver's domain.
pub fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.bytes().position(|b| b == b'/') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (driver, name),
    }
}

/// Appends a name as given to `keys`; an unqualified name's domain is the driver's name,
/// stored at `driver`.
fn push_name(keys: &mut String, driver: (u32, u32), name: &str) -> Span {
    let start = keys.len() as u32;
    keys.push_str(name);
    let end = keys.len() as u32;
    match name.bytes().position(|b| b == b'/') {
        Some(i) => Span {
            domain: start,
            domain_end: start + i as u32,
            name: start + i as u32 + 1,
            name_end: end,
        },
        None => Span {
            domain: driver.0,
            domain_end: driver.1,
            name: start,
            name_end: end,
        },
    }
}

/// The names of the attribute indexes built one after another (an allocator's), in one string
/// shared by all of them, and how the last device's names were ordered.
///
/// The devices of a slice mostly publish the same names in the same order (the API gives them
/// sorted): a device whose driver and names are the previous device's reuses their place in
/// the string, their hashes and their order, instead of copying, hashing and sorting them
/// again.
#[derive(Debug, Default)]
pub(crate) struct NameArena<'n> {
    keys: String,
    /// The last driver and where its name is in `keys`.
    driver: Option<(&'n str, (u32, u32))>,
    attrs: NameList<'n>,
    caps: NameList<'n>,
}

/// An attribute value given to [`NameArena::index`].
#[derive(Debug)]
pub(crate) enum Given<'n> {
    /// Any value.
    Value(AttributeValue),
    /// A string value, copied into the names string and made a String only when read.
    Str(&'n str),
}

/// One device's attribute (or capacity) names as given, and their index order.
#[derive(Debug, Default)]
struct NameList<'n> {
    names: Vec<&'n str>,
    /// By position in `names`.
    spans: Vec<Span>,
    /// Positions in `names` in index order, with their hash (0 for capacities).
    order: Vec<(u64, u32)>,
}

impl<'n> NameList<'n> {
    /// Forgets the names, so the next device's are ordered and checked anew.
    fn forget(&mut self) {
        self.names.clear();
        self.spans.clear();
        self.order.clear();
    }

    fn same<V>(&self, given: &[(&'n str, V)]) -> bool {
        self.names.len() == given.len() && self.names.iter().zip(given).all(|(a, (b, _))| a == b)
    }

    /// Takes `given`'s names, stores them in `keys` and orders them: attributes by (hash,
    /// domain, name), capacities (`hashed` false) by (domain, name). A name given twice is an
    /// error naming it.
    fn set<V>(
        &mut self,
        keys: &mut String,
        driver: (u32, u32),
        given: &[(&'n str, V)],
        hashed: bool,
    ) -> Result<(), AttributesError> {
        self.forget();
        for (i, (name, _)) in given.iter().enumerate() {
            let span = push_name(keys, driver, name);
            self.names.push(name);
            self.spans.push(span);
            let hash = if hashed {
                key_hash(span.domain(keys), span.name(keys))
            } else {
                0
            };
            self.order.push((hash, i as u32));
        }
        let k = keys.as_str();
        let spans = &self.spans;
        self.order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                spans[a.1 as usize]
                    .pair(k)
                    .cmp(&spans[b.1 as usize].pair(k))
            })
        });
        if let Some(w) = self.order.windows(2).find(|w| {
            w[0].0 == w[1].0 && spans[w[0].1 as usize].pair(k) == spans[w[1].1 as usize].pair(k)
        }) {
            let name = spans[w[0].1 as usize].qualified(k);
            // Not reusable: the next device must not skip this check.
            self.forget();
            return Err(if hashed {
                AttributesError::DuplicateAttribute(name)
            } else {
                AttributesError::DuplicateCapacity(name)
            });
        }
        Ok(())
    }
}

impl<'n> NameArena<'n> {
    /// An arena sized for the API's limits on a device (32 attributes and capacities), so
    /// building indexes does not grow its lists.
    pub(crate) fn new() -> NameArena<'n> {
        let list = |n| NameList {
            names: Vec::with_capacity(n),
            spans: Vec::with_capacity(n),
            order: Vec::with_capacity(n),
        };
        NameArena {
            // A few lists of names of about 300 bytes each, then the devices' string values;
            // it starts below the size (1 KiB) from which glibc's malloc consolidates its
            // free lists first.
            keys: String::with_capacity(960),
            driver: None,
            attrs: list(dranet_core::attributes::MAX_ATTRIBUTES_PER_DEVICE),
            caps: list(4),
        }
    }

    /// Indexes one device's attributes and capacities published by `driver`: the values are
    /// taken out of `attributes` (what is left there is to be cleared). The index's names stay
    /// in the arena until [`NameArena::finish`] gives them to it.
    pub(crate) fn index(
        &mut self,
        driver: &'n str,
        attributes: &mut [(&'n str, Given<'n>)],
        capacity: &[(&'n str, Quantity)],
    ) -> Result<DeviceAttributes, AttributesError> {
        let driver_at = match self.driver {
            Some((d, at)) if d == driver => at,
            _ => {
                let start = self.keys.len() as u32;
                self.keys.push_str(driver);
                let at = (start, self.keys.len() as u32);
                self.driver = Some((driver, at));
                self.attrs.forget();
                self.caps.forget();
                at
            }
        };
        if !self.attrs.same(attributes) {
            self.attrs
                .set(&mut self.keys, driver_at, attributes, true)?;
        }
        if !self.caps.same(capacity) {
            self.caps.set(&mut self.keys, driver_at, capacity, false)?;
        }
        let mut attrs: Vec<Entry> = Vec::with_capacity(attributes.len());
        for &(hash, i) in &self.attrs.order {
            let i = i as usize;
            // Left behind: a value without an allocation, for the caller to clear.
            let value = match std::mem::replace(&mut attributes[i].1, Given::Str("")) {
                Given::Value(v) => Lazy::Ready(v),
                Given::Str(text) => {
                    let start = self.keys.len() as u32;
                    self.keys.push_str(text);
                    Lazy::Text {
                        at: (start, self.keys.len() as u32),
                        value: OnceLock::new(),
                    }
                }
            };
            attrs.push(Entry {
                hash,
                span: self.attrs.spans[i],
                value,
            });
        }
        let caps: Vec<CapEntry> = self
            .caps
            .order
            .iter()
            .map(|&(_, i)| CapEntry {
                span: self.caps.spans[i as usize],
                value: capacity[i as usize].1,
            })
            .collect();
        Ok(DeviceAttributes {
            keys: Arc::default(),
            attrs,
            capacity: caps,
        })
    }

    /// The names, for every index built from this arena ([`DeviceAttributes::set_names`]).
    pub(crate) fn finish(self) -> Arc<str> {
        Arc::from(self.keys)
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
    fn domain_names(&self, domain: &str) -> Vec<&str> {
        self.names()
            .filter(|(d, _)| *d == domain)
            .map(|(_, n)| n)
            .collect()
    }

    /// The capacities of `domain`, sorted by name.
    fn domain_caps(&self, domain: &str) -> impl Iterator<Item = (&str, &str, Quantity)> {
        self.capacities().filter(move |(d, _, _)| *d == domain)
    }
}

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

/// A device the shortcut reads directly, with its full view for the evaluator.
pub(crate) trait FullDevice: fast::FastDevice {
    /// The `device` variable, attribute index included.
    fn view(&self) -> DeviceView<'_>;
}

impl FullDevice for DeviceView<'_> {
    fn view(&self) -> DeviceView<'_> {
        *self
    }
}

/// A compiled selector expression.
#[derive(Debug, Clone)]
pub struct Program {
    source: String,
    /// The shortcut for the common shapes, when the expression has one.
    fast: Option<fast::Fast>,
    /// The checked tree: built at once by the general compile, on first need when the
    /// expression was recognised as one of the common shapes (see [`fast::recognize`]).
    checked: OnceLock<Result<Checked, CelError>>,
    env: Env,
}

/// What the general compile makes of an expression.
#[derive(Debug, Clone)]
struct Checked {
    expr: ast::Expr,
    refs: Vec<check::Ref>,
    /// The API server's cost estimate; `None` when compiled for the scheduler, which skips it.
    cost: Option<CostEstimate>,
}

/// The compile issues in source order as cel-go reports them (the first names the position a
/// user fixes first).
fn compile_error(mut issues: Vec<parse::Issue>, source: &str) -> CelError {
    // cel-go sorts its issues by position, stably; one without a position comes first.
    issues.sort_by_key(|i| i.offset);
    let mut it = issues.into_iter();
    let Some(first) = it.next() else {
        return CelError::Syntax {
            position: 0,
            message: "invalid expression".to_string(),
        };
    };
    let rest: Vec<String> = it.map(|i| i.message).collect();
    let mut message = first.message;
    if !rest.is_empty() {
        message.push_str("; ");
        message.push_str(&rest.join("; "));
    }
    // Issues carry code point offsets; the error reports a byte offset into the source.
    let position = first
        .offset
        .and_then(|cp| source.char_indices().nth(cp as usize).map(|(b, _)| b))
        .unwrap_or(source.len());
    CelError::Syntax { position, message }
}

/// Appended to a compile error of a selector the scheduler's environment accepts.
const NEW_EXPRESSIONS_HINT: &str = "the 1.34 scheduler accepts this selector, but the API \
     server refuses it in a new claim, claim template or device class: it checks new selectors \
     in the CEL environment of Kubernetes 1.33 with default feature gates";

impl Program {
    /// Compiles `source` as the 1.34 API server admits it when a claim, claim template or
    /// device class is created: parsed and type-checked in the environment it checks new
    /// selectors in (Kubernetes 1.33's, default feature gates: without the 1.34 lists extension
    /// and `device.allowMultipleAllocations`), and refused, as the API server refuses the
    /// object, when its estimated worst-case cost is over [`MAX_SELECTOR_COST`]
    /// ([`CelError::TooComplex`]).
    pub fn compile(source: &str) -> Result<Program, CelError> {
        Program::build(source, Env::New)
    }

    /// Compiles as the scheduler does: in the stored-expressions environment, a superset of
    /// [`Program::compile`]'s, and without the cost estimate, which the scheduler does not make
    /// (it only compiles selectors the API server admitted).
    pub fn compile_for_scheduler(source: &str) -> Result<Program, CelError> {
        Program::build(source, Env::Stored)
    }

    /// The API server's estimate of the cost of evaluating this selector on one device, in CEL
    /// cost units; `None` for a program from [`Program::compile_for_scheduler`].
    pub fn estimated_cost(&self) -> Option<CostEstimate> {
        self.checked().ok().and_then(|c| c.cost)
    }

    fn build(source: &str, env: Env) -> Result<Program, CelError> {
        if source.len() > MAX_EXPRESSION_LEN {
            return Err(CelError::TooLong(source.len()));
        }
        // The common shapes compile to the same program without the general passes, which cost
        // ten times more; their checked tree is built only if an evaluation needs it.
        if let Some(f) = fast::recognize(source) {
            return Ok(Program {
                source: source.to_string(),
                fast: Some(f),
                checked: OnceLock::new(),
                env,
            });
        }
        let (checked, fast) = Program::check(source, env)?;
        Ok(Program {
            source: source.to_string(),
            fast,
            checked: OnceLock::from(Ok(checked)),
            env,
        })
    }

    /// The general compile: parse, type-check, the scheduler's validators and, for the API
    /// server's environment, the cost estimate.
    fn check(source: &str, env: Env) -> Result<(Checked, Option<fast::Fast>), CelError> {
        let mut parsed = parse::parse(source, env).map_err(|i| compile_error(i, source))?;
        let checked = check::check(&mut parsed.expr, &parsed.positions, env).map_err(|i| {
            let mut e = compile_error(i, source);
            // Checked again only on this error path: whether the environment is the reason.
            let env_hint = (env == Env::New && Program::check(source, Env::Stored).is_ok())
                .then(|| NEW_EXPRESSIONS_HINT.to_string());
            if let (CelError::Syntax { message, .. }, Some(hint)) = (
                &mut e,
                env_hint.or_else(|| explain::compile_hint(&parsed.expr)),
            ) {
                message.push_str(" (");
                message.push_str(&hint);
                message.push(')');
            }
            e
        })?;
        let root = checked
            .types
            .get(parsed.expr.id as usize)
            .cloned()
            .unwrap_or(types::Type::Dyn);
        if !matches!(root, types::Type::Bool) && !root.is_dyn() {
            return Err(CelError::NotBool(root.to_string()));
        }
        let issues = validate::validate(
            &parsed.expr,
            &checked.types,
            &checked.refs,
            &parsed.positions,
        );
        if !issues.is_empty() {
            return Err(compile_error(issues, source));
        }
        validate::instantiate(&parsed.expr, &checked.refs, &parsed.positions)
            .map_err(|i| compile_error(vec![i], source))?;
        // The API server estimates the cost of the selectors it admits; the scheduler does not.
        let cost = if env == Env::New {
            let c = cost::estimate(&parsed.expr, &checked.types, &checked.refs);
            if c.max > MAX_SELECTOR_COST {
                return Err(CelError::TooComplex {
                    estimated: c.max,
                    limit: MAX_SELECTOR_COST,
                });
            }
            Some(c)
        } else {
            None
        };
        let fast = fast::plan(&parsed.expr, &checked.refs);
        Ok((
            Checked {
                expr: parsed.expr,
                refs: checked.refs,
                cost,
            },
            fast,
        ))
    }

    /// The checked tree, built now if the expression was compiled by recognising its shape.
    /// The shapes recognised always compile, so the error is only a safeguard.
    fn checked(&self) -> Result<&Checked, CelError> {
        self.checked
            .get_or_init(|| Program::check(&self.source, self.env).map(|(c, _)| c))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The expression as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the selector for one device: `Ok(true)` when it selects the device, an error
    /// when evaluation fails for this device (the scheduler then fails the claim).
    pub fn matches(&self, device: &DeviceView<'_>) -> Result<bool, CelError> {
        self.matches_device(device)
    }

    /// Whether the program reads nothing of a device but its driver, so that its answer is
    /// the same for every device of a pool (and never an error).
    pub(crate) fn driver_only(&self) -> bool {
        self.fast.as_ref().is_some_and(fast::Fast::driver_only)
    }

    /// [`Program::matches`] on a device that gives its full view ([`DeviceView`], with the
    /// attribute index) only when the evaluator needs it: the allocator builds a device's index
    /// only for selectors the shortcut cannot decide.
    pub(crate) fn matches_device<D: FullDevice + ?Sized>(
        &self,
        device: &D,
    ) -> Result<bool, CelError> {
        if let Some(b) = self.fast.as_ref().and_then(|f| f.eval(device)) {
            return Ok(b);
        }
        let checked = self.checked()?;
        let mut ev = eval::Eval::new(device.view(), &checked.refs);
        match ev.eval(&checked.expr) {
            Ok(value::Value::Bool(b)) => Ok(b),
            // A `dyn` result (an attribute) that is not a bool: the scheduler's runtime error.
            Ok(other) => Err(CelError::Runtime(format!(
                "CEL result of type {t} could not be converted to bool: unsupported type \
                 conversion from '{t}' to bool",
                t = other.type_name()
            ))),
            Err(e) => Err(CelError::Runtime(e.message().to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AttributeValue, DeviceAttributes, Given, NameArena, Quantity, same_bytes};

    /// The word-wise comparison is `==` at every length and wherever two strings differ.
    #[test]
    fn same_bytes_is_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            assert!(same_bytes(a, a), "{n}");
            for m in 0..=base.len() {
                assert_eq!(same_bytes(a, &base[..m]), n == m, "{n} vs {m}");
            }
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "{n}: differs at {at}");
            }
        }
    }

    type Attrs<'a> = Vec<(&'a str, AttributeValue)>;
    /// A device: its driver, attributes and capacities.
    type Dev = (&'static str, Attrs<'static>, Vec<(&'static str, Quantity)>);

    fn int(names: &[&'static str], base: i64) -> Attrs<'static> {
        names
            .iter()
            .zip(base..)
            .map(|(n, i)| (*n, AttributeValue::Int(i)))
            .collect()
    }

    fn strings(names: &[&'static str], text: &str) -> Attrs<'static> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| match i % 2 {
                0 => (*n, AttributeValue::String(format!("{text}{i}"))),
                _ => (*n, AttributeValue::Bool(true)),
            })
            .collect()
    }

    /// Builds indexes one after another from one arena, as the allocator does.
    fn from_arena(devices: &[Dev]) -> Vec<Result<DeviceAttributes, String>> {
        let mut arena = NameArena::new();
        let mut out: Vec<Result<DeviceAttributes, String>> = devices
            .iter()
            .map(|(driver, attrs, caps)| {
                // Strings as the allocator gives them: read only when asked for.
                let mut attrs: Vec<(&str, Given)> = attrs
                    .iter()
                    .map(|(n, v)| match v {
                        AttributeValue::String(s) => (*n, Given::Str(s)),
                        v => (*n, Given::Value(v.clone())),
                    })
                    .collect();
                arena
                    .index(driver, &mut attrs, caps)
                    .map_err(|e| e.to_string())
            })
            .collect();
        let names = arena.finish();
        for d in out.iter_mut().flatten() {
            d.set_names(&names);
        }
        out
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn indexes_sharing_an_arena_equal_indexes_built_alone() {
        let same = ["b", "resource.kubernetes.io/pcieRoot", "a", "c"];
        let devices = vec![
            ("dra.net", int(&same, 0), vec![("memory", q("1Gi"))]),
            // The same names: reused, with the device's own values.
            ("dra.net", int(&same, 10), vec![("memory", q("2Gi"))]),
            // Other names, then the same again: the order is computed anew each time.
            ("dra.net", int(&["z", "a"], 20), vec![]),
            ("dra.net", int(&same, 30), vec![("x.io/memory", q("3"))]),
            // The same names under another driver: unqualified ones are in its domain.
            ("gpu.example.com", int(&same, 40), vec![("memory", q("4"))]),
            // Strings, kept in the arena until read.
            ("dra.net", strings(&same, "x"), vec![]),
            ("dra.net", strings(&same, "yy"), vec![]),
            // Another driver again, and no names at all: nothing of the last device is kept.
            ("dra.net", int(&[], 0), vec![]),
            ("dra.net", int(&["a"], 50), vec![]),
        ];
        let shared = from_arena(&devices);
        for ((driver, attrs, caps), got) in devices.iter().zip(shared) {
            let got = got.unwrap();
            let alone = DeviceAttributes::new(driver, attrs.clone(), caps.clone()).unwrap();
            assert_eq!(got, alone, "{driver} {attrs:?}");
            for (name, value) in attrs {
                assert_eq!(got.get_qualified(name, driver), Some(value), "{name}");
            }
        }
        let last =
            DeviceAttributes::new("gpu.example.com", int(&same, 40), [("memory", q("4"))]).unwrap();
        assert_eq!(
            last.get("gpu.example.com", "a"),
            Some(&AttributeValue::Int(42))
        );
        assert_eq!(last.get("dra.net", "a"), None);
        assert_eq!(last.capacity("gpu.example.com", "memory"), Some(q("4")));
    }

    #[test]
    fn a_name_given_twice_is_reported_for_every_device_that_gives_it() {
        let twice = ["numaNode", "dra.net/numaNode"];
        let devices = vec![
            ("dra.net", int(&["numaNode"], 0), vec![]),
            ("dra.net", int(&twice, 0), vec![]),
            // The same list again: not taken as checked.
            ("dra.net", int(&twice, 0), vec![]),
            (
                "dra.net",
                int(&["a"], 0),
                vec![("m", q("1")), ("dra.net/m", q("2"))],
            ),
            (
                "dra.net",
                int(&["a"], 0),
                vec![("m", q("1")), ("dra.net/m", q("2"))],
            ),
        ];
        let got: Vec<Result<(), String>> = from_arena(&devices)
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect();
        let attr = Err("attribute dra.net/numaNode is given twice".to_string());
        let cap = Err("capacity dra.net/m is given twice".to_string());
        assert_eq!(got, vec![Ok(()), attr.clone(), attr, cap.clone(), cap]);
    }
}
