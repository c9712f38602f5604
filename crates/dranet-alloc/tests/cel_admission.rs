//! What the API server of each supported Kubernetes version admits in a new claim, against
//! `Program::compile_at`: the API server checks a new selector in its `NewExpressions` CEL
//! environment (compatibility version one minor below its own, default feature gates), while
//! the scheduler compiles stored selectors in the `StoredExpressions` one (everything of its
//! build). The corpus below holds selectors that only the 1.34 stored environment declares (the
//! 1.34 lists extension, `device.allowMultipleAllocations`: the 1.36 API server admits both),
//! selectors only the 1.36 stored environment declares (DRA's `includes`), and controls from the
//! libraries all declare.
//!
//! - Always: against the verdicts and messages recorded in `testdata/cel/admission-corpus.jsonl`
//!   (1.34.9) and `testdata/cel/admission-corpus-1.36.jsonl` (1.36.3).
//! - When the Kubernetes kit is running (`../shared/k8s/kit.sh`, or `DRANET_K8S_KIT`): also
//!   against the live API server (`kubectl create --dry-run=server`) of the version it runs.
//! - `DRANET_CEL_ADMISSION_REGEN=1 cargo test -p dranet-alloc --test cel_admission` rewrites the
//!   recorded file of the running version from the live API server.
//!
//! Every selector of the corpus must compile with `Program::compile_for_scheduler_at` of each
//! version that declares it.

#[path = "fixtures/mod.rs"]
mod fixtures;

use std::collections::HashMap;
use std::path::PathBuf;

use dranet_alloc::KubernetesVersion;
use dranet_alloc::cel::{CelError, MAX_EXPRESSION_LEN, Program};
use serde_json::json;

/// Selectors only the scheduler's (stored) environment declares.
const STORED_ONLY: &[&str] = &[
    // cel-go's lists extension, version 3 (Kubernetes 1.34).
    "[3, 1, 2].sort() == [1, 2, 3]",
    r#"["b", "a"].sort()[0] == "a""#,
    "[1, 2, 2].distinct() == [1, 2]",
    "[[1], [2, 3]].flatten() == [1, 2, 3]",
    "[dyn([1]), dyn([[2]])].flatten(2) == [1, 2]",
    "[1, 2, 3, 4].slice(1, 3) == [2, 3]",
    "lists.range(3) == [0, 1, 2]",
    "[1, 2, 3].reverse() == [3, 2, 1]",
    "[2, 1, 3].sortBy(x, -x) == [3, 2, 1]",
    r#"["bb", "a"].sortBy(s, s.size())[0] == "a""#,
    "cel.bind(xs, [3, 1], xs.sort()[0] == 1)",
    "[1, 2].reverse().distinct().size() == 2",
    r#"device.attributes["dra.net"].ifName in ["eth1", "eth0"].sort()"#,
    // The DRAConsumableCapacity field (the gate is off by default in 1.34).
    "device.allowMultipleAllocations",
    "!device.allowMultipleAllocations",
    "has(device.allowMultipleAllocations)",
    "device.?allowMultipleAllocations.orValue(false) == false",
    r#"device.allowMultipleAllocations || device.driver == "dra.net""#,
];

/// Selectors only the 1.36 scheduler declares: DRA's `includes`, gated by DRAListTypeAttributes
/// (alpha, off), which the stored environment ignores and the create-time one honours.
const STORED_ONLY_1_36: &[&str] = &[
    r#"device.attributes["dra.net"].ifName.includes("eth0")"#,
    "[1, 2].includes(1)",
    r#"device.attributes["dra.net"].numaNode.includes(0) || device.driver == "dra.net""#,
];

/// Selectors from the libraries both environments declare, each introduced at or before 1.33.
const BOTH: &[&str] = &[
    r#"device.driver == "dra.net""#,
    r#"device.attributes["dra.net"].mtu > 1000"#,
    r#"device.capacity["dra.net"].memory.isGreaterThan(quantity("1Gi"))"#,
    r#"semver("1.2.3").isLessThan(semver("1.3.0"))"#,
    r#"isSemver("v1.0.0", true)"#,
    "[1, 2].all(i, v, v > i)",
    r#"{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}"#,
    "sets.contains([1, 2, 3], [1])",
    "[1, 2, 3].isSorted()",
    "[1, 2, 3].indexOf(2) == 1",
    "[1, 2, 3].sum() == 6",
    "[1, 2].min() == 1",
    r#"ip("10.0.0.1").family() == 4"#,
    r#"cidr("10.0.0.0/8").containsIP("10.1.2.3")"#,
    r#"format.dns1123Label().validate("abc").hasValue() == false"#,
    r#"url("https://x.example").getHost() == "x.example""#,
    r#""abc".charAt(1) == "b""#,
    r#"strings.quote("a") == "\"a\"""#,
    "optional.of(1).hasValue()",
    "[1, 2].first().orValue(0) == 1",
    "optional.unwrap([optional.of(1)]) == [1]",
    "cel.bind(x, 1, x == 1)",
    "[1, 2].exists_one(x, x == 1)",
    r#""%d".format([1]) == "1""#,
];

/// A selector of exactly `len` bytes: the API server's field validation admits 10 KiB
/// (`CELSelectorExpressionMaxLength`), and refuses one byte more before compiling it; the
/// scheduler compiles either.
fn of_length(len: usize) -> &'static str {
    format!("\"{}\" != \"\"", "a".repeat(len - 8)).leak()
}

fn selectors() -> Vec<&'static str> {
    STORED_ONLY
        .iter()
        .chain(STORED_ONLY_1_36)
        .chain(BOTH)
        .copied()
        .chain([of_length(10 * 1024), of_length(10 * 1024 + 1)])
        .collect()
}

fn recorded_path(version: KubernetesVersion) -> PathBuf {
    let name = match version {
        KubernetesVersion::V1_34 => "admission-corpus.jsonl".to_string(),
        v => format!("admission-corpus-{v}.jsonl"),
    };
    fixtures::root().join("testdata/cel").join(name)
}

/// The API server's verdict on one selector: `None` admitted, else its message.
type Verdict = Option<String>;

fn load_recorded(version: KubernetesVersion) -> HashMap<String, Verdict> {
    let regen = "record it with DRANET_CEL_ADMISSION_REGEN=1 and the kit running";
    fixtures::jsonl(&recorded_path(version), regen)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let selector = v["selector"].as_str().unwrap_or_default().to_string();
            let verdict = match v["verdict"].as_str() {
                Some("accepted") => None,
                Some("invalid") => Some(v["message"].as_str().unwrap_or_default().to_string()),
                other => panic!("admission-corpus.jsonl record {}: verdict {other:?}", i + 1),
            };
            (selector, verdict)
        })
        .collect()
}

fn write_recorded(selectors: &[&str], verdicts: &[Verdict], version: KubernetesVersion) {
    let mut out = String::new();
    for (s, v) in selectors.iter().zip(verdicts) {
        let line = json!({"selector": s,
                          "verdict": if v.is_some() { "invalid" } else { "accepted" },
                          "message": v.clone().unwrap_or_default()});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(recorded_path(version), out).expect("write the admission corpus");
}

/// The CEL issues of an API server message, each as (column, message):
/// `... compilation failed: ERROR: <input>:1:10: undeclared reference to 'sort' (in container '')`
/// followed by the source and caret lines, once per issue. Empty when it refused for another
/// reason.
fn cel_issues(message: &str) -> Vec<(usize, String)> {
    message
        .split("ERROR: <input>:")
        .skip(1)
        .filter_map(|part| {
            let first = part.lines().next()?;
            let mut it = first.splitn(3, ':');
            let _line = it.next()?;
            let col: usize = it.next()?.trim().parse().ok()?;
            Some((col, it.next()?.trim().to_string()))
        })
        .collect()
}

/// How our compile differs from the API server's verdict on `selector`, if it does: the same
/// verdict, and for a refusal the same issues, in the API server's order, the first at the same
/// place (single-line ASCII selectors: column = byte offset + 1).
fn mismatch(selector: &str, theirs: &Verdict, version: KubernetesVersion) -> Option<String> {
    let ours = Program::compile_at(selector, version);
    match (theirs, &ours) {
        (None, Ok(_)) => None,
        (None, Err(e)) => Some(format!("API server admits it, we refuse: {e}")),
        (Some(m), Ok(_)) => Some(format!("API server refuses it ({m}), we admit it")),
        (Some(m), Err(CelError::Syntax { position, message })) => {
            let issues = cel_issues(m);
            if issues.is_empty() {
                return Some(format!("API server refuses it for no CEL issue: {m}"));
            }
            let want = issues
                .iter()
                .map(|(_, i)| i.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            if !message.starts_with(&want) {
                return Some(format!(
                    "messages differ:\n      API server: {want}\n      ours:       {message}"
                ));
            }
            (issues[0].0 != position + 1).then(|| {
                format!(
                    "first issue at column {} for the API server, offset {position} for us",
                    issues[0].0
                )
            })
        }
        (Some(m), Err(CelError::TooLong(n))) => {
            // "...: Too long: may not be more than 10240 bytes"
            let limit = format!("more than {MAX_EXPRESSION_LEN} bytes");
            (*n != selector.len() || !m.contains("Too long") || !m.contains(&limit))
                .then(|| format!("API server: {m}\n      ours: {}", CelError::TooLong(*n)))
        }
        (Some(m), Err(e)) => Some(format!("API server: {m}\n      ours: {e}")),
    }
}

#[test]
fn new_selectors_are_checked_in_the_1_34_api_servers_create_environment() {
    new_selectors_are_checked_in_the_api_servers_create_environment(KubernetesVersion::V1_34);
}

#[test]
fn new_selectors_are_checked_in_the_1_36_api_servers_create_environment() {
    new_selectors_are_checked_in_the_api_servers_create_environment(KubernetesVersion::V1_36);
}

fn new_selectors_are_checked_in_the_api_servers_create_environment(version: KubernetesVersion) {
    let all = selectors();
    // The live check needs the kit running this version.
    let kit = fixtures::kit_script()
        .filter(|k| fixtures::kit_running(k))
        .filter(|k| fixtures::kit_version(k) == version);
    if std::env::var("DRANET_CEL_ADMISSION_REGEN").is_ok_and(|v| v == "1") {
        if let Some(kit) = &kit {
            let live = fixtures::create_claims_dry_run(kit, "admission", &all)
                .unwrap_or_else(|e| panic!("{e}"));
            write_recorded(&all, &live, version);
            eprintln!("rewrote {}", recorded_path(version).display());
        } else {
            eprintln!(
                "DRANET_CEL_ADMISSION_REGEN=1: the kit does not run {version}; kept its record"
            );
        }
    }
    let recorded = load_recorded(version);
    let mut failures = Vec::new();
    let mut refused = 0;
    for s in &all {
        let Some(theirs) = recorded.get(*s) else {
            failures.push(format!(
                "{s}\n    no recorded verdict (DRANET_CEL_ADMISSION_REGEN=1 with the kit running)"
            ));
            continue;
        };
        refused += usize::from(theirs.is_some());
        if let Some(why) = mismatch(s, theirs, version) {
            failures.push(format!("{s}\n    recorded API server: {why}"));
        }
        let declared = version >= KubernetesVersion::V1_36 || !STORED_ONLY_1_36.contains(s);
        match Program::compile_for_scheduler_at(s, version) {
            Err(e) if declared => failures.push(format!(
                "{s}\n    compile_for_scheduler_at({version}) refused it: {e}"
            )),
            Ok(_) if !declared => failures.push(format!(
                "{s}\n    compile_for_scheduler_at({version}) admits it; the {version} \
                 scheduler does not declare includes"
            )),
            _ => {}
        }
    }
    // The corpus must hold what it is about: every stored-only selector refused at creation,
    // every control admitted; the 1.34 stored-only ones admitted by the 1.36 API server.
    let stored_only: &[&str] = match version {
        KubernetesVersion::V1_34 => STORED_ONLY,
        _ => STORED_ONLY_1_36,
    };
    for s in stored_only {
        if matches!(recorded.get(*s), Some(None)) {
            failures.push(format!(
                "{s}\n    listed as stored-only in {version}, but the API server admits it"
            ));
        }
    }
    if version >= KubernetesVersion::V1_36 {
        for s in STORED_ONLY {
            if matches!(recorded.get(*s), Some(Some(_))) {
                failures.push(format!(
                    "{s}\n    stored-only in 1.34, but the {version} API server refuses it"
                ));
            }
        }
    }
    for s in BOTH {
        if matches!(recorded.get(*s), Some(Some(_))) {
            failures.push(format!("{s}\n    a control, but the API server refuses it"));
        }
    }
    match &kit {
        Some(kit) => match fixtures::create_claims_dry_run(kit, "admission", &all) {
            Ok(live) => {
                for (s, theirs) in all.iter().zip(&live) {
                    if recorded.get(*s) != Some(theirs) {
                        failures.push(format!(
                            "{s}\n    the live API server says {theirs:?}, the record differs \
                             (DRANET_CEL_ADMISSION_REGEN=1)"
                        ));
                    }
                    if let Some(why) = mismatch(s, theirs, version) {
                        failures.push(format!("{s}\n    live API server: {why}"));
                    }
                }
                eprintln!(
                    "cel_admission: {} selectors checked against the live {version} API server",
                    live.len()
                );
            }
            Err(e) => failures.push(format!("live API server: {e}")),
        },
        None => eprintln!(
            "SKIP cel_admission live check: the k8s kit is not running {version} (KUBE_VERSION=\
             {version} kit.sh up; DRANET_K8S_KIT names kit.sh when it is not at ../shared/k8s); \
             checked {} recorded verdicts only",
            all.len()
        ),
    }
    eprintln!(
        "cel_admission {version}: {} selectors, {refused} refused at creation, {} mismatches",
        all.len(),
        failures.len()
    );
    fixtures::assert_no_mismatches(&failures);
}

/// Message constructions (protobuf's well-known types): the API server checks them with the
/// same type registry as the scheduler, so a new selector is admitted exactly when the
/// scheduler compiles it, unless the cost estimate refuses it.
const MESSAGES: &[&str] = &[
    "google.protobuf.Int64Value{value: 1} == 1",
    ".google.protobuf.Int64Value{value: 1,} == 1",
    "google.protobuf.Int64Value{value: 1u} == 1",
    "google.protobuf.Int64Value{foo: 1} == 1",
    "google.protobuf.Foo{} == 1",
    "int{} == 1",
    "null_type{} == null",
    "google.protobuf.Duration{seconds: 90} + duration(\"30s\") == duration(\"2m\")",
    "google.protobuf.Timestamp{seconds: 1} > timestamp(\"1970-01-01T00:00:00Z\")",
    "google.protobuf.Struct{fields: {\"a\": 1}}.a == 1",
    "google.protobuf.Value{list_value: [1, \"a\"]} == [1]",
    "google.protobuf.Value{bool_value: true}",
    "google.protobuf.Any{} == 1",
    "google.protobuf.NullValue.NULL_VALUE == 0",
    "[google.protobuf.Int64Value{}, null][0] == 0",
];

#[test]
fn message_construction_is_admitted_as_the_scheduler_compiles_it() {
    for version in KubernetesVersion::ALL {
        for s in MESSAGES {
            let admitted = Program::compile_at(s, version).map_err(|e| e.to_string());
            let compiled = Program::compile_for_scheduler_at(s, version).map_err(|e| e.to_string());
            assert_eq!(
                admitted.is_ok(),
                compiled.is_ok(),
                "{version} {s}: {admitted:?}"
            );
        }
    }
}

/// cel-go's estimate of a message construction: `StructCreateBaseCost` (40) plus its fields'.
/// Its size is unknown to the estimate, so comparing two constructions (an equality's cost
/// grows with the smaller operand) has no bound: the API server refuses what the scheduler
/// would compile.
#[test]
fn message_construction_costs_forty_plus_its_fields() {
    let cost = |s: &str| {
        Program::compile(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .estimated_cost()
            .unwrap_or_else(|| panic!("{s}: no estimate"))
    };
    for field in [
        "1",
        "size(\"ab\")",
        "device.attributes[\"dra.net\"].numaNode",
    ] {
        let with = cost(&format!(
            "google.protobuf.Int64Value{{value: {field}}} == 1"
        ));
        let without = cost(&format!("{field} == 1"));
        assert_eq!(with.min, without.min + 40, "{field}");
        assert_eq!(with.max, without.max + 40, "{field}");
    }
    let s = "google.protobuf.Empty{} == google.protobuf.Empty{}";
    assert!(Program::compile_for_scheduler(s).is_ok());
    assert!(matches!(
        Program::compile(s),
        Err(CelError::TooComplex { .. })
    ));
}
