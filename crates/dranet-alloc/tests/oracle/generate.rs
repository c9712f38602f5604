//! Random but valid DRA inputs, reproducible from a seed: a node's ResourceSlices (1–512
//! devices of several drivers and pools, typed attributes and capacities, some missing),
//! DeviceClasses with selectors and config, and claim templates with `exactly` and
//! `firstAvailable` requests, counts, `All`, constraints and CEL of every kind the Kubernetes
//! DRA environment offers (attributes, capacity, driver, string and list functions, semver,
//! quantities, reads of missing keys).
//!
//! For Kubernetes 1.36 also what its default gates bring: taints of every effect (and the
//! tolerations that match them), shared counters in slices of their own, devices with binding
//! conditions or bound to the node, devices shared by several claims (`allowMultipleAllocations`
//! with capacities under a `requestPolicy`) and claims asking for capacity, and groups of claims
//! allocated together as one pod's. The 1.34 cases are what they were before (the same seeds
//! give the same cases).

use std::collections::BTreeMap;

use dranet_alloc::{Features, KubernetesVersion};
use serde_json::{Value, json};

use super::{Case, Header};

/// SplitMix64: small, fast, and the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// 0..n
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// lo..=hi
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

const DRIVERS: [&str; 3] = ["dra.net", "gpu.example.com", "fpga.example.org"];
const MODELS: [&str; 5] = ["a100", "h100", "mi300x", "cx7", "H100"];
const VERSIONS: [&str; 7] = [
    "1.2.3",
    "1.10.0",
    "2.0.0",
    "2.0.0-rc.1",
    "1.2.3+b7",
    "0.9.1",
    "1.2.3",
];
const MEMORY: [&str; 6] = ["16Gi", "40Gi", "80Gi", "81920Mi", "1.5Ti", "512M"];
const BANDWIDTH: [&str; 4] = ["100G", "400G", "200000M", "1e11"];
pub const NODE: &str = "node-1";

/// What the generator knows of one case while writing selectors.
struct Ctx {
    drivers: Vec<&'static str>,
    features: Features,
    version: KubernetesVersion,
}

impl Ctx {
    /// 1.36's inputs (counters in their own slice, taint effects, sharing, binding).
    fn v136(&self) -> bool {
        self.version >= KubernetesVersion::V1_36
    }
}

/// Capacities of a device shared by several claims: bandwidth in 5G steps from 10G, and
/// slots of 1, 2 or 4.
fn shared_capacities(rng: &mut Rng) -> Value {
    let mut caps = serde_json::Map::new();
    if rng.chance(0.8) {
        let mut range = json!({"min": "10G", "step": "5G"});
        if rng.chance(0.4) {
            range["max"] = json!(rng.pick(&["50G", "100G"]));
        }
        let mut policy = json!({"validRange": range});
        if rng.chance(0.7) {
            policy["default"] = json!(rng.pick(&["10G", "20G"]));
        }
        caps.insert(
            "bw".into(),
            json!({"value": rng.pick(&["100G", "200G", "40G"]), "requestPolicy": policy}),
        );
    }
    if rng.chance(0.6) {
        let mut policy = json!({"validValues": ["1", "2", "4"]});
        if rng.chance(0.6) {
            policy["default"] = json!("1");
        }
        caps.insert(
            "slots".into(),
            json!({"value": rng.pick(&["4", "8"]), "requestPolicy": policy}),
        );
    }
    if rng.chance(0.3) {
        caps.insert("memory".into(), json!({"value": rng.pick(&MEMORY)}));
    }
    Value::Object(caps)
}

fn device(
    rng: &mut Rng,
    ctx: &Ctx,
    name: String,
    index: usize,
    per_device: bool,
    counters: Option<&str>,
) -> Value {
    let mut attrs = serde_json::Map::new();
    if rng.chance(0.85) {
        attrs.insert("model".into(), json!({"string": rng.pick(&MODELS)}));
    }
    if rng.chance(0.95) {
        attrs.insert(
            "resource.kubernetes.io/numaNode".into(),
            json!({"int": rng.below(4)}),
        );
    }
    if rng.chance(0.9) {
        attrs.insert(
            "resource.kubernetes.io/pcieRoot".into(),
            json!({"string": format!("pci0000:{:02x}", rng.below(8) * 0x10)}),
        );
    }
    if rng.chance(0.8) {
        attrs.insert("rdma".into(), json!({"bool": rng.chance(0.6)}));
    }
    if rng.chance(0.7) {
        attrs.insert("fw".into(), json!({"version": rng.pick(&VERSIONS)}));
    }
    attrs.insert("index".into(), json!({"int": index}));
    if rng.chance(0.3) {
        let v = if rng.chance(0.5) {
            json!({"int": rng.below(3)})
        } else {
            json!({"string": rng.pick(&["0", "1", "x"])})
        };
        attrs.insert("mixed".into(), v);
    }
    if rng.chance(0.5) {
        attrs.insert(
            "example.com/zone".into(),
            json!({"string": rng.pick(&["a", "b"])}),
        );
    }
    let mut caps = serde_json::Map::new();
    if rng.chance(0.7) {
        caps.insert("memory".into(), json!({"value": rng.pick(&MEMORY)}));
    }
    if rng.chance(0.5) {
        caps.insert("bandwidth".into(), json!({"value": rng.pick(&BANDWIDTH)}));
    }
    let mut d = json!({"name": name, "attributes": attrs});
    if !caps.is_empty() {
        d["capacity"] = Value::Object(caps);
    }
    if ctx.features.device_taints && rng.chance(0.2) {
        let effects: &[&str] = if ctx.v136() {
            &["NoSchedule", "NoExecute", "None"]
        } else {
            &["NoSchedule", "NoExecute"]
        };
        let taints: Vec<Value> = (0..rng.range(1, 2))
            .map(|_| {
                let mut t = json!({"key": rng.pick(&["k1", "k2"]), "effect": rng.pick(effects)});
                if rng.chance(0.6) {
                    t["value"] = json!(rng.pick(&["v1", "v2"]));
                }
                t
            })
            .collect();
        d["taints"] = json!(taints);
    }
    if per_device {
        match rng.below(4) {
            0 => d["nodeName"] = json!(NODE),
            1 => d["nodeName"] = json!("node-2"),
            2 => d["allNodes"] = json!(true),
            _ => {
                d["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": [rng.pick(&["a", "b"])]}]}]})
            }
        }
    }
    if ctx.v136() {
        if rng.chance(0.25) {
            d["allowMultipleAllocations"] = json!(true);
            let caps = shared_capacities(rng);
            if caps.as_object().is_some_and(|c| !c.is_empty()) {
                d["capacity"] = caps;
            }
        }
        if rng.chance(0.06) {
            d["bindingConditions"] = json!(["attached"]);
            d["bindingFailureConditions"] = json!(["failed"]);
            if rng.chance(0.5) {
                d["bindsToNode"] = json!(true);
            }
        } else if rng.chance(0.03) {
            d["bindsToNode"] = json!(true);
        }
    }
    if let Some(set) = counters
        && rng.chance(0.6)
    {
        let mut c = serde_json::Map::new();
        if rng.chance(0.8) {
            c.insert(
                "mem".into(),
                json!({"value": rng.pick(&["10Gi", "20Gi", "40Gi"])}),
            );
        }
        if rng.chance(0.5) {
            c.insert("slots".into(), json!({"value": rng.pick(&["1", "2"])}));
        }
        // A set the pool does not declare, now and then: the pool is invalid (1.36).
        let set = if ctx.v136() && rng.chance(0.02) {
            "cs9"
        } else {
            set
        };
        if !c.is_empty() {
            d["consumesCounters"] = json!([{"counterSet": set, "counters": c}]);
        }
    }
    d
}

/// The slices of one node: 1–3 drivers, 1–2 pools each (at most 5), 1–3 slices per pool,
/// 1–512 devices in all.
fn slices(rng: &mut Rng, ctx: &Ctx, docs: &mut Vec<Value>) -> Vec<(String, String, String)> {
    let total = if rng.chance(0.2) {
        rng.range(1, 8)
    } else if rng.chance(0.8) {
        rng.range(8, 64)
    } else {
        rng.range(64, 512)
    };
    let mut pools: Vec<(&str, String)> = Vec::new();
    for d in &ctx.drivers {
        for p in 0..rng.range(1, 2) {
            if pools.len() < 5 {
                pools.push((d, format!("pool-{p}")));
            }
        }
    }
    let mut visible = Vec::new();
    let mut made = 0;
    for (pi, (driver, pool)) in pools.iter().enumerate() {
        let left = total.saturating_sub(made);
        let share = if pi + 1 == pools.len() {
            left.max(1)
        } else {
            rng.range(1, (left / (pools.len() - pi)).max(1) * 2 - 1)
                .min(left.max(1))
        };
        let nslices = rng.range(1, 3).min(share.max(1));
        let generation = rng.range(1, 3) as i64;
        let incomplete = rng.chance(0.02);
        let duplicate = rng.chance(0.02);
        // 1.36: the pool's shared counters in a slice of their own.
        let pool_counters = ctx.v136() && ctx.features.partitionable_devices && rng.chance(0.4);
        let count = nslices as i64 + i64::from(incomplete) + i64::from(pool_counters);
        let mut device_no = 0;
        for si in 0..nslices {
            let n = if si + 1 == nslices {
                share - (share / nslices) * (nslices - 1)
            } else {
                share / nslices
            };
            let per_device = ctx.features.partitionable_devices && rng.chance(0.15);
            let counters = if ctx.v136() {
                pool_counters.then(|| *rng.pick(&["cs0", "cs0", "cs1"]))
            } else {
                (ctx.features.partitionable_devices && rng.chance(0.5)).then_some("cs0")
            };
            let mut devices = Vec::new();
            for _ in 0..n {
                let name = if duplicate && device_no > 0 && rng.chance(0.1) {
                    format!("dev-{}", device_no - 1)
                } else {
                    format!("dev-{device_no}")
                };
                device_no += 1;
                devices.push(device(rng, ctx, name, device_no, per_device, counters));
            }
            let mut spec = json!({
                "driver": driver,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                "devices": devices,
            });
            let on_node = if per_device {
                spec["perDeviceNodeSelection"] = json!(true);
                true
            } else {
                match rng.below(50) {
                    0..=39 => {
                        spec["nodeName"] = json!(NODE);
                        true
                    }
                    40..=43 => {
                        let (expr, hit) = node_expression(rng);
                        spec["nodeSelector"] = json!({"nodeSelectorTerms": [expr]});
                        hit
                    }
                    44..=47 => {
                        spec["allNodes"] = json!(true);
                        true
                    }
                    _ => {
                        spec["nodeName"] = json!("node-2");
                        false
                    }
                }
            };
            if let Some(set) = counters.filter(|_| !ctx.v136()) {
                spec["sharedCounters"] = json!([{"name": set, "counters": {
                    "mem": {"value": rng.pick(&["40Gi", "80Gi"])},
                    "slots": {"value": rng.pick(&["2", "4"])},
                }}]);
            }
            let name = format!("{}-{}-{}", driver.replace('.', "-"), pool, si);
            if on_node {
                for d in spec["devices"].as_array().into_iter().flatten() {
                    visible.push((
                        driver.to_string(),
                        pool.clone(),
                        d["name"].as_str().unwrap_or("").to_string(),
                    ));
                }
            }
            docs.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": name}, "spec": spec,
            }));
        }
        if pool_counters {
            let set = |rng: &mut Rng, name: &str| {
                json!({"name": name, "counters": {
                    "mem": {"value": rng.pick(&["40Gi", "80Gi"])},
                    "slots": {"value": rng.pick(&["2", "4"])},
                }})
            };
            let mut sets = vec![set(rng, "cs0"), set(rng, "cs1")];
            if rng.chance(0.03) {
                // A set declared twice: the pool is invalid.
                sets.push(set(rng, "cs0"));
            }
            let node = if rng.chance(0.8) { NODE } else { "node-2" };
            docs.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{}-{}-counters", driver.replace('.', "-"), pool)},
                "spec": {"driver": driver, "nodeName": node,
                         "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                         "sharedCounters": sets},
            }));
        }
        if rng.chance(0.1) {
            // An outdated slice of the same pool, which must be ignored.
            docs.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{}-{}-old", driver.replace('.', "-"), pool)},
                "spec": {"driver": driver, "nodeName": NODE,
                         "pool": {"name": pool, "generation": generation - 1, "resourceSliceCount": 1},
                         "devices": [device(rng, ctx, "old-0".into(), 0, false, None)]},
            }));
        }
        made += share;
    }
    visible
}

/// A node selector term and whether it selects the node (labels zone=a, rack=3).
fn node_expression(rng: &mut Rng) -> (Value, bool) {
    match rng.below(7) {
        0 => (
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}),
            true,
        ),
        1 => (
            json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
            false,
        ),
        2 => (
            json!({"matchExpressions": [{"key": "rack", "operator": "Gt", "values": ["2"]}]}),
            true,
        ),
        3 => (
            json!({"matchExpressions": [{"key": "rack", "operator": "Lt", "values": ["2"]}]}),
            false,
        ),
        4 => (
            json!({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}),
            true,
        ),
        5 => (
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}),
            true,
        ),
        _ => (
            json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}],
                     "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-2"]}]}),
            true,
        ),
    }
}

/// A selector expression over devices of `domain`'s driver.
fn expression(rng: &mut Rng, ctx: &Ctx, domain: &str, depth: usize) -> String {
    let a = |n: &str| format!("device.attributes[\"{domain}\"].{n}");
    let guarded =
        |n: &str, e: String| format!("(\"{n}\" in device.attributes[\"{domain}\"] && {e})");
    let k8s = "device.attributes[\"resource.kubernetes.io\"]";
    if depth < 2 && rng.chance(0.25) {
        let l = expression(rng, ctx, domain, depth + 1);
        let r = expression(rng, ctx, domain, depth + 1);
        return match rng.below(4) {
            0 => format!("({l} && {r})"),
            1 => format!("({l} || {r})"),
            2 => format!("!({l})"),
            _ => format!("({l} ? {r} : true)"),
        };
    }
    let model = *rng.pick(&MODELS);
    // Reads of attributes some devices lack fail the claim in the scheduler; most selectors
    // guard them, as users learn to.
    let unguarded = rng.chance(0.3);
    let pick = if unguarded {
        rng.below(22)
    } else {
        *rng.pick(&[0, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 21])
    };
    match pick {
        0 => format!("device.driver == \"{}\"", rng.pick(&ctx.drivers)),
        1 => format!("{} == \"{model}\"", a("model")),
        2 => guarded("model", format!("{} == \"{model}\"", a("model"))),
        3 => guarded(
            "model",
            format!(
                "{}.startsWith(\"{}\")",
                a("model"),
                rng.pick(&["h", "a", "m"])
            ),
        ),
        4 => format!("{}.lowerAscii() == \"h100\"", a("model")),
        5 => guarded("model", format!("{} in [\"a100\", \"h100\"]", a("model"))),
        6 => guarded(
            "model",
            format!("[\"cx7\", \"mi300x\"].exists(m, m == {})", a("model")),
        ),
        7 => format!(
            "{k8s}.numaNode {} {}",
            rng.pick(&["==", "!=", "<=", ">"]),
            rng.below(4)
        ),
        8 => guarded("rdma", a("rdma")),
        9 => format!("{} == {}", a("rdma"), rng.pick(&["true", "false"])),
        10 => guarded(
            "fw",
            format!(
                "{}.isGreaterThan(semver(\"{}\"))",
                a("fw"),
                rng.pick(&["1.5.0", "1.2.3", "2.0.0-rc.0"])
            ),
        ),
        11 => guarded(
            "fw",
            format!(
                "{}.compareTo(semver(\"1.10.0\")) {} 0",
                a("fw"),
                rng.pick(&[">=", "<", "=="])
            ),
        ),
        12 => guarded("fw", format!("{}.major() == {}", a("fw"), rng.below(3))),
        13 => format!(
            "(\"memory\" in device.capacity[\"{domain}\"] && device.capacity[\"{domain}\"].memory.compareTo(quantity(\"{}\")) >= 0)",
            rng.pick(&["40Gi", "80Gi", "1Ti"])
        ),
        14 => format!(
            "(\"bandwidth\" in device.capacity[\"{domain}\"] && quantity(\"{}\").isLessThan(device.capacity[\"{domain}\"].bandwidth))",
            rng.pick(&["100G", "200G"])
        ),
        15 => format!("{} % {} == 0", a("index"), rng.range(2, 3)),
        16 => format!("{} < {}", a("index"), rng.range(2, 40)),
        17 => format!(
            "(\"zone\" in device.attributes[\"example.com\"] && device.attributes[\"example.com\"].zone == \"{}\")",
            rng.pick(&["a", "b"])
        ),
        18 => format!(
            "size(device.attributes[\"{domain}\"]) > {}",
            rng.range(3, 6)
        ),
        19 => format!("{}.endsWith(\"0\")", a("model")),
        20 => format!("{k8s}.pcieRoot.contains(\"{:02x}\")", rng.below(8) * 0x10),
        _ => "true".to_string(),
    }
}

fn selectors(rng: &mut Rng, ctx: &Ctx, domain: &str, max: usize) -> Vec<Value> {
    (0..rng.range(0, max))
        .map(|_| json!({"cel": {"expression": expression(rng, ctx, domain, 0)}}))
        .collect()
}

fn opaque(rng: &mut Rng, driver: &str) -> Value {
    json!({"driver": driver, "parameters": {"apiVersion": "example.com/v1", "kind": "Config", "mtu": rng.range(1500, 9000)}})
}

/// Classes: one per driver, one for every device, one with a second selector.
fn classes(rng: &mut Rng, ctx: &Ctx, docs: &mut Vec<Value>) -> Vec<(String, Option<&'static str>)> {
    let mut out = Vec::new();
    for d in &ctx.drivers {
        let name = format!("c-{}", d.split('.').next().unwrap_or(d));
        let mut sels = vec![json!({"cel": {"expression": format!("device.driver == \"{d}\"")}})];
        if rng.chance(0.2) {
            sels.push(json!({"cel": {"expression": expression(rng, ctx, d, 1)}}));
        }
        let mut spec = json!({"selectors": sels});
        if rng.chance(0.3) {
            spec["config"] = json!([{"opaque": opaque(rng, d)}]);
        }
        docs.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}));
        out.push((name, Some(*d)));
    }
    let mut spec = json!({});
    if rng.chance(0.3) {
        spec["config"] = json!([{"opaque": opaque(rng, ctx.drivers[0])}]);
    }
    docs.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c-any"}, "spec": spec}));
    out.push(("c-any".into(), None));
    out
}

fn request_body(
    rng: &mut Rng,
    ctx: &Ctx,
    classes: &[(String, Option<&'static str>)],
    sub: bool,
) -> Value {
    let (class, driver) = rng.pick(classes).clone();
    let domain = driver.unwrap_or_else(|| *rng.pick(&ctx.drivers));
    let mut body = json!({"deviceClassName": class});
    let sels = selectors(rng, ctx, domain, 2);
    if !sels.is_empty() {
        body["selectors"] = json!(sels);
    }
    match rng.below(20) {
        0 | 1 => body["allocationMode"] = json!("All"),
        2 => body["count"] = json!(rng.range(5, 12)),
        3 if rng.chance(0.3) => body["count"] = json!(33),
        _ => body["count"] = json!(*rng.pick(&[1, 1, 1, 2, 2, 3, 4])),
    }
    if !sub && ctx.features.admin_access && rng.chance(0.05) {
        body["adminAccess"] = json!(true);
    }
    if ctx.v136() && rng.chance(0.3) {
        let mut reqs = serde_json::Map::new();
        match rng.below(6) {
            0 | 1 => {
                reqs.insert(
                    "bw".into(),
                    json!(rng.pick(&["5G", "12G", "20G", "60G", "150G"])),
                );
            }
            2 => {
                reqs.insert("slots".into(), json!(rng.pick(&["1", "2", "3", "5"])));
            }
            3 => {
                reqs.insert("bw".into(), json!(rng.pick(&["10G", "25G"])));
                reqs.insert("slots".into(), json!(rng.pick(&["1", "2"])));
            }
            4 => {
                reqs.insert("memory".into(), json!(rng.pick(&["16Gi", "40Gi"])));
            }
            _ => {
                // A capacity no device has: no device fits.
                reqs.insert("lanes".into(), json!("1"));
            }
        }
        body["capacity"] = json!({"requests": reqs});
    }
    if ctx.features.device_taints && rng.chance(0.4) {
        let kinds = if ctx.v136() { 6 } else { 4 };
        let tols: Vec<Value> = (0..rng.range(1, 2))
            .map(|_| match rng.below(kinds) {
                4 => json!({"key": "k1", "operator": "Exists", "effect": "None"}),
                5 => json!({"key": "k2", "operator": "Equal", "value": "v2"}),
                0 => json!({"key": "k1", "operator": "Exists"}),
                1 => {
                    json!({"key": "k2", "operator": "Equal", "value": "v1", "effect": "NoSchedule"})
                }
                2 => json!({"operator": "Exists", "effect": "NoExecute"}),
                _ => json!({"operator": "Exists"}),
            })
            .collect();
        body["tolerations"] = json!(tols);
    }
    body
}

fn claim(
    rng: &mut Rng,
    ctx: &Ctx,
    classes: &[(String, Option<&'static str>)],
    name: &str,
    distinct: bool,
) -> Value {
    let mut requests = Vec::new();
    let mut names = Vec::new();
    for i in 0..rng.range(1, 3) {
        let rname = format!("r{i}");
        if ctx.features.prioritized_list && rng.chance(0.25) {
            let subs: Vec<Value> = (0..rng.range(2, 3))
                .map(|j| {
                    let mut b = request_body(rng, ctx, classes, true);
                    b["name"] = json!(format!("s{j}"));
                    names.push(format!("{rname}/s{j}"));
                    b
                })
                .collect();
            requests.push(json!({"name": rname, "firstAvailable": subs}));
        } else {
            requests
                .push(json!({"name": rname, "exactly": request_body(rng, ctx, classes, false)}));
        }
        names.push(rname);
    }
    let top: Vec<String> = names.iter().filter(|n| !n.contains('/')).cloned().collect();
    let mut devices = json!({"requests": requests});
    let mut constraints = Vec::new();
    for _ in 0..rng.range(0, 2) {
        let domain = *rng.pick(&ctx.drivers);
        let attr = match rng.below(8) {
            0 | 1 => "resource.kubernetes.io/numaNode".to_string(),
            2 | 3 => "resource.kubernetes.io/pcieRoot".to_string(),
            4 => format!("{domain}/model"),
            5 => format!("{domain}/rdma"),
            6 => format!("{domain}/fw"),
            _ => "example.com/zone".to_string(),
        };
        let mut c = json!({"matchAttribute": attr});
        if rng.chance(0.5) {
            let scope: Vec<&String> = names.iter().filter(|_| rng.chance(0.5)).collect();
            if !scope.is_empty() {
                c["requests"] = json!(scope);
            }
        }
        constraints.push(c);
    }
    if distinct {
        let attr = *rng.pick(&[
            "resource.kubernetes.io/numaNode",
            "resource.kubernetes.io/pcieRoot",
        ]);
        constraints.push(json!({"distinctAttribute": attr}));
    }
    if !constraints.is_empty() {
        devices["constraints"] = json!(constraints);
    }
    if rng.chance(0.25) {
        let driver = *rng.pick(&ctx.drivers);
        let mut c = json!({"opaque": opaque(rng, driver)});
        if rng.chance(0.6) {
            let scope: Vec<&String> = names.iter().filter(|_| rng.chance(0.5)).collect();
            if !scope.is_empty() {
                c["requests"] = json!(scope);
            }
        }
        devices["config"] = json!([c]);
    }
    let _ = top;
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": devices}},
    })
}

/// One case of Kubernetes `version`: a node and `claims` claim templates (and, for 1.36, a few
/// pods of them).
pub fn case(seed: u64, claims: usize, version: KubernetesVersion) -> Case {
    let mut rng = Rng::new(seed);
    let mut features = Features::of(version);
    if version >= KubernetesVersion::V1_36 {
        // Mostly the default gates; now and then some of them off.
        if rng.chance(0.15) {
            features.device_taints = rng.chance(0.5);
            features.partitionable_devices = rng.chance(0.5);
            features.consumable_capacity = rng.chance(0.5);
            features.device_binding_conditions = rng.chance(0.5);
            // With both off 1.36 runs its "stable" variant, which the allocator refuses to
            // model (an options error): keep one of them.
            if !features.consumable_capacity && !features.device_binding_conditions {
                features.device_binding_conditions = true;
            }
        }
    } else {
        match rng.below(10) {
            0 | 1 => features.device_taints = true,
            2 | 3 => features.partitionable_devices = true,
            _ => {}
        }
    }
    let mut drivers: Vec<&'static str> = DRIVERS.to_vec();
    let keep = rng.range(1, 3);
    while drivers.len() > keep {
        drivers.remove(rng.below(drivers.len()));
    }
    let ctx = Ctx {
        drivers,
        features,
        version,
    };
    let mut docs = Vec::new();
    let visible = slices(&mut rng, &ctx, &mut docs);
    let classes = classes(&mut rng, &ctx, &mut docs);
    if !visible.is_empty() && rng.chance(0.3) {
        let results: Vec<Value> = (0..rng.range(1, 4))
            .map(|_| {
                let (d, p, n) = rng.pick(&visible).clone();
                json!({"request": "r", "driver": d, "pool": p, "device": n})
            })
            .collect();
        docs.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "holder", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c-any"}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }));
    }
    for i in 0..claims {
        let distinct = rng.chance(0.05);
        docs.push(claim(&mut rng, &ctx, &classes, &format!("c{i}"), distinct));
    }
    // Pods: groups of 2–3 of the claims, allocated together.
    let mut pods = Vec::new();
    if ctx.v136() && claims >= 3 {
        for _ in 0..3 {
            let n = rng.range(2, 3);
            let mut pod: Vec<String> = Vec::new();
            while pod.len() < n {
                let c = format!("c{}", rng.below(claims));
                if !pod.contains(&c) {
                    pod.push(c);
                }
            }
            pods.push(pod);
        }
    }
    let mut labels = BTreeMap::new();
    labels.insert("zone".to_string(), "a".to_string());
    labels.insert("rack".to_string(), "3".to_string());
    Case {
        header: Header {
            version,
            node: NODE.to_string(),
            labels,
            features,
            pods,
            expect: BTreeMap::new(),
            note: format!("generated from seed {seed}"),
        },
        docs,
    }
}
