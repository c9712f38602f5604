//! Upstream's `python_webhook` scenario on a real Kubernetes node, v1.34.9 and v1.36.3 (the kit
//! in `../shared/k8s/`): `dranet run --cloud-provider-hint webhook --profile-provider webhook
//! --webhook-url http://127.0.0.1:PORT` as the node's DRA driver, and an operator's webhook
//! written in Python (`http.server`, as upstream's test has it: HTTP/1.0 answers that end when the
//! connection closes).
//!
//! - the webhook gives the veth `drtw0` the attribute `dra.net/webhook_attr: python` and an MTU of
//!   1450 (`GetDeviceConfig`), and resolves the profile `python-profile` to `10.200.200.200/24`
//!   (`GetProfileConfig`);
//! - the published slice carries the attribute on `drtw0` only;
//! - a claim that selects on it and names the profile is allocated by the real scheduler and
//!   prepared by the real kubelet; the pod sees `drtw0` with the profile's address and the
//!   webhook's MTU;
//! - deleting the pod releases the profile (`ReleaseProfileConfig` with the claim's UID and the
//!   device) and gives the host its veth back as it was.
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use crate::links::{VETH_FILTER, Veths, claim_pod, host_link};
use crate::manifests::{claim_template, device_class};
use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, wait_for};

const LIMIT: Duration = Duration::from_secs(90);
const VETH: &str = "drtw0";

/// The operator's webhook: upstream's protocol, one line of JSON per POST in a log file.
const WEBHOOK: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, DEVICE, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Webhook(BaseHTTPRequestHandler):
    def answer(self, code, doc):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(doc).encode())

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"cloudProvider": True, "profileProvider": True})
        else:
            self.answer(404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with open(LOG, "a") as log:
            log.write(json.dumps({"path": self.path, "body": body}) + "\n")
        ours = body.get("name") == DEVICE
        if self.path == "/GetDeviceAttributes":
            self.answer(200, {"dra.net/webhook_attr": {"string": "python"}} if ours else {})
        elif self.path == "/GetDeviceConfig":
            self.answer(200, {"interface": {"mtu": 1450}} if ours else {})
        elif self.path == "/GetProfileConfig":
            profile = (body.get("config") or {}).get("profile")
            addresses = {"interface": {"addresses": ["10.200.200.200/24"]}}
            self.answer(200, addresses if profile == "python-profile" else {})
        elif self.path == "/ReleaseProfileConfig":
            self.answer(200, {})
        else:
            self.answer(404, {})

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Webhook).serve_forever()
"#;

/// A child process killed when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The webhook's POSTs so far: (path, body).
pub(crate) fn posts(log: &Path) -> Vec<(String, serde_json::Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["path"].as_str().unwrap_or_default().to_string(),
                v["body"].clone(),
            )
        })
        .collect()
}

/// The DeviceClass and the claim template; the pod is [`claim_pod`].
fn manifests() -> String {
    let devices = format!(
        r#"      requests:
      - name: req-veth
        exactly:
          deviceClassName: dranet-webhook.net
          selectors:
          - cel:
              expression: 'has(device.attributes["dra.net"].webhook_attr) && device.attributes["dra.net"].webhook_attr == "python" && device.attributes["dra.net"].ifName == "{VETH}"'
      config:
      - opaque:
          driver: dra.net
          parameters:
            profile: python-profile
"#
    );
    format!(
        "{}---{}",
        device_class("dranet-webhook.net", "dra.net"),
        claim_template("python-claim", &devices)
    )
}

pub(crate) fn upstreams_python_webhook_scenario(kit: &Kit) {
    let tmp = tempfile::tempdir().unwrap();
    let mut veths = Veths::default();
    veths.add(VETH);
    veths.add("drtw1");
    let before = host_link(VETH).expect("the veth exists");

    // The operator's webhook.
    let script = tmp.path().join("webhook.py");
    std::fs::write(&script, WEBHOOK).unwrap();
    let log = tmp.path().join("webhook.log");
    let hook_port = free_port();
    let _webhook = Killed(
        Command::new("python3")
            .arg(&script)
            .args([&hook_port.to_string(), VETH])
            .arg(&log)
            .spawn()
            .expect("python3"),
    );
    wait_for(
        "the webhook to listen",
        Duration::from_secs(20),
        || (http_get(hook_port, "/health")?.0 == 200).then_some(()),
        || "python3 webhook.py does not answer".into(),
    );

    // dranet as the node's driver, with the webhook as cloud and profile provider.
    let port = free_port();
    let mut cmd = kit.dranet_run(
        env!("CARGO_BIN_EXE_dranet"),
        &tmp.path().join("state"),
        port,
    );
    cmd.args(["--filter", VETH_FILTER])
        .args([
            "--cloud-provider-hint=webhook",
            "--profile-provider=webhook",
        ])
        .arg(format!("--webhook-url=http://127.0.0.1:{hook_port}"))
        .args(["--log", "info"]);
    let mut daemon = Daemon::spawn(cmd, tmp.path().join("dranet.log"));
    let tail = |d: &Daemon| dranet_testkit::kit::tail(&d.output(), 60);
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(port, "/readyz")?.0 == 200).then_some(()),
        || tail(&daemon),
    );

    // The slice carries the webhook's attribute on drtw0, and only there.
    let attr = |d: &serde_json::Value| {
        let a = &d["attributes"];
        a["webhook_attr"]["string"]
            .as_str()
            .or(a["dra.net/webhook_attr"]["string"].as_str())
            .map(str::to_string)
    };
    let devices = wait_for(
        "drtw0 with dra.net/webhook_attr in the slice",
        LIMIT,
        || {
            let list = kit.node_device_list("dra.net");
            list.iter()
                .any(|d| d["name"] == VETH && attr(d).as_deref() == Some("python"))
                .then_some(list)
        },
        || tail(&daemon),
    );
    let other = devices
        .iter()
        .find(|d| d["name"] == "drtw1")
        .expect("drtw1 published");
    assert_eq!(attr(other), None, "the attribute is drtw0's only");

    // A pod whose claim selects on the attribute and names the profile.
    kit.apply(&manifests());
    kit.apply(&claim_pod(
        "pod-python-webhook",
        "python-claim",
        kit.var("DRANET_K8S_BUSYBOX_IMAGE"),
        &format!(
            "echo MTU $(cat /sys/class/net/{VETH}/mtu); ip -o -4 addr show dev {VETH}; echo END; trap 'exit 0' TERM; sleep 100000 & wait"
        ),
    ));
    wait_for(
        "pod-python-webhook to be Ready",
        LIMIT,
        || kit.pod_ready("pod-python-webhook").then_some(()),
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", "pod-python-webhook"]),
                tail(&daemon)
            )
        },
    );
    let out = wait_for(
        "the container's output",
        LIMIT,
        || {
            let out = kit.logs("pod-python-webhook");
            out.contains("END").then_some(out)
        },
        || tail(&daemon),
    );
    eprintln!("pod output:\n{}", out.trim());
    assert!(
        out.contains("10.200.200.200/24"),
        "the profile's address: {out}"
    );
    assert!(out.contains("MTU 1450"), "the webhook's MTU: {out}");
    assert!(host_link(VETH).is_none(), "the veth left the host");

    // What the webhook was asked.
    let claim = kit
        .pod_claim("pod-python-webhook")
        .expect("the pod's claim");
    let claim_uid = kit.get_json(&["resourceclaim", &claim])["metadata"]["uid"]
        .as_str()
        .expect("claim uid")
        .to_string();
    let asked: Vec<serde_json::Value> = posts(&log)
        .into_iter()
        .filter(|(p, _)| p == "/GetProfileConfig")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["claim_uid"], claim_uid.as_str());
    assert_eq!(asked[0]["device"]["name"], VETH);
    assert_eq!(asked[0]["config"]["profile"], "python-profile");
    assert_eq!(
        asked[0]["config"]["interface"]["mtu"], 1450,
        "the webhook's device config is in the request"
    );

    // Deleting the pod releases the profile and gives the host its veth back.
    kit.kubectl_ok(&[
        "delete",
        "pod",
        "pod-python-webhook",
        "--wait=true",
        "--timeout=60s",
    ]);
    let released = wait_for(
        "ReleaseProfileConfig",
        LIMIT,
        || {
            let r: Vec<serde_json::Value> = posts(&log)
                .into_iter()
                .filter(|(p, _)| p == "/ReleaseProfileConfig")
                .map(|(_, b)| b)
                .collect();
            (!r.is_empty()).then_some(r)
        },
        || tail(&daemon),
    );
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["claim_uid"], claim_uid.as_str());
    assert_eq!(released[0]["device"]["name"], VETH);
    assert_eq!(released[0]["config"]["profile"], "python-profile");
    let after = wait_for(
        "the veth back on the host",
        LIMIT,
        || host_link(VETH),
        || tail(&daemon),
    );
    assert_eq!(after, before, "the host's veth after the pod");
    assert!(
        !tmp.path()
            .join("state/driver/profiles")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "no profile left recorded"
    );

    daemon.stop(Duration::from_secs(30));
    let _ = kit.kubectl(&["delete", "resourceclaimtemplate", "python-claim"]);
    let _ = kit.kubectl(&["delete", "deviceclass", "dranet-webhook.net"]);
}
