//! `dranet-kubeletplugin`: a DRA kubelet plugin library for any Rust driver.
//!
//! Registers with the kubelet, serves the DRAPlugin gRPC services (v1 and v1beta1), publishes the
//! driver's ResourceSlices, looks up claims and checkpoints what was prepared, so that a Rust DRA
//! driver only implements prepare and unprepare. dranet is its first user.
