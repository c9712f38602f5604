//! The Kubernetes versions whose scheduler this crate answers for.

/// A Kubernetes minor version whose scheduler this crate reproduces: its default feature gates
/// ([`Features::of`](crate::Features::of)), its allocator's own behaviour
/// ([`SchedulerBugs::of`](crate::SchedulerBugs::of), and how it gathers pools and searches), and
/// the CEL environment selectors are checked in.
///
/// The default is the newest supported version, [`KubernetesVersion::NEWEST`].
///
/// 1.34 and 1.36 are measured against their schedulers (the stock 1.34.9 and 1.36.3 binaries'
/// allocator, `kit.sh allocbench`); 1.35 from its source; 1.37 from its changelog and feature
/// gates (no 1.37 scheduler runs here): it allocates as 1.36.3 does, and differs from it where
/// this crate models anything only in its default gates (`DRADeviceTaintRules` on, see
/// [`DeviceTaintRule`](crate::DeviceTaintRule)) and in the base CEL environment new selectors
/// are checked in (1.36's). docs/alloc.md lists what 1.37 changed and what is modelled.
///
/// ```
/// use dranet_alloc::KubernetesVersion;
///
/// let v: KubernetesVersion = "v1.36.3".parse().unwrap();
/// assert_eq!(v, KubernetesVersion::V1_36);
/// assert_eq!(v.to_string(), "1.36");
/// assert!("1.33".parse::<KubernetesVersion>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum KubernetesVersion {
    /// Kubernetes 1.34.
    V1_34,
    /// Kubernetes 1.35.
    V1_35,
    /// Kubernetes 1.36.
    V1_36,
    /// Kubernetes 1.37.
    #[default]
    V1_37,
}

/// Why a string or an API server's answer is not a supported Kubernetes version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not `MAJOR.MINOR` (with an optional `v` and patch: `v1.36.3`).
    #[error("{0:?} is not a Kubernetes version (MAJOR.MINOR, e.g. 1.36)")]
    Malformed(String),
    /// A version this crate does not reproduce.
    #[error("Kubernetes {0} is not supported (supported: {supported})", supported = KubernetesVersion::supported())]
    Unsupported(String),
}

impl KubernetesVersion {
    /// Every supported version, oldest first.
    pub const ALL: [KubernetesVersion; 4] = [
        KubernetesVersion::V1_34,
        KubernetesVersion::V1_35,
        KubernetesVersion::V1_36,
        KubernetesVersion::V1_37,
    ];

    /// The newest supported version, the default.
    pub const NEWEST: KubernetesVersion = KubernetesVersion::V1_37;

    /// The minor version (34 for 1.34).
    pub fn minor(self) -> u32 {
        match self {
            KubernetesVersion::V1_34 => 34,
            KubernetesVersion::V1_35 => 35,
            KubernetesVersion::V1_36 => 36,
            KubernetesVersion::V1_37 => 37,
        }
    }

    /// The supported versions, for messages: `1.34, 1.35, 1.36, 1.37`.
    pub fn supported() -> String {
        KubernetesVersion::ALL
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The version of `major` and `minor` as an API server's `/version` gives them (a minor of
    /// `36+` is 36: providers append `+`).
    pub fn from_server(major: &str, minor: &str) -> Result<KubernetesVersion, VersionError> {
        let minor = minor.trim_end_matches('+');
        format!("{major}.{minor}").parse()
    }

    /// The version of 1.`minor`, if supported.
    fn of_minor(minor: u32) -> Option<KubernetesVersion> {
        KubernetesVersion::ALL
            .into_iter()
            .find(|v| v.minor() == minor)
    }

    /// The compatibility version (1.x) the API server checks new selectors at (its
    /// `NewExpressions` CEL environment): `DefaultCompatibilityVersion()`, one minor below the
    /// binary.
    pub(crate) fn new_expressions_minor(self) -> u32 {
        self.minor() - 1
    }

    /// Whether the API server's DRAConsumableCapacity feature gate is on by default (alpha in
    /// 1.34 and 1.35, beta in 1.36), which declares `device.allowMultipleAllocations` for new
    /// selectors.
    pub(crate) fn declares_consumable_capacity(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    // How each version's allocator works, where the versions differ (see docs/alloc.md).

    /// 1.35 and newer gather a pool from every slice of it (one for another node completes it),
    /// leave incomplete and invalid pools out of `ExactCount` requests (an invalid one fails the
    /// node only when nothing else fits), take shared counters from a slice of their own and key
    /// them by pool; 1.34 counts only the node's slices, allocates from incomplete pools, fails
    /// on reaching an invalid one and keys counters by the slice that declares them.
    pub(crate) fn gathers_whole_pools(self) -> bool {
        self >= KubernetesVersion::V1_35
    }

    /// Whether the scheduler's `DRADeviceTaintRules` gate is on by default (beta and off in
    /// 1.36, GA in 1.37): an API server with the gate on serves DeviceTaintRules, whose taints
    /// the scheduler adds to the devices they select.
    pub fn applies_taint_rules_by_default(self) -> bool {
        self >= KubernetesVersion::V1_37
    }

    /// 1.36 sorts pools by (driver, pool) and a pool's slices by name; older versions visit
    /// pools in Go map order (random) and slices in the order given.
    pub(crate) fn sorts_pools(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    /// 1.36 tries a request's devices as combinations (each slot after the previous slot's
    /// device); older versions try every permutation, which only shows with shared counters.
    pub(crate) fn searches_combinations(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    /// 1.35 and newer act only on taints with effect `NoSchedule` or `NoExecute` (`None` and
    /// unknown effects are ignored); 1.34 requires every taint to be tolerated.
    pub(crate) fn ignores_other_taint_effects(self) -> bool {
        self >= KubernetesVersion::V1_35
    }

    /// 1.34 and 1.36 pin an allocation with a `bindsToNode` device to the node; the
    /// allocator of 1.35's default feature gates does not look at it.
    pub(crate) fn honours_binds_to_node(self) -> bool {
        self != KubernetesVersion::V1_35
    }

    /// 1.36 runs the allocator variant it calls "stable" (not modelled here) unless
    /// `DRADeviceBindingConditions` or `DRAConsumableCapacity` is on; its default gates turn
    /// both on and select the "incubating" variant, which this crate reproduces.
    pub(crate) fn needs_incubating_features(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    /// 1.36.3 gives a device's shared counters back when its taints or the claim's
    /// constraints reject it after its counter check (measured with its allocbench); older
    /// versions keep them taken for the rest of the call.
    pub(crate) fn gives_back_rejected_counters(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    /// 1.36.3 gives a shared device's counters back when the share that took them is undone
    /// (measured with its allocbench); 1.35's source keeps them taken for the rest of the call.
    pub(crate) fn share_returns_counters(self) -> bool {
        self >= KubernetesVersion::V1_36
    }

    /// 1.35 and newer copy the request's tolerations into each result.
    pub(crate) fn results_carry_tolerations(self) -> bool {
        self >= KubernetesVersion::V1_35
    }
}

impl std::fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "1.{}", self.minor())
    }
}

impl std::str::FromStr for KubernetesVersion {
    type Err = VersionError;

    /// `1.36`, `v1.36`, `v1.36.3` or `1.36.3-gke.100`: the patch and anything after it do not
    /// change the scheduler's allocator.
    fn from_str(s: &str) -> Result<KubernetesVersion, VersionError> {
        let malformed = || VersionError::Malformed(s.to_string());
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.splitn(3, '.');
        let major = parts.next().ok_or_else(malformed)?;
        let minor = parts.next().ok_or_else(malformed)?;
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || !digits(minor) {
            return Err(malformed());
        }
        let minor_n: u32 = minor.parse().map_err(|_| malformed())?;
        if major != "1" {
            return Err(VersionError::Unsupported(format!("{major}.{minor}")));
        }
        KubernetesVersion::of_minor(minor_n)
            .ok_or_else(|| VersionError::Unsupported(format!("{major}.{minor}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_what_users_and_servers_write() {
        for (s, v) in [
            ("1.34", KubernetesVersion::V1_34),
            ("v1.35", KubernetesVersion::V1_35),
            ("v1.36.3", KubernetesVersion::V1_36),
            ("1.36.0-gke.1200", KubernetesVersion::V1_36),
        ] {
            assert_eq!(s.parse::<KubernetesVersion>(), Ok(v), "{s}");
        }
        assert_eq!(
            KubernetesVersion::from_server("1", "36+"),
            Ok(KubernetesVersion::V1_36)
        );
        for bad in ["", "1", "one.36", "1.x", "v", "1..36"] {
            assert!(
                matches!(
                    bad.parse::<KubernetesVersion>(),
                    Err(VersionError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!("v1.37.0".parse(), Ok(KubernetesVersion::V1_37));
        let e = "1.38".parse::<KubernetesVersion>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "Kubernetes 1.38 is not supported (supported: 1.34, 1.35, 1.36, 1.37)"
        );
        assert!(matches!(
            "2.0".parse::<KubernetesVersion>(),
            Err(VersionError::Unsupported(_))
        ));
    }

    #[test]
    fn every_version_prints_as_it_parses_and_the_newest_is_the_default() {
        for v in KubernetesVersion::ALL {
            assert_eq!(v.to_string().parse::<KubernetesVersion>(), Ok(v));
        }
        assert_eq!(KubernetesVersion::default(), KubernetesVersion::NEWEST);
        assert_eq!(
            KubernetesVersion::ALL.last(),
            Some(&KubernetesVersion::NEWEST)
        );
    }
}
