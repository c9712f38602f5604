//! Pods sharing one NIC on a real Kubernetes node (v1.34.9 and v1.36.3, one test each; the kit
//! in `../shared/k8s/`, `DRANET_K8S_KIT` names another `kit.sh`).
//!
//! `dranet run` publishes a host veth, `drtshare0`, for sharing (`--share-filter` naming it,
//! `--share-children 3`); the test applies `examples/sharing/nic-share.yaml` as it is (the
//! DeviceClass of shared NICs, and one ResourceClaimTemplate per pod asking for one child with
//! its own address, `interface.type: Macvlan`: this kernel has no ipvlan).
//!
//! On 1.36 (`DRAConsumableCapacity` on by default):
//! - the slice as the API server stores it keeps `allowMultipleAllocations` and the `children`
//!   capacity with its `requestPolicy`;
//! - three pods each get a share (`shareID`, one child consumed) and their child in their own
//!   namespace: a bridge-mode macvlan of the veth, named, addressed and sized as its claim says;
//! - a fourth stays Pending, with the scheduler's reason in its event;
//! - deleting one pod removes its child only: the other two children (index, MAC, addresses,
//!   rules, routes) and the veth on the host are as they were, and the waiting pod then gets the
//!   freed share;
//! - with every pod gone, the host's veth is as it was before the first.
//!
//! On 1.34 (gate off) the server drops the sharing fields: the daemon warns once per field, the
//! device stays exclusive (the first pod gets it, with its macvlan child; the second waits).
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::links::{VETH_FILTER, Veths, host_link, nic_pod};
use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, wait_for};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);
/// The shared NIC: a veth the test makes (its name passes `VETH_FILTER`).
const PARENT: &str = "drtshare0";
/// The manifests of docs/claims.md, applied as they are.
const MANIFESTS: &str = "examples/sharing/nic-share.yaml";
/// What the operator passes: the NIC to share and how many children it carries.
const SHARE_FILTER: &str = r#"device.attributes["dra.net"].ifName == "drtshare0""#;
const SHARE_CHILDREN: &str = "3";
/// The scheduler's reason for a pod whose claim finds no device (both versions).
const NO_DEVICE: &str = "cannot allocate all claims";

/// Pod `share-x` claims from template `nic-share-x` the address `10.78.0.1n/24`.
const PODS: [(&str, &str, &str); 4] = [
    ("share-a", "nic-share-a", "10.78.0.11/24"),
    ("share-b", "nic-share-b", "10.78.0.12/24"),
    ("share-c", "nic-share-c", "10.78.0.13/24"),
    ("share-d", "nic-share-d", "10.78.0.14/24"),
];

fn tail(s: &str) -> String {
    dranet_testkit::kit::tail(s, 60)
}

/// `dranet run` sharing [`PARENT`].
fn start(kit: &Kit, state: &Path, port: u16, log: PathBuf) -> Daemon {
    let mut cmd = kit.dranet_run(env!("CARGO_BIN_EXE_dranet"), state, port);
    cmd.args(["--cloud-provider-hint", "none", "--filter", VETH_FILTER])
        .args(["--share-filter", SHARE_FILTER])
        .args(["--share-children", SHARE_CHILDREN])
        .args(["--log", "info"]);
    Daemon::spawn(cmd, log)
}

/// The device `name` as the API server stores it in this node's dra.net slice.
fn stored_device(kit: &Kit, name: &str) -> Option<Value> {
    kit.node_device_list("dra.net")
        .into_iter()
        .find(|d| d["name"] == name)
}

/// The children journal's entries (`<state>/**/children/*.json`), as JSON.
fn child_entries(state: &Path) -> Vec<Value> {
    fn walk(dir: &Path, out: &mut Vec<Value>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "json")
                && p.parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "children")
                && let Ok(text) = std::fs::read_to_string(&p)
                && let Ok(v) = serde_json::from_str(&text)
            {
                out.push(v);
            }
        }
    }
    let mut out = Vec::new();
    walk(state, &mut out);
    out
}

/// `ip -j ARGS` inside the network namespace at `netns`, parsed.
fn ip_in(netns: &str, args: &[&str]) -> Value {
    let out = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(["ip", "-j"])
        .args(args)
        .output()
        .expect("run nsenter ip");
    assert!(
        out.status.success(),
        "ip {args:?} in {netns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ip -j prints JSON")
}

/// A pod's child as its namespace holds it: the link (kind, mode, parent, index, MAC, MTU,
/// state), its addresses, and the namespace's rules and IPv4 routes (what dranet added for it).
fn child_state(netns: &str) -> Value {
    let link = ip_in(netns, &["-d", "addr", "show", "dev", "net1"]);
    let l = &link[0];
    let addrs: Vec<String> = l["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    serde_json::json!({
        "kind": l["linkinfo"]["info_kind"],
        "mode": l["linkinfo"]["info_data"]["mode"],
        "parentIndex": l["link_index"],
        "index": l["ifindex"],
        "mac": l["address"],
        "mtu": l["mtu"],
        "up": l["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "UP")),
        "addrs": addrs,
        "rules": ip_in(netns, &["rule", "show"]),
        // IPv4 only: the kernel adds the child's IPv6 link-local routes when its duplicate
        // address detection ends, whenever that is; the claims' addresses are IPv4.
        "routes": ip_in(netns, &["-4", "route", "show", "table", "all"]),
    })
}

/// The children on the host's journal, each with its namespace's view, keyed by the child's
/// address (which names its pod).
fn children(state: &Path) -> Vec<(String, Value, Value)> {
    child_entries(state)
        .into_iter()
        .map(|e| {
            let netns = e["podNetns"].as_str().expect("podNetns").to_string();
            let s = child_state(&netns);
            let addr = s["addrs"][0].as_str().unwrap_or_default().to_string();
            (addr, e, s)
        })
        .collect()
}

/// Waits until pod `pod` is Ready and its container printed its view of net1, and checks it:
/// MTU 1400 and `addr`.
fn wait_pod(kit: &Kit, daemon: &Daemon, pod: &str, addr: &str) {
    wait_for(
        &format!("pod {pod} to be Ready"),
        LIMIT,
        || kit.pod_ready(pod).then_some(()),
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", pod]),
                tail(&daemon.output())
            )
        },
    );
    let out = wait_for(
        &format!("{pod}'s output"),
        LIMIT,
        || {
            let out = kit.logs(pod);
            out.contains("END").then_some(out)
        },
        || tail(&daemon.output()),
    );
    assert!(out.contains("MTU 1400"), "{pod}: {out}");
    assert!(
        out.contains("net1") && out.contains(addr),
        "{pod} wants {addr}: {out}"
    );
}

/// Waits for the scheduler's FailedScheduling event of `pod` and returns its message; the pod
/// is still Pending on no node.
fn unschedulable(kit: &Kit, daemon: &Daemon, pod: &str) -> String {
    let msg = wait_for(
        &format!("a FailedScheduling event of {pod}"),
        LIMIT,
        || {
            let ev = kit.get_json(&[
                "events",
                "--field-selector",
                &format!("involvedObject.name={pod},reason=FailedScheduling"),
            ]);
            ev["items"].as_array()?.last()?["message"]
                .as_str()
                .map(str::to_string)
        },
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", pod]),
                tail(&daemon.output())
            )
        },
    );
    let p = kit.get_json(&["pod", pod]);
    assert_eq!(p["status"]["phase"], "Pending", "{pod}: {p}");
    assert!(p["spec"]["nodeName"].is_null(), "{pod} was bound: {p}");
    msg
}

/// The allocation result of `pod`'s claim.
fn allocation(kit: &Kit, pod: &str) -> Value {
    let claim = kit.pod_claim(pod).expect("the pod's claim");
    let c = kit.get_json(&["resourceclaim", &claim]);
    let results = c["status"]["allocation"]["devices"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(results.len(), 1, "{pod}'s claim: {c}");
    results[0].clone()
}

fn delete_pod(kit: &Kit, pod: &str) {
    kit.kubectl_ok(&["delete", "pod", pod, "--wait=true", "--timeout=60s"]);
}

/// Deletes `pods`: no child is left in the journal, and the shared NIC is as it was before the
/// first pod.
fn delete_all(kit: &Kit, daemon: &Daemon, state: &Path, pods: &[&str], parent_before: &Value) {
    for pod in pods {
        delete_pod(kit, pod);
    }
    wait_for(
        "no child left in the journal",
        LIMIT,
        || child_entries(state).is_empty().then_some(()),
        || tail(&daemon.output()),
    );
    assert_eq!(
        host_link(PARENT).as_ref(),
        Some(parent_before),
        "the shared NIC after every pod"
    );
}

pub(crate) fn pods_share_one_nic(kit: &Kit) {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mut veths = Veths::default();
    veths.add(PARENT);
    let parent_before = host_link(PARENT).expect("the veth exists");
    let port = free_port();
    let mut daemon = start(kit, &state, port, tmp.path().join("dranet.log"));
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(port, "/readyz")?.0 == 200).then_some(()),
        || tail(&daemon.output()),
    );
    let stored = wait_for(
        "the shared NIC in the slice",
        LIMIT,
        || stored_device(kit, PARENT),
        || tail(&daemon.output()),
    );
    let children_cap = &stored["capacity"]["children"];
    assert_eq!(children_cap["value"], SHARE_CHILDREN, "{stored}");

    let manifests = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(MANIFESTS))
        .expect("the example manifests");
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE").to_string();
    let t = Instant::now();
    kit.say(format_args!(
        "{PARENT} as the API server stores it: {stored}"
    ));
    let minor: u32 = kit
        .version
        .kit
        .strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .expect("a 1.x version");
    if dranet_core::share::consumable_capacity_by_default(1, minor) {
        assert_eq!(stored["allowMultipleAllocations"], true, "{stored}");
        assert_eq!(
            children_cap["requestPolicy"],
            serde_json::json!({"default": "1", "validRange": {"min": "1", "max": "3", "step": "1"}}),
            "{stored}"
        );
        kit.apply(&manifests);
        shared(kit, &daemon, &state, &image, &parent_before);
    } else {
        assert!(stored["allowMultipleAllocations"].is_null(), "{stored}");
        assert!(children_cap["requestPolicy"].is_null(), "{stored}");
        // Two more publications (a veth comes and goes) for the warnings to be once only.
        veths.add("drtshare1");
        let in_slice = |want: bool| {
            wait_for(
                &format!("drtshare1 in the slice: {want}"),
                LIMIT,
                || (kit.node_devices("dra.net").contains("drtshare1") == want).then_some(()),
                || tail(&daemon.output()),
            )
        };
        in_slice(true);
        veths.del("drtshare1");
        in_slice(false);
        kit.apply(&manifests);
        exclusive(kit, &daemon, &state, &image, &parent_before);
    }
    kit.say(format_args!("pods and children: {:.1?}", t.elapsed()));

    daemon.stop(Duration::from_secs(30));
    for (_, template, _) in PODS {
        let _ = kit.kubectl(&["delete", "resourceclaimtemplate", template]);
    }
    let _ = kit.kubectl(&["delete", "deviceclass", "dranet-share"]);
    drop(veths);
}

/// 1.36: three shares, a fourth waits, one pod's deletion touches nothing else.
fn shared(kit: &Kit, daemon: &Daemon, state: &Path, image: &str, parent_before: &Value) {
    let [a, b, c, d] = PODS;
    for (pod, template, _) in [a, b, c] {
        kit.apply(&nic_pod(pod, template, image));
    }
    for (pod, _, addr) in [a, b, c] {
        wait_pod(kit, daemon, pod, addr);
        let r = allocation(kit, pod);
        assert_eq!(r["device"], PARENT, "{pod}: {r}");
        assert!(r["shareID"].is_string(), "{pod} holds a share: {r}");
        assert_eq!(r["consumedCapacity"]["children"], "1", "{pod}: {r}");
    }
    let share_ids: std::collections::BTreeSet<String> = [a, b, c]
        .iter()
        .map(|(pod, _, _)| allocation(kit, pod)["shareID"].to_string())
        .collect();
    assert_eq!(share_ids.len(), 3, "one share each: {share_ids:?}");
    // The claim's status names the share and the child.
    let claim = kit.pod_claim(a.0).expect("a's claim");
    let status = wait_for(
        "networkData of a's share in its claim's status",
        LIMIT,
        || {
            let c = kit.get_json(&["resourceclaim", &claim]);
            c["status"]["devices"]
                .as_array()?
                .iter()
                .find(|d| d["device"] == PARENT && d["networkData"].is_object())
                .cloned()
        },
        || tail(&daemon.output()),
    );
    assert_eq!(
        status["shareID"],
        allocation(kit, a.0)["shareID"],
        "{status}"
    );
    assert_eq!(status["networkData"]["interfaceName"], "net1", "{status}");
    assert_eq!(
        status["networkData"]["ips"],
        serde_json::json!([a.2]),
        "{status}"
    );

    // Each child in its pod's namespace: a bridge-mode macvlan of the veth.
    let parent_index: u64 = std::fs::read_to_string(format!("/sys/class/net/{PARENT}/ifindex"))
        .expect("the veth's index")
        .trim()
        .parse()
        .expect("an index");
    let before = children(state);
    assert_eq!(before.len(), 3, "{before:?}");
    for (_, _, addr) in [a, b, c] {
        let (_, entry, s) = before
            .iter()
            .find(|(x, _, _)| x == addr)
            .unwrap_or_else(|| panic!("no child with {addr}: {before:?}"));
        assert_eq!(entry["parent"], PARENT, "{entry}");
        assert_eq!(entry["type"], "Macvlan", "{entry}");
        assert_eq!(s["kind"], "macvlan", "{s}");
        assert_eq!(s["mode"], "bridge", "{s}");
        assert_eq!(s["parentIndex"], parent_index, "{s}");
        assert_eq!(s["mtu"], 1400, "{s}");
        assert_eq!(s["up"], true, "{s}");
    }
    assert_eq!(host_link(PARENT).as_ref(), Some(parent_before));
    let a_child = before
        .iter()
        .find(|(x, _, _)| x == a.2)
        .map(|(_, _, s)| s)
        .expect("a's child");
    assert_eq!(
        status["networkData"]["hardwareAddress"], a_child["mac"],
        "{status}"
    );
    kit.say(format_args!(
        "{}'s child, seen from the host: {}",
        a.0,
        before
            .iter()
            .find(|(x, _, _)| x == a.2)
            .map_or(&Value::Null, |c| &c.2)
    ));

    // A fourth share is more than the NIC carries.
    kit.apply(&nic_pod(d.0, d.1, image));
    let why = unschedulable(kit, daemon, d.0);
    kit.say(format_args!("{}: {why}", d.0));
    assert!(why.contains(NO_DEVICE), "{why}");

    // One pod goes: its child only.
    delete_pod(kit, b.0);
    let b_sandbox = before
        .iter()
        .find(|(x, _, _)| x == b.2)
        .map(|(_, e, _)| e["owner"].clone())
        .expect("b's child");
    let freed = wait_for(
        "b's child out of the journal",
        LIMIT,
        || {
            let now = child_entries(state);
            (!now.iter().any(|e| e["owner"] == b_sandbox)).then_some(now)
        },
        || tail(&daemon.output()),
    );
    kit.say(format_args!(
        "after {} went: {} journal entries",
        b.0,
        freed.len()
    ));
    // The freed share goes to the waiting pod.
    wait_pod(kit, daemon, d.0, d.2);
    let after = children(state);
    for (_, _, addr) in [a, c] {
        let state_of = |list: &[(String, Value, Value)]| {
            list.iter()
                .find(|(x, _, _)| x == addr)
                .map(|(_, _, s)| s.clone())
                .unwrap_or_else(|| panic!("no child with {addr}: {list:?}"))
        };
        let (old, new) = (state_of(&before), state_of(&after));
        let changed: Vec<String> = old
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| new.get(k.as_str()) != Some(v))
            .map(|(k, v)| format!("{k}: {v} -> {}", new[k.as_str()]))
            .collect();
        assert!(
            changed.is_empty(),
            "the child {addr} after another pod went: {changed:#?}"
        );
    }
    assert!(after.iter().all(|(x, _, _)| x != b.2), "{after:?}");
    assert!(after.iter().any(|(x, _, _)| x == d.2), "{after:?}");
    assert_eq!(
        host_link(PARENT).as_ref(),
        Some(parent_before),
        "the shared NIC after a pod went"
    );

    delete_all(kit, daemon, state, &[a.0, c.0, d.0], parent_before);
}

/// 1.34: the fields are dropped, the daemon warns once per field, the NIC is one pod's.
fn exclusive(kit: &Kit, daemon: &Daemon, state: &Path, image: &str, parent_before: &Value) {
    let [a, b, ..] = PODS;
    // The server dropped the capacity request too: the claim asks for the whole device.
    let t = kit.get_json(&["resourceclaimtemplate", a.1]);
    let req = &t["spec"]["spec"]["devices"]["requests"][0]["exactly"];
    assert!(req["capacity"].is_null(), "{t}");
    kit.apply(&nic_pod(a.0, a.1, image));
    wait_pod(kit, daemon, a.0, a.2);
    let r = allocation(kit, a.0);
    assert_eq!(r["device"], PARENT, "{r}");
    assert!(r["shareID"].is_null(), "no share on 1.34: {r}");
    let entries = children(state);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].2["kind"], "macvlan", "{entries:?}");
    assert_eq!(entries[0].0, a.2);

    kit.apply(&nic_pod(b.0, b.1, image));
    let why = unschedulable(kit, daemon, b.0);
    kit.say(format_args!("{}: {why}", b.0));
    assert!(why.contains(NO_DEVICE), "{why}");

    let out = daemon.output();
    for field in [
        "devices[].allowMultipleAllocations",
        "devices[].capacity[].requestPolicy",
    ] {
        let warned = out
            .lines()
            .filter(|l| l.contains(&format!("the API server dropped {field}")))
            .count();
        assert_eq!(warned, 1, "one warning for {field}:\n{}", tail(&out));
    }
    assert!(out.contains("DRAConsumableCapacity"), "{}", tail(&out));

    delete_all(kit, daemon, state, &[a.0, b.0], parent_before);
}

/// The manifests docs/claims.md shows under "The manifests" are, verbatim, in the file this test
/// applies; every document of the file is the Kubernetes object it says, and every dra.net config
/// in it is a valid `NetworkConfig` of a child type. (No cluster needed.)
pub(crate) fn the_docs_show_the_manifests_the_test_applies() {
    use dranet_core::NetworkConfig;
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join(MANIFESTS)).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/claims.md")).unwrap();
    let section = doc
        .split("### The manifests")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("docs/claims.md has a section \"The manifests\"");
    assert!(section.contains(MANIFESTS), "the section names {MANIFESTS}");
    let shown: Vec<&str> = section
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .filter(|b| b.starts_with("apiVersion:"))
        .collect();
    assert_eq!(shown.len(), 2, "the class and a template are shown");
    for block in shown {
        assert!(
            file.contains(block),
            "docs/claims.md shows a manifest that is not in {MANIFESTS}:\n{block}"
        );
    }

    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&file).unwrap();
    let mut templates = 0;
    for d in docs {
        match d["kind"].as_str() {
            Some("DeviceClass") => {
                serde_json::from_value::<DeviceClass>(d).unwrap();
            }
            Some("ResourceClaimTemplate") => {
                let t: ResourceClaimTemplate = serde_json::from_value(d).unwrap();
                let devices = t.spec.spec.devices.expect("devices");
                let req = &devices.requests.as_ref().expect("requests")[0];
                let caps = req
                    .exactly
                    .as_ref()
                    .and_then(|e| e.capacity.as_ref())
                    .and_then(|c| c.requests.as_ref())
                    .expect("a capacity request");
                assert_eq!(caps["children"].0, "1");
                for c in devices.config.expect("config") {
                    let o = c.opaque.expect("opaque config");
                    assert_eq!(o.driver, "dra.net");
                    let n: NetworkConfig = serde_json::from_value(o.parameters.0).unwrap();
                    n.validate().unwrap();
                    assert!(n.interface_type().is_child(), "{n:?}");
                }
                templates += 1;
            }
            other => panic!("unexpected kind {other:?} in {MANIFESTS}"),
        }
    }
    assert_eq!(templates, PODS.len(), "a template per pod");
}
