//! The value types of the Kubernetes CEL libraries DRA uses: semantic versions and quantities.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A semantic version (`major.minor.patch[-pre][+build]`), ordered by semver precedence:
/// build metadata is ignored and a pre-release sorts before its release.
#[derive(Debug, Clone)]
pub struct Semver {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// Behind a pointer to keep a version (and so every attribute value) small: a device's
    /// attribute index is an array of values, and a smaller array is a cheaper allocation.
    /// Shared, so the devices of a slice that publish one version hold one copy of it.
    rest: Arc<Rest>,
}

#[derive(Debug, Clone)]
struct Rest {
    pre: Vec<PreId>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PreId {
    // Numeric identifiers sort before alphanumeric ones, so the variant order matters.
    Num(u64),
    Alpha(String),
}

/// Whether `s` is `major.minor.patch` of decimal numbers without leading zeros, each of at most
/// 19 digits (so below `u64::MAX`): versions of this form, the ones devices publish, are
/// accepted by [`Semver::parse`] without the general parse.
fn plain_version(s: &str) -> bool {
    // One pass over the bytes: a split per part cost more than the rest of the check.
    let (mut dots, mut len, mut first) = (0, 0usize, 0u8);
    let part_ok = |len: usize, first: u8| len > 0 && len <= 19 && (len == 1 || first != b'0');
    for &c in s.as_bytes() {
        if c == b'.' {
            if !part_ok(len, first) {
                return false;
            }
            dots += 1;
            len = 0;
        } else if c.is_ascii_digit() {
            if len == 0 {
                first = c;
            }
            len += 1;
        } else {
            return false;
        }
    }
    dots == 2 && part_ok(len, first)
}

impl Semver {
    /// Parses a version as the Kubernetes semver library does (blang/semver `Parse`); the
    /// error says what is wrong.
    pub fn parse(s: &str) -> Result<Semver, String> {
        let (major, minor, patch, ids) = Semver::parts(s)?;
        Ok(Semver {
            major,
            minor,
            patch,
            rest: Arc::new(Rest {
                pre: ids,
                text: s.to_string(),
            }),
        })
    }

    /// Whether [`Semver::parse`] accepts `s`, its error if not, without making the version
    /// (which allocates): the allocator checks every version a slice publishes.
    pub(crate) fn check(s: &str) -> Result<(), String> {
        if plain_version(s) {
            return Ok(());
        }
        Semver::parts(s).map(|_| ())
    }

    /// Major, minor, patch and prerelease identifiers.
    fn parts(s: &str) -> Result<(u64, u64, u64, Vec<PreId>), String> {
        if s.is_empty() {
            return Err("Version string empty".into());
        }
        // No list of the parts: versions are parsed for every device on the allocator's cold
        // path.
        let mut parts = s.splitn(3, '.');
        let (Some(major), Some(minor), Some(patch_str)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err("No Major.Minor.Patch elements found".into());
        };
        let num = |p: &str, what: &str| -> Result<u64, String> {
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("Invalid character(s) found in {what} number {p:?}"));
            }
            if p.len() > 1 && p.starts_with('0') {
                let w = format!("{}{}", what[..1].to_uppercase(), &what[1..]);
                return Err(format!("{w} number must not contain leading zeroes {p:?}"));
            }
            p.parse()
                .map_err(|_| format!("strconv.ParseUint: parsing {p:?}: invalid syntax"))
        };
        let major = num(major, "major")?;
        let minor = num(minor, "minor")?;
        let mut patch_str = patch_str;
        let mut build: Option<&str> = None;
        if let Some(i) = patch_str.find('+') {
            build = Some(&patch_str[i + 1..]);
            patch_str = &patch_str[..i];
        }
        let mut pre: Option<&str> = None;
        if let Some(i) = patch_str.find('-') {
            pre = Some(&patch_str[i + 1..]);
            patch_str = &patch_str[..i];
        }
        let patch = num(patch_str, "patch")?;
        let mut ids = Vec::new();
        if let Some(pre) = pre {
            for p in pre.split('.') {
                if p.is_empty() {
                    return Err("Prerelease is empty".into());
                }
                if p.bytes().all(|b| b.is_ascii_digit()) {
                    if p.len() > 1 && p.starts_with('0') {
                        return Err(format!(
                            "Prerelease version must not contain leading zeroes {p:?}"
                        ));
                    }
                    ids.push(PreId::Num(p.parse().map_err(|_| {
                        format!("strconv.ParseUint: parsing {p:?}: value out of range")
                    })?));
                } else if ident_ok(p) {
                    ids.push(PreId::Alpha(p.to_string()));
                } else {
                    return Err(format!("Invalid character(s) found in prerelease {p:?}"));
                }
            }
        }
        if let Some(build) = build {
            for b in build.split('.') {
                if b.is_empty() {
                    return Err("Build meta data is empty".into());
                }
                if !ident_ok(b) {
                    return Err(format!(
                        "Invalid character(s) found in build meta data {b:?}"
                    ));
                }
            }
        }
        Ok((major, minor, patch, ids))
    }

    /// `semver(s, true)`: a `v` prefix, missing minor/patch and leading zeros are accepted.
    pub fn parse_tolerant(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s.splitn(3, '.').map(str::to_string).collect();
        for p in parts.iter_mut() {
            if p.len() > 1 {
                let t = p.trim_start_matches('0');
                *p = if t.is_empty() || !t.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("0{t}")
                } else {
                    t.to_string()
                };
            }
        }
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".into());
            }
            while parts.len() < 3 {
                parts.push("0".into());
            }
        }
        Semver::parse(&parts.join("."))
    }
}

fn ident_ok(p: &str) -> bool {
    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Ord for Semver {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (self.rest.pre.is_empty(), o.rest.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.rest.pre.cmp(&o.rest.pre),
            })
    }
}
impl PartialOrd for Semver {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Semver {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Semver {}
impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rest.text)
    }
}

impl Semver {
    /// The version as written.
    pub fn as_str(&self) -> &str {
        &self.rest.text
    }
}

// The API carries a version as its text; reading one checks it is a version.
impl serde::Serialize for Semver {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rest.text)
    }
}

impl<'de> serde::Deserialize<'de> for Semver {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Semver, D::Error> {
        let text = String::deserialize(d)?;
        Semver::parse(&text)
            .map_err(|e| serde::de::Error::custom(format!("invalid semver {text:?}: {e}")))
    }
}

/// A Kubernetes resource quantity (`100m`, `1.5Gi`, `2e3`), exact to the nano unit.
///
/// Equality, order and hashing are by value. The quantity also remembers whether Kubernetes
/// would hold it as a scaled 64-bit integer or as an arbitrary-precision decimal, because
/// `asInteger()` and `isInteger()` answer from that representation, not from the value:
/// `quantity("1.5Gi").asInteger()` is an error in the scheduler although 1.5Gi is a whole number.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nanos: i128,
    /// `Some(scale)` when Kubernetes holds the quantity as an int64 times 10^scale, `None` when
    /// it holds an arbitrary-precision decimal.
    int64_scale: Option<i32>,
}

impl PartialEq for Quantity {
    fn eq(&self, o: &Self) -> bool {
        self.nanos == o.nanos
    }
}
impl Eq for Quantity {}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Quantity {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&o.nanos)
    }
}
impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.nanos.hash(h)
    }
}

/// `nanos` as an int64 count of 10^`scale` units, if it is exactly that.
fn unscaled(nanos: i128, scale: i32) -> Option<i64> {
    let shift = scale + 9;
    let v = if shift >= 0 {
        let d = pow10(shift as u32)?;
        if nanos % d != 0 {
            return None;
        }
        nanos / d
    } else {
        nanos.checked_mul(pow10((-shift) as u32)?)?
    };
    i64::try_from(v).ok()
}

/// `10^e` for `e` in 0..=38.
fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Whether [`Quantity::parse`] accepts `s`, its error if not. The form devices publish
    /// (up to 9 digits and a suffix up to `T` or `Ti`, as `200G` or `288Gi`) is accepted
    /// without the general parse, which cannot fail on it.
    pub(crate) fn check(s: &str) -> Result<(), String> {
        let b = s.as_bytes();
        let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        if (1..=9).contains(&digits)
            && matches!(
                &b[digits..],
                b"" | b"k" | b"M" | b"G" | b"T" | b"Ki" | b"Mi" | b"Gi" | b"Ti"
            )
        {
            return Ok(());
        }
        Quantity::parse(s).map(|_| ())
    }

    /// Parses the Kubernetes quantity syntax as `resource.ParseQuantity` does: fractions below
    /// a nano unit round up, binary-suffixed values are capped at the int64 maximum.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        const WRONG: &str = "quantities must match the regular expression \
                             '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
        let b = s.as_bytes();
        if b.is_empty() {
            return Err(WRONG.into());
        }
        let mut pos = 0;
        let mut neg = false;
        match b[0] {
            b'-' => {
                neg = true;
                pos = 1;
            }
            b'+' => pos = 1,
            _ => {}
        }
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let n = digits(pos);
        let num = &s[pos..pos + n];
        pos += n;
        let mut frac = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let d = digits(pos);
            frac = &s[pos..pos + d];
            pos += d;
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && matches!(b[pos], b'-' | b'+') {
            pos += 1;
        }
        pos += digits(pos);
        if pos != b.len() {
            return Err(WRONG.into());
        }
        let suffix = &s[suffix_start..];
        let bad_suffix = || "unable to parse quantity's suffix".to_string();
        // (multiplier, power of ten, binary)
        let (mult, exp10, binary): (i128, i32, bool) = match suffix {
            "" => (1, 0, false),
            "n" => (1, -9, false),
            "u" => (1, -6, false),
            "m" => (1, -3, false),
            "k" => (1, 3, false),
            "M" => (1, 6, false),
            "G" => (1, 9, false),
            "T" => (1, 12, false),
            "P" => (1, 15, false),
            "E" => (1, 18, false),
            "Ki" => (1 << 10, 0, true),
            "Mi" => (1 << 20, 0, true),
            "Gi" => (1 << 30, 0, true),
            "Ti" => (1 << 40, 0, true),
            "Pi" => (1 << 50, 0, true),
            "Ei" => (1 << 60, 0, true),
            e if e.len() > 1 && e.starts_with(['e', 'E']) => {
                let x: i64 = e[1..].parse().map_err(|_| bad_suffix())?;
                if !(-60..=60).contains(&x) {
                    return Err("quantity exponent out of the supported range".into());
                }
                (1, x as i32, false)
            }
            _ => return Err(bad_suffix()),
        };
        let overflow = || "quantity is too large".to_string();
        let mut mantissa: i128 = 0;
        for d in num.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(d - b'0')))
                .ok_or_else(overflow)?;
        }
        // value = mantissa * mult * 10^(exp10 - frac_len); in nanos add 9 to the exponent.
        let scale = exp10 - frac.len() as i32 + 9;
        let mut v = mantissa.checked_mul(mult).ok_or_else(overflow)?;
        if scale >= 0 {
            for _ in 0..scale {
                v = v.checked_mul(10).ok_or_else(overflow)?;
            }
        } else {
            let div = (0..-scale).try_fold(1i128, |acc, _| acc.checked_mul(10));
            v = match div {
                Some(div) => (v + div - 1) / div,
                None => i128::from(v != 0),
            };
        }
        if binary && v > i128::from(i64::MAX) * NANO {
            v = i128::from(i64::MAX) * NANO;
        }
        // resource.ParseQuantity's fast path: an int64 with a decimal scale when the digits
        // surely fit (18 for decimal forms; for binary suffixes only whole numbers, with the
        // suffix's digits counted as exponent*3/10), else a decimal.
        let digits_len = (num.len() + frac.len()) as i32;
        let int64_scale = if binary {
            let exp2 = mult.trailing_zeros() as i32;
            let precision = 15 - num.len() as i32 - exp2 * 3 / 10 - 1;
            (frac.is_empty() && precision >= 0 && i64::try_from(mantissa * mult).is_ok())
                .then_some(0)
        } else {
            let scale = exp10 - frac.len() as i32;
            (18 - digits_len >= 0 && scale >= -9).then_some(scale)
        };
        Ok(Quantity {
            nanos: if neg { -v } else { v },
            int64_scale,
        })
    }

    /// The int64 Kubernetes would hold at `scale`, if the value is exactly that.
    fn unscaled(self, scale: i32) -> Option<i64> {
        unscaled(self.nanos, scale)
    }

    /// The representation of `self ± o`, as Kubernetes' int64 addition keeps it: the smaller
    /// scale when both values fit there, else a decimal.
    fn sum_scale(self, o: Quantity, nanos: i128) -> Option<i32> {
        let (a, b) = (self.int64_scale?, o.int64_scale?);
        if o.nanos == 0 {
            return Some(a);
        }
        if self.nanos == 0 {
            return Some(b);
        }
        let s = a.min(b);
        let ok =
            self.unscaled(s).is_some() && o.unscaled(s).is_some() && unscaled(nanos, s).is_some();
        ok.then_some(s)
    }

    /// A whole number of units.
    pub fn from_int(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANO,
            int64_scale: Some(0),
        }
    }

    /// Sum, `None` on overflow.
    pub fn checked_add(self, o: Quantity) -> Option<Quantity> {
        self.nanos.checked_add(o.nanos).map(|nanos| Quantity {
            nanos,
            int64_scale: self.sum_scale(o, nanos),
        })
    }

    /// Difference, `None` on overflow.
    pub fn checked_sub(self, o: Quantity) -> Option<Quantity> {
        self.nanos.checked_sub(o.nanos).map(|nanos| Quantity {
            nanos,
            int64_scale: self.sum_scale(o, nanos),
        })
    }

    /// The value as an i64, as Kubernetes' `Quantity.AsInt64` gives it: only for a quantity held
    /// as an int64 with a scale of zero or more whose value fits (`1k`, `100Gi`, `1e3`); `None`
    /// for fractions and for quantities held as decimals (`1.0`, `1.5Gi`, `1Ei`,
    /// `9223372036854775807`), whatever their value.
    pub fn as_integer(self) -> Option<i64> {
        match self.int64_scale? {
            s if s < 0 => None,
            _ => self.unscaled(0),
        }
    }

    /// The value as a float, possibly rounded.
    pub fn as_f64(self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    /// -1, 0 or 1.
    pub fn sign(self) -> i64 {
        self.nanos.signum() as i64
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANO == 0 {
            write!(f, "{}", self.nanos / NANO)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20,000 strings of up to `max_len` characters of `alphabet`, from a seeded xorshift so
    /// the cases are the same every run.
    fn short_strings(alphabet: &[char], seed: u64, max_len: u64) -> Vec<String> {
        let mut x = seed;
        (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut y = x;
                (0..x % (max_len + 1))
                    .map(|_| {
                        let c = alphabet[(y % alphabet.len() as u64) as usize];
                        y /= alphabet.len() as u64;
                        c
                    })
                    .collect()
            })
            .collect()
    }

    /// `Semver::check` is `Semver::parse` without making the version: the same verdict and
    /// error on every string of a generated set (the plain shortcut included).
    #[test]
    fn check_agrees_with_parse() {
        let mut cases: Vec<String> = [
            "0.0.0",
            "1.2.3",
            "580.82.7",
            "10.3.0",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.2",
            "1.2.3.4",
            "",
            ".",
            "1..3",
            "1.2.",
            "9999999999999999999.1.1",
            "18446744073709551615.0.0",
            "18446744073709551616.0.0",
            "99999999999999999999.0.0",
            "1.2.3-rc.1",
            "1.2.3+b",
            "1.2.3-01",
            "a.b.c",
            "1.2.3 ",
            " 1.2.3",
            "+1.2.3",
            "1.2.-3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Every combination of numbers near the shortcut's limits.
        let nums = [
            "0",
            "1",
            "10",
            "007",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
        ];
        for a in nums {
            for b in nums {
                for c in nums {
                    cases.push(format!("{a}.{b}.{c}"));
                }
            }
        }
        // Short strings over the characters that matter.
        cases.extend(short_strings(
            &['0', '1', '9', '.', '-', '+', 'a'],
            0x9e37_79b9_7f4a_7c15,
            8,
        ));
        let mut plain = 0;
        for c in &cases {
            assert_eq!(Semver::check(c), Semver::parse(c).map(|_| ()), "{c:?}");
            if super::plain_version(c) {
                plain += 1;
            }
        }
        assert!(plain >= 64, "the shortcut was taken {plain} times");
    }

    /// `Quantity::check` gives `Quantity::parse`'s verdict and error, in and out of its
    /// shortcut: every suffix after numbers of 0 to 12 digits (zeros and nines at the limits),
    /// and short strings over the characters of the syntax.
    #[test]
    fn quantity_check_agrees_with_parse() {
        let suffixes = [
            "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "n", "u",
            "K", "g", "e3", "E2", "i", "GiB", "Gi ",
        ];
        let mut cases: Vec<String> = Vec::new();
        for digits in 0..=12 {
            for d in ['0', '1', '9'] {
                let num: String = std::iter::repeat_n(d, digits).collect();
                for s in suffixes {
                    cases.push(format!("{num}{s}"));
                    cases.push(format!("-{num}{s}"));
                    cases.push(format!("{num}.5{s}"));
                }
            }
        }
        cases.extend(short_strings(
            &[
                '0', '1', '9', '.', '-', '+', 'e', 'E', 'i', 'k', 'K', 'M', 'G', 'T',
            ],
            0x2545_f491_4f6c_dd1d,
            7,
        ));
        for c in &cases {
            assert_eq!(Quantity::check(c), Quantity::parse(c).map(|_| ()), "{c:?}");
        }
    }

    #[test]
    fn semver_precedence() {
        let v = |s| Semver::parse(s).unwrap();
        assert!(v("1.0.0-alpha") < v("1.0.0-alpha.1"));
        assert!(v("1.0.0-alpha.1") < v("1.0.0-alpha.beta"));
        assert!(v("1.0.0-beta.11") > v("1.0.0-beta.2"));
        assert!(v("1.0.0-rc.1") < v("1.0.0"));
        assert!(v("1.10.0") > v("1.9.9"));
        assert_eq!(v("1.2.3+build.5"), v("1.2.3"));
        for bad in ["1.2", "01.2.3", "1.2.3-", "1.2.x", "", "1.2.3+"] {
            assert!(Semver::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1Gi"), Quantity::from_int(1 << 30));
        assert_eq!(q("1.5Gi"), Quantity::from_int(3 << 29));
        assert_eq!(q("100m").checked_add(q("900m")), Some(q("1")));
        assert_eq!(q("2e3"), q("2k"));
        assert_eq!(q("-5"), Quantity::from_int(-5));
        assert!(q("1k") > q("999"));
        assert_eq!(q("1n").as_integer(), None);
        assert_eq!(q("8Gi").as_integer(), Some(8 << 30));
        // As Go's ParseQuantity: no digits before the suffix reads as zero.
        assert_eq!(q("Gi"), Quantity::from_int(0));
        for bad in [
            "",
            "aoeu",
            "1.2.3",
            "1Xi",
            "1e999",
            "99999999999999999999999E",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
