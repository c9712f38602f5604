//! dranet-cloud's integration tests in one binary, one module per area.

mod support;

mod clouds;
mod detect;
mod hostile;
mod webhook;
