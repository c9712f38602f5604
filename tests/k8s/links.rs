//! Veths on the host for the real-cluster tests that give a pod a NIC, and the host's view of a
//! link to compare before and after.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use dranet_testkit::kit::{Kit, wait_for};

use crate::manifests::claim_template;

/// A `--filter` that publishes the usual devices plus the tests' veths, named `drt*` (the default
/// filter drops veths).
pub const VETH_FILTER: &str = r#"!("type" in device.attributes["dra.net"]) || device.attributes["dra.net"].type != "veth" || device.attributes["dra.net"].ifName.startsWith("drt")"#;

pub use dranet_testkit::netns::{Veths, ip};

/// What the host knows of a link, for before/after comparison: name, MAC, MTU, admin state,
/// IPv4 and global IPv6 addresses. `None` when the host has no such link.
pub fn host_link(name: &str) -> Option<serde_json::Value> {
    let out = Command::new("ip")
        .args(["-j", "addr", "show", "dev", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let l = v.get(0)?;
    let addrs: BTreeSet<String> = l["addr_info"]
        .as_array()?
        .iter()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    let up = l["flags"].as_array()?.iter().any(|f| f == "UP");
    Some(serde_json::json!({
        "name": l["ifname"], "mac": l["address"], "mtu": l["mtu"], "up": up, "addrs": addrs,
    }))
}

/// A ResourceClaimTemplate `name` in `default` with two requests of DeviceClass `class`: `nic`, one
/// device passing the CEL `nic`, and `eth`, the host's veth `veth` configured in the pod as
/// `net1`, `10.77.0.2/24`, MTU 1400 (what [`nic_pod`] prints).
pub fn nic_and_veth_template(name: &str, class: &str, nic: &str, veth: &str) -> String {
    let devices = format!(
        r#"      requests:
      - name: nic
        exactly:
          deviceClassName: {class}
          count: 1
          selectors:
          - cel: {{expression: {nic:?}}}
      - name: eth
        exactly:
          deviceClassName: {class}
          selectors:
          - cel: {{expression: 'device.attributes["dra.net"].ifName == "{veth}"'}}
      config:
      - requests: ["eth"]
        opaque:
          driver: dra.net
          parameters:
            interface: {{name: net1, addresses: ["10.77.0.2/24"], mtu: 1400}}
"#
    );
    claim_template(name, &devices)
}

/// A busybox pod with a claim from `template` (request names free), whose container prints what
/// it was given: `DEV <the names in /dev/infiniband>`, `MTU <net1's MTU>`, net1's IPv4 addresses,
/// `MAC <net1's MAC>`, each request's device metadata file ([`METADATA_SCRIPT`]), then `END`, and
/// sleeps.
pub fn nic_pod(pod: &str, template: &str, image: &str) -> String {
    claim_pod(
        pod,
        template,
        image,
        &format!(
            r"echo DEV $(ls /dev/infiniband | tr '\n' ' '); echo MTU $(cat /sys/class/net/net1/mtu); ip -o -4 addr show dev net1; echo MAC $(cat /sys/class/net/net1/address); {METADATA_SCRIPT}; echo END; trap 'exit 0' TERM; sleep 100000 & wait"
        ),
    )
}

/// Prints, in a [`claim_pod`]'s container, the dra.net device metadata file of each request of its
/// claim `nics` (KEP-5304's released path for a template's claim) as `META <request>` then the
/// file; [`printed_metadata`] reads it back.
pub const METADATA_SCRIPT: &str = "for r in $(ls /var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nics); do echo META $r; cat /var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nics/$r/dra.net-metadata.json; echo; done";

/// The device metadata each request's file held in a container's output `out` of
/// [`METADATA_SCRIPT`], by request: its `metadata.resource.k8s.io/v1alpha1` object, after checking
/// the file streams v1beta1 then v1alpha1 (newest first), as the daemon writes by default.
pub fn printed_metadata(out: &str) -> BTreeMap<String, serde_json::Value> {
    let mut files: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut request = None;
    for line in out.lines() {
        if let Some(r) = line.strip_prefix("META ") {
            request = Some(r.trim().to_string());
            files.entry(r.trim().to_string()).or_default();
        } else if let (Some(r), true) = (&request, line.starts_with('{')) {
            let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            files.entry(r.clone()).or_default().push(v);
        } else if !line.trim().is_empty() {
            request = None;
        }
    }
    files
        .into_iter()
        .map(|(r, objects)| {
            let versions: Vec<&str> = objects
                .iter()
                .filter_map(|o| o["apiVersion"].as_str())
                .collect();
            assert_eq!(
                versions,
                [
                    "metadata.resource.k8s.io/v1beta1",
                    "metadata.resource.k8s.io/v1alpha1"
                ],
                "request {r}'s file, newest first: {out}"
            );
            (r, objects[1].clone())
        })
        .collect()
}

/// The value after `prefix` on the first line of `out` that starts with it (trimmed; empty if none).
pub fn printed_line(out: &str, prefix: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A busybox pod with a claim from `template` whose container runs `script` (`/bin/sh -c`; no
/// double quotes in it).
pub fn claim_pod(pod: &str, template: &str, image: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}, namespace: default}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - {{name: nics, resourceClaimTemplateName: {template}}}
  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "{script}"]
    resources:
      claims: [{{name: nics}}]
"#
    )
}

/// The veth of a [`nic_and_veth_template`] claim is in the pod as configured: [`nic_pod`]'s
/// output `out` shows net1's MTU and address, the host no longer has `veth`, and the claim's
/// status gets the device's networkData (waited for up to `limit`; `context` explains a timeout).
pub fn check_veth_in_pod(
    kit: &Kit,
    out: &str,
    claim: &str,
    veth: &str,
    limit: Duration,
    context: impl FnOnce() -> String,
) {
    assert!(out.contains("MTU 1400"), "{out}");
    assert!(
        out.contains("net1") && out.contains("10.77.0.2/24"),
        "{out}"
    );
    assert!(host_link(veth).is_none(), "the veth left the host");
    let net = wait_for(
        "networkData in the claim's status (1.36: needs resourceclaims/driver associated-node:patch)",
        limit,
        || {
            let c = kit.get_json(&["resourceclaim", claim]);
            c["status"]["devices"]
                .as_array()?
                .iter()
                .find(|d| d["device"] == veth && d["networkData"].is_object())
                .cloned()
        },
        context,
    );
    assert_eq!(net["networkData"]["interfaceName"], "net1");
    assert!(
        net["networkData"]["ips"]
            .as_array()
            .is_some_and(|ips| ips.iter().any(|i| i == "10.77.0.2/24")),
        "{net}"
    );
}
