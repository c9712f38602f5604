//! Device metadata in the container (KEP-5304), on a real node, v1.34.9 and v1.36.3: `dranet run`
//! (device metadata on by default) publishes one veth, `drm0`; a pod claims it through a
//! template and its container prints, at its start, its metadata file at the released path
//! (`/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<podClaimName>/<request>/dra.net-metadata.json`)
//! and what `ip` shows of the link. The file must say what the pod sees: the interface's name,
//! address and MAC, the claim and the pod's name for it, the device's published attributes.
//! The node carries CoreWeave CKS's labels: the daemon, detecting, publishes their
//! `coreweave.dra.net` attributes, and the file has them. The daemon is then restarted and the
//! container killed: the restarted container (its CDI
//! devices resolved again) reads the same file. After the pod is deleted the claim's host
//! directory is gone.
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::time::Duration;

use crate::links::{METADATA_SCRIPT, Veths, claim_pod, host_link, printed_line, printed_metadata};
use crate::manifests::{claim_template, device_class};
use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, tail, wait_for};

const LIMIT: Duration = Duration::from_secs(90);
const VETH: &str = "drm0";
const CLASS: &str = "dranet-meta";
const TEMPLATE: &str = "meta-veth";
const POD: &str = "meta-reader";

fn manifests() -> String {
    let devices = format!(
        r#"      requests:
      - name: nic
        exactly:
          deviceClassName: {CLASS}
          selectors:
          - cel: {{expression: 'device.attributes["dra.net"].ifName == "{VETH}"'}}
      config:
      - requests: [nic]
        opaque:
          driver: dra.net
          parameters:
            interface: {{name: net1, addresses: ["10.91.0.2/24"]}}
"#
    );
    format!(
        "{}---{}",
        device_class(CLASS, "dra.net"),
        claim_template(TEMPLATE, &devices)
    )
}

/// What the container prints at each start: its metadata file, then the link, then `END`.
fn script() -> String {
    format!(
        "echo RUN; {METADATA_SCRIPT}; echo ADDR $(ip -o -4 addr show dev net1); echo MAC $(cat /sys/class/net/net1/address); echo END; trap 'exit 0' TERM; sleep 100000 & wait"
    )
}

fn daemon(kit: &Kit, state: &std::path::Path, port: u16, log: std::path::PathBuf) -> Daemon {
    let mut cmd = kit.dranet_run(env!("CARGO_BIN_EXE_dranet"), state, port);
    // Detected (no metadata service here): the Node's CKS labels make it CoreWeave CKS.
    cmd.args(["--cloud-provider-hint", "auto"])
        .args([
            "--filter",
            &format!(
                r#""ifName" in device.attributes["dra.net"] && device.attributes["dra.net"].ifName == "{VETH}""#
            ),
        ])
        .args(["--log", "info"]);
    let d = Daemon::spawn(cmd, log);
    wait_for(
        "the daemon ready with drm0 published",
        LIMIT,
        || {
            let ready = http_get(port, "/readyz")?.0 == 200;
            (ready && kit.node_devices("dra.net").contains(VETH)).then_some(())
        },
        || tail(&d.output(), 40),
    );
    d
}

/// The v1alpha1 object of the stream the container printed in its `n`-th run (from 1), with its
/// ADDR and MAC lines.
fn printed(kit: &Kit, n: usize, d: &Daemon) -> (serde_json::Value, String, String) {
    let out = wait_for(
        &format!("{POD}'s container's run {n} to print its metadata"),
        LIMIT,
        || {
            // Fails while the container is being created.
            let out = kit.logs(POD);
            (out.contains("END") && out.contains("RUN")).then_some(out)
        },
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", POD]),
                tail(&d.output(), 40)
            )
        },
    );
    let meta = printed_metadata(&out);
    let m = meta
        .get("nic")
        .unwrap_or_else(|| panic!("request nic's file: {out}"));
    (
        m.clone(),
        printed_line(&out, "ADDR "),
        printed_line(&out, "MAC "),
    )
}

pub(crate) fn a_pod_reads_its_devices_metadata(kit: &Kit) {
    let tmp = tempfile::tempdir().unwrap();
    let mut veths = Veths::default();
    veths.add(VETH);
    let before = host_link(VETH).expect("drm0");
    let port = free_port();
    let state = tmp.path().join("state");
    // The node is a CoreWeave CKS node, as its labels say.
    let leaf = format!("backend.coreweave.cloud/neighbors.expected.{VETH}.device");
    let cks: [(&str, &str); 4] = [
        ("cks.coreweave.com/cluster", "kit"),
        ("backend.coreweave.cloud/fabric", "fab-1"),
        ("node.coreweave.cloud/rack", "r-7"),
        (&leaf, "leaf-3"),
    ];
    let mut label = vec!["label", "node", kit.node(), "--overwrite"];
    let set: Vec<String> = cks.iter().map(|(k, v)| format!("{k}={v}")).collect();
    label.extend(set.iter().map(String::as_str));
    kit.kubectl_ok(&label);
    let mut d = daemon(kit, &state, port, tmp.path().join("dranet-1.log"));
    kit.apply(&manifests());
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE");
    kit.apply(&claim_pod(POD, TEMPLATE, image, &script()));

    let (m, addr, mac) = printed(kit, 1, &d);
    let claim = kit.pod_claim(POD).expect("the pod's claim");
    assert_eq!(m["kind"], "DeviceMetadata");
    assert_eq!(m["metadata"]["name"], claim.as_str());
    assert_eq!(m["metadata"]["namespace"], "default");
    assert_eq!(m["podClaimName"], "nics");
    assert_eq!(m["requests"][0]["name"], "nic");
    let dev = &m["requests"][0]["devices"][0];
    assert_eq!(dev["driver"], "dra.net");
    assert_eq!(dev["pool"], kit.node());
    assert_eq!(dev["name"], VETH, "{m}");
    assert_eq!(dev["attributes"]["ifName"]["string"], VETH, "{m}");
    // CKS's attributes, from the Node's labels: the node's, and the device's leaf switch.
    let attr = |name: &str| dev["attributes"][name]["string"].clone();
    assert_eq!(attr("coreweave.dra.net/fabric"), "fab-1", "{m}");
    assert_eq!(attr("coreweave.dra.net/rack"), "r-7", "{m}");
    assert_eq!(attr("coreweave.dra.net/leafSwitch"), "leaf-3", "{m}");
    let nd = &dev["networkData"];
    assert_eq!(nd["interfaceName"], "net1", "{m}");
    assert!(
        nd["ips"]
            .as_array()
            .is_some_and(|v| v.iter().any(|ip| ip == "10.91.0.2/24")),
        "{m}"
    );
    assert!(addr.contains("10.91.0.2/24"), "ip in the pod: {addr}");
    assert_eq!(nd["hardwareAddress"].as_str(), Some(mac.as_str()), "{m}");
    let host_dir = kit
        .kubelet_root_dir()
        .join("plugins/dra.net/dra-device-metadata")
        .join(format!("default_{claim}"));
    assert!(host_dir.is_dir(), "{}", host_dir.display());

    // The daemon restarted, then the container killed: the restarted container reads the same.
    d.kill();
    let d = daemon(kit, &state, port, tmp.path().join("dranet-2.log"));
    let killed = kit.kill_container(POD);
    assert!(killed, "ctr task kill of {POD}'s container");
    wait_for(
        "the container restarted and Ready",
        LIMIT,
        || {
            let p = kit.get_json(&["pod", POD]);
            let restarts = p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0);
            (restarts >= 1 && kit.pod_ready(POD)).then_some(())
        },
        || kit.kubectl_ok(&["describe", "pod", POD]) + &tail(&d.output(), 40),
    );
    let (again, _, _) = printed(kit, 2, &d);
    assert_eq!(again, m, "the restarted container reads the same metadata");

    kit.kubectl_ok(&["delete", "pod", POD, "--wait=true", "--timeout=60s"]);
    wait_for(
        "the claim's metadata directory gone and drm0 back",
        LIMIT,
        || (!host_dir.exists() && host_link(VETH) == Some(before.clone())).then_some(()),
        || tail(&d.output(), 40),
    );
    let mut unlabel = vec!["label", "node", kit.node()];
    let unset: Vec<String> = cks.iter().map(|(k, _)| format!("{k}-")).collect();
    unlabel.extend(unset.iter().map(String::as_str));
    kit.kubectl_ok(&unlabel);
    let _ = kit.kubectl(&["delete", "resourceclaimtemplate", TEMPLATE]);
    let _ = kit.kubectl(&["delete", "deviceclass", CLASS]);
    let mut d = d;
    d.stop(Duration::from_secs(30));
}
