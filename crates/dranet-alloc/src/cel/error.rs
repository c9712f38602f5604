//! What can go wrong compiling or evaluating a selector.

/// Longest expression the API server admits in a new selector (its field validation; the
/// scheduler has no such limit).
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
    /// The expression is longer than [`MAX_EXPRESSION_LEN`] (only in the API server's
    /// environment: [`Program::compile_at`](super::Program::compile_at)).
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
        /// [`MAX_SELECTOR_COST`](super::MAX_SELECTOR_COST).
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
