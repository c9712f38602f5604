//! Support code shared by the integration tests.
pub mod chart;
pub mod cluster;
