//! Differential test: `dranet_alloc` against the scheduler's own allocator of Kubernetes 1.34.9
//! and of 1.36.3 (`allocbench` from the shared k8s kit) on random but valid inputs, each with
//! its version's default feature gates on our side too. No 1.37 scheduler runs here: our 1.37
//! model must give 1.36.3's answers on each 1.36 case as well.
//!
//! Each case is a node generated from a seed (see `oracle/generate.rs`) with many claim
//! templates; allocbench allocates each template alone, and so do we; for 1.36, a few groups of
//! templates are also allocated together as one pod's. They must agree on every claim: the
//! same devices for the same requests (with the same config and node selector, shares and the
//! capacity they consume, binding conditions), or both "cannot allocate", or both an error of
//! the same class. The 1.34 scheduler visits pools in random order (Go map iteration), so when
//! its answer differs from ours with our default pool order, ours must be one it gives under
//! some order: every order is tried. 1.36 sorts its pools: ours must be its answer as is.
//!
//! Our allocator reproduces each scheduler's bugs for this ([`SchedulerBugs::of`]); their
//! fixed behaviour is covered by `alloc_semantics.rs`.
//!
//! Counted, not failures: claims the scheduler searches for longer than the per-claim limit
//! (its search is exponential where ours is not), a speed finding printed with our time.
//!
//! [`SchedulerBugs::of`]: dranet_alloc::SchedulerBugs::of
//!
//! On a disagreement the case is written to a file, the seed printed, and the test fails.
//! Knobs: `DRANET_ORACLE_CASES` (default 160 per version), `DRANET_ORACLE_CLAIMS` (claims per
//! case, 20),
//! `DRANET_ORACLE_SEED` (first seed), `DRANET_ORACLE_GO_TIMEOUT_MS` (per claim, 2000),
//! `DRANET_ORACLE_REPLAY=<case file>` (run one saved case), `DRANET_ORACLE_KEEP=1` (keep the
//! case files of agreeing cases too), `DRANET_ORACLE_SAVE=<dir>` (write, with the scheduler's
//! answers, the cases where reproducing its bugs or its pool order changed our answer: the
//! candidates for `testdata/alloc-oracle/`).
//!
//! The kept cases in `testdata/alloc-oracle/` replay without the kit: each holds the
//! scheduler's answers, and ours must be among them.

#[path = "oracle/mod.rs"]
mod oracle;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dranet_alloc::KubernetesVersion;
use oracle::{Case, GoResult, Ours, Outcome, generate, run_allocbench, run_allocbench_pod};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Stats {
    cases: usize,
    claims: usize,
    agreed: usize,
    /// Agreed only under a pool order other than ours.
    other_order: usize,
    /// By the scheduler's outcome: allocated / unsatisfiable / error class.
    by_kind: BTreeMap<String, usize>,
    go_timeouts: Vec<(u64, String, Duration, String)>,
    mismatches: Vec<String>,
    /// Pods allocated, and those whose every claim agreed.
    pods: usize,
    pods_agreed: usize,
}

fn kind(o: &Outcome) -> String {
    match o {
        Outcome::Allocated(_) => "allocated".into(),
        Outcome::Unsatisfiable => "unsatisfiable".into(),
        Outcome::Error(c) => format!("error: {}", c.split(" #").next().unwrap_or(c)),
    }
}

fn check_case(
    bin: &std::path::Path,
    case: &Case,
    file: &std::path::Path,
    seed: u64,
    limit: Duration,
    stats: &Mutex<Stats>,
) -> bool {
    case.save(file);
    let names = case.claim_names();
    let go = match run_allocbench(bin, file, &case.header, &names, limit) {
        Ok(go) => go,
        Err(e) => {
            stats
                .lock()
                .unwrap()
                .mismatches
                .push(format!("seed {seed}: allocbench failed: {e}"));
            return false;
        }
    };
    let mut ours = match Ours::new(case) {
        Ok(o) => o,
        Err(e) => {
            stats
                .lock()
                .unwrap()
                .mismatches
                .push(format!("seed {seed}: our allocator refused the node: {e}"));
            return false;
        }
    };
    // 1.37 runs nowhere here: 1.36.3's answers are its oracle too (docs/alloc.md), so our
    // 1.37 model answers each 1.36 case as well and must give the scheduler's answers.
    let next = if case.header.version == KubernetesVersion::V1_36 {
        let mut c = case.clone();
        c.header.version = KubernetesVersion::V1_37;
        match Ours::new(&c) {
            Ok(o) => Some(o),
            Err(e) => {
                stats.lock().unwrap().mismatches.push(format!(
                    "seed {seed}: our 1.37 allocator refused the node: {e}"
                ));
                return false;
            }
        }
    } else {
        None
    };
    // Our allocator without the scheduler's bugs, to find the cases that need them.
    let fixed = std::env::var_os("DRANET_ORACLE_SAVE")
        .and_then(|_| Ours::with_bugs(case, dranet_alloc::SchedulerBugs::default()).ok());
    let mut ok = true;
    let mut local = Stats::default();
    // 1.36 visits pools in a fixed order: only our answer in it counts.
    let any_order = case.header.version < KubernetesVersion::V1_36;
    for name in &names {
        local.claims += 1;
        let (g, msg) = match &go[name] {
            GoResult::Timeout => {
                let t = Instant::now();
                let o = ours.outcome(name);
                local
                    .go_timeouts
                    .push((seed, name.clone(), t.elapsed(), o.short()));
                continue;
            }
            GoResult::Done(g, msg) => (g.clone(), msg.clone()),
        };
        *local.by_kind.entry(kind(&g)).or_default() += 1;
        if let Some(next) = &next {
            let o = next.outcome(name);
            if o != g {
                ok = false;
                local.mismatches.push(format!(
                    "seed {seed} claim {name}: 1.36.3 scheduler: {}\n    our 1.37: {}",
                    g.short(),
                    o.short()
                ));
            }
        }
        if ours.outcome(name) == g {
            local.agreed += 1;
            if let Some(fixed) = &fixed
                && fixed.outcome(name) != g
            {
                save_as_regression(
                    case,
                    seed,
                    name,
                    &g,
                    "only with the scheduler's bugs reproduced",
                );
            }
            continue;
        }
        let all = if any_order {
            ours.outcomes(name, 120)
        } else {
            vec![ours.outcome(name)]
        };
        if any_order && all.contains(&g) {
            save_as_regression(case, seed, name, &g, "only under another pool order");
            local.agreed += 1;
            local.other_order += 1;
            continue;
        }
        ok = false;
        local.mismatches.push(format!(
            "seed {seed} claim {name}: scheduler: {}{}\n    ours (any pool order): {}",
            g.short(),
            if msg.is_empty() {
                String::new()
            } else {
                format!(" ({msg})")
            },
            all.iter()
                .map(Outcome::short)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    // The pods: their claims allocated together.
    for pod in &case.header.pods {
        // allocbench allocates a pod's claims in the order of the file, not of `-name`.
        let pod: Vec<String> = names.iter().filter(|n| pod.contains(n)).cloned().collect();
        let pod = &pod;
        let label = pod.join("+");
        let go = match run_allocbench_pod(bin, file, &case.header, pod, limit) {
            Ok(go) => go,
            Err(e) => {
                ok = false;
                local
                    .mismatches
                    .push(format!("seed {seed} pod {label}: allocbench failed: {e}"));
                continue;
            }
        };
        local.pods += 1;
        if go.values().any(|g| *g == GoResult::Timeout) {
            let t = Instant::now();
            let o = ours.pod_outcomes(pod);
            local.go_timeouts.push((
                seed,
                label,
                t.elapsed(),
                o.iter().map(Outcome::short).collect::<Vec<_>>().join(" | "),
            ));
            continue;
        }
        let theirs: Vec<Outcome> = pod
            .iter()
            .map(|c| match &go[c] {
                GoResult::Done(g, _) => g.clone(),
                GoResult::Timeout => Outcome::Unsatisfiable,
            })
            .collect();
        if let Some(next) = &next
            && next.pod_outcomes(pod) != theirs
        {
            ok = false;
            local.mismatches.push(format!(
                "seed {seed} pod {label}: our 1.37 answers otherwise than the 1.36.3 scheduler"
            ));
        }
        let mine = ours.pod_outcomes(pod);
        if mine == theirs {
            local.pods_agreed += 1;
            continue;
        }
        ok = false;
        local.mismatches.push(format!(
            "seed {seed} pod {label}: scheduler: {}\n    ours: {}",
            theirs
                .iter()
                .map(Outcome::short)
                .collect::<Vec<_>>()
                .join(" | "),
            mine.iter()
                .map(Outcome::short)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    let mut s = stats.lock().unwrap();
    s.cases += 1;
    s.pods += local.pods;
    s.pods_agreed += local.pods_agreed;
    s.claims += local.claims;
    s.agreed += local.agreed;
    s.other_order += local.other_order;
    for (k, v) in local.by_kind {
        *s.by_kind.entry(k).or_default() += v;
    }
    s.go_timeouts.extend(local.go_timeouts);
    s.mismatches.extend(local.mismatches);
    ok
}

/// With `DRANET_ORACLE_SAVE=<dir>`: writes `case` reduced to `claim`, with the scheduler's
/// answer, as a candidate regression case (small cases only, so they can be kept).
fn save_as_regression(case: &Case, seed: u64, claim: &str, go: &Outcome, why: &str) {
    let Some(dir) = std::env::var_os("DRANET_ORACLE_SAVE") else {
        return;
    };
    let mut kept = case.clone();
    kept.docs.retain(|d| {
        d["kind"] != "ResourceClaimTemplate" || d["metadata"]["name"].as_str() == Some(claim)
    });
    kept.header.expect = BTreeMap::from([(claim.to_string(), vec![go.clone()])]);
    kept.header.note = format!("seed {seed} claim {claim}: ours agrees with the scheduler {why}");
    if kept.yaml().len() <= 24 * 1024 {
        kept.save(&PathBuf::from(dir).join(format!("seed-{seed}-{claim}.yaml")));
    }
}

/// The kept cases: the scheduler's answers recorded by allocbench, replayed without the kit.
#[test]
fn kept_cases_get_the_schedulers_answers() {
    let dir = oracle::root().join("testdata/alloc-oracle");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no kept cases in {}", dir.display());
    let mut claims = 0;
    for f in &files {
        let case = Case::load(f);
        let mut ours = Ours::new(&case).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (claim, expect) in &case.header.expect {
            claims += 1;
            let all = ours.outcomes(claim, 120);
            assert!(
                all.iter().any(|o| expect.contains(o)),
                "{} claim {claim} ({}): scheduler: {}\n  ours (any pool order): {}",
                f.display(),
                case.header.note,
                expect
                    .iter()
                    .map(Outcome::short)
                    .collect::<Vec<_>>()
                    .join(" | "),
                all.iter()
                    .map(Outcome::short)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
    }
    println!(
        "alloc oracle: {} kept cases, {claims} claims replayed",
        files.len()
    );
}

#[test]
fn the_allocator_agrees_with_the_1_34_scheduler_on_random_inputs() {
    agrees_on_random_inputs(KubernetesVersion::V1_34);
}

#[test]
fn the_allocator_agrees_with_the_1_36_scheduler_on_random_inputs() {
    agrees_on_random_inputs(KubernetesVersion::V1_36);
}

fn agrees_on_random_inputs(version: KubernetesVersion) {
    let Some(bin) = oracle::allocbench(version) else {
        return;
    };
    let start = Instant::now();
    let limit = Duration::from_millis(env_or("DRANET_ORACLE_GO_TIMEOUT_MS", 2000));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("alloc-oracle-{version}"));
    let stats = Mutex::new(Stats::default());
    let mut failed_files = Vec::new();
    if let Ok(replay) = std::env::var("DRANET_ORACLE_REPLAY") {
        let case = Case::load(std::path::Path::new(&replay));
        if case.header.version != version {
            return;
        }
        let file = dir.join("replay.yaml");
        if !check_case(&bin, &case, &file, 0, limit, &stats) {
            failed_files.push(file);
        }
    } else {
        let cases: usize = env_or("DRANET_ORACLE_CASES", 160);
        let per_case: usize = env_or("DRANET_ORACLE_CLAIMS", 20);
        let first: u64 = env_or("DRANET_ORACLE_SEED", 1);
        let keep = std::env::var_os("DRANET_ORACLE_KEEP").is_some();
        let next = AtomicUsize::new(0);
        let failed = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= cases {
                            break;
                        }
                        let seed = first + i as u64;
                        let case = generate::case(seed, per_case, version);
                        let file = dir.join(format!("case-{seed}.yaml"));
                        if check_case(&bin, &case, &file, seed, limit, &stats) {
                            if !keep {
                                let _ = std::fs::remove_file(&file);
                            }
                        } else {
                            failed.lock().unwrap().push(file);
                        }
                    }
                });
            }
        });
        failed_files = failed.into_inner().unwrap();
    }
    let s = stats.into_inner().unwrap();
    let wall = start.elapsed();
    println!(
        "alloc oracle {version}: {} cases, {} claims: {} agreed with the scheduler ({} only under another pool order), {} pods: {} agreed, {} mismatches, {} scheduler timeouts (> {:?}); {:.1} s",
        s.cases,
        s.claims,
        s.agreed,
        s.other_order,
        s.pods,
        s.pods_agreed,
        s.mismatches.len(),
        s.go_timeouts.len(),
        limit,
        wall.as_secs_f64()
    );
    println!("  scheduler outcomes: {:?}", s.by_kind);
    for (seed, claim, ours, what) in &s.go_timeouts {
        println!(
            "  scheduler timeout: seed {seed} claim {claim}: ours answered in {ours:?}: {what}"
        );
    }
    for m in &s.mismatches {
        println!("  MISMATCH {m}");
    }
    for f in &failed_files {
        println!(
            "  case written to {} (rerun: DRANET_ORACLE_REPLAY={} cargo test -p dranet-alloc --test alloc_oracle -- --nocapture)",
            f.display(),
            f.display()
        );
    }
    assert!(
        s.mismatches.is_empty(),
        "{} claims disagree with the {version} scheduler (see above)",
        s.mismatches.len()
    );
}
