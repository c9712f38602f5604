//! `dranet check` (issue 6): placeholder until it lands.
