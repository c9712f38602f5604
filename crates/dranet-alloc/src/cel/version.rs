//! The Kubernetes versions whose DRA CEL environments are modelled, and what differs between
//! them (read from each release's `k8s.io/dynamic-resource-allocation/cel/compile.go` and
//! `k8s.io/apiserver/pkg/cel/environment/base.go`, confirmed against each release's scheduler
//! allocator and API server by the CEL corpora).

use std::fmt;
use std::str::FromStr;

/// A Kubernetes release whose DRA CEL environments (the API server's for a new selector, the
/// scheduler's for a stored one) a [`Program`](super::Program) is compiled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum KubeVersion {
    /// Kubernetes 1.34.
    V1_34,
    /// Kubernetes 1.36: the API server checks new selectors at compatibility version 1.35
    /// (so with cel-go's lists extension, version 3) and with DRAConsumableCapacity on (beta,
    /// so `device.allowMultipleAllocations`); the scheduler also declares DRA's `includes`.
    V1_36,
}

/// A Kubernetes version this crate has no CEL environment for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Kubernetes version {given:?} is not supported: the CEL environments modelled are those of \
     {supported}",
    given = .0,
    supported = KubeVersion::ALL.map(|v| v.to_string()).join(", ")
)]
pub struct UnsupportedVersion(pub String);

impl KubeVersion {
    /// Every supported version, oldest first.
    pub const ALL: [KubeVersion; 2] = [KubeVersion::V1_34, KubeVersion::V1_36];

    /// The newest supported version.
    pub const NEWEST: KubeVersion = KubeVersion::V1_36;

    /// The minor version (1.x).
    pub fn minor(self) -> u8 {
        match self {
            KubeVersion::V1_34 => 34,
            KubeVersion::V1_36 => 36,
        }
    }

    /// The supported version of minor version `minor` (1.x), if there is one.
    pub fn from_minor(minor: u8) -> Option<KubeVersion> {
        KubeVersion::ALL.into_iter().find(|v| v.minor() == minor)
    }

    /// The compatibility version (1.x) the API server checks new selectors at (its
    /// `NewExpressions` environment): `DefaultCompatibilityVersion()`, one minor below the
    /// binary.
    pub(crate) fn new_expressions_minor(self) -> u8 {
        self.minor() - 1
    }

    /// Whether the API server's DRAConsumableCapacity feature gate is on by default (alpha in
    /// 1.34, beta in 1.36), which declares `device.allowMultipleAllocations` for new selectors.
    pub(crate) fn consumable_capacity(self) -> bool {
        self >= KubeVersion::V1_36
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor())
    }
}

impl FromStr for KubeVersion {
    type Err = UnsupportedVersion;

    /// `1.36`, `v1.36`, or a full version such as `v1.36.3` (patch and pre-release ignored:
    /// patch releases do not change the CEL environment).
    fn from_str(s: &str) -> Result<KubeVersion, UnsupportedVersion> {
        let err = || UnsupportedVersion(s.to_string());
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split(['.', '-', '+']);
        let major = parts.next().ok_or_else(err)?;
        let minor = parts.next().ok_or_else(err)?;
        if major != "1" {
            return Err(err());
        }
        minor
            .parse::<u8>()
            .ok()
            .and_then(KubeVersion::from_minor)
            .ok_or_else(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_and_servers_give() {
        for s in ["1.36", "v1.36", "v1.36.3", "1.36.0-rc.1", " 1.36 "] {
            assert_eq!(s.parse::<KubeVersion>(), Ok(KubeVersion::V1_36), "{s}");
        }
        assert_eq!("v1.34.9".parse::<KubeVersion>(), Ok(KubeVersion::V1_34));
        let e = "1.35".parse::<KubeVersion>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "Kubernetes version \"1.35\" is not supported: the CEL environments modelled are \
             those of 1.34, 1.36"
        );
        for bad in ["", "2.36", "1", "1.x", "136"] {
            assert!(bad.parse::<KubeVersion>().is_err(), "{bad}");
        }
    }
}
