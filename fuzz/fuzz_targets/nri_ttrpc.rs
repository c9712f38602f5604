//! ttrpc message framing and the Request/Response envelopes on arbitrary bytes: decoding never
//! panics, and whatever decodes re-encodes to something that decodes the same.
#![no_main]

use dranet_nri::ttrpc::{MessageDecoder, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut d = MessageDecoder::new();
    d.push(data);
    while let Ok(Some(msg)) = d.next_message() {
        if let Ok(req) = Request::decode(&msg.body) {
            assert_eq!(Request::decode(&req.encode_to_vec()).ok(), Some(req));
        }
        if let Ok(resp) = Response::decode(&msg.body) {
            assert_eq!(Response::decode(&resp.encode_to_vec()).ok(), Some(resp));
        }
    }
    let _ = Request::decode(data);
    let _ = Response::decode(data);
});
