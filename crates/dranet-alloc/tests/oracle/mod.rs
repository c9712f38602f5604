//! The scheduler's allocator as a test oracle: `allocbench` (the structured allocator of the
//! Kubernetes 1.34.9 or 1.36.3 scheduler as a CLI, from the shared k8s kit) run on the same
//! files as `dranet_alloc`, and the two answers compared.
//!
//! A case is one node (ResourceSlices, DeviceClasses, claims already holding devices) and many
//! ResourceClaimTemplates, each allocated alone (`allocbench -mode separate`), and some groups
//! of them allocated together as one pod's (`-mode together`). Its file is a YAML stream whose
//! first document (`kind: AllocCase`, which allocbench skips) says the Kubernetes version, the
//! node, its labels, the feature gates, the pods and, for kept regression cases, the
//! scheduler's answers.

#![allow(dead_code)]

pub mod generate;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dranet_alloc::{
    AllocError, Allocation, Allocator, DeviceId, Features, KubernetesVersion, Node, Options,
    SchedulerBugs,
};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::{Value, json};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The allocbench binary of `version` (1.34 or 1.36, the versions the kit has), unpacked by the
/// kit (`DRANET_K8S_KIT`, else `../shared/k8s/kit.sh` beside the repository). `None` when there
/// is no kit: the caller skips with a message.
pub fn allocbench(version: KubernetesVersion) -> Option<PathBuf> {
    let kit = std::env::var_os("DRANET_K8S_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/k8s/kit.sh"));
    if !kit.exists() {
        eprintln!(
            "SKIP: the k8s kit ({}) is not there, so the scheduler's allocator cannot run; set DRANET_K8S_KIT",
            kit.display()
        );
        return None;
    }
    let out = Command::new(&kit)
        .args(["unpack", "allocbench"])
        .env("KUBE_VERSION", version.to_string())
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let bin_dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    let bin = PathBuf::from(bin_dir).join("allocbench");
    if !out.status.success() || !bin.exists() {
        eprintln!("SKIP: {} unpack allocbench failed", kit.display());
        return None;
    }
    Some(bin)
}

/// The version, node and gates of a case, its pods, and the scheduler's answers when kept as a
/// regression case.
#[derive(Debug, Clone)]
pub struct Header {
    pub version: KubernetesVersion,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub features: Features,
    /// Groups of claims allocated together, as one pod's.
    pub pods: Vec<Vec<String>>,
    /// Claim name (or a pod's claims joined by `+`) → the outcomes the scheduler may give (one
    /// unless the pool order matters).
    pub expect: BTreeMap<String, Vec<Outcome>>,
    pub note: String,
}

impl Header {
    pub fn go_features(&self) -> String {
        let mut f = vec!["DeviceStatus"];
        let on = [
            (self.features.admin_access, "AdminAccess"),
            (self.features.prioritized_list, "PrioritizedList"),
            (self.features.device_taints, "DeviceTaints"),
            (self.features.partitionable_devices, "PartitionableDevices"),
            (self.features.consumable_capacity, "ConsumableCapacity"),
            (self.features.device_binding_conditions, "DeviceBinding"),
        ];
        f.extend(on.iter().filter(|(b, _)| *b).map(|(_, n)| *n));
        f.join(",")
    }

    pub fn to_json(&self) -> Value {
        json!({
            "apiVersion": "dranet.dev/test",
            "kind": "AllocCase",
            "note": self.note,
            "kubernetesVersion": self.version.to_string(),
            "node": self.node,
            "nodeLabels": self.labels,
            "features": {
                "adminAccess": self.features.admin_access,
                "prioritizedList": self.features.prioritized_list,
                "deviceTaints": self.features.device_taints,
                "partitionableDevices": self.features.partitionable_devices,
                "consumableCapacity": self.features.consumable_capacity,
                "deviceBindingConditions": self.features.device_binding_conditions,
            },
            "pods": self.pods,
            "expect": self.expect.iter().map(|(k, v)| (k.clone(), v.iter().map(Outcome::to_json).collect::<Vec<_>>())).collect::<BTreeMap<_, _>>(),
        })
    }

    pub fn from_json(v: &Value) -> Header {
        let f = &v["features"];
        let flag = |k: &str, d: bool| f[k].as_bool().unwrap_or(d);
        // Cases kept before versions were named are 1.34's.
        let version = v["kubernetesVersion"]
            .as_str()
            .map(|s| s.parse().expect("kubernetesVersion"))
            .unwrap_or(KubernetesVersion::V1_34);
        Header {
            version,
            node: v["node"].as_str().unwrap_or("node-1").to_string(),
            labels: serde_json::from_value(v["nodeLabels"].clone()).unwrap_or_default(),
            features: Features {
                admin_access: flag("adminAccess", true),
                prioritized_list: flag("prioritizedList", true),
                device_taints: flag("deviceTaints", false),
                partitionable_devices: flag("partitionableDevices", false),
                consumable_capacity: flag("consumableCapacity", false),
                device_binding_conditions: flag("deviceBindingConditions", false),
            },
            pods: serde_json::from_value(v["pods"].clone()).unwrap_or_default(),
            expect: v["expect"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            let list = v.as_array().cloned().unwrap_or_default();
                            (k.clone(), list.iter().map(Outcome::from_json).collect())
                        })
                        .collect()
                })
                .unwrap_or_default(),
            note: v["note"].as_str().unwrap_or("").to_string(),
        }
    }

    pub fn node(&self) -> Node {
        Node::new(&self.node).with_labels(self.labels.clone())
    }
}

/// A case: header and the API objects.
#[derive(Debug, Clone)]
pub struct Case {
    pub header: Header,
    pub docs: Vec<Value>,
}

impl Case {
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        for d in std::iter::once(self.header.to_json()).chain(self.docs.iter().cloned()) {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(&d).expect("case serializes"));
        }
        out
    }

    pub fn save(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("case dir");
        }
        std::fs::write(path, self.yaml()).expect("case written");
    }

    pub fn load(path: &Path) -> Case {
        let text = std::fs::read_to_string(path).expect("case file");
        let docs: Vec<Value> = serde_saphyr::from_str_multiple::<Value, Vec<_>>(&text)
            .expect("case is YAML")
            .into_iter()
            .filter(|v| !v.is_null())
            .collect();
        let (h, rest) = docs.split_first().expect("case has a header");
        assert_eq!(h["kind"], "AllocCase", "{}: first document", path.display());
        Case {
            header: Header::from_json(h),
            docs: rest.to_vec(),
        }
    }

    fn of_kind(&self, kind: &str) -> impl Iterator<Item = &Value> {
        self.docs.iter().filter(move |d| d["kind"] == kind)
    }

    /// The templates to allocate, in file order.
    pub fn claim_names(&self) -> Vec<String> {
        self.of_kind("ResourceClaimTemplate")
            .filter_map(|t| t["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }
}

/// What an allocator answers for one claim, normalized for comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Devices `[request, driver, pool, device, adminAccess]`, config and node selector.
    Allocated(Value),
    /// No solution on this node.
    Unsatisfiable,
    /// An error, by class (`cel-runtime claim #0`, `constraint`, …).
    Error(String),
}

impl Outcome {
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Allocated(v) => json!({"allocated": v}),
            Outcome::Unsatisfiable => json!("unsatisfiable"),
            Outcome::Error(c) => json!({"error": c}),
        }
    }

    pub fn from_json(v: &Value) -> Outcome {
        if let Some(a) = v.get("allocated") {
            Outcome::Allocated(a.clone())
        } else if let Some(e) = v.get("error") {
            Outcome::Error(e.as_str().unwrap_or("").to_string())
        } else {
            Outcome::Unsatisfiable
        }
    }

    pub fn short(&self) -> String {
        match self {
            Outcome::Allocated(v) => {
                let devs: Vec<String> = v["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        format!(
                            "{}={}/{}",
                            d[0].as_str().unwrap_or(""),
                            d[2].as_str().unwrap_or(""),
                            d[3].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                format!("allocated [{}]", devs.join(" "))
            }
            Outcome::Unsatisfiable => "unsatisfiable".into(),
            Outcome::Error(c) => format!("error ({c})"),
        }
    }
}

/// Drops nulls and empty lists, so `requests: null`, `[]` and absent compare equal.
fn prune(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
                .map(|(k, v)| (k.clone(), prune(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(prune).collect()),
        other => other.clone(),
    }
}

fn allocated(devices: Vec<Value>, config: &Value, node_selector: &Value) -> Outcome {
    let mut v = json!({"devices": devices});
    let config = prune(config);
    if config.as_array().is_some_and(|a| !a.is_empty()) {
        v["config"] = config;
    }
    let ns = prune(node_selector);
    if !ns.is_null() {
        v["nodeSelector"] = ns;
    }
    Outcome::Allocated(v)
}

/// The error class of one of the scheduler's messages.
pub fn go_error_class(msg: &str) -> String {
    if msg.contains("CEL runtime error") {
        let sel = msg
            .split("selector #")
            .nth(1)
            .and_then(|s| s.split(':').next())
            .unwrap_or("?");
        return if let Some(rest) = msg.strip_prefix("class ") {
            let class = rest.split(':').next().unwrap_or("?");
            format!("cel-runtime class {class} #{sel}")
        } else {
            format!("cel-runtime claim #{sel}")
        };
    }
    let classes = [
        (
            "because a claim constraint would not be satisfied",
            "constraint",
        ),
        (
            "asks for all devices, but resource pool",
            "all-over-unusable-pool",
        ),
        ("exceeds the claim limit", "too-many-devices"),
        ("allocation max size exceeded", "too-many-devices"),
        (" is invalid: ", "invalid-pool"),
        ("feature is disabled", "feature-disabled"),
        ("invalid resource pools were encountered", "invalid-pools"),
        ("could not retrieve device class", "class-not-found"),
        ("CEL compile error", "cel-compile"),
        ("node selection", "node-selector"),
        ("NodeSelector", "node-selector"),
    ];
    for (needle, class) in classes {
        if msg.contains(needle) {
            return class.to_string();
        }
    }
    format!("other: {msg}")
}

/// The error class of one of ours.
pub fn our_error_class(e: &AllocError) -> Outcome {
    let c = match e {
        AllocError::Unsatisfiable { .. } => return Outcome::Unsatisfiable,
        AllocError::CelRuntime {
            class: Some(c),
            selector,
            ..
        } => format!("cel-runtime class {c} #{selector}"),
        AllocError::CelRuntime { selector, .. } => format!("cel-runtime claim #{selector}"),
        AllocError::ConstraintViolated { .. } => "constraint".into(),
        AllocError::AllOverUnusablePool { .. } => "all-over-unusable-pool".into(),
        AllocError::TooManyDevices { .. } => "too-many-devices".into(),
        AllocError::InvalidPool { .. } => "invalid-pool".into(),
        AllocError::FeatureDisabled { .. } => "feature-disabled".into(),
        AllocError::InvalidPools { .. } => "invalid-pools".into(),
        AllocError::ClassNotFound { .. } => "class-not-found".into(),
        AllocError::Cel { .. } => "cel-compile".into(),
        other => format!("ours: {other}"),
    };
    Outcome::Error(c)
}

/// A device of a result: `[request, driver, pool, device, adminAccess]`, and when any is set,
/// `{share: true, consumedCapacity, bindingConditions}` (the share ID is random in the
/// scheduler: only its presence is compared).
#[allow(clippy::too_many_arguments)] // one argument per field of a result row
fn device_row(
    request: &Value,
    driver: &Value,
    pool: &Value,
    device: &Value,
    admin: bool,
    share: bool,
    consumed: BTreeMap<String, String>,
    binding: Vec<String>,
) -> Value {
    let mut row = vec![
        request.clone(),
        driver.clone(),
        pool.clone(),
        device.clone(),
        json!(admin),
    ];
    if share || !consumed.is_empty() || !binding.is_empty() {
        row.push(
            json!({"share": share, "consumedCapacity": consumed, "bindingConditions": binding}),
        );
    }
    Value::Array(row)
}

/// Our answer for one claim, normalized.
pub fn our_outcome(r: &Result<Allocation, AllocError>) -> Outcome {
    match r {
        Ok(a) => our_allocated(a),
        Err(e) => {
            if std::env::var_os("DRANET_ORACLE_DEBUG").is_some() {
                eprintln!("DEBUG ours: {e}");
            }
            our_error_class(e)
        }
    }
}

fn our_allocated(a: &Allocation) -> Outcome {
    let devices = a
        .results
        .iter()
        .map(|d| {
            device_row(
                &json!(d.request),
                &json!(d.driver),
                &json!(d.pool),
                &json!(d.device),
                d.admin_access.unwrap_or(false),
                d.share_id.is_some(),
                d.consumed_capacity.clone(),
                d.binding_conditions.clone(),
            )
        })
        .collect();
    allocated(
        devices,
        &serde_json::to_value(&a.config).unwrap_or(Value::Null),
        &serde_json::to_value(&a.node_selector).unwrap_or(Value::Null),
    )
}

/// Our answer for a pod's claims, normalized: one outcome per claim.
pub fn our_pod_outcomes(r: &Result<Vec<Allocation>, AllocError>, n: usize) -> Vec<Outcome> {
    match r {
        Ok(v) => v.iter().map(our_allocated).collect(),
        Err(e) => vec![our_error_class(e); n],
    }
}

/// The scheduler's answer for one claim of allocbench's JSON, normalized.
pub fn go_outcome(c: &Value) -> Outcome {
    if c["allocated"].as_bool() == Some(true) {
        let devices = c["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                device_row(
                    &d["request"],
                    &d["driver"],
                    &d["pool"],
                    &d["device"],
                    d["adminAccess"].as_bool().unwrap_or(false),
                    d["shareID"].is_string(),
                    serde_json::from_value(d["consumedCapacity"].clone()).unwrap_or_default(),
                    serde_json::from_value(d["bindingConditions"].clone()).unwrap_or_default(),
                )
            })
            .collect();
        return allocated(devices, &c["config"], &c["nodeSelector"]);
    }
    let e = c["error"].as_str().unwrap_or("");
    if e.starts_with("cannot allocate") || e.is_empty() {
        Outcome::Unsatisfiable
    } else {
        Outcome::Error(go_error_class(e))
    }
}

/// The scheduler's answer, or that it searched for longer than the limit.
#[derive(Debug, Clone, PartialEq)]
pub enum GoResult {
    Done(Outcome, String),
    Timeout,
}

/// Runs allocbench on `file` for the named claims, each allowed `limit`: a claim still
/// searching after that is killed, counted as a timeout, and the run goes on without it.
pub fn run_allocbench(
    bin: &Path,
    file: &Path,
    header: &Header,
    claims: &[String],
    limit: Duration,
) -> Result<BTreeMap<String, GoResult>, String> {
    run_allocbench_mode(bin, file, header, claims, limit, "separate")
}

/// A pod's claims allocated together (`-mode together`): one answer per claim, or the pod
/// timed out (every claim's answer is then [`GoResult::Timeout`]).
pub fn run_allocbench_pod(
    bin: &Path,
    file: &Path,
    header: &Header,
    claims: &[String],
    limit: Duration,
) -> Result<BTreeMap<String, GoResult>, String> {
    let mut out = run_allocbench_mode(bin, file, header, claims, limit, "together")?;
    if out.values().any(|g| *g == GoResult::Timeout) {
        out.values_mut().for_each(|g| *g = GoResult::Timeout);
    }
    Ok(out)
}

fn run_allocbench_mode(
    bin: &Path,
    file: &Path,
    header: &Header,
    claims: &[String],
    limit: Duration,
    mode: &str,
) -> Result<BTreeMap<String, GoResult>, String> {
    let mut out = BTreeMap::new();
    let mut remaining: Vec<String> = claims.to_vec();
    let labels: Vec<String> = header
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    while !remaining.is_empty() {
        let mut child = Command::new(bin)
            .args(["-pretty=false", "-mode", mode, "-v", "5"])
            .args(["-features", &header.go_features()])
            .args(["-node", &header.node])
            .args(["-node-labels", &labels.join(",")])
            .args(["-name", &remaining.join(",")])
            .arg(file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        // (claims started, when the last one started), from the allocator's own V(5) log.
        let progress = Arc::new(Mutex::new((0usize, Instant::now())));
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let p = progress.clone();
        let log = std::thread::spawn(move || {
            let mut other = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"Starting allocation\"") {
                    let mut g = p.lock().unwrap_or_else(|e| e.into_inner());
                    g.0 += 1;
                    g.1 = Instant::now();
                } else if !line.contains("allocator_experimental.go")
                    && !line.contains("allocator_incubating.go")
                    && other.len() < 4096
                {
                    other.push_str(&line);
                    other.push('\n');
                }
            }
            other
        });
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let mut killed_at = None;
        loop {
            if child.try_wait().map_err(|e| e.to_string())?.is_some() {
                break;
            }
            let (started, at) = *progress.lock().unwrap_or_else(|e| e.into_inner());
            if started > 0 && at.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                killed_at = Some(started - 1);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let stdout = reader.join().unwrap_or_default();
        let stderr = log.join().unwrap_or_default();
        if let Some(i) = killed_at {
            if mode == "together" {
                for n in remaining.drain(..) {
                    out.insert(n, GoResult::Timeout);
                }
                continue;
            }
            let name = remaining.remove(i.min(remaining.len() - 1));
            out.insert(name, GoResult::Timeout);
            continue;
        }
        let doc: Value = serde_json::from_str(&stdout)
            .map_err(|e| format!("allocbench output: {e}\nstderr:\n{stderr}\nstdout:\n{stdout}"))?;
        for c in doc["claims"].as_array().into_iter().flatten() {
            let name = c["name"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("default/")
                .to_string();
            let msg = c["error"].as_str().unwrap_or("").to_string();
            out.insert(name, GoResult::Done(go_outcome(c), msg));
        }
        for n in &remaining {
            if !out.contains_key(n) {
                return Err(format!(
                    "allocbench gave no answer for {n}\nstderr:\n{stderr}"
                ));
            }
        }
        remaining.clear();
    }
    Ok(out)
}

/// Our side of a case: the allocator for the node, and the devices held by other claims.
pub struct Ours {
    pub alloc: Allocator<'static>,
    /// The slices typed, for the allocator that borrows them, whose every answer must be the
    /// one built from JSON (which indexes every device up front): the borrowing allocator
    /// reads the common selector shapes straight from the slices.
    typed: Vec<ResourceSlice>,
    classes: Vec<DeviceClass>,
    options: Options,
    pub held: Vec<DeviceId>,
    pub templates: BTreeMap<String, ResourceClaimTemplate>,
}

impl Ours {
    /// Our allocator reproducing the scheduler of the case's version, bugs included, as the
    /// oracle runs.
    pub fn new(case: &Case) -> Result<Ours, AllocError> {
        Ours::with_bugs(case, SchedulerBugs::of(case.header.version))
    }

    /// Our allocator with the given scheduler bugs reproduced.
    pub fn with_bugs(case: &Case, bugs: SchedulerBugs) -> Result<Ours, AllocError> {
        let slices: Vec<Value> = case.of_kind("ResourceSlice").cloned().collect();
        let classes: Vec<DeviceClass> = case
            .of_kind("DeviceClass")
            .map(|c| serde_json::from_value(c.clone()).expect("class parses"))
            .collect();
        let options = Options {
            version: case.header.version,
            node: Some(case.header.node()),
            features: case.header.features,
            bugs,
            programs: None,
        };
        let alloc = Allocator::from_json_with_options(&slices, &classes, &options)?;
        let typed = slices
            .iter()
            .map(|s| serde_json::from_value(s.clone()).expect("slice parses"))
            .collect();
        let mut held = Vec::new();
        for c in case.of_kind("ResourceClaim") {
            let c: ResourceClaim = serde_json::from_value(c.clone()).expect("claim parses");
            let results = c
                .status
                .and_then(|s| s.allocation)
                .and_then(|a| a.devices)
                .and_then(|d| d.results)
                .unwrap_or_default();
            for r in results {
                held.push(DeviceId {
                    driver: r.driver,
                    pool: r.pool,
                    device: r.device,
                });
            }
        }
        let templates = case
            .of_kind("ResourceClaimTemplate")
            .map(|t| {
                let t: ResourceClaimTemplate =
                    serde_json::from_value(t.clone()).expect("template parses");
                (t.metadata.name.clone().unwrap_or_default(), t)
            })
            .collect();
        Ok(Ours {
            alloc,
            typed,
            classes,
            options,
            held,
            templates,
        })
    }

    /// Our answers for a pod's claims, allocated together, with the default pool order.
    pub fn pod_outcomes(&self, claims: &[String]) -> Vec<Outcome> {
        let compiled: Result<Vec<_>, _> = claims
            .iter()
            .map(|c| self.alloc.compile(&self.templates[c].spec.spec))
            .collect();
        let in_use = dranet_alloc::InUse::from(self.held.clone());
        let result = compiled.and_then(|cs| {
            let refs: Vec<_> = cs.iter().collect();
            self.alloc.allocate_pod(&refs, &in_use)
        });
        our_pod_outcomes(&result, claims.len())
    }

    /// Our answer with the default pool order.
    pub fn outcome(&self, claim: &str) -> Outcome {
        let spec = &self.templates[claim].spec.spec;
        let owned = our_outcome(&self.alloc.allocate_spec(spec, &self.held));
        let mut borrowing = Allocator::with_options(&self.typed, &self.classes, &self.options)
            .expect("the typed slices build as their JSON does");
        borrowing
            .set_pool_order(&self.alloc.pool_order())
            .expect("the same pools");
        let borrowed = our_outcome(&borrowing.allocate_spec(spec, &self.held));
        assert_eq!(
            borrowed, owned,
            "claim {claim}: the allocator borrowing the typed slices disagrees with the one built from JSON"
        );
        owned
    }

    /// Every answer over all pool orders (the scheduler's is random), at most `max` orders.
    pub fn outcomes(&mut self, claim: &str, max: usize) -> Vec<Outcome> {
        let pools: Vec<(String, String)> = self
            .alloc
            .pool_order()
            .into_iter()
            .map(|(d, p)| (d.to_string(), p.to_string()))
            .collect();
        let mut seen = Vec::new();
        let mut perm: Vec<usize> = (0..pools.len()).collect();
        let mut n = 0;
        loop {
            let order: Vec<(&str, &str)> = perm
                .iter()
                .map(|&i| (pools[i].0.as_str(), pools[i].1.as_str()))
                .collect();
            self.alloc.set_pool_order(&order).expect("pools exist");
            let o = self.outcome(claim);
            if !seen.contains(&o) {
                seen.push(o);
            }
            n += 1;
            if n >= max || !next_permutation(&mut perm) {
                break;
            }
        }
        let order: Vec<(&str, &str)> = pools
            .iter()
            .map(|(d, p)| (d.as_str(), p.as_str()))
            .collect();
        self.alloc.set_pool_order(&order).expect("pools exist");
        seen
    }
}

fn next_permutation(p: &mut [usize]) -> bool {
    let Some(i) = (1..p.len()).rev().find(|&i| p[i - 1] < p[i]) else {
        return false;
    };
    let j = (i..p.len()).rev().find(|&j| p[j] > p[i - 1]).unwrap_or(i);
    p.swap(i - 1, j);
    p[i..].reverse();
    true
}
