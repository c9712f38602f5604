//! Generated gRPC code for the kubelet protocols, from this crate's own `.proto` files.
//!
//! Exposed so that tests of drivers can play the kubelet (see `fake::FakeKubelet` with the
//! `fake` feature) and so that callers can build the wire messages themselves.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `pluginregistration.Registration`: how the kubelet discovers plugins.
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
pub mod dra_v1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
pub mod dra_v1beta1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// `v1alpha1.DRAResourceHealth` (kubelet 1.34 and later).
pub mod dra_health_v1alpha1 {
    tonic::include_proto!("v1alpha1");
}

/// `v1.DRAResourceHealth` (newer kubelets); the same messages as v1alpha1.
pub mod dra_health_v1 {
    tonic::include_proto!("v1");
}

/// Service names as the kubelet expects them in `PluginInfo.supported_versions`.
pub mod service_names {
    /// The DRA v1 node service.
    pub const DRA_V1: &str = "v1.DRAPlugin";
    /// The DRA v1beta1 node service.
    pub const DRA_V1BETA1: &str = "v1beta1.DRAPlugin";
    /// The device health service, v1alpha1.
    pub const HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";
    /// The device health service, v1.
    pub const HEALTH_V1: &str = "v1.DRAResourceHealth";
    /// `PluginInfo.type` for DRA drivers.
    pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
}
