//! `dranet-util`: the small pieces of plumbing every dranet crate shares, in one place.
//!
//! - [`Backoff`]: retry timing, doubling from an initial delay up to a cap.
//! - [`error_chain`]: an error and its causes as one line, `error: cause: cause`.
//! - [`AtomicWrite`]: a file replaced so that a crash leaves either the old or the new content
//!   (temporary file in the same directory, fsync, rename, fsync of the directory).
//! - [`NamedLocks`] (feature `tokio`): async locks by name, forgotten when released.
//!
//! Without features it depends on the standard library only. That is the point of a crate of its own: the
//! crates that share these pieces include `dranet-nri`, an NRI plugin library that must not
//! compile the Kubernetes API types `dranet-core` brings, so the pieces cannot live in
//! `dranet-core`; and a copy in each crate drifts.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod atomic;
mod backoff;
mod chain;
mod duration;
#[cfg(feature = "tokio")]
mod named_locks;

pub use atomic::{AtomicWrite, AtomicWriteError, AtomicWriteStep, quarantine, temp_path};
pub use backoff::Backoff;
pub use chain::error_chain;
pub use duration::parse_duration;
#[cfg(feature = "tokio")]
pub use named_locks::{NamedGuard, NamedLocks};
