//! Test support shared by dranet-rs's integration tests, so each is written once:
//!
//! - [`root`]: are we root, and the visible `SKIP` line when a test cannot run;
//! - [`wait`]: polling until a condition holds, with a diagnosis when it never does;
//! - [`netns`]: named network namespaces, veths and the iproute2 oracle (`ip -j ...`), so
//!   tests never judge the project's netlink code with that same code;
//! - [`upstream`]: upstream dranet's e2e scenarios, the host state and what the pod shows;
//! - `bpf` (feature `bpf`): a minimal eBPF program attached as a TC filter or TCX program;
//! - `dnsmasq` (feature `dnsmasq`): a real DHCP server in a namespace of its own, for DHCP tests;
//! - `containerd` (feature `containerd`): a containerd 1.7 with NRI of a test's own, driven
//!   through CRI as the kubelet would;
//! - `kit` (feature `kit`): the Kubernetes kit, a real single-node cluster per version.
//!
//! A dev-dependency only (`publish = false`); each crate's tests pick the features they use.

#[cfg(feature = "bpf")]
pub mod bpf;
#[cfg(feature = "containerd")]
pub mod containerd;
#[cfg(feature = "dnsmasq")]
pub mod dnsmasq;
#[cfg(feature = "kit")]
pub mod kit;
pub mod netns;
pub mod root;
pub mod upstream;
pub mod wait;

pub use root::{is_root, skip};
pub use wait::wait_for;
