//! `dranet-nri`: the NRI (Node Resource Interface) plugin protocol for Rust.
//!
//! Speaks ttrpc over the container runtime's multiplexed NRI socket so that any Rust program can be
//! an NRI plugin: learn a pod's network namespace when its sandbox starts, adjust containers (device
//! nodes, cgroup device rules, environment, mounts) when they are created, and hear when the sandbox
//! stops. dranet is its first user.
