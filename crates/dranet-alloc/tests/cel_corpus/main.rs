//! The CEL corpus against the scheduler: every selector of `generate.rs` is evaluated by our
//! engine on one device and compared with what the scheduler's allocator (`allocbench`) said
//! about the same selector on the same device: allocated, not allocated, compile error or
//! runtime error. Once per supported Kubernetes version: our engine compiles in that version's
//! environment ([`Program::compile_for_scheduler_at`]) and is compared with that version's
//! scheduler (1.34.9, 1.36.3).
//!
//! - Always: against the outcomes recorded in `testdata/cel/corpus.jsonl` (1.34) and
//!   `testdata/cel/corpus-1.36.jsonl`.
//! - When the Kubernetes kit is next to the repository (`../shared/k8s/kit.sh`, or
//!   `DRANET_K8S_KIT`): also against each version's allocbench itself, run live (it needs no
//!   cluster).
//! - `DRANET_CEL_CORPUS_REGEN=1 cargo test -p dranet-alloc --test cel_corpus` rewrites the
//!   recorded files from allocbench (needs the kit).
//!
//! A selector on which the outcome differs fails the test, naming the selector and both
//! messages. Message differences where the outcome agrees are counted and listed, not failed:
//! the outcome is what a user's pod depends on.

#[path = "../fixtures/mod.rs"]
mod fixtures;
mod generate;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use dranet_alloc::KubernetesVersion;
use dranet_alloc::cel::{
    AttributeValue, CelError, DeviceAttributes, DeviceView, Program, Quantity,
};
use serde_json::{Value, json};

const DRIVER: &str = "dra.net";

/// The device every selector is evaluated on: (name, value) as the ResourceSlice carries them.
fn attributes() -> Vec<(&'static str, Value)> {
    vec![
        ("numaNode", json!({"int": 1})),
        ("mtu", json!({"int": 9000})),
        ("neg", json!({"int": -5})),
        ("ifName", json!({"string": "eth0"})),
        ("pciAddress", json!({"string": "0000:17:00.0"})),
        ("empty", json!({"string": ""})),
        ("ip", json!({"string": "10.1.2.3"})),
        ("ipv4", json!({"string": "10.1.2.3/24"})),
        ("ipv6", json!({"string": "fd00::1"})),
        (
            "url",
            json!({"string": "https://example.com:8443/path?q=1"}),
        ),
        ("mac", json!({"string": "0c:42:a1:00:00:01"})),
        ("rdma", json!({"bool": true})),
        ("ibOnly", json!({"bool": false})),
        ("firmware", json!({"version": "28.39.1002-rc.1+build5"})),
        ("dra.net/qualifiedHere", json!({"string": "yes"})),
        (
            "resource.kubernetes.io/pcieRoot",
            json!({"string": "pci0000:16"}),
        ),
        (
            "resource.kubernetes.io/pciBusID",
            json!({"string": "0000:17:00.0"}),
        ),
        ("gpu.example.com/model", json!({"string": "H100"})),
        (
            "gpu.example.com/driverVersion",
            json!({"version": "550.54.15"}),
        ),
    ]
}

fn capacity() -> Vec<(&'static str, &'static str)> {
    vec![
        ("memory", "80Gi"),
        ("bandwidth", "400G"),
        ("fraction", "1500m"),
        ("gpu.example.com/slots", "8"),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Allocated,
    NotAllocated,
    CompileError,
    RuntimeError,
    Other,
}

impl Outcome {
    fn name(&self) -> &'static str {
        match self {
            Outcome::Allocated => "allocated",
            Outcome::NotAllocated => "not allocated",
            Outcome::CompileError => "compile error",
            Outcome::RuntimeError => "runtime error",
            Outcome::Other => "other error",
        }
    }
    fn parse(s: &str) -> Outcome {
        match s {
            "allocated" => Outcome::Allocated,
            "not allocated" => Outcome::NotAllocated,
            "compile error" => Outcome::CompileError,
            "runtime error" => Outcome::RuntimeError,
            _ => Outcome::Other,
        }
    }
}

#[derive(Debug, Clone)]
struct Result_ {
    outcome: Outcome,
    message: String,
}

fn recorded_path(version: KubernetesVersion) -> PathBuf {
    let name = match version {
        KubernetesVersion::V1_34 => "corpus.jsonl".to_string(),
        v => format!("corpus-{v}.jsonl"),
    };
    fixtures::root().join("testdata/cel").join(name)
}

/// Our engine's outcome, as the scheduler decides: a compile error refuses the claim, a runtime
/// error fails it, otherwise the device is allocated when the selector is true.
fn ours(selector: &str, view: &DeviceView<'_>, version: KubernetesVersion) -> Result_ {
    // A panic is a bug to report against the selector, not a reason to stop comparing.
    std::panic::catch_unwind(|| ours_unguarded(selector, view, version)).unwrap_or_else(|_| {
        Result_ {
            outcome: Outcome::Other,
            message: "panicked".into(),
        }
    })
}

fn ours_unguarded(selector: &str, view: &DeviceView<'_>, version: KubernetesVersion) -> Result_ {
    match Program::compile_for_scheduler_at(selector, version) {
        Err(e) => Result_ {
            outcome: Outcome::CompileError,
            message: e.to_string(),
        },
        Ok(p) => match p.matches(view) {
            Ok(true) => Result_ {
                outcome: Outcome::Allocated,
                message: String::new(),
            },
            Ok(false) => Result_ {
                outcome: Outcome::NotAllocated,
                message: String::new(),
            },
            Err(CelError::Runtime(m)) => Result_ {
                outcome: Outcome::RuntimeError,
                message: m,
            },
            Err(e) => Result_ {
                outcome: Outcome::RuntimeError,
                message: e.to_string(),
            },
        },
    }
}

fn device_attributes() -> DeviceAttributes {
    let attrs: Vec<(&str, AttributeValue)> = attributes()
        .into_iter()
        .map(|(n, v)| {
            let v: AttributeValue = serde_json::from_value(v).expect("attribute of the fixture");
            (n, v)
        })
        .collect();
    let caps: Vec<(&str, Quantity)> = capacity()
        .into_iter()
        .map(|(n, q)| (n, Quantity::parse(q).expect("quantity of the fixture")))
        .collect();
    DeviceAttributes::new(DRIVER, attrs, caps).expect("fixture device")
}

/// The allocbench input: the device's slice, a class selecting everything, one claim per
/// selector (`c<index>`).
fn allocbench_input(cases: &[generate::Case]) -> String {
    let attrs: serde_json::Map<String, Value> = attributes()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let caps: serde_json::Map<String, Value> = capacity()
        .into_iter()
        .map(|(n, q)| (n.to_string(), json!({ "value": q })))
        .collect();
    let mut docs = vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": "corpus"},
               "spec": {"driver": DRIVER, "nodeName": "corpus-node",
                        "pool": {"name": "corpus-node", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": "dev", "attributes": attrs, "capacity": caps}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "any"}, "spec": {}}),
    ];
    for (i, c) in cases.iter().enumerate() {
        docs.push(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": format!("c{i}"), "namespace": "corpus"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "any",
                "selectors": [{"cel": {"expression": c.selector}}]}}]}}}),
        );
    }
    docs.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Runs the allocbench of `version` on all cases at once (`-mode separate`: each claim alone).
fn allocbench(kit: &Path, cases: &[generate::Case], version: KubernetesVersion) -> Vec<Result_> {
    try_allocbench(kit, cases, version).unwrap_or_else(|e| panic!("{e}"))
}

/// [`allocbench`], or what went wrong when it gave no JSON (a selector that panics cel-go's
/// planner takes the whole run down).
fn try_allocbench(
    kit: &Path,
    cases: &[generate::Case],
    version: KubernetesVersion,
) -> Result<Vec<Result_>, String> {
    let dir = std::env::temp_dir().join(format!(
        "dranet-cel-corpus-{}-{version}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("input.yaml");
    std::fs::write(&input, allocbench_input(cases)).expect("write input");
    let out = Command::new(kit)
        .args(["allocbench", "-mode", "separate", "-pretty=false", "-f"])
        .arg(&input)
        .env("KUBE_VERSION", version.to_string())
        .output()
        .expect("run kit.sh allocbench");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout).map_err(|e| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        format!(
            "allocbench output is not JSON ({e}); stderr:\n{}",
            stderr.lines().take(3).collect::<Vec<_>>().join("\n")
        )
    })?;
    // The kit picks the allocbench by KUBE_VERSION; make sure it was this version's.
    let from = v["allocatorFrom"].as_str().unwrap_or_default();
    if !from.contains(&format!("Kubernetes v{version}.")) {
        return Err(format!(
            "asked the {version} allocbench, answered by {from:?}"
        ));
    }
    let claims = v["claims"].as_array().expect("claims in allocbench output");
    let by_name: HashMap<&str, &Value> = claims
        .iter()
        .filter_map(|c| Some((c["name"].as_str()?, c)))
        .collect();
    (0..cases.len())
        .map(|i| {
            let c = by_name
                .get(format!("corpus/c{i}").as_str())
                .ok_or_else(|| format!("allocbench has no result for claim c{i}"))?;
            Ok(classify(c))
        })
        .collect()
}

fn classify(claim: &Value) -> Result_ {
    if claim["allocated"].as_bool() == Some(true) {
        return Result_ {
            outcome: Outcome::Allocated,
            message: String::new(),
        };
    }
    let err = claim["error"].as_str().unwrap_or_default();
    for (marker, outcome) in [
        ("CEL compile error: ", Outcome::CompileError),
        ("CEL runtime error: ", Outcome::RuntimeError),
    ] {
        if let Some(i) = err.find(marker) {
            return Result_ {
                outcome,
                message: err[i + marker.len()..].to_string(),
            };
        }
    }
    if err.starts_with("cannot allocate") {
        return Result_ {
            outcome: Outcome::NotAllocated,
            message: String::new(),
        };
    }
    Result_ {
        outcome: Outcome::Other,
        message: err.to_string(),
    }
}

fn load_recorded(version: KubernetesVersion) -> HashMap<String, Result_> {
    let text = std::fs::read_to_string(recorded_path(version)).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line of corpus.jsonl");
            (
                v["selector"].as_str().unwrap_or_default().to_string(),
                Result_ {
                    outcome: Outcome::parse(v["outcome"].as_str().unwrap_or_default()),
                    message: v["message"].as_str().unwrap_or_default().to_string(),
                },
            )
        })
        .collect()
}

fn write_recorded(cases: &[generate::Case], results: &[Result_], version: KubernetesVersion) {
    let mut out = String::new();
    for (c, r) in cases.iter().zip(results) {
        let line = json!({"family": c.family, "function": c.function, "selector": c.selector,
                          "outcome": r.outcome.name(), "message": r.message});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    let path = recorded_path(version);
    std::fs::create_dir_all(path.parent().expect("testdata/cel")).expect("mkdir");
    std::fs::write(&path, out).expect("write the recorded corpus");
}

fn short(s: &str) -> String {
    let one_line = s.replace('\n', "⏎");
    if one_line.chars().count() > 300 {
        format!("{}…", one_line.chars().take(300).collect::<String>())
    } else {
        one_line
    }
}

/// Agreement per family: (agree, total), outcomes and messages.
#[derive(Default)]
struct Tally {
    outcome_agree: usize,
    message_agree: usize,
    total: usize,
    known: usize,
}

/// Selectors where we knowingly answer differently from the scheduler, each with the reason.
/// The test fails if one of them starts to agree (then it belongs out of this list).
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "lists.range(150000).all(x, x >= 0)",
        "runtime cost: our budget counts evaluation steps (a node, an iteration), close to but \
         not cel-go's cost of each node; this comprehension of 150,000 iterations is within \
         the scheduler's limit and over ours",
    ),
    (
        "lists.range(250).map(x, lists.range(250).map(y, x * y)).size() == 250",
        "runtime cost: cel-go also charges for building the lists of map() results, which our \
         steps do not count; 62,500 results are over the scheduler's limit and within ours",
    ),
    (
        "lists.range(300).map(x, lists.range(300).map(y, x * y)).size() == 300",
        "runtime cost: as the 250 × 250 map()",
    ),
];

/// The reason a selector is a known difference, if it is one.
fn known_difference(selector: &str) -> Option<&'static str> {
    KNOWN_DIFFERENCES
        .iter()
        .find_map(|(s, why)| (selector == *s).then_some(*why))
}

/// Compares two columns of outcomes; `ours` says whether the second is our engine's (then the
/// known differences are excused, and must still differ).
fn compare(
    ours_side: bool,
    what: &str,
    cases: &[generate::Case],
    theirs: &[Result_],
    ours: &[Result_],
) -> (String, Vec<String>) {
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for ((c, t), o) in cases.iter().zip(theirs).zip(ours) {
        let tally = tallies.entry(c.family).or_default();
        tally.total += 1;
        let known = known_difference(&c.selector).filter(|_| ours_side);
        if t.outcome == o.outcome {
            tally.outcome_agree += 1;
            if t.message == o.message {
                tally.message_agree += 1;
            }
            if known.is_some() {
                failures.push(format!(
                    "[{}/{}] {}\n    listed as a known difference but now agrees ({}): \
                     remove it from KNOWN_DIFFERENCES",
                    c.family,
                    c.function,
                    short(&c.selector),
                    t.outcome.name()
                ));
            }
        } else if known.is_some() {
            tally.known += 1;
        } else {
            failures.push(format!(
                "[{}/{}] {}\n    scheduler: {}{}\n    ours:      {}{}",
                c.family,
                c.function,
                short(&c.selector),
                t.outcome.name(),
                if t.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", short(&t.message))
                },
                o.outcome.name(),
                if o.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", short(&o.message))
                },
            ));
        }
    }
    let mut report = format!("CEL corpus vs {what}:\n");
    let (mut a, mut m, mut n) = (0, 0, 0);
    for (family, t) in &tallies {
        let _ = writeln!(
            report,
            "  {family:<11} outcome {:>4} of {:>4} ({:>5.1} %), message {:>4}, known differences {}",
            t.outcome_agree,
            t.total,
            100.0 * t.outcome_agree as f64 / t.total.max(1) as f64,
            t.message_agree,
            t.known
        );
        a += t.outcome_agree;
        m += t.message_agree;
        n += t.total;
    }
    let _ = writeln!(
        report,
        "  {:<11} outcome {a:>4} of {n:>4} ({:>5.1} %), message {m:>4}",
        "all",
        100.0 * a as f64 / n.max(1) as f64
    );
    (report, failures)
}

#[test]
fn corpus_agrees_with_the_1_34_scheduler() {
    corpus_agrees_with_the_scheduler(KubernetesVersion::V1_34);
}

#[test]
fn corpus_agrees_with_the_1_36_scheduler() {
    corpus_agrees_with_the_scheduler(KubernetesVersion::V1_36);
}

fn corpus_agrees_with_the_scheduler(version: KubernetesVersion) {
    let cases = generate::cases();
    assert!(
        cases.len() >= 1000,
        "the corpus has only {} selectors",
        cases.len()
    );
    let kit = fixtures::kit_script();
    if std::env::var_os("DRANET_CEL_CORPUS_REGEN").is_some() {
        let kit = kit
            .as_deref()
            .expect("DRANET_CEL_CORPUS_REGEN needs the kit (../shared/k8s/kit.sh)");
        let results = allocbench(kit, &cases, version);
        write_recorded(&cases, &results, version);
        eprintln!(
            "wrote {} outcomes to {}",
            results.len(),
            recorded_path(version).display()
        );
    }
    let recorded = load_recorded(version);
    let missing: Vec<&str> = cases
        .iter()
        .filter(|c| !recorded.contains_key(&c.selector))
        .map(|c| c.selector.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "{} selectors have no recorded {version} outcome (regenerate: DRANET_CEL_CORPUS_REGEN=1 \
         cargo test -p dranet-alloc --test cel_corpus), first: {}",
        missing.len(),
        short(missing[0])
    );
    let theirs: Vec<Result_> = cases
        .iter()
        .map(|c| recorded[&c.selector].clone())
        .collect();

    let attrs = device_attributes();
    let view = DeviceView {
        driver: DRIVER,
        attributes: &attrs,
        allow_multiple_allocations: false,
    };
    let mine: Vec<Result_> = cases
        .iter()
        .map(|c| ours(&c.selector, &view, version))
        .collect();

    let (report, mut failures) = compare(
        true,
        &format!("recorded {version} scheduler outcomes"),
        &cases,
        &theirs,
        &mine,
    );
    eprintln!("{report}");
    match kit {
        Some(kit) => {
            // The slow few are compared with their recorded outcomes above, not run again.
            let all = std::env::var_os("DRANET_CEL_CORPUS_LIVE_ALL").is_some();
            let keep = live_indices(&cases, all);
            if keep.len() < cases.len() {
                eprintln!(
                    "live allocbench: {} slow selectors compared with their recorded outcomes only \
                     (DRANET_CEL_CORPUS_LIVE_ALL=1 asks about them too)",
                    cases.len() - keep.len()
                );
            }
            let cases: Vec<generate::Case> = keep.iter().map(|&i| cases[i].clone()).collect();
            let theirs: Vec<Result_> = keep.iter().map(|&i| theirs[i].clone()).collect();
            let mine: Vec<Result_> = keep.iter().map(|&i| mine[i].clone()).collect();
            let live = allocbench(&kit, &cases, version);
            let (drift_report, drift) = compare(
                false,
                &format!("live {version} allocbench (recorded)"),
                &cases,
                &live,
                &theirs,
            );
            if !drift.is_empty() {
                eprintln!("{drift_report}");
                failures.push(format!(
                    "{} recorded outcomes differ from live allocbench; regenerate \
                     (DRANET_CEL_CORPUS_REGEN=1). First:\n{}",
                    drift.len(),
                    drift[0]
                ));
            }
            let (live_report, live_failures) = compare(
                true,
                &format!("live {version} allocbench"),
                &cases,
                &live,
                &mine,
            );
            eprintln!("{live_report}");
            if failures.is_empty() {
                failures = live_failures;
            }
        }
        None => eprintln!(
            "note: no Kubernetes kit at ../shared/k8s/kit.sh: compared with the recorded \
             outcomes only"
        ),
    }
    assert!(
        failures.is_empty(),
        "{} selectors where our outcome differs from the {version} scheduler's:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Selectors that cel-go evaluates in seconds to a minute each (its `lists.range(n).all` is
/// quadratic in `n`): four minutes of allocbench a version. With the parser's depth probes
/// ([`slow_in_cel_go`]) their outcomes, recorded from allocbench, are compared on every run; the
/// live run leaves them out unless `DRANET_CEL_CORPUS_LIVE_ALL` is set (regenerating always asks
/// allocbench about them).
const SLOW_IN_CEL_GO: &[&str] = &[
    "lists.range(300000).all(x, x >= 0)",
    "lists.range(200000).all(x, x >= 0)",
    "lists.range(150000).all(x, x >= 0)",
    "lists.range(100000).all(x, x >= 0)",
    "lists.range(50000).all(x, x >= 0)",
    "lists.range(30000).exists(x, x < 0)",
    "lists.range(50000).map(x, x).sort().size() > 0",
    "lists.range(100000).map(x, \"a\").join(\"\").size() > 0",
    "lists.range(490000).map(x, x).size() > 0",
    "lists.range(10000000).size() > 0",
    "lists.range(30000).all(i, google.protobuf.Int64Value{value: i} >= 0)",
];

/// Nesting this deep probes cel-go's parser limits, and takes it seconds a selector.
const DEEP: usize = 200;

/// Whether the live allocbench run leaves `selector` out (see [`SLOW_IN_CEL_GO`]).
fn slow_in_cel_go(selector: &str) -> bool {
    SLOW_IN_CEL_GO.contains(&selector) || nesting(selector) >= DEEP
}

/// The deepest nesting of brackets, braces and parentheses (string literals not told apart: an
/// over-count only leaves a selector to its recorded outcome).
fn nesting(selector: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in selector.chars() {
        match c {
            '[' | '{' | '(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ']' | '}' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The indices of the cases the live allocbench run asks about: all of them, or all but the
/// slow ones.
fn live_indices(cases: &[generate::Case], all: bool) -> Vec<usize> {
    (0..cases.len())
        .filter(|&i| all || !slow_in_cel_go(&cases[i].selector))
        .collect()
}

/// A slow selector the corpus no longer has would be a stale entry; and the live run must
/// still ask about nearly all of the corpus.
#[test]
fn slow_selectors_are_in_the_corpus() {
    let cases = generate::cases();
    for slow in SLOW_IN_CEL_GO {
        assert!(
            cases.iter().any(|c| c.selector == *slow),
            "SLOW_IN_CEL_GO names a selector the corpus does not have: {slow}"
        );
    }
    let left_out = cases.len() - live_indices(&cases, false).len();
    assert!(
        left_out < cases.len() / 50,
        "the live run leaves out {left_out} of {} selectors",
        cases.len()
    );
}

/// Between the recorded outcomes of two versions, the selectors whose outcome changed may only
/// be those of the `versions` family (what the versions' environments declare differently):
/// a change anywhere else is a difference between the schedulers nobody has looked at.
#[test]
fn versions_differ_only_where_their_environments_do() {
    let cases = generate::cases();
    let (old, new) = (
        load_recorded(KubernetesVersion::V1_34),
        load_recorded(KubernetesVersion::V1_36),
    );
    let mut changed = 0;
    let mut unexplained = Vec::new();
    for c in &cases {
        let (Some(o), Some(n)) = (old.get(&c.selector), new.get(&c.selector)) else {
            continue;
        };
        if o.outcome != n.outcome {
            changed += 1;
            if c.family != "versions" {
                unexplained.push(format!(
                    "[{}/{}] {}: 1.34 {}, 1.36 {}",
                    c.family,
                    c.function,
                    short(&c.selector),
                    o.outcome.name(),
                    n.outcome.name()
                ));
            }
        }
    }
    assert!(
        changed > 0,
        "no selector changes outcome between 1.34 and 1.36: the `includes` cases should"
    );
    fixtures::assert_no_mismatches(&unexplained);
}

/// A tool for whoever extends the engine: asks the scheduler's allocator (live) and our engine
/// about the selectors in the file `DRANET_CEL_PROBE` (one per line) and prints both answers;
/// the version is `KUBE_VERSION` (default 1.34).
#[test]
#[ignore = "a probe for development; needs DRANET_CEL_PROBE and the kit"]
fn probe() {
    let Some(file) = std::env::var_os("DRANET_CEL_PROBE") else {
        eprintln!("SKIP: set DRANET_CEL_PROBE to a file of selectors, one per line");
        return;
    };
    let Some(kit) = fixtures::kit_script() else {
        eprintln!("SKIP: the Kubernetes kit (../shared/k8s/kit.sh) is not there");
        return;
    };
    let version: KubernetesVersion = std::env::var("KUBE_VERSION")
        .as_deref()
        .unwrap_or("1.34")
        .parse()
        .expect("KUBE_VERSION");
    let text = std::fs::read_to_string(&file).expect("read the probe file");
    let cases: Vec<generate::Case> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| generate::Case {
            family: "probe",
            function: String::new(),
            selector: l.to_string(),
        })
        .collect();
    // When one selector takes allocbench down, ask about each alone.
    let theirs = try_allocbench(&kit, &cases, version).unwrap_or_else(|_| {
        cases
            .iter()
            .map(
                |c| match try_allocbench(&kit, std::slice::from_ref(c), version) {
                    Ok(mut one) => one.remove(0),
                    Err(e) => Result_ {
                        outcome: Outcome::Other,
                        message: e,
                    },
                },
            )
            .collect()
    });
    let attrs = device_attributes();
    let view = DeviceView {
        driver: DRIVER,
        attributes: &attrs,
        allow_multiple_allocations: false,
    };
    for (c, t) in cases.iter().zip(&theirs) {
        let o = ours(&c.selector, &view, version);
        let mark = if o.outcome == t.outcome { "  " } else { "!!" };
        println!(
            "{mark} {}\n     scheduler: {} {}\n     ours:      {} {}",
            c.selector,
            t.outcome.name(),
            short(&t.message),
            o.outcome.name(),
            short(&o.message)
        );
    }
}
