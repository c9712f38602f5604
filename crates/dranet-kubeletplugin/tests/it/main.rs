//! dranet-kubeletplugin's integration tests in one binary, one module per area.

mod common;

mod crash;
mod grpc;
mod hardening;
mod kubelet_wire;
mod list;
mod metadata;
mod modes;
mod publish;
mod rolling;
