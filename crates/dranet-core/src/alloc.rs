//! Allocation simulation (issue 6): placeholder until it lands.
