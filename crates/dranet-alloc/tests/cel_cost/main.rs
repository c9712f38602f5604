//! The compile-time cost estimate against the Kubernetes API server: for every selector of the
//! cost corpus (`families.rs`: families swept across the point where the API server starts
//! refusing them as "too complex, exceeds cost limit"), `Program::compile_at` must accept what
//! the API server accepts and refuse with `CelError::TooComplex` what it refuses for cost.
//!
//! - Always: against the verdicts recorded in `testdata/cel/cost-corpus.jsonl`, for every
//!   supported version: recorded from 1.34.9, and the 1.36.3 API server gave the same verdict on
//!   every selector (the limit, 1,000,000, and the estimator did not change).
//! - When the Kubernetes kit is running (`../shared/k8s/kit.sh`, or `DRANET_K8S_KIT`): also
//!   against the live API server of the version it runs, each selector in a ResourceClaim
//!   created with `kubectl create --dry-run=server` (all claims in a few YAML streams).
//! - `DRANET_CEL_COST_REGEN=1 cargo test -p dranet-alloc --test cel_cost` regenerates the corpus
//!   and rewrites the recorded verdicts from the live API server (needs the running kit).
//!
//! The scheduler does not estimate cost: every selector the API server refuses only for its
//! cost must still compile with `Program::compile_for_scheduler`.

mod families;
#[path = "../fixtures/mod.rs"]
mod fixtures;

use std::path::{Path, PathBuf};

use dranet_alloc::KubernetesVersion;
use dranet_alloc::cel::{CelError, MAX_SELECTOR_COST, Program};
use families::Case;
use serde_json::json;

/// What the API server (or we) made of a selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepted,
    TooComplex,
    /// Refused for another reason (a compile error).
    Invalid,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::TooComplex => "too complex",
            Verdict::Invalid => "invalid",
        }
    }
    fn parse(s: &str) -> Option<Verdict> {
        Some(match s {
            "accepted" => Verdict::Accepted,
            "too complex" => Verdict::TooComplex,
            "invalid" => Verdict::Invalid,
            _ => return None,
        })
    }
}

/// A recorded corpus entry.
struct Recorded {
    case: Case,
    verdict: Verdict,
    message: String,
}

fn recorded_path() -> PathBuf {
    fixtures::root().join("testdata/cel/cost-corpus.jsonl")
}

/// Our verdict, with the estimate or error for the report.
fn ours(selector: &str, version: KubernetesVersion) -> (Verdict, String) {
    match Program::compile_at(selector, version) {
        Ok(p) => (
            Verdict::Accepted,
            p.estimated_cost()
                .map(|c| format!("estimated {}", c.max))
                .unwrap_or_default(),
        ),
        Err(CelError::TooComplex { estimated, .. }) => {
            (Verdict::TooComplex, format!("estimated {estimated}"))
        }
        Err(e) => (Verdict::Invalid, e.to_string()),
    }
}

/// Our estimated worst-case cost, or why there is none.
fn estimate(selector: &str) -> Result<u64, String> {
    match Program::compile(selector) {
        Ok(p) => p
            .estimated_cost()
            .map(|c| c.max)
            .ok_or_else(|| "no estimate".to_string()),
        Err(CelError::TooComplex { estimated, .. }) => Ok(estimated),
        Err(e) => Err(e.to_string()),
    }
}

fn load_recorded() -> Vec<Recorded> {
    let regen = "regenerate with DRANET_CEL_COST_REGEN=1 and the kit running";
    fixtures::jsonl(&recorded_path(), regen)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let verdict = v["verdict"].as_str().and_then(Verdict::parse);
            Recorded {
                case: Case {
                    family: v["family"].as_str().unwrap_or_default().to_string(),
                    n: v["n"].as_u64().unwrap_or_default(),
                    pad: v["pad"].as_u64(),
                    selector: v["selector"].as_str().unwrap_or_default().to_string(),
                },
                verdict: verdict
                    .unwrap_or_else(|| panic!("cost-corpus.jsonl line {}: unknown verdict", i + 1)),
                message: v["message"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

fn write_recorded(cases: &[Case], verdicts: &[(Verdict, String)]) {
    let mut out = String::new();
    for (c, (v, m)) in cases.iter().zip(verdicts) {
        let line = json!({"family": c.family, "n": c.n, "pad": c.pad, "selector": c.selector,
                          "verdict": v.name(), "message": m});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(recorded_path(), out).expect("write cost-corpus.jsonl");
}

/// The API server's verdicts (see `fixtures::create_claims_dry_run`).
fn api_server(kit: &Path, selectors: &[&str]) -> Result<Vec<(Verdict, String)>, String> {
    Ok(fixtures::create_claims_dry_run(kit, "cost", selectors)?
        .into_iter()
        .map(|refused| match refused {
            None => (Verdict::Accepted, String::new()),
            Some(m) if m.contains("Forbidden: too complex, exceeds cost limit") => {
                (Verdict::TooComplex, m)
            }
            Some(m) => (Verdict::Invalid, m),
        })
        .collect())
}

fn short(s: &str) -> String {
    if s.chars().count() > 240 {
        format!(
            "{}… ({} bytes)",
            s.chars().take(240).collect::<String>(),
            s.len()
        )
    } else {
        s.to_string()
    }
}

/// Compares our verdict on each case with `theirs`; the lines of every mismatch.
fn compare(
    what: &str,
    cases: &[&Case],
    theirs: &[(Verdict, String)],
    version: KubernetesVersion,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (c, (t, tm)) in cases.iter().zip(theirs) {
        let (o, om) = ours(&c.selector, version);
        if o != *t {
            failures.push(format!(
                "[{} n={}{}] {}\n    {what} {version}: {}{}\n    ours: {} ({om})",
                c.family,
                c.n,
                c.pad.map(|p| format!(" pad={p}")).unwrap_or_default(),
                short(&c.selector),
                t.name(),
                if tm.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", short(tm))
                },
                o.name(),
            ));
        }
    }
    failures
}

#[test]
fn cost_corpus_agrees_with_the_api_server() {
    let kit = fixtures::kit_script().filter(|k| fixtures::kit_running(k));
    // The record is the 1.34.9 API server's.
    if let Some(kit) = kit
        .as_deref()
        .filter(|_| std::env::var("DRANET_CEL_COST_REGEN").is_ok())
        && fixtures::kit_version(kit) != KubernetesVersion::V1_34
    {
        panic!(
            "DRANET_CEL_COST_REGEN=1 records the 1.34 API server's verdicts: run the kit on 1.34"
        );
    }
    if std::env::var("DRANET_CEL_COST_REGEN").is_ok_and(|v| v == "1") {
        let Some(kit) = &kit else {
            panic!("DRANET_CEL_COST_REGEN=1 needs the kit running (kit.sh up, DRANET_K8S_KIT)");
        };
        let cases = families::generate(&estimate).unwrap_or_else(|e| panic!("{e}"));
        let selectors: Vec<&str> = cases.iter().map(|c| c.selector.as_str()).collect();
        let verdicts = api_server(kit, &selectors).unwrap_or_else(|e| panic!("{e}"));
        write_recorded(&cases, &verdicts);
        eprintln!(
            "rewrote {} with {} selectors",
            recorded_path().display(),
            cases.len()
        );
    }

    let recorded = load_recorded();
    assert!(
        recorded.len() >= 300,
        "the cost corpus has only {} selectors",
        recorded.len()
    );
    let cases: Vec<&Case> = recorded.iter().map(|r| &r.case).collect();
    let theirs: Vec<(Verdict, String)> = recorded
        .iter()
        .map(|r| (r.verdict, r.message.clone()))
        .collect();
    let too_complex = theirs
        .iter()
        .filter(|(v, _)| *v == Verdict::TooComplex)
        .count();
    assert!(
        too_complex > 0 && too_complex < recorded.len(),
        "the corpus must hold both sides of the limit ({too_complex} of {} refused)",
        recorded.len()
    );
    let mut failures = Vec::new();
    for version in KubernetesVersion::ALL {
        failures.extend(compare("recorded API server", &cases, &theirs, version));
        // The scheduler compiles whatever the API server admitted, and never estimates cost.
        for r in &recorded {
            if r.verdict != Verdict::Invalid
                && let Err(e) = Program::compile_for_scheduler_at(&r.case.selector, version)
            {
                failures.push(format!(
                    "[{}] {}\n    compile_for_scheduler_at({version}) refused it: {e}",
                    r.case.family,
                    short(&r.case.selector)
                ));
            }
        }
    }

    match &kit {
        Some(kit) => {
            let selectors: Vec<&str> = cases.iter().map(|c| c.selector.as_str()).collect();
            let version = fixtures::kit_version(kit);
            match api_server(kit, &selectors) {
                Ok(live) => {
                    eprintln!(
                        "cel_cost: {} selectors checked against the live {version} API server",
                        live.len()
                    );
                    failures.extend(compare("live API server", &cases, &live, version));
                    // The record must hold for this version too.
                    for ((c, (t, _)), (l, lm)) in cases.iter().zip(&theirs).zip(&live) {
                        if t != l {
                            failures.push(format!(
                                "[{}] {}\n    recorded {}, the live {version} API server {} ({})",
                                c.family,
                                short(&c.selector),
                                t.name(),
                                l.name(),
                                short(lm)
                            ));
                        }
                    }
                }
                Err(e) => failures.push(format!("live API server: {e}")),
            }
        }
        None => eprintln!(
            "SKIP cel_cost live check: the k8s kit is not running (kit.sh up; DRANET_K8S_KIT \
             names kit.sh when it is not at ../shared/k8s); checked {} recorded verdicts only",
            recorded.len()
        ),
    }
    eprintln!(
        "cel_cost: {} selectors, {} refused for cost (limit {MAX_SELECTOR_COST}), {} mismatches",
        recorded.len(),
        too_complex,
        failures.len()
    );
    fixtures::assert_no_mismatches(&failures);
}
