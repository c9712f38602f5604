//! `dranet-azure`: Azure Instance Metadata Service (IMDS) support for dranet.
//!
//! Reads IMDS once at start and turns what it says into `azure.dra.net/*` device attributes
//! (placement group, VM size, interconnect group) so that claims can select NICs on one InfiniBand
//! fabric, and into per-NIC routing for Azure NICs that carry a netdev.
