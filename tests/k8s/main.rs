//! Every real-cluster scenario in one binary with its own harness (`harness = false`): each
//! Kubernetes version's cluster ([`VERSIONS`]: v1.34.9 and v1.36.3) comes up **once**, every
//! scenario runs in it in turn, each with its own daemon, and the cluster goes down at the end.
//! Between two scenarios the harness checks that the one before left the cluster and the host as
//! it found them (pods, claims, slices, classes, namespaces, DaemonSets, admission objects, RBAC,
//! the node's labels and taints, host links); what is left is named, fails that scenario, and is
//! removed so the next one starts clean.
//!
//! Each scenario keeps the name it had as a test (`MODULE::FUNCTION::kubernetes_1_36`), its lines
//! start with the version (`[Kubernetes v1.36.3] ...`), and the run ends with `test result: ok. N
//! passed; N failed` (exit 101 on a failure). Arguments are libtest's: name filters (a substring
//! of the name; `--exact` for the whole name), `--skip`, `--list`. Without root or the kit each
//! version prints a `SKIP` line; the scenarios that need no cluster still run.
//!
//! One scenario needs a cluster of its own: `check::list_attributes` runs on 1.36 with the alpha
//! gate `DRAListTypeAttributes`, a third cluster brought up after the two.

#[path = "../support/mod.rs"]
mod support;

mod attach_bench;
mod big_node;
mod check;
mod check_scale;
mod daemon;
mod health;
mod install;
mod links;
mod manifests;
mod metadata;
mod minimal_driver;
mod nri_timeout;
mod share;
mod slaac;
mod upstream;
mod webhook;
mod whereabouts;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dranet_testkit::kit::{Kit, V1_36, VERSIONS, Version};

/// One scenario on a running cluster.
struct Scenario {
    /// `MODULE::FUNCTION`, the name it had as a test.
    name: &'static str,
    /// What it is, for the log.
    what: &'static str,
    run: fn(&Kit),
}

/// The scenarios each version's cluster runs, in this order (upstream's run last: they share one
/// daemon of their own, see [`upstream`]).
const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "check::check_reads_slices_and_classes_from_a_real_cluster",
        what: "dranet check --kubeconfig",
        run: check::check_reads_slices_and_classes_from_a_real_cluster,
    },
    Scenario {
        name: "check_scale::check_answers_a_thousand_nodes_from_the_api_server",
        what: "dranet check over 1,000 nodes",
        run: check_scale::check_answers_a_thousand_nodes_from_the_api_server,
    },
    Scenario {
        name: "daemon::dranet_run_on_a_real_node",
        what: "dranet run on a real node",
        run: daemon::dranet_run_on_a_real_node,
    },
    Scenario {
        name: "health::device_health_on_a_real_node",
        what: "device health on a real node",
        run: health::device_health_on_a_real_node,
    },
    Scenario {
        name: "share::pods_share_one_nic",
        what: "pods sharing one NIC",
        run: share::pods_share_one_nic,
    },
    Scenario {
        name: "webhook::upstreams_python_webhook_scenario",
        what: "upstream's python webhook scenario",
        run: webhook::upstreams_python_webhook_scenario,
    },
    Scenario {
        name: "whereabouts::validate_whereabouts_cni_integration",
        what: "upstream's \"validate whereabouts cni integration\" (host-local IPAM)",
        run: whereabouts::validate_whereabouts_cni_integration,
    },
    Scenario {
        name: "minimal_driver::the_stock_kubelet_registers_prepares_and_unprepares_through_the_example_driver",
        what: "the example minimal driver",
        run: minimal_driver::the_stock_kubelet_registers_prepares_and_unprepares_through_the_example_driver,
    },
    Scenario {
        name: "nri_timeout::a_larger_containerd_timeout_attaches_at_sandbox_creation",
        what: "eight NICs within containerd's 2 s",
        run: nri_timeout::a_larger_containerd_timeout_attaches_at_sandbox_creation,
    },
    Scenario {
        name: "big_node::sixty_five_nics_with_one_link_down_stay_allocatable",
        what: "a node of 65 NICs, one without carrier",
        run: big_node::sixty_five_nics_with_one_link_down_stay_allocatable,
    },
    Scenario {
        name: "metadata::a_pod_reads_its_devices_metadata",
        what: "device metadata in the container (KEP-5304)",
        run: metadata::a_pod_reads_its_devices_metadata,
    },
    Scenario {
        name: "slaac::a_pod_gets_its_address_from_router_advertisements",
        what: "SLAAC from a real router's advertisements, and without them",
        run: slaac::a_pod_gets_its_address_from_router_advertisements,
    },
    Scenario {
        name: "install::installs_with_kubectl_then_helm",
        what: "install on a real node",
        run: install::installs_with_kubectl_then_helm,
    },
];

/// Measurements, run only when named with `--ignored`, on both clusters of a version (libtest's
/// ignored tests: with `--ignored` nothing else runs).
const MEASUREMENTS: &[Scenario] = &[Scenario {
    name: "attach_bench::pod_start_with_and_without_the_barrier",
    what: "pod start of 1/4/8/16 NICs, with and without the barrier (a measurement)",
    run: attach_bench::pod_start_with_and_without_the_barrier,
}];

/// The scenarios of each version's second cluster, whose containerd gives NRI plugins
/// [`nri_timeout::NRI_TIMEOUT`].
const NRI_100MS: &[Scenario] = &[
    Scenario {
        name: "nri_timeout::hook_installed_eight_nics_at_container_start",
        what: "eight NICs at the container's start: hook, stalled, restarted, killed daemon",
        run: nri_timeout::hook_installed_eight_nics_at_container_start,
    },
    Scenario {
        name: "nri_timeout::without_the_hook_creation_fails_until_attached",
        what: "eight NICs at the container's start without the hook",
        run: nri_timeout::without_the_hook_creation_fails_until_attached,
    },
    Scenario {
        name: "nri_timeout::device_attach_timeout_0_fails_the_sandbox",
        what: "--device-attach-timeout=0",
        run: nri_timeout::device_attach_timeout_0_fails_the_sandbox,
    },
];

/// The scenario of the third cluster: 1.36 with [`check::LIST_GATES`].
const GATED: Scenario = Scenario {
    name: "check::check_reads_list_attributes_of_a_1_36_cluster_with_the_gate",
    what: "dranet check --kubeconfig, list attributes",
    run: check::check_reads_list_attributes_of_a_1_36_cluster_with_the_gate,
};

/// Checks that need no cluster (they ran as plain tests beside the scenarios).
const NO_CLUSTER: &[(&str, fn())] = &[
    (
        "check::cluster_flags_name_what_is_wrong_without_a_cluster",
        check::cluster_flags_name_what_is_wrong_without_a_cluster,
    ),
    (
        "share::the_docs_show_the_manifests_the_test_applies",
        share::the_docs_show_the_manifests_the_test_applies,
    ),
];

/// libtest's command line, the parts this harness honours.
#[derive(Default)]
pub(crate) struct Args {
    filters: Vec<String>,
    skip: Vec<String>,
    exact: bool,
    list: bool,
    /// Only the measurements ([`MEASUREMENTS`]).
    ignored: bool,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--exact" => a.exact = true,
                "--list" => a.list = true,
                "--ignored" => a.ignored = true,
                "--skip" => a.skip.extend(it.next()),
                // libtest flags with a value this harness has no use for.
                "--test-threads" | "--format" | "--color" | "-Z" | "--logfile" => {
                    it.next();
                }
                s if s.starts_with('-') => {}
                s => a.filters.push(s.to_string()),
            }
        }
        a
    }

    /// Whether the test `name` is chosen.
    pub(crate) fn selects(&self, name: &str) -> bool {
        let hit = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(hit))
            && !self.skip.iter().any(|s| name.contains(s.as_str()))
    }
}

/// A scenario's test name on `version`: `NAME::kubernetes_1_36`.
pub(crate) fn test_name(name: &str, version: Version) -> String {
    format!("{name}::kubernetes_{}", version.kit.replace('.', "_"))
}

/// The outcomes so far.
#[derive(Default)]
pub(crate) struct Report {
    passed: usize,
    failed: Vec<String>,
}

impl Report {
    /// Records `name`'s outcome and prints its line.
    pub(crate) fn record(
        &mut self,
        version: Option<Version>,
        name: &str,
        ok: bool,
        took: Duration,
    ) {
        let prefix = version.map(|v| format!("[{v}] ")).unwrap_or_default();
        let verdict = if ok { "ok" } else { "FAILED" };
        println!(
            "{prefix}test {name} ... {verdict} ({:.1} s)",
            took.as_secs_f64()
        );
        if ok {
            self.passed += 1;
        } else {
            self.failed.push(name.to_string());
        }
    }
}

/// Runs `f`, catching its panic: whether it passed.
pub(crate) fn passes(f: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok()
}

fn main() {
    let args = Args::parse();
    let mut report = Report::default();
    let started = Instant::now();

    for (name, f) in NO_CLUSTER {
        if args.ignored || !args.selects(name) {
            continue;
        }
        if args.list {
            println!("{name}: test");
            continue;
        }
        let t = Instant::now();
        report.record(None, name, passes(f), t.elapsed());
    }

    let mut gated_chosen = false;
    for version in VERSIONS {
        let pick = |list: &'static [Scenario]| -> Vec<&Scenario> {
            let list = if args.ignored { MEASUREMENTS } else { list };
            list.iter()
                .filter(|s| args.selects(&test_name(s.name, version)))
                .collect()
        };
        let chosen = pick(SCENARIOS);
        let upstream = if args.ignored {
            Vec::new()
        } else {
            upstream::chosen(&args, version)
        };
        let short = pick(NRI_100MS);
        let gated = !args.ignored && version == V1_36 && args.selects(GATED.name);
        gated_chosen |= gated;
        if args.list {
            for s in &chosen {
                println!("{}: test", test_name(s.name, version));
            }
            for n in &upstream {
                println!("{n}: test");
            }
            for s in &short {
                println!("{}: test", test_name(s.name, version));
            }
            if gated {
                // Named without a version, as it was: it runs on one.
                println!("{}: test", GATED.name);
            }
            continue;
        }
        if !(chosen.is_empty() && upstream.is_empty()) {
            run_cluster(version, &args, &chosen, upstream, &mut report);
        }
        if !short.is_empty()
            && let Some(kit) = Kit::start_with(
                "the scenarios of a 100 ms NRI timeout",
                version,
                "",
                nri_timeout::NRI_TIMEOUT,
            )
        {
            let baseline = Baseline::take(&kit);
            for s in short {
                run_scenario(&kit, &baseline, s, &test_name(s.name, version), &mut report);
            }
        }
    }

    if gated_chosen && !args.list {
        let version = V1_36;
        if let Some(kit) = Kit::start_with_gates(GATED.what, version, check::LIST_GATES) {
            let baseline = Baseline::take(&kit);
            run_scenario(&kit, &baseline, &GATED, GATED.name, &mut report);
        }
    }
    finish(&args, &report, started);
}

/// Runs `chosen` and upstream's scenarios on one cluster of `version`.
fn run_cluster(
    version: Version,
    args: &Args,
    chosen: &[&Scenario],
    upstream: Vec<String>,
    report: &mut Report,
) {
    {
        let Some(kit) = Kit::start("the real-cluster scenarios", version) else {
            return;
        };
        let t = Instant::now();
        let baseline = Baseline::take(&kit);
        for s in chosen {
            run_scenario(&kit, &baseline, s, &test_name(s.name, version), report);
        }
        if !upstream.is_empty() {
            let t = Instant::now();
            let ok = upstream::run(&kit, args, report);
            let clean = left_behind(&kit, &baseline, "upstream::*");
            if !ok || !clean {
                kit.say(format_args!(
                    "upstream's scenarios: {} after {:.1} s",
                    if clean { "failed" } else { "left state behind" },
                    t.elapsed().as_secs_f64()
                ));
            }
            if !clean {
                report
                    .failed
                    .push(test_name("upstream::(clean-up)", version));
            }
        }
        kit.say(format_args!(
            "every scenario on one cluster in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
    }
}

/// Prints the result line; exits 101 on a failure.
fn finish(args: &Args, report: &Report, started: Instant) {
    if args.list {
        return;
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.1} s",
        if report.failed.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
        report.passed,
        report.failed.len(),
        started.elapsed().as_secs_f64()
    );
    if !report.failed.is_empty() {
        for f in &report.failed {
            println!("    {f}");
        }
        std::process::exit(101);
    }
}

/// Runs `s` on `kit`, then checks and restores what it left.
fn run_scenario(kit: &Kit, baseline: &Baseline, s: &Scenario, name: &str, report: &mut Report) {
    let t = Instant::now();
    kit.say(format_args!("{name}: {}", s.what));
    let ok = passes(|| (s.run)(kit));
    if !ok {
        // A failure on a node the kubelet tainted (disk or memory pressure) reads as a pod that
        // never started; the node's own account goes with it.
        kit.say(format_args!(
            "{name} failed; the node then:\n{}",
            kit.node_report()
        ));
    }
    let clean = left_behind(kit, baseline, name);
    report.record(Some(kit.version), name, ok && clean, t.elapsed());
}

/// The kinds of object a scenario may create, which must be gone after it.
const KINDS: &str = "pods,resourceclaims,resourceclaimtemplates,resourceslices,deviceclasses,\
    namespaces,daemonsets,serviceaccounts,validatingadmissionpolicies,\
    validatingadmissionpolicybindings,validatingwebhookconfigurations,\
    mutatingwebhookconfigurations,clusterroles,clusterrolebindings,roles,rolebindings";

/// What the cluster and the host hold before any scenario.
struct Baseline {
    objects: BTreeSet<String>,
    node: (serde_json::Value, serde_json::Value),
    links: BTreeSet<String>,
}

impl Baseline {
    fn take(kit: &Kit) -> Baseline {
        Baseline {
            objects: objects(kit),
            node: node_marks(kit),
            links: host_links(),
        }
    }
}

/// Every object of [`KINDS`], as `kind/namespace/name`.
fn objects(kit: &Kit) -> BTreeSet<String> {
    let list = kit.get_json(&[KINDS, "--all-namespaces"]);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// The node's labels and taints.
fn node_marks(kit: &Kit) -> (serde_json::Value, serde_json::Value) {
    let node = kit.get_json(&["node", kit.node()]);
    (
        node["metadata"]["labels"].clone(),
        node["spec"]["taints"].clone(),
    )
}

/// The prefixes of the host links scenarios make (their veths and peers, upstream's names);
/// links of other tests running on the machine, the kit's bridges and the CNI's pod veths are
/// not a scenario's to keep.
const LINK_PREFIXES: &[&str] = &["drt", "drh", "dummy", "upk", "mlx5_", "pbr-"];

/// The host's links a scenario may have made.
fn host_links() -> BTreeSet<String> {
    let out = std::process::Command::new("ip")
        .args(["-j", "link", "show"])
        .output()
        .expect("run ip link");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .filter(|n| LINK_PREFIXES.iter().any(|p| n.starts_with(p)))
        .collect()
}

/// How long the leftovers of a scenario may take to go (a namespace's deletion, a pod's
/// unprepare) before they count as left behind, and how long the harness waits for its own
/// clean-up.
const SETTLE: Duration = Duration::from_secs(10);
const RESTORE: Duration = Duration::from_secs(60);

/// The objects of [`KINDS`] not in `baseline`, but the node's ResourceSlices: a driver keeps its
/// slices when it stops (the kubelet deletes them about 30 s after it goes, or keeps them for
/// its restart), so a scenario's stopped daemon leaves them by design, and the harness deletes
/// them.
fn new_objects(kit: &Kit, baseline: &Baseline) -> (Vec<String>, Vec<String>) {
    let node_slices = format!("ResourceSlice//{}-", kit.node());
    objects(kit)
        .difference(&baseline.objects)
        // A namespace's own service account goes with the namespace.
        .filter(|o| !o.starts_with("ServiceAccount/") || !o.ends_with("/default"))
        .cloned()
        .partition(|o| !o.starts_with(&node_slices))
}

/// Polls `f` every 200 ms until it holds or `limit` passes; whether it held.
fn settles(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether `name` left the cluster and host as [`Baseline`] found them (`true`); otherwise names
/// what it left, removes it, and returns `false`.
fn left_behind(kit: &Kit, baseline: &Baseline, name: &str) -> bool {
    // What is being deleted (a pod terminating, a namespace finalising) gets a moment.
    settles(SETTLE, || new_objects(kit, baseline).0.is_empty());
    let (objects, slices) = new_objects(kit, baseline);
    let node = node_marks(kit);
    let links: Vec<String> = host_links().difference(&baseline.links).cloned().collect();
    let clean = objects.is_empty() && node == baseline.node && links.is_empty();
    if !clean {
        kit.say(format_args!(
            "{name} left behind: objects {objects:?}, links {links:?}{}",
            if node == baseline.node {
                String::new()
            } else {
                format!(
                    ", the node's labels/taints {} / {} (were {} / {})",
                    node.0, node.1, baseline.node.0, baseline.node.1
                )
            }
        ));
    }
    restore(kit, baseline, &[objects, slices].concat());
    clean
}

/// Deletes `objects` (pods first, forced: their driver may be gone), puts the node's taints back
/// and deletes the scenario links not in `baseline`.
fn restore(kit: &Kit, baseline: &Baseline, objects: &[String]) {
    if objects.is_empty() && host_links() == baseline.links && node_marks(kit) == baseline.node {
        return;
    }
    let mut ordered: Vec<&String> = objects.iter().collect();
    ordered.sort_by_key(|o| !o.starts_with("Pod/"));
    for o in ordered {
        let mut parts = o.splitn(3, '/');
        let (Some(kind), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let mut a = vec!["delete", kind, name, "--ignore-not-found", "--wait=false"];
        if !ns.is_empty() {
            a.extend(["-n", ns]);
        }
        if kind == "Pod" {
            a.extend(["--grace-period=0", "--force"]);
        }
        let _ = kit.kubectl(&a);
    }
    if node_marks(kit).1 != baseline.node.1 {
        let taints = serde_json::json!({"spec": {"taints": baseline.node.1}});
        let _ = kit.kubectl(&["patch", "node", kit.node(), "-p", &taints.to_string()]);
    }
    for link in host_links().difference(&baseline.links) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", link])
            .status();
    }
    let back = settles(RESTORE, || {
        let (o, s) = new_objects(kit, baseline);
        o.is_empty() && s.is_empty()
    });
    if !back {
        kit.say(format_args!(
            "the harness could not restore the cluster: {:?}",
            new_objects(kit, baseline)
        ));
    }
}
