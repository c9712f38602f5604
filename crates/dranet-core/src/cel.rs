//! CEL for DRA selectors (issue 6): placeholder until it lands.
