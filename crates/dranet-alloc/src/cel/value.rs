//! Runtime values and cel-go's rules for them: equality (heterogeneous numbers, errors from the
//! Kubernetes types), ordering, map lookup with numeric keys, and the type of a value.
//!
//! Strings borrow from the program or the device where they can, and the device's attribute
//! maps are views over [`DeviceAttributes`](super::attrs::DeviceAttributes), never built per device.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;
use std::rc::Rc;

use dranet_core::{Quantity, Semver};

/// An evaluation error. `Cancel` (the cost limit) stops evaluation: unlike an ordinary error
/// no `&&`, `||` or comprehension absorbs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    Eval(String),
    Cancel(String),
}

impl Error {
    pub(crate) fn msg(m: impl Into<String>) -> Error {
        Error::Eval(m.into())
    }
    pub(crate) fn no_such_overload() -> Error {
        Error::Eval("no such overload".into())
    }
    pub(crate) fn message(&self) -> &str {
        match self {
            Error::Eval(m) | Error::Cancel(m) => m,
        }
    }
}

pub(crate) type R<T> = Result<T, Error>;

/// A string borrowed from the program or the device, or owned.
#[derive(Debug, Clone)]
pub(crate) enum Str<'a> {
    B(&'a str),
    O(Rc<str>),
}

impl Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Str::B(s) => s,
            Str::O(s) => s,
        }
    }
}

/// A semantic version borrowed from the device or made by `semver()`.
#[derive(Debug, Clone)]
pub(crate) enum Ver<'a> {
    B(&'a Semver),
    O(Rc<Semver>),
}

impl Deref for Ver<'_> {
    type Target = Semver;
    fn deref(&self) -> &Semver {
        match self {
            Ver::B(s) => s,
            Ver::O(s) => s,
        }
    }
}

/// A map literal or library result: entries in insertion order, keys unique.
#[derive(Debug, Clone, Default)]
pub(crate) struct Map<'a> {
    pub entries: Vec<(Value<'a>, Value<'a>)>,
}

impl<'a> Map<'a> {
    /// cel-go's lookup: the exact key, then the same number as another numeric type.
    pub(crate) fn find(&self, key: &Value<'a>) -> Option<&Value<'a>> {
        if let Some(v) = self.find_exact(key) {
            return Some(v);
        }
        match key {
            Value::Double(d) => {
                if let Some(i) = double_to_i64_lossless(*d)
                    && let Some(v) = self.find_exact(&Value::Int(i))
                {
                    return Some(v);
                }
                if let Some(u) = double_to_u64_lossless(*d) {
                    return self.find_exact(&Value::Uint(u));
                }
                None
            }
            Value::Int(i) => u64::try_from(*i)
                .ok()
                .and_then(|u| self.find_exact(&Value::Uint(u))),
            Value::Uint(u) => i64::try_from(*u)
                .ok()
                .and_then(|i| self.find_exact(&Value::Int(i))),
            _ => None,
        }
    }

    fn find_exact(&self, key: &Value<'a>) -> Option<&Value<'a>> {
        self.entries
            .iter()
            .find(|(k, _)| key_eq(k, key))
            .map(|(_, v)| v)
    }

    /// Inserts or replaces (a later duplicate key of a literal wins, as in cel-go).
    pub(crate) fn insert(&mut self, k: Value<'a>, v: Value<'a>) {
        match self.entries.iter_mut().find(|(x, _)| key_eq(x, &k)) {
            Some(e) => e.1 = v,
            None => self.entries.push((k, v)),
        }
    }
}

/// Key identity in a map: same type and value (Go map semantics over CEL values).
fn key_eq(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => **x == **y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Uint(x), Value::Uint(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Double(x), Value::Double(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

fn double_to_i64_lossless(d: f64) -> Option<i64> {
    let i = d as i64;
    (i as f64 == d && d.fract() == 0.0 && d > i64::MIN as f64 && d < -(i64::MIN as f64))
        .then_some(i)
}

fn double_to_u64_lossless(d: f64) -> Option<u64> {
    let u = d as u64;
    (u as f64 == d && d.fract() == 0.0 && (0.0..1.844_674_407_370_955_2e19).contains(&d))
        .then_some(u)
}

/// A URL, parsed once: the parts the Kubernetes URL library exposes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Url {
    pub text: String,
    pub scheme: String,
    pub host: String,
    pub escaped_path: String,
    pub query: Vec<(String, Vec<String>)>,
}

/// A runtime value.
#[derive(Debug, Clone)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Str<'a>),
    Bytes(Rc<[u8]>),
    List(Rc<Vec<Value<'a>>>),
    Map(Rc<Map<'a>>),
    /// Nanoseconds, as Go's `time.Duration`.
    Duration(i64),
    /// Seconds and nanoseconds since the Unix epoch, UTC.
    /// The third field is the offset east of UTC in seconds the timestamp was written with:
    /// `string()` prints it (`+01:00`) as Go's time keeps its location; it takes no part in
    /// comparisons or arithmetic results' value.
    Timestamp(i64, u32, i32),
    /// A type value (`int`, `list`, `kubernetes.Quantity`).
    Type(Rc<str>),
    Optional(Option<Rc<Value<'a>>>),
    Quantity(Quantity),
    Semver(Ver<'a>),
    Ip(IpAddr),
    Cidr(IpAddr, u8),
    Url(Rc<Url>),
    /// A named format of the Kubernetes format library (its key).
    Format(&'static str),
    /// `device`.
    Device,
    /// A `google.protobuf.Empty` message.
    Empty,
    /// `device.attributes`: domain → attributes.
    Attributes,
    /// `device.capacity`: domain → capacities.
    Capacity,
    /// `device.attributes[domain]`.
    Domain(Str<'a>),
    /// `device.capacity[domain]`.
    CapDomain(Str<'a>),
}

impl<'a> Value<'a> {
    pub(crate) fn str(s: &'a str) -> Value<'a> {
        Value::Str(Str::B(s))
    }
    pub(crate) fn string(s: String) -> Value<'a> {
        Value::Str(Str::O(s.into()))
    }
    pub(crate) fn list(v: Vec<Value<'a>>) -> Value<'a> {
        Value::List(Rc::new(v))
    }
    pub(crate) fn typ(name: &str) -> Value<'a> {
        Value::Type(name.into())
    }

    /// The runtime type's name, as `type()` returns it and `no such overload` messages print it.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null_type",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) | Value::Attributes | Value::Capacity => "map",
            Value::Domain(_) | Value::CapDomain(_) => "map",
            Value::Duration(_) => "google.protobuf.Duration",
            Value::Timestamp(..) => "google.protobuf.Timestamp",
            Value::Type(_) => "type",
            Value::Optional(_) => "optional_type",
            Value::Quantity(_) => super::types::QUANTITY,
            Value::Semver(_) => super::types::SEMVER,
            Value::Ip(_) => super::types::IP,
            Value::Cidr(..) => super::types::CIDR,
            Value::Url(_) => super::types::URL,
            Value::Format(_) => super::types::FORMAT,
            // Declared as an object to the checker, but the scheduler hands cel-go a map.
            Value::Device => "map",
            Value::Empty => super::types::EMPTY,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn is_map(&self) -> bool {
        matches!(
            self,
            Value::Map(_)
                | Value::Attributes
                | Value::Capacity
                | Value::Domain(_)
                | Value::CapDomain(_)
        )
    }
}

/// `a == b` as cel-go's `types.Equal` decides it: null equals only null, numbers compare by
/// value across int, uint and double, other kinds never equal each other — except that the
/// Kubernetes types (quantity, semver, IP, CIDR, URL) call a different kind an error.
pub(crate) fn equal<'a>(a: &Value<'a>, b: &Value<'a>, maps: &dyn MapView<'a>) -> R<bool> {
    use Value as V;
    if matches!(a, V::Null) || matches!(b, V::Null) {
        return Ok(matches!(a, V::Null) && matches!(b, V::Null));
    }
    Ok(match (a, b) {
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(_) | V::Uint(_) | V::Double(_), _) => match num_cmp(a, b) {
            Some(o) => o == Ordering::Equal,
            None => false,
        },
        (V::Str(x), V::Str(y)) => **x == **y,
        (V::Bytes(x), V::Bytes(y)) => x == y,
        (V::Duration(x), V::Duration(y)) => x == y,
        (V::Timestamp(s1, n1, _), V::Timestamp(s2, n2, _)) => s1 == s2 && n1 == n2,
        (V::Type(x), V::Type(y)) => x == y,
        (V::Empty, V::Empty) => true,
        (V::Optional(x), V::Optional(y)) => match (x, y) {
            (None, None) => true,
            (Some(x), Some(y)) => equal(x, y, maps)?,
            _ => false,
        },
        (V::List(x), V::List(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            // cel-go: only a definite `false` decides; an element error is passed over.
            for (p, q) in x.iter().zip(y.iter()) {
                if let Ok(false) = equal(p, q, maps) {
                    return Ok(false);
                }
            }
            true
        }
        (x, y) if x.is_map() && y.is_map() => {
            let kx = maps.keys(x);
            if kx.len() != maps.keys(y).len() {
                return Ok(false);
            }
            for k in kx {
                let vx = maps.get(x, &k);
                let Some(vy) = maps.get(y, &k) else {
                    return Ok(false);
                };
                if let Some(vx) = vx
                    && let Ok(false) = equal(&vx, &vy, maps)
                {
                    return Ok(false);
                }
            }
            true
        }
        (V::Quantity(x), V::Quantity(y)) => x == y,
        (V::Semver(x), V::Semver(y)) => **x == **y,
        (V::Ip(x), V::Ip(y)) => x == y,
        (V::Cidr(x, p), V::Cidr(y, q)) => x == y && p == q,
        (V::Url(x), V::Url(y)) => x == y,
        (V::Device, V::Device) => true,
        // Kubernetes' format values are equal by name.
        (V::Format(x), V::Format(y)) => x == y,
        (V::Quantity(_) | V::Semver(_) | V::Ip(_) | V::Cidr(..) | V::Url(_) | V::Format(_), _) => {
            return Err(Error::no_such_overload());
        }
        _ => false,
    })
}

/// Access to maps whatever they are backed by (literals or the device).
pub(crate) trait MapView<'a> {
    fn keys(&self, m: &Value<'a>) -> Vec<Value<'a>>;
    fn get(&self, m: &Value<'a>, k: &Value<'a>) -> Option<Value<'a>>;
}

/// Numeric ordering across int, uint and double; `None` when either is not a number or a NaN
/// is involved.
pub(crate) fn num_cmp(a: &Value<'_>, b: &Value<'_>) -> Option<Ordering> {
    use Value as V;
    match (a, b) {
        (V::Int(x), V::Int(y)) => Some(x.cmp(y)),
        (V::Uint(x), V::Uint(y)) => Some(x.cmp(y)),
        (V::Int(x), V::Uint(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (V::Uint(x), V::Int(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (V::Double(x), V::Double(y)) => x.partial_cmp(y),
        (V::Double(x), V::Int(y)) => cmp_double_int(*x, *y),
        (V::Double(x), V::Uint(y)) => cmp_double_uint(*x, *y),
        (V::Int(x), V::Double(y)) => cmp_double_int(*y, *x).map(Ordering::reverse),
        (V::Uint(x), V::Double(y)) => cmp_double_uint(*y, *x).map(Ordering::reverse),
        _ => None,
    }
}

// A double against an integer as cel-go compares them: out of the integer type's range the
// double is greater or less; within it the integer is rounded to a double, so
// `dyn(9223372036854775808.0) == 9223372036854775807` (2^63 against int64 max, which rounds
// to 2^63) and `dyn(9007199254740993) == 9007199254740992.0` hold.
#[allow(clippy::cast_precision_loss)]
fn cmp_double_int(d: f64, i: i64) -> Option<Ordering> {
    if d < i64::MIN as f64 {
        return (!d.is_nan()).then_some(Ordering::Less);
    }
    if d > i64::MAX as f64 {
        return Some(Ordering::Greater);
    }
    d.partial_cmp(&(i as f64))
}

#[allow(clippy::cast_precision_loss)]
fn cmp_double_uint(d: f64, u: u64) -> Option<Ordering> {
    if d < 0.0 {
        return Some(Ordering::Less);
    }
    if d > u64::MAX as f64 {
        return Some(Ordering::Greater);
    }
    d.partial_cmp(&(u as f64))
}

/// `a < b` and friends: numbers across kinds, and two values of the same orderable kind.
pub(crate) fn compare(a: &Value<'_>, b: &Value<'_>) -> R<Ordering> {
    use Value as V;
    match (a, b) {
        (V::Int(_) | V::Uint(_) | V::Double(_), V::Int(_) | V::Uint(_) | V::Double(_)) => {
            num_cmp(a, b).ok_or_else(|| Error::msg("NaN values cannot be ordered"))
        }
        (V::Bool(x), V::Bool(y)) => Ok(x.cmp(y)),
        (V::Str(x), V::Str(y)) => Ok((**x).cmp(&**y)),
        (V::Bytes(x), V::Bytes(y)) => Ok(x.cmp(y)),
        (V::Duration(x), V::Duration(y)) => Ok(x.cmp(y)),
        (V::Timestamp(s1, n1, _), V::Timestamp(s2, n2, _)) => Ok((s1, n1).cmp(&(s2, n2))),
        _ => Err(Error::no_such_overload()),
    }
}

/// Formats a double as Go's `strconv.FormatFloat(f, 'g', -1, 64)`, which `string(double)`
/// uses.
pub(crate) fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Shortest round-trip digits and decimal exponent.
    let s = format!("{d:e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    // %g with the shortest precision: exponent form when exp < -4 or exp >= 6... unless the
    // exponent is below the digit count (Go's eprec rule), which shortest formatting resets to 6.
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let m = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    if exp >= n - 1 {
        format!("{sign}{digits}{}", "0".repeat((exp - (n - 1)) as usize))
    } else if exp >= 0 {
        let (a, b) = digits.split_at((exp + 1) as usize);
        format!("{sign}{a}.{b}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
