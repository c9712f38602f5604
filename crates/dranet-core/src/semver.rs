//! Semantic versions as Kubernetes reads them: the value of a `version` attribute and of CEL's
//! `semver()`.

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

/// One of the three numbers of a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionPart {
    /// The major number.
    Major,
    /// The minor number.
    Minor,
    /// The patch number.
    Patch,
}

impl VersionPart {
    fn name(self) -> &'static str {
        match self {
            VersionPart::Major => "major",
            VersionPart::Minor => "minor",
            VersionPart::Patch => "patch",
        }
    }

    fn capitalized(self) -> &'static str {
        match self {
            VersionPart::Major => "Major",
            VersionPart::Minor => "Minor",
            VersionPart::Patch => "Patch",
        }
    }
}

impl fmt::Display for VersionPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a string is not a version. The messages are those of the Kubernetes semver library
/// (blang/semver), which CEL's `semver()` reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SemverError {
    /// The string is empty.
    #[error("Version string empty")]
    Empty,
    /// Fewer than three dot-separated parts.
    #[error("No Major.Minor.Patch elements found")]
    MissingParts,
    /// A number with something other than digits.
    #[error("Invalid character(s) found in {part} number {text:?}")]
    NotANumber {
        /// Which number.
        part: VersionPart,
        /// Its text.
        text: String,
    },
    /// A number with a leading zero.
    #[error("{} number must not contain leading zeroes {text:?}", part.capitalized())]
    LeadingZero {
        /// Which number.
        part: VersionPart,
        /// Its text.
        text: String,
    },
    /// A number above `u64::MAX`.
    #[error("strconv.ParseUint: parsing {0:?}: invalid syntax")]
    NumberTooLarge(String),
    /// An empty pre-release identifier (`1.2.3-` or `1.2.3-a..b`).
    #[error("Prerelease is empty")]
    EmptyPrerelease,
    /// A numeric pre-release identifier with a leading zero.
    #[error("Prerelease version must not contain leading zeroes {0:?}")]
    PrereleaseLeadingZero(String),
    /// A numeric pre-release identifier above `u64::MAX`.
    #[error("strconv.ParseUint: parsing {0:?}: value out of range")]
    PrereleaseTooLarge(String),
    /// A pre-release identifier with a character other than `[0-9A-Za-z-]`.
    #[error("Invalid character(s) found in prerelease {0:?}")]
    InvalidPrerelease(String),
    /// An empty build metadata identifier.
    #[error("Build meta data is empty")]
    EmptyBuild,
    /// A build metadata identifier with a character other than `[0-9A-Za-z-]`.
    #[error("Invalid character(s) found in build meta data {0:?}")]
    InvalidBuild(String),
    /// [`Semver::parse_tolerant`]: a version of fewer than three numbers with a pre-release or
    /// build metadata.
    #[error("short version cannot contain PreRelease/Build meta data")]
    ShortWithMetadata,
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
    pub fn parse(s: &str) -> Result<Semver, SemverError> {
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
    /// (which allocates): an allocator checks every version a slice publishes.
    pub fn check(s: &str) -> Result<(), SemverError> {
        if plain_version(s) {
            return Ok(());
        }
        Semver::parts(s).map(|_| ())
    }

    /// Major, minor, patch and prerelease identifiers.
    fn parts(s: &str) -> Result<(u64, u64, u64, Vec<PreId>), SemverError> {
        if s.is_empty() {
            return Err(SemverError::Empty);
        }
        // No list of the parts: versions are parsed for every device on the allocator's cold
        // path.
        let mut parts = s.splitn(3, '.');
        let (Some(major), Some(minor), Some(patch_str)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(SemverError::MissingParts);
        };
        let num = |p: &str, part: VersionPart| -> Result<u64, SemverError> {
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(SemverError::NotANumber {
                    part,
                    text: p.to_string(),
                });
            }
            if p.len() > 1 && p.starts_with('0') {
                return Err(SemverError::LeadingZero {
                    part,
                    text: p.to_string(),
                });
            }
            p.parse()
                .map_err(|_| SemverError::NumberTooLarge(p.to_string()))
        };
        let major = num(major, VersionPart::Major)?;
        let minor = num(minor, VersionPart::Minor)?;
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
        let patch = num(patch_str, VersionPart::Patch)?;
        let mut ids = Vec::new();
        if let Some(pre) = pre {
            for p in pre.split('.') {
                if p.is_empty() {
                    return Err(SemverError::EmptyPrerelease);
                }
                if p.bytes().all(|b| b.is_ascii_digit()) {
                    if p.len() > 1 && p.starts_with('0') {
                        return Err(SemverError::PrereleaseLeadingZero(p.to_string()));
                    }
                    ids.push(PreId::Num(
                        p.parse()
                            .map_err(|_| SemverError::PrereleaseTooLarge(p.to_string()))?,
                    ));
                } else if ident_ok(p) {
                    ids.push(PreId::Alpha(p.to_string()));
                } else {
                    return Err(SemverError::InvalidPrerelease(p.to_string()));
                }
            }
        }
        if let Some(build) = build {
            for b in build.split('.') {
                if b.is_empty() {
                    return Err(SemverError::EmptyBuild);
                }
                if !ident_ok(b) {
                    return Err(SemverError::InvalidBuild(b.to_string()));
                }
            }
        }
        Ok((major, minor, patch, ids))
    }

    /// `semver(s, true)`: a `v` prefix, missing minor/patch and leading zeros are accepted.
    pub fn parse_tolerant(s: &str) -> Result<Semver, SemverError> {
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
                return Err(SemverError::ShortWithMetadata);
            }
            while parts.len() < 3 {
                parts.push("0".into());
            }
        }
        Semver::parse(&parts.join("."))
    }

    /// The version as written.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.rest.text
    }
}

fn ident_ok(p: &str) -> bool {
    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Ord for Semver {
    #[inline]
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
    #[inline]
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Semver {
    #[inline]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::tests::short_strings;

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

    /// The errors read as blang/semver's, which CEL's `semver()` reports.
    #[test]
    fn errors_read_as_the_semver_library() {
        let e = |s| Semver::parse(s).unwrap_err().to_string();
        assert_eq!(e(""), "Version string empty");
        assert_eq!(e("1.2"), "No Major.Minor.Patch elements found");
        assert_eq!(
            e("1.x.3"),
            "Invalid character(s) found in minor number \"x\""
        );
        assert_eq!(
            e("01.2.3"),
            "Major number must not contain leading zeroes \"01\""
        );
        assert_eq!(
            e("1.2.3-01"),
            "Prerelease version must not contain leading zeroes \"01\""
        );
        assert_eq!(e("1.2.3+"), "Build meta data is empty");
        assert_eq!(
            Semver::parse_tolerant("1.2-rc").unwrap_err().to_string(),
            "short version cannot contain PreRelease/Build meta data"
        );
    }
}
