//! How many pods a check allocates a claim for, one after another on each node (`dranet check
//! --pods`): N pods each with their own claim from one template, each later one seeing what the
//! earlier ones hold, as the scheduler places them.

use serde::Serialize;

/// How many pods, each with its own claim made from the checked template, are allocated one
/// after another on each node: 1 (the default) to [`Pods::MAX`].
///
/// ```
/// use dranet_alloc::report::Pods;
///
/// assert_eq!("6".parse::<Pods>().map(Pods::get), Ok(6));
/// assert!("0".parse::<Pods>().is_err());
/// assert_eq!(Pods::default().get(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pods(u32);

impl Pods {
    /// The most pods one check allocates: each is a full allocation per claim and node, and a
    /// node holds far fewer pods than this.
    pub const MAX: u32 = 1024;
    /// One pod: the claim on its own.
    pub const ONE: Pods = Pods(1);

    /// `n` pods, from 1 to [`Pods::MAX`].
    pub fn new(n: u32) -> Result<Pods, PodsError> {
        match n {
            0 => Err(PodsError::Zero),
            n if n > Pods::MAX => Err(PodsError::TooMany(n)),
            n => Ok(Pods(n)),
        }
    }

    /// How many.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for Pods {
    fn default() -> Pods {
        Pods::ONE
    }
}

impl std::str::FromStr for Pods {
    type Err = PodsError;

    fn from_str(s: &str) -> Result<Pods, PodsError> {
        let n = s.parse::<u32>().map_err(|source| PodsError::NotANumber {
            given: s.to_string(),
            source,
        })?;
        Pods::new(n)
    }
}

/// A pod count that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodsError {
    /// Zero pods: nothing to check.
    #[error("0 pods: nothing to check (give 1 to {max})", max = Pods::MAX)]
    Zero,
    /// More than [`Pods::MAX`].
    #[error("{0} pods: at most {max} are checked at once", max = Pods::MAX)]
    TooMany(u32),
    /// Not a whole number.
    #[error("{given:?} is not a number of pods (give 1 to {max})", max = Pods::MAX)]
    NotANumber {
        /// What was given.
        given: String,
        /// Why it is not a number.
        #[source]
        source: std::num::ParseIntError,
    },
}

/// How many of the pods asked for fit on a node ([`super::ClaimReport::pods`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCount {
    /// The pods asked for ([`super::Input::pods`]).
    pub asked: u32,
    /// How many of them were allocated before the first that was not (all of them when the
    /// claim fits).
    pub fit: u32,
}
