//! dranet-nri's integration tests in one binary, one module per area.

mod containerd;
mod framing;
mod socket;
