//! Whatever the plugin accepts into its checkpoint must read back: a driver's prepare state or
//! driver record of any shape within `MAX_STATE_DEPTH` levels encodes and decodes to the same
//! contents (deeper values are refused before they reach the file).
#![no_main]

use dranet_kubeletplugin::checkpoint::{CheckpointEntry, Contents, Phase, decode, encode};
use dranet_kubeletplugin::{ClaimRef, MAX_STATE_DEPTH, Prepared};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// Builds a JSON value from bytes: 0 wraps in an array, 1 in an object, 2 adds a sibling,
/// anything else is a leaf.
fn value(data: &[u8]) -> Value {
    let mut v = json!(null);
    for (i, b) in data.iter().enumerate().rev() {
        v = match b {
            0 => json!([v]),
            1 => json!({ format!("k{i}"): v }),
            2 => json!([v, i]),
            _ => json!(format!("{b}\u{1F600}\"\\")),
        };
    }
    v
}

fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

fuzz_target!(|data: &[u8]| {
    let state = value(data);
    if depth(&state) > MAX_STATE_DEPTH {
        return;
    }
    let mut contents = Contents::default();
    contents.records.insert("owed/uid-1".into(), state.clone());
    contents.claims.insert(
        "uid-1".to_string(),
        CheckpointEntry {
            claim: ClaimRef {
                namespace: "default".into(),
                name: "c".into(),
                uid: "uid-1".into(),
            },
            phase: Phase::Prepared,
            prepared: Some(Prepared {
                devices: Vec::new(),
                state: Some(state),
            }),
            pod_claim_name: None,
        },
    );
    let decoded = decode(&encode(&contents)).expect("what the plugin accepts must read back");
    assert_eq!(decoded, contents);
});
