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
//! - the webhook also serves runtime hooks (`/health` `runtimeHook`): `GetRuntimeHook` gives
//!   `drtw0` a shell script, which runs once for the pod, after the veth is in and configured, in
//!   the pod's network namespace, with the provider's arguments and data and the pod's identity
//!   in its environment; a restarted container does not run it again;
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

/// What every test webhook shares, put before its own code by [`start_webhook`]: a handler that
/// answers JSON and logs each POST (path and body, one line of JSON) to the file `LOG` its
/// subclass names, and `serve`.
const PRELUDE: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    LOG = None

    def answer(self, code, doc):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(doc).encode())

    def posted(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with open(self.LOG, "a") as log:
            log.write(json.dumps({"path": self.path, "body": body}) + "\n")
        return body

    def log_message(self, *args):
        pass


def serve(port, handler):
    HTTPServer(("127.0.0.1", port), handler).serve_forever()
"#;

/// The operator's webhook: upstream's protocol.
const WEBHOOK: &str = r#"
PORT, DEVICE, LOG, HOOK = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


class Webhook(JsonHandler):
    LOG = LOG

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"cloudProvider": True, "profileProvider": True, "runtimeHook": True})
        else:
            self.answer(404, {})

    def do_POST(self):
        body = self.posted()
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
        elif self.path == "/GetRuntimeHook":
            hook = {"path": HOOK, "args": ["--claim", body["claim_uid"]],
                    "timeoutSeconds": 5, "data": {"vlan": 7}}
            self.answer(200, hook if body["device"]["name"] == DEVICE else None)
        else:
            self.answer(404, {})


serve(PORT, Webhook)
"#;

/// The provider's runtime hook: what it was given and what it sees, appended to a log.
fn hook_script(log: &Path) -> String {
    format!(
        "#!/bin/sh\n{{ echo RUN; echo \"ARGS $*\"; echo \"DATA $(cat)\"; env | grep ^DRANET_ | sort; \
         echo \"LINKS $(ip -o link show | cut -d: -f2 | tr -d ' ' | tr '\\n' ' ')\"; \
         echo \"ADDR $(ip -o -4 addr show dev {VETH})\"; echo END; }} >> {}\n",
        log.display()
    )
}

/// A child process killed when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `python3 SCRIPT PORT ARGS...` (the webhook's own `code` after [`PRELUDE`], in
/// `dir/webhook.py`), once it answers `GET /health`; its port.
pub(crate) fn start_webhook(dir: &Path, code: &str, args: &[&std::ffi::OsStr]) -> (Killed, u16) {
    let script = dir.join("webhook.py");
    std::fs::write(&script, format!("{PRELUDE}\n{code}")).unwrap();
    let port = free_port();
    let child = Killed(
        Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .args(args)
            .spawn()
            .expect("python3"),
    );
    wait_for(
        "the webhook to listen",
        Duration::from_secs(20),
        || (http_get(port, "/health")?.0 == 200).then_some(()),
        || "python3 webhook.py does not answer".into(),
    );
    (child, port)
}

/// `dranet run` as the node's driver on the test veths (state in `dir`), asking the webhook at
/// `webhook_port` with `flags` (which of its capabilities), once `/readyz` answers 200; its
/// metrics port.
pub(crate) fn start_daemon(
    kit: &Kit,
    dir: &Path,
    webhook_port: u16,
    flags: &[&str],
) -> (Daemon, u16) {
    let port = free_port();
    let mut cmd = kit.dranet_run(env!("CARGO_BIN_EXE_dranet"), &dir.join("state"), port);
    cmd.args(["--filter", VETH_FILTER])
        .args(flags)
        .arg(format!("--webhook-url=http://127.0.0.1:{webhook_port}"))
        .args(["--log", "info"]);
    let daemon = Daemon::spawn(cmd, dir.join("dranet.log"));
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(port, "/readyz")?.0 == 200).then_some(()),
        || dranet_testkit::kit::tail(&daemon.output(), 60),
    );
    (daemon, port)
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

    // The operator's webhook, and its runtime hook.
    let log = tmp.path().join("webhook.log");
    let hook = tmp.path().join("runtime-hook.sh");
    let hook_log = tmp.path().join("runtime-hook.log");
    std::fs::write(&hook, hook_script(&hook_log)).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (_webhook, hook_port) = start_webhook(
        tmp.path(),
        WEBHOOK,
        &[VETH.as_ref(), log.as_os_str(), hook.as_os_str()],
    );

    // dranet as the node's driver, with the webhook as cloud and profile provider.
    let (mut daemon, _) = start_daemon(
        kit,
        tmp.path(),
        hook_port,
        &[
            "--cloud-provider-hint=webhook",
            "--profile-provider=webhook",
        ],
    );
    let tail = |d: &Daemon| dranet_testkit::kit::tail(&d.output(), 60);

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

    // The provider's runtime hook ran once, after dranet's attach (the veth is in, with the
    // profile's address), in the pod's network namespace (drtw0 is there, the host's drtw1 is
    // not), with the provider's arguments and data and the pod's identity.
    let runs = std::fs::read_to_string(&hook_log).unwrap_or_default();
    kit.say(format_args!("the runtime hook saw:\n{}", runs.trim()));
    assert_eq!(runs.matches("RUN\n").count(), 1, "one run: {runs}");
    assert!(
        runs.contains(&format!("ARGS --claim {claim_uid}")),
        "{runs}"
    );
    assert!(runs.contains(r#"DATA {"vlan":7}"#), "{runs}");
    assert!(
        runs.contains("DRANET_POD_NAME=pod-python-webhook"),
        "{runs}"
    );
    assert!(runs.contains("DRANET_POD_NAMESPACE=default"), "{runs}");
    assert!(runs.contains("DRANET_CONTAINER_NAME=c\n"), "{runs}");
    assert!(
        runs.contains(&format!(r#""device":"{VETH}","interface":"{VETH}""#)),
        "{runs}"
    );
    let links = runs
        .lines()
        .find_map(|l| l.strip_prefix("LINKS "))
        .unwrap_or_default();
    assert!(
        links
            .split_whitespace()
            .any(|l| l == VETH || l.starts_with(&format!("{VETH}@"))),
        "the pod's {VETH} in the hook's network namespace: {links}"
    );
    assert!(
        !links.split_whitespace().any(|l| l.starts_with("drtw1")),
        "the host's drtw1 is not in the hook's network namespace: {links}"
    );
    assert!(runs.contains("10.200.200.200/24"), "{runs}");
    let hooks_asked: Vec<serde_json::Value> = posts(&log)
        .into_iter()
        .filter(|(p, _)| p == "/GetRuntimeHook")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(hooks_asked.len(), 1, "{hooks_asked:?}");
    assert_eq!(hooks_asked[0]["claim_uid"], claim_uid.as_str());
    // Once per pod: a restarted container does not run it again.
    assert!(kit.kill_container("pod-python-webhook"), "ctr task kill");
    wait_for(
        "pod-python-webhook's container restarted and Ready",
        LIMIT,
        || {
            let p = kit.get_json(&["pod", "pod-python-webhook"]);
            let restarts = p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0);
            (restarts >= 1 && kit.pod_ready("pod-python-webhook")).then_some(())
        },
        || kit.kubectl_ok(&["describe", "pod", "pod-python-webhook"]),
    );
    let runs = std::fs::read_to_string(&hook_log).unwrap_or_default();
    assert_eq!(runs.matches("RUN\n").count(), 1, "still one run: {runs}");

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
