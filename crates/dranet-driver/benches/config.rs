//! The cost of building one device's configuration from a claim's opaque `dra.net` entries
//! (`claim::config_for`: parse each entry, merge them least specific first, validate), on the
//! largest inputs the API lets a claim's author write:
//!
//! - `config_merge/api_max_routes_merge_only`: 32 claim entries (the API's most) of ~10 KiB
//!   each (its most per entry), all routes, to distinct destinations: ~6,300 routes laid over
//!   each other with `NetworkConfig::merged_over`, no parsing, no validation. This is the merge
//!   itself, whatever the limits on the result.
//! - `config_merge/api_max_routes_config_for`: the same claim through `config_for`, as prepare
//!   runs it (parse, merge, validate).
//! - `config_merge/max_legal_config_for`: 32 entries that together hold 1,024 routes, 1,024
//!   rules and 1,024 neighbors: the most one device's configuration may hold.
//!
//! `cargo bench -p dranet-driver --bench config -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_core::NetworkConfig;
use dranet_driver::claim::{DRIVER_NAME, config_for, parse_parameters};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceRequestAllocationResult, OpaqueDeviceConfiguration,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use dranet_kubeletplugin::{ClaimRef, ClaimToPrepare};

/// The API's limit on one entry's opaque parameters.
const ENTRY_BYTES: usize = 10 * 1024;
/// The API's limit on a claim's config entries.
const ENTRIES: usize = 32;

fn route(i: usize) -> serde_json::Value {
    serde_json::json!({
        "destination": format!("10.{}.{}.0/24", (i >> 8) & 0xff, i & 0xff),
        "gateway": "192.168.0.1",
    })
}

/// As many routes as fit in one entry's 10 KiB, numbered from `first`.
fn routes_entry(first: usize) -> (serde_json::Value, usize) {
    let mut routes = Vec::new();
    loop {
        routes.push(route(first + routes.len()));
        let v = serde_json::json!({ "routes": routes });
        if serde_json::to_vec(&v).map_or(0, |b| b.len()) > ENTRY_BYTES {
            routes.pop();
            let n = routes.len();
            return (serde_json::json!({ "routes": routes }), n);
        }
    }
}

fn claim(entries: Vec<serde_json::Value>) -> ClaimToPrepare {
    ClaimToPrepare {
        claim_ref: ClaimRef {
            namespace: "ml".into(),
            name: "big".into(),
            uid: "uid-big".into(),
        },
        claim: Default::default(),
        results: vec![],
        config: entries
            .into_iter()
            .map(|p| DeviceAllocationConfiguration {
                source: "FromClaim".into(),
                requests: None,
                opaque: Some(OpaqueDeviceConfiguration {
                    driver: DRIVER_NAME.into(),
                    parameters: RawExtension(p),
                }),
            })
            .collect(),
    }
}

fn result() -> DeviceRequestAllocationResult {
    DeviceRequestAllocationResult {
        request: "nic".into(),
        driver: DRIVER_NAME.into(),
        pool: "node".into(),
        device: "pci-0000-01-00-0".into(),
        ..Default::default()
    }
}

/// 32 entries holding, together, `n` routes, `n` rules and `n` neighbors.
fn spread(n: usize) -> Vec<serde_json::Value> {
    let per = n.div_ceil(ENTRIES);
    (0..ENTRIES)
        .map(|e| {
            let ids: Vec<usize> = (e * per..((e + 1) * per).min(n)).collect();
            serde_json::json!({
                "routes": ids.iter().map(|&i| route(i)).collect::<Vec<_>>(),
                "rules": ids.iter().map(|&i| serde_json::json!({
                    "priority": 1000 + i,
                    "source": format!("10.{}.{}.0/24", (i >> 8) & 0xff, i & 0xff),
                    "table": 100,
                })).collect::<Vec<_>>(),
                "neighbors": ids.iter().map(|&i| serde_json::json!({
                    "destination": format!("10.{}.{}.1", (i >> 8) & 0xff, i & 0xff),
                    "hardwareAddr": format!("02:00:00:00:{:02x}:{:02x}", (i >> 8) & 0xff, i & 0xff),
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut entries = Vec::new();
    let mut total = 0;
    for _ in 0..ENTRIES {
        let (e, n) = routes_entry(total);
        entries.push(e);
        total += n;
    }
    eprintln!("api_max_routes: {ENTRIES} entries, {total} routes");
    let parsed: Vec<NetworkConfig> = entries
        .iter()
        .map(|e| parse_parameters(e).expect("entry parses"))
        .collect();
    let big = claim(entries);
    let legal = claim(spread(1024));
    let r = result();

    let mut g = c.benchmark_group("config_merge");
    g.sample_size(10);
    g.bench_function("api_max_routes_merge_only", |b| {
        b.iter(|| {
            let mut acc = NetworkConfig::default();
            for p in &parsed {
                acc = p.merged_over(&acc);
            }
            assert_eq!(acc.routes.len(), total);
            acc
        })
    });
    g.bench_function("api_max_routes_config_for", |b| {
        b.iter(|| black_box(config_for(&big, &r, None)))
    });
    g.bench_function("max_legal_config_for", |b| {
        b.iter(|| {
            let c = config_for(&legal, &r, None).expect("the largest legal config");
            assert_eq!(c.routes.len(), 1024);
            c
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
