//! The value types of the Kubernetes CEL libraries DRA uses: semantic versions and quantities.

use std::cmp::Ordering;
use std::fmt;

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
    pre: Vec<PreId>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PreId {
    // Numeric identifiers sort before alphanumeric ones, so the variant order matters.
    Num(u64),
    Alpha(String),
}

impl Semver {
    /// Parses a version; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Semver, String> {
        let bad = |why: &str| format!("invalid semver {s:?}: {why}");
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        if build.is_some_and(|b| b.is_empty() || b.split('.').any(|p| !ident_ok(p))) {
            return Err(bad("bad build metadata"));
        }
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let nums: Vec<&str> = core.split('.').collect();
        if nums.len() != 3 {
            return Err(bad("expected major.minor.patch"));
        }
        let num = |p: &str| -> Result<u64, String> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("version numbers must be digits"));
            }
            if p.len() > 1 && p.starts_with('0') {
                return Err(bad("leading zero in a version number"));
            }
            p.parse().map_err(|_| bad("version number too large"))
        };
        let mut ids = Vec::new();
        if let Some(pre) = pre {
            for p in pre.split('.') {
                if !ident_ok(p) {
                    return Err(bad("bad pre-release identifier"));
                }
                ids.push(if p.bytes().all(|b| b.is_ascii_digit()) {
                    if p.len() > 1 && p.starts_with('0') {
                        return Err(bad("leading zero in a numeric pre-release identifier"));
                    }
                    PreId::Num(p.parse().map_err(|_| bad("pre-release number too large"))?)
                } else {
                    PreId::Alpha(p.to_string())
                });
            }
        }
        Ok(Semver {
            major: num(nums[0])?,
            minor: num(nums[1])?,
            patch: num(nums[2])?,
            pre: ids,
            text: s.to_string(),
        })
    }
}

fn ident_ok(p: &str) -> bool {
    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Ord for Semver {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&o.pre),
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
        f.write_str(&self.text)
    }
}

impl Semver {
    /// The version as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

// The API carries a version as its text; reading one checks it is a version.
impl serde::Serialize for Semver {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Semver {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Semver, D::Error> {
        let text = String::deserialize(d)?;
        Semver::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A Kubernetes resource quantity (`100m`, `1.5Gi`, `2e3`), exact to the nano unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses the Kubernetes quantity syntax; fractions below a nano unit round up, as
    /// Kubernetes does.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        let bad = |why: &str| format!("invalid quantity {s:?}: {why}");
        let t = s.trim();
        let (neg, body) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (num, suffix) = body.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad("expected a number"));
        }
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        // (multiplier, power of ten) applied to the digits.
        let (mult, exp10): (i128, i32) = match suffix {
            "" => (1, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            e if e.starts_with(['e', 'E']) => {
                let x: i32 = e[1..].parse().map_err(|_| bad("bad exponent"))?;
                if !(-40..=40).contains(&x) {
                    return Err(bad("exponent out of range"));
                }
                (1, x)
            }
            _ => return Err(bad("unknown suffix")),
        };
        let overflow = || bad("value out of range");
        let digits: String = format!("{int_part}{frac_part}");
        let mut mantissa: i128 = 0;
        for d in digits.bytes() {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(d - b'0')))
                .ok_or_else(overflow)?;
        }
        // value = mantissa * mult * 10^(exp10 - frac_len); in nanos add 9 to the exponent.
        let scale = exp10 - frac_part.len() as i32 + 9;
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
        if v > i128::from(i64::MAX) * NANO {
            return Err(overflow());
        }
        Ok(Quantity {
            nanos: if neg { -v } else { v },
        })
    }

    /// A whole number of units.
    pub fn from_int(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANO,
        }
    }

    /// Sum, `None` on overflow.
    pub fn checked_add(self, o: Quantity) -> Option<Quantity> {
        self.nanos
            .checked_add(o.nanos)
            .map(|nanos| Quantity { nanos })
    }

    /// Difference, `None` on overflow.
    pub fn checked_sub(self, o: Quantity) -> Option<Quantity> {
        self.nanos
            .checked_sub(o.nanos)
            .map(|nanos| Quantity { nanos })
    }

    /// The value as an integer, when it is one and fits in i64.
    pub fn as_integer(self) -> Option<i64> {
        if self.nanos % NANO != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
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
        for bad in [
            "",
            "Gi",
            "1.2.3",
            "1Xi",
            "1e999",
            "99999999999999999999999E",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
