//! placeholder
pub mod alloc;
pub mod cel;
