//! The driver's integration tests, one binary: claims through prepare and unprepare, pods through
//! the runtime's hooks in real network namespaces, profiles, DHCP leases, restarts and reboots,
//! the daemon with a slow cloud provider, and the end-to-end run against containerd. Host
//! networking alone is tested in dranet-podnet. Tests that need root or a tool the machine lacks
//! print a SKIP line and pass.

mod barrier;
mod daemon;
mod dhcp;
mod driver;
mod driver_netns;
mod e2e;
mod metadata;
mod profiles;
mod reboot;
mod support;
