//! The exit policy of `dranet check`: which verdicts fail it (`--fail-on`), with which exit code
//! and one-line message. The report ([`dranet_alloc::report`]) says what fits; this says what the
//! command makes of it.

use std::collections::BTreeMap;

use dranet_alloc::report::{Report, Verdict, per_claim};

use super::CheckError;

/// Exit codes of `dranet check` (1 is any input or usage error).
pub mod exit {
    /// A claim fits on no node.
    pub const DOES_NOT_FIT: u8 = 2;
    /// A claim is invalid: the scheduler would fail the pod.
    pub const INVALID: u8 = 3;
    /// With `--fail-on warning`: a claim fits only unaligned.
    pub const UNALIGNED: u8 = 4;
}

/// `--fail-on` levels: which outcome counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FailOn {
    /// Exit non-zero when a claim does not fit or is invalid.
    #[default]
    Error,
    /// Also when a claim fits only unaligned.
    Warning,
}

/// The worst outcome of a report: the claims with that best verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// [`Verdict::Invalid`], [`Verdict::DoesNotFit`] (on every node) or
    /// [`Verdict::FitsUnaligned`] (with [`FailOn::Warning`]).
    pub verdict: Verdict,
    /// The claims, by name.
    pub claims: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.verdict {
            Verdict::Invalid => "invalid",
            Verdict::DoesNotFit => "fit on no node",
            Verdict::FitsUnaligned => "fit only unaligned",
            Verdict::Fits => "fit",
        };
        write!(
            f,
            "{} claim(s) {what}: {}",
            self.claims.len(),
            self.claims.join(", ")
        )
    }
}

impl Failure {
    /// The failure of a report, if any: the worst claim wins (invalid, then fits on no node,
    /// then, with [`FailOn::Warning`], fits only unaligned).
    pub fn of(r: &Report, fail_on: FailOn) -> Option<Failure> {
        let mut by: BTreeMap<Verdict, Vec<String>> = BTreeMap::new();
        for v in per_claim(r) {
            by.entry(v.best).or_default().push(v.claim.name.clone());
        }
        let mut worst = [Verdict::Invalid, Verdict::DoesNotFit].to_vec();
        if fail_on == FailOn::Warning {
            worst.push(Verdict::FitsUnaligned);
        }
        worst.into_iter().find_map(|verdict| {
            Some(Failure {
                verdict,
                claims: by.remove(&verdict)?,
            })
        })
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        match self.verdict {
            Verdict::Invalid => exit::INVALID,
            Verdict::DoesNotFit => exit::DOES_NOT_FIT,
            Verdict::FitsUnaligned | Verdict::Fits => exit::UNALIGNED,
        }
    }
}

/// The exit code and message for a report: the worst claim wins (invalid, then fits nowhere,
/// then, with `--fail-on warning`, fits only unaligned).
pub fn verdict_error(r: &Report, fail_on: FailOn) -> Option<CheckError> {
    let f = Failure::of(r, fail_on)?;
    Some(CheckError::Verdict {
        code: f.code(),
        message: f.to_string(),
    })
}
