//! Upstream's `webhook.bats` scenario "validate whereabouts cni integration" on a real node,
//! v1.34.9 and v1.36.3: `dranet run --profile-provider=webhook --webhook-url=...` as the node's
//! driver, and a profile webhook that, like upstream's `cmd/webhook-whereabouts`, answers
//! `GetProfileConfig` by running a real CNI IPAM plugin (`CNI_COMMAND=ADD`, the claim's UID as
//! `CNI_CONTAINERID`) and `ReleaseProfileConfig` by running it again with `DEL`.
//!
//! What differs from upstream: the IPAM plugin is `host-local` from Debian's
//! containernetworking-plugins (the kit installs it), not whereabouts, which needs its CRDs and an
//! image this machine cannot pull; the range is upstream's (`192.168.100.0/24`). host-local keeps
//! each allocation as a file named after the address, holding the container ID, so the test also
//! checks what upstream's cannot see: the address was allocated for this claim's UID, and the
//! deletion gave it back (no address leaks across pods).
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::path::Path;
use std::time::Duration;

use crate::links::{Veths, claim_pod, host_link};
use crate::manifests::{claim_template, device_class};
use crate::webhook::{posts, start_daemon, start_webhook};
use dranet_testkit::kit::{Daemon, Kit, wait_for};

const LIMIT: Duration = Duration::from_secs(90);
/// Upstream's `dummy0` (a veth here: the kernel has no dummy links).
const VETH: &str = "drtwa0";
/// Where Debian's containernetworking-plugins keeps the plugins.
const CNI_BIN: &str = "/usr/lib/cni";

/// The profile webhook: upstream's protocol; `GetProfileConfig`/`ReleaseProfileConfig` run the
/// profile's IPAM plugin as a CNI runtime would (after `webhook.rs`'s prelude).
const WEBHOOK: &str = r#"
import os, subprocess

PORT, CNI_BIN, DATA, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
PROFILES = {
    "whereabouts-profile": {
        "cniVersion": "1.0.0",
        "name": "whereabouts-net",
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "192.168.100.0/24"}]],
            "dataDir": DATA,
        },
    }
}


def ipam(command, body):
    conf = PROFILES[(body.get("config") or {}).get("profile")]
    env = dict(os.environ)
    env.update({
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": body["claim_uid"],
        "CNI_NETNS": "/dev/null",
        "CNI_IFNAME": body["device"]["name"],
        "CNI_PATH": CNI_BIN,
        "CNI_ARGS": "IgnoreUnknown=1",
    })
    plugin = os.path.join(CNI_BIN, conf["ipam"]["type"])
    return subprocess.run([plugin], input=json.dumps(conf).encode(), env=env,
                          capture_output=True, check=True).stdout


class Webhook(JsonHandler):
    LOG = LOG

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"cloudProvider": False, "profileProvider": True})
        else:
            self.answer(404, {})

    def do_POST(self):
        body = self.posted()
        profile = (body.get("config") or {}).get("profile")
        if self.path not in ("/GetProfileConfig", "/ReleaseProfileConfig"):
            self.answer(404, {})
        elif profile not in PROFILES:
            if self.path == "/GetProfileConfig":
                self.answer(404, {"error": "CNI profile %r not found" % profile})
            else:
                self.answer(200, {})
        else:
            try:
                out = ipam("ADD" if self.path == "/GetProfileConfig" else "DEL", body)
            except subprocess.CalledProcessError as e:
                self.answer(500, {"error": e.stderr.decode() + e.stdout.decode()})
                return
            if self.path == "/ReleaseProfileConfig":
                self.answer(200, {})
                return
            res = json.loads(out)
            routes = [{"destination": r["dst"], "gateway": r.get("gw", "")}
                      for r in res.get("routes", [])]
            config = {"interface": {"addresses": [ip["address"] for ip in res.get("ips", [])]}}
            if routes:
                config["routes"] = routes
            self.answer(200, config)


serve(PORT, Webhook)
"#;

/// The DeviceClass and upstream's `whereabouts-claim` template.
fn manifests() -> String {
    let devices = format!(
        r#"      requests:
      - name: req-dummy
        exactly:
          deviceClassName: dranet-whereabouts.net
          selectors:
          - cel:
              expression: 'device.attributes["dra.net"].ifName == "{VETH}"'
      config:
      - opaque:
          driver: dra.net
          parameters:
            profile: whereabouts-profile
"#
    );
    format!(
        "{}---{}",
        device_class("dranet-whereabouts.net", "dra.net"),
        claim_template("whereabouts-claim", &devices)
    )
}

/// host-local's allocations in `data`: (address, container ID).
fn leases(data: &Path) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(data.join("whereabouts-net")) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = dir
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // Besides the addresses: `last_reserved_ip.0` and the lock.
            name.parse::<std::net::IpAddr>().ok()?;
            let owner = std::fs::read_to_string(e.path()).ok()?;
            Some((name, owner.lines().next().unwrap_or_default().to_string()))
        })
        .collect();
    out.sort();
    out
}

pub(crate) fn validate_whereabouts_cni_integration(kit: &Kit) {
    if !Path::new(CNI_BIN).join("host-local").exists() {
        panic!("no {CNI_BIN}/host-local: the kit installs containernetworking-plugins");
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut veths = Veths::default();
    veths.add(VETH);
    let before = host_link(VETH).expect("the veth exists");

    let log = tmp.path().join("webhook.log");
    let data = tmp.path().join("ipam");
    let (_webhook, hook_port) = start_webhook(
        tmp.path(),
        WEBHOOK,
        &[CNI_BIN.as_ref(), data.as_os_str(), log.as_os_str()],
    );

    // Upstream adds exactly these two flags to its DaemonSet.
    let (mut daemon, _) = start_daemon(kit, tmp.path(), hook_port, &["--profile-provider=webhook"]);
    let tail = |d: &Daemon| dranet_testkit::kit::tail(&d.output(), 60);
    wait_for(
        "the veth published",
        LIMIT,
        || kit.node_devices("dra.net").contains(VETH).then_some(()),
        || tail(&daemon),
    );

    kit.apply(&manifests());
    kit.apply(&claim_pod(
        "pod-whereabouts",
        "whereabouts-claim",
        kit.var("DRANET_K8S_BUSYBOX_IMAGE"),
        &format!(
            "ip -o -4 addr show dev {VETH}; echo END; trap 'exit 0' TERM; sleep 100000 & wait"
        ),
    ));
    let out = wait_for(
        "pod-whereabouts's output",
        LIMIT,
        || {
            let out = kit.logs("pod-whereabouts");
            out.contains("END").then_some(out)
        },
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", "pod-whereabouts"]),
                tail(&daemon)
            )
        },
    );
    // Upstream: `kubectl exec pod-whereabouts -- ip -4 addr show` has "192.168.100.".
    assert!(
        out.contains("inet 192.168.100."),
        "an address of the IPAM plugin's range in the pod: {out}"
    );

    // The IPAM plugin allocated it for this claim: its UID is the CNI container ID.
    let claim = kit.pod_claim("pod-whereabouts").expect("the pod's claim");
    let claim_uid = kit.get_json(&["resourceclaim", &claim])["metadata"]["uid"]
        .as_str()
        .expect("claim uid")
        .to_string();
    let held = leases(&data);
    assert_eq!(held.len(), 1, "one address allocated: {held:?}");
    assert_eq!(held[0].1, claim_uid, "the allocation's owner is the claim");
    assert!(
        out.contains(&format!("inet {}/24", held[0].0)),
        "the pod has the allocated address {}: {out}",
        held[0].0
    );
    kit.say(format_args!(
        "pod-whereabouts has {} from host-local, allocated for claim {claim_uid}",
        held[0].0
    ));

    // Deleting the pod releases the address (CNI DEL with the same container ID).
    kit.kubectl_ok(&[
        "delete",
        "pod",
        "pod-whereabouts",
        "--wait=true",
        "--timeout=60s",
    ]);
    wait_for(
        "the IPAM plugin's allocation released",
        LIMIT,
        || leases(&data).is_empty().then_some(()),
        || {
            format!(
                "leases: {:?}\nposts: {:?}\ndaemon:\n{}",
                leases(&data),
                posts(&log),
                tail(&daemon)
            )
        },
    );
    let released: Vec<serde_json::Value> = posts(&log)
        .into_iter()
        .filter(|(p, _)| p == "/ReleaseProfileConfig")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["claim_uid"], claim_uid.as_str());
    let after = wait_for(
        "the veth back on the host",
        LIMIT,
        || host_link(VETH),
        || tail(&daemon),
    );
    assert_eq!(after, before, "the host's veth after the pod");

    daemon.stop(Duration::from_secs(30));
    let _ = kit.kubectl(&["delete", "resourceclaimtemplate", "whereabouts-claim"]);
    let _ = kit.kubectl(&["delete", "deviceclass", "dranet-whereabouts.net"]);
}
