//! dranet-discovery's integration tests in one binary, one module per area.

mod fixtures;
mod host;
mod runtimes;
