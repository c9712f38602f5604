//! Support code shared by the integration tests.
pub mod k8s;
