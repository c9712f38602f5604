//! The root package's integration tests in one binary, one module per former test file (the real-cluster
//! scenarios are `tests/k8s/`, the qemu guests `tests/real_kernel.rs`).

#[path = "../support/mod.rs"]
mod support;

mod check_scale;
mod cli;
mod clouds;
mod deploy;
mod docs;
mod examples;
mod publication;
mod publishing;
