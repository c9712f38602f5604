//! The kubelet plugin's checkpoint decoder reads whatever is on disk after a crash or an edit:
//! errors are fine, panics are not, and whatever it accepts must encode back to the same claims
//! and driver records.
#![no_main]

use dranet_kubeletplugin::checkpoint::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(contents) = decode(data) {
        assert_eq!(decode(&encode(&contents)).ok(), Some(contents));
    }
});
