//! The NRI socket's receive path (mux frames, then ttrpc messages per channel) on arbitrary bytes
//! fed in arbitrary chunks: it must return messages, ask for more, or fail cleanly, never panic,
//! and never report a frame larger than it accepted.
#![no_main]

use dranet_nri::mux::{Demux, MAX_INCOMING_PAYLOAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size, so split headers and payloads get exercised.
    let Some((&step, bytes)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let mut d = Demux::new();
    for chunk in bytes.chunks(step) {
        d.push(chunk);
        loop {
            match d.next_message() {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    assert!(d.largest_frame() <= 8 + MAX_INCOMING_PAYLOAD as usize);
    let _ = d.finish();
});
