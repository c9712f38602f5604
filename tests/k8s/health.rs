//! Device health on a real Kubernetes node, v1.34.9 and v1.36.3 (one test each; the kit in
//! `../shared/k8s/`): `dranet run` publishes one veth, `drh0`, named in its `--filter`, and the
//! test takes the veth's carrier away by setting its peer `drh0p` down.
//!
//! On 1.36 (`DRADeviceTaints` and `ResourceHealthStatus` beta, on by default):
//! - the slice's device gets the taint `dra.net/unhealthy=link-down:NoSchedule` (with the API
//!   server's `timeAdded`); a new claim for it stays unallocated, its pod unschedulable;
//! - carrier back: the taint goes, and that pod is scheduled and runs;
//! - carrier lost again: a claim that tolerates the taint gets the device; its running pod's
//!   `status.containerStatuses[].allocatedResourcesStatus` shows the kubelet's view of the device
//!   (from the driver's health stream): `Unhealthy`, then `Healthy` when the carrier is back,
//!   and the taint, following the link in the pod, goes.
//!
//! On 1.34 (gates off) nothing changes: the API server drops the taint, the daemon says so once,
//! and a claim for the device without carrier is allocated and its pod runs, as before.
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::time::Duration;

use crate::links::{Veths, claim_pod, host_link, ip};
use crate::manifests::{claim_template, device_class};
use dranet_testkit::kit::{Daemon, Kit, V1_34, free_port, http_get, tail, wait_for};

const LIMIT: Duration = Duration::from_secs(60);
const VETH: &str = "drh0";
const PEER: &str = "drh0p";
const TAINT_KEY: &str = "dra.net/unhealthy";
/// What the daemon logs when the API server drops the taints it wrote.
const DROPPED: &str = "dropped devices[].taints";

/// A DeviceClass for every dra.net device, and two claim templates for the veth: one plain, one
/// tolerating the health taint.
fn class_and_templates() -> String {
    let template = |name: &str, tolerations: &str| {
        let devices = format!(
            r#"      requests:
      - name: eth
        exactly:
          deviceClassName: dranet.net
          selectors:
          - cel: {{expression: 'device.attributes["dra.net"].ifName == "{VETH}"'}}{tolerations}
"#
        );
        claim_template(name, &devices)
    };
    let tolerate = format!(
        "\n          tolerations: [{{key: {TAINT_KEY}, operator: Exists, effect: NoSchedule}}]"
    );
    format!(
        "{}---{}---{}",
        device_class("dranet.net", "dra.net"),
        template("veth-plain", ""),
        template("veth-tolerant", &tolerate)
    )
}

/// The veth as the API server holds it in this node's slices.
fn published_veth(kit: &Kit) -> Option<serde_json::Value> {
    kit.node_device_list("dra.net")
        .into_iter()
        .find(|d| d["name"] == VETH)
}

/// The veth's taints in the slice (empty when it has none).
fn taints(kit: &Kit) -> Vec<serde_json::Value> {
    published_veth(kit)
        .and_then(|d| d["taints"].as_array().cloned())
        .unwrap_or_default()
}

/// The pod's condition `PodScheduled`, if it has one.
fn scheduled_condition(kit: &Kit, pod: &str) -> Option<serde_json::Value> {
    let p = kit.get_json(&["pod", pod]);
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

/// The health the kubelet shows for the pod's claim `nics` in its container's
/// `allocatedResourcesStatus` (`Healthy`, `Unhealthy`, `Unknown`), with the whole entry.
fn kubelet_health(kit: &Kit, pod: &str) -> Option<(String, serde_json::Value)> {
    let p = kit.get_json(&["pod", pod]);
    let entry = p["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "claim:nics")?
        .clone();
    let health = entry["resources"][0]["health"].as_str()?.to_string();
    Some((health, entry))
}

/// The end of the daemon's log, for failure messages.
fn logs(daemon: &Daemon) -> String {
    tail(&daemon.output(), 40)
}

/// Waits until the kubelet shows `health` for `pod`'s claim; the entry.
fn wait_kubelet_health(kit: &Kit, pod: &str, health: &str, daemon: &Daemon) -> serde_json::Value {
    wait_for(
        &format!("allocatedResourcesStatus {health}"),
        LIMIT,
        || kubelet_health(kit, pod).filter(|(h, _)| h == health),
        || {
            format!(
                "status: {}\ndaemon:\n{}",
                kit.get_json(&["pod", pod])["status"]["containerStatuses"],
                logs(daemon)
            )
        },
    )
    .1
}

/// Deletes `pod` and waits for its veth to be back on the host.
fn delete_pod(kit: &Kit, pod: &str, daemon: &Daemon) {
    kit.kubectl_ok(&["delete", "pod", pod, "--wait=true", "--timeout=60s"]);
    wait_for(
        "the veth back on the host",
        LIMIT,
        || host_link(VETH),
        || logs(daemon),
    );
}

fn set_peer(up: bool) {
    ip(&["link", "set", PEER, if up { "up" } else { "down" }]);
}

pub(crate) fn device_health_on_a_real_node(kit: &Kit) {
    let tmp = tempfile::tempdir().unwrap();
    let mut veths = Veths::default();
    veths.add(VETH);
    let port = free_port();
    let mut cmd = kit.dranet_run(
        env!("CARGO_BIN_EXE_dranet"),
        &tmp.path().join("state"),
        port,
    );
    cmd.args(["--cloud-provider-hint", "none"])
        .args([
            "--filter",
            &format!(
                r#""ifName" in device.attributes["dra.net"] && device.attributes["dra.net"].ifName == "{VETH}""#
            ),
        ])
        // The link in the pod is looked at on the periodic rescan (and on the host's events,
        // which the peer's changes are).
        .args(["--inventory-max-poll-interval", "2s"])
        .args(["--log", "info,dranet_kubeletplugin=debug"]);
    let mut daemon = Daemon::spawn(cmd, tmp.path().join("dranet.log"));
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(port, "/readyz")?.0 == 200).then_some(()),
        || logs(&daemon),
    );
    wait_for(
        "the veth in the slice",
        LIMIT,
        || published_veth(kit),
        || logs(&daemon),
    );
    assert_eq!(
        taints(kit),
        Vec::<serde_json::Value>::new(),
        "healthy: no taint"
    );
    kit.apply(&class_and_templates());
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE");
    let script = "trap 'exit 0' TERM; sleep 100000 & wait";

    set_peer(false);
    if kit.version == V1_34 {
        // DRADeviceTaints is off: the API server drops the taint and the daemon says so.
        wait_for(
            "the daemon's warning that the API server dropped the taint",
            LIMIT,
            || daemon.output().contains(DROPPED).then_some(()),
            || logs(&daemon),
        );
        assert!(taints(kit).is_empty(), "{:?}", published_veth(kit));
        // Nothing else changes: a claim for the device is allocated and its pod runs.
        kit.apply(&claim_pod("plain-pod", "veth-plain", image, script));
        wait_for(
            "plain-pod Ready (1.34 allocates a device without carrier, as before)",
            LIMIT,
            || kit.pod_ready("plain-pod").then_some(()),
            || kit.kubectl_ok(&["describe", "pod", "plain-pod"]) + &logs(&daemon),
        );
        // ResourceHealthStatus is alpha and off: the kubelet shows no device health.
        assert_eq!(kubelet_health(kit, "plain-pod"), None);
        delete_pod(kit, "plain-pod", &daemon);
        // Carrier back and lost again: still one warning.
        set_peer(true);
        set_peer(false);
        set_peer(true);
        wait_for(
            "the republished slice",
            LIMIT,
            || published_veth(kit),
            || logs(&daemon),
        );
        std::thread::sleep(Duration::from_secs(1));
        let warned = daemon.output().matches(DROPPED).count();
        assert_eq!(warned, 1, "warned once\n{}", logs(&daemon));
    } else {
        let taint = wait_for(
            "the health taint on the veth",
            LIMIT,
            || taints(kit).into_iter().next(),
            || logs(&daemon),
        );
        kit.say(format_args!("carrier lost: the slice has {taint}"));
        assert_eq!(taint["key"], TAINT_KEY);
        assert_eq!(taint["value"], "link-down");
        assert_eq!(taint["effect"], "NoSchedule");
        assert!(taint["timeAdded"].is_string(), "stamped by the API server");
        assert_eq!(taints(kit).len(), 1);
        assert!(!daemon.output().contains(DROPPED), "{}", logs(&daemon));

        // A claim that does not tolerate the taint is not allocated: its pod is unschedulable.
        kit.apply(&claim_pod("plain-pod", "veth-plain", image, script));
        let cond = wait_for(
            "plain-pod unschedulable",
            LIMIT,
            || scheduled_condition(kit, "plain-pod").filter(|c| c["reason"] == "Unschedulable"),
            || kit.kubectl_ok(&["describe", "pod", "plain-pod"]),
        );
        kit.say(format_args!(
            "the scheduler on the tainted device: {}",
            cond["message"]
        ));
        assert!(
            cond["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot allocate all claims")),
            "the scheduler's reason: {cond}"
        );
        let claim = kit.pod_claim("plain-pod").expect("plain-pod's claim");
        assert!(
            kit.get_json(&["resourceclaim", &claim])["status"]["allocation"].is_null(),
            "the claim stays unallocated"
        );

        // Carrier back: the taint goes and the waiting pod gets the device.
        set_peer(true);
        wait_for(
            "the taint cleared",
            LIMIT,
            || taints(kit).is_empty().then_some(()),
            || logs(&daemon),
        );
        wait_for(
            "plain-pod Ready once the taint is gone",
            LIMIT,
            || kit.pod_ready("plain-pod").then_some(()),
            || kit.kubectl_ok(&["describe", "pod", "plain-pod"]) + &logs(&daemon),
        );
        delete_pod(kit, "plain-pod", &daemon);

        // Carrier lost again: a claim that tolerates the taint gets the device.
        set_peer(false);
        wait_for(
            "the health taint again",
            LIMIT,
            || (!taints(kit).is_empty()).then_some(()),
            || logs(&daemon),
        );
        kit.apply(&claim_pod("tolerant-pod", "veth-tolerant", image, script));
        wait_for(
            "tolerant-pod Ready",
            LIMIT,
            || kit.pod_ready("tolerant-pod").then_some(()),
            || kit.kubectl_ok(&["describe", "pod", "tolerant-pod"]) + &logs(&daemon),
        );

        // The kubelet's view, from the health stream: the link in the pod has no carrier...
        let entry = wait_kubelet_health(kit, "tolerant-pod", "Unhealthy", &daemon);
        kit.say(format_args!("carrier lost, in the pod: {entry}"));
        let message = entry["resources"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains(&format!("link {VETH} is")) && message.contains("in the pod of claim"),
            "the driver's reason, read in the pod: {entry}"
        );
        // The kubelet names a device by its CDI ID when it has one: the hook's, one a device.
        let claim = kit.pod_claim("tolerant-pod").expect("the pod's claim");
        let uid = kit.get_json(&["resourceclaim", &claim])["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            entry["resources"][0]["resourceID"],
            format!("dra.net/pod={uid}-{VETH}")
        );
        // ... and has it again.
        set_peer(true);
        let entry = wait_kubelet_health(kit, "tolerant-pod", "Healthy", &daemon);
        kit.say(format_args!("carrier back, in the pod: {entry}"));
        // The device in use takes the state of its link in the pod: the taint goes.
        wait_for(
            "the taint cleared while the device is in the pod",
            LIMIT,
            || taints(kit).is_empty().then_some(()),
            || logs(&daemon),
        );
        delete_pod(kit, "tolerant-pod", &daemon);
        assert!(taints(kit).is_empty(), "untainted back on the host");
    }

    let status = daemon.terminate(Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "exit status after SIGTERM\n{}",
        logs(&daemon)
    );
    drop(veths);
    for kind in [
        "resourceclaimtemplate/veth-plain",
        "resourceclaimtemplate/veth-tolerant",
        "deviceclass/dranet.net",
    ] {
        let _ = kit.kubectl(&["delete", kind]);
    }
}
