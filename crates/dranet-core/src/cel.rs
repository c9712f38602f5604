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
//! use dranet_core::cel::{AttributeValue, DeviceAttributes, DeviceView, Program, Quantity};
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
mod ext;
mod fast;
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
use std::sync::OnceLock;

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
pub use ext::{Quantity, Semver};

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
pub use crate::attributes::AttributeValue;

/// The former name of [`AttributeValue`], kept so existing callers build; new code uses
/// [`AttributeValue`].
#[doc(hidden)]
pub type AttrValue = AttributeValue;

/// A device's attributes and capacities indexed by (domain, name), built once per device so
/// lookups during evaluation are a binary search without allocation.
///
/// Building one is on the allocator's cold path (every device of every slice), so the
/// qualified names of all attributes and capacities share one string instead of one each.
#[derive(Debug, Clone, Default)]
pub struct DeviceAttributes {
    /// Every `domain/name`, one after another; entries hold offsets into it.
    keys: String,
    /// Sorted by (hash of domain and name, qualified name): a lookup compares integers, then
    /// the strings of the one entry with that hash.
    attrs: Vec<Entry>,
    /// Sorted by (domain, name).
    capacity: Vec<CapEntry>,
}

/// Where one qualified name is in [`DeviceAttributes::keys`]: `domain` is
/// `keys[start..split]`, `name` is `keys[split + 1..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    split: u32,
    end: u32,
}

impl Span {
    fn domain<'k>(&self, keys: &'k str) -> &'k str {
        &keys[self.start as usize..self.split as usize]
    }
    fn name<'k>(&self, keys: &'k str) -> &'k str {
        &keys[self.split as usize + 1..self.end as usize]
    }
    fn key<'k>(&self, keys: &'k str) -> &'k str {
        &keys[self.start as usize..self.end as usize]
    }
}

#[derive(Debug, Clone)]
struct Entry {
    hash: u64,
    span: Span,
    value: AttributeValue,
}

// A device has up to 32 attributes, most about 15: at 64 bytes an entry, its index stays below
// the size (1 KiB) past which glibc's malloc first consolidates its free lists, which showed as
// a tenth of the cold allocation path when versions made entries 104 bytes.
const _: () = assert!(std::mem::size_of::<Entry>() <= 64);

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
}

impl AttrKey {
    /// The key of `name` in `domain`.
    pub fn new(domain: &str, name: &str) -> AttrKey {
        AttrKey {
            domain: domain.to_string(),
            name: name.to_string(),
            hash: key_hash(domain, name),
        }
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
    const K: u64 = 0x517c_c1b7_2722_0a95;
    fn words(mut h: u64, b: &[u8]) -> u64 {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        h
    }
    let h = words(0, domain.as_bytes());
    // The length separates ("ab", "c") from ("a", "bc").
    let h = (h.rotate_left(5) ^ domain.len() as u64).wrapping_mul(K);
    words(h, name.as_bytes())
}

/// Splits `domain/name`; an unqualified name is in the driver's domain.
pub fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.bytes().position(|b| b == b'/') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (driver, name),
    }
}

/// Appends `domain/name` to `keys`. Offsets are u32: a device's names are bounded by the API
/// (32 attributes and capacities of at most 63 + 1 + 32 bytes), far below 4 GiB.
fn push_key(keys: &mut String, domain: &str, name: &str) -> Span {
    let start = keys.len() as u32;
    keys.push_str(domain);
    let split = keys.len() as u32;
    keys.push('/');
    keys.push_str(name);
    Span {
        start,
        split,
        end: keys.len() as u32,
    }
}

impl DeviceAttributes {
    /// Indexes attributes and capacities published by `driver` (names as in the ResourceSlice,
    /// qualified or not). Two names that resolve to the same qualified name are an error.
    pub fn new<A, C, S, T>(driver: &str, attributes: A, capacity: C) -> Result<Self, String>
    where
        A: IntoIterator<Item = (S, AttributeValue)>,
        C: IntoIterator<Item = (T, Quantity)>,
        S: AsRef<str>,
        T: AsRef<str>,
    {
        let attributes = attributes.into_iter();
        let capacity = capacity.into_iter();
        let n = attributes.size_hint().0 + capacity.size_hint().0;
        let mut keys = String::with_capacity(n * (driver.len() + 16));
        let mut attrs: Vec<Entry> = Vec::with_capacity(attributes.size_hint().0);
        for (n, value) in attributes {
            let (d, n) = split_qualified(n.as_ref(), driver);
            attrs.push(Entry {
                hash: key_hash(d, n),
                span: push_key(&mut keys, d, n),
                value,
            });
        }
        let mut caps: Vec<CapEntry> = Vec::with_capacity(capacity.size_hint().0);
        for (n, value) in capacity {
            let (d, n) = split_qualified(n.as_ref(), driver);
            caps.push(CapEntry {
                span: push_key(&mut keys, d, n),
                value,
            });
        }
        let k = keys.as_str();
        attrs.sort_unstable_by(|a, b| {
            a.hash
                .cmp(&b.hash)
                .then_with(|| a.span.key(k).cmp(b.span.key(k)))
        });
        if let Some(w) = attrs
            .windows(2)
            .find(|w| w[0].hash == w[1].hash && w[0].span.key(k) == w[1].span.key(k))
        {
            return Err(format!("attribute {} is given twice", w[0].span.key(k)));
        }
        let by_name = |c: &CapEntry| (c.span.domain(k), c.span.name(k));
        caps.sort_unstable_by(|a, b| by_name(a).cmp(&by_name(b)));
        if let Some(w) = caps.windows(2).find(|w| by_name(&w[0]) == by_name(&w[1])) {
            return Err(format!("capacity {} is given twice", w[0].span.key(k)));
        }
        Ok(DeviceAttributes {
            keys,
            attrs,
            capacity: caps,
        })
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
        let start = self.attrs.partition_point(|e| e.hash < hash);
        let k = self.keys.as_str();
        self.attrs[start..]
            .iter()
            .take_while(|e| e.hash == hash)
            .find(|e| e.span.domain(k) == domain && e.span.name(k) == name)
            .map(|e| &e.value)
    }

    /// The attribute with a fully qualified name (`resource.kubernetes.io/pcieRoot`), or an
    /// unqualified one in the driver's domain.
    pub fn get_qualified(&self, name: &str, driver: &str) -> Option<&AttributeValue> {
        let (d, n) = split_qualified(name, driver);
        self.get(d, n)
    }

    /// The capacity `name` of `domain`.
    pub fn capacity(&self, domain: &str, name: &str) -> Option<Quantity> {
        let k = self.keys.as_str();
        self.capacity
            .binary_search_by(|c| (c.span.domain(k), c.span.name(k)).cmp(&(domain, name)))
            .ok()
            .map(|i| self.capacity[i].value)
    }

    /// All attributes as (domain, name, value), in the index's order (stable for equal
    /// contents, not alphabetical).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &AttributeValue)> {
        let k = self.keys.as_str();
        self.attrs
            .iter()
            .map(move |e| (e.span.domain(k), e.span.name(k), &e.value))
    }

    /// All capacities as (domain, name, quantity), sorted.
    pub fn capacities(&self) -> impl Iterator<Item = (&str, &str, Quantity)> {
        let k = self.keys.as_str();
        self.capacity
            .iter()
            .map(move |c| (c.span.domain(k), c.span.name(k), c.value))
    }

    /// Names of the attributes in `domain`.
    fn domain_names(&self, domain: &str) -> Vec<&str> {
        self.iter()
            .filter(|(d, _, _)| *d == domain)
            .map(|(_, n, _)| n)
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
        if let Some(b) = self.fast.as_ref().and_then(|f| f.eval(device)) {
            return Ok(b);
        }
        let checked = self.checked()?;
        let mut ev = eval::Eval::new(*device, &checked.refs);
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
