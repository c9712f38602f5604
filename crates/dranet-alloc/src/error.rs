//! Why an allocation could not be simulated or found.

use crate::cel::CelError;
use crate::device::DeviceId;
use crate::limits::MAX_ALLOCATED_DEVICES;

/// Why an allocation could not be simulated or found.
///
/// [`AllocError::Unsatisfiable`] and [`AllocError::InvalidPools`] are "does not fit": the
/// scheduler would try other nodes. Every other variant is an error the scheduler reports for the claim (or that the API
/// server would have refused), see [`AllocError::is_unsatisfiable`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocError {
    /// A ResourceSlice that cannot be used.
    #[error("ResourceSlice {slice}: {reason}")]
    InvalidSlice {
        /// Slice name (or its position when unnamed).
        slice: String,
        /// What is wrong.
        reason: String,
    },
    /// A DeviceTaintRule that cannot be read.
    #[error("DeviceTaintRule {rule}: {reason}")]
    InvalidTaintRule {
        /// Rule name (or its position when unnamed).
        rule: String,
        /// What is wrong.
        reason: String,
    },
    /// The [`Options`](crate::Options) ask for what cannot be built (a feature not modelled
    /// for the version, a program cache of another version).
    #[error("allocator options: {0}")]
    Options(String),
    /// The claim's structure is invalid.
    #[error("invalid claim: {0}")]
    InvalidClaim(String),
    /// A request names a DeviceClass that was not given.
    #[error("request {request}: DeviceClass {class:?} not found")]
    ClassNotFound {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class name.
        class: String,
    },
    /// A selector expression that does not compile.
    #[error("request {request}: invalid CEL expression {expression:?}{}: {error}",
        class.as_ref().map(|c| format!(" of DeviceClass {c}")).unwrap_or_default())]
    Cel {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class whose selector it is, when it is not the request's own.
        class: Option<String>,
        /// The expression.
        expression: String,
        /// What is wrong.
        error: CelError,
    },
    /// A selector failed to evaluate on a device the search reached (a missing attribute, a
    /// type mismatch, an overflow). The scheduler reports this for the claim (`claim …:
    /// selector #0: CEL runtime error: no such key: model`) and does not schedule the pod; it
    /// is not "this node does not fit".
    #[error("request {request}: {}selector #{selector}: CEL runtime error on device {device}: {error}",
        class.as_ref().map(|c| format!("DeviceClass {c}: ")).unwrap_or_default())]
    CelRuntime {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class whose selector failed, when it is not the request's own.
        class: Option<String>,
        /// The selector's position in its list.
        selector: usize,
        /// The device it was evaluated on.
        device: Box<DeviceId>,
        /// What failed.
        error: String,
    },
    /// An `allocationMode: All` request whose devices cannot all satisfy the claim's
    /// constraints: the scheduler treats this as an error of the claim.
    #[error(
        "request {request}: allocationMode All takes device {device}, which breaks {constraint}"
    )]
    ConstraintViolated {
        /// Request (or `request/sub-request`).
        request: String,
        /// The device that does not fit the constraint.
        device: DeviceId,
        /// The constraint (`constraint #0 (matchAttribute …)`).
        constraint: String,
    },
    /// An `allocationMode: All` request over a pool that cannot be used whole: incomplete
    /// (slices missing, being updated) or invalid.
    #[error("request {request}: allocationMode All, but pool {pool} {reason}")]
    AllOverUnusablePool {
        /// Request (or `request/sub-request`).
        request: String,
        /// `driver/pool`.
        pool: String,
        /// `is incomplete (…)` or `is invalid (…)`.
        reason: String,
    },
    /// The search reached a pool that names a device twice.
    #[error("pool {pool} is invalid: {reason}")]
    InvalidPool {
        /// `driver/pool`.
        pool: String,
        /// What is wrong.
        reason: String,
    },
    /// Kubernetes 1.35 and newer: no solution on the node, and some of its pools are invalid
    /// (a device name given twice, counters declared twice or consumed but not declared). The
    /// scheduler reports this node as not fitting and tries the others.
    #[error("invalid resource pools were encountered: {}", pools.join(", "))]
    InvalidPools {
        /// `driver/pool (why)`.
        pools: Vec<String>,
    },
    /// The claim needs more than [`MAX_ALLOCATED_DEVICES`] devices.
    #[error("the claim needs {needed} devices, more than the limit of {MAX_ALLOCATED_DEVICES}")]
    TooManyDevices {
        /// How many (at least).
        needed: usize,
    },
    /// A request uses a feature that is off in [`Features`](crate::Features) (the scheduler refuses it too).
    #[error("request {request}: {feature} is requested, but the feature is disabled")]
    FeatureDisabled {
        /// Request (or `request/sub-request`).
        request: String,
        /// The feature.
        feature: String,
    },
    /// A request uses a feature this engine does not model.
    #[error("request {request}: {feature} is not supported by this simulation")]
    Unsupported {
        /// Request (or `request/sub-request`).
        request: String,
        /// The feature.
        feature: String,
    },
    /// No set of devices satisfies the claim on this node.
    #[error("cannot allocate request {request}: {reason}")]
    Unsatisfiable {
        /// The request that could not be met (the furthest the search got).
        request: String,
        /// Why: too few matching devices, or which constraint failed.
        reason: String,
    },
    /// The search was stopped after [`MAX_SEARCH_STEPS`](crate::MAX_SEARCH_STEPS).
    #[error("gave up after {0} search steps: the claim has too many combinations to try")]
    SearchLimit(u64),
}

impl AllocError {
    /// `true` when the claim does not fit this node's free devices (the scheduler's "no
    /// result", after which it tries other nodes); `false` for an error that stops the claim
    /// from being scheduled at all until its inputs change (a CEL runtime error, an `All`
    /// request breaking a constraint, a missing class, …) and for [`AllocError::SearchLimit`].
    pub fn is_unsatisfiable(&self) -> bool {
        matches!(
            self,
            AllocError::Unsatisfiable { .. } | AllocError::InvalidPools { .. }
        )
    }
}
