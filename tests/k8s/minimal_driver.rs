//! `examples/minimal_driver.rs` as the DRA driver of a real Kubernetes node (v1.34.9 and v1.36.3,
//! one test each): the stock
//! kubelet registers it, the scheduler allocates its devices, the kubelet prepares and unprepares
//! claims through it (the device metadata it returns from prepare is in the container's file), and
//! a driver killed with SIGKILL comes back and still unprepares what it had prepared. Needs root and the kit (`../shared/k8s/`); skipped with a message otherwise.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dranet_testkit::kit::{Daemon, Kit, tail, wait_for};

use crate::manifests::{claim_template, device_class};

const DRIVER: &str = "minimal.example.com";
const LIMIT: Duration = Duration::from_secs(60);

fn example_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe
        .parent()?
        .parent()?
        .join("examples")
        .join("minimal_driver");
    p.exists().then_some(p)
}

fn start_driver(kit: &Kit, bin: &PathBuf, log: PathBuf) -> Daemon {
    let mut cmd = kit.command(bin);
    cmd.args(["--node", kit.node(), "--kubelet-root-dir"])
        .arg(kit.kubelet_root_dir())
        .arg("--cdi-dir")
        .arg(kit.var("DRANET_K8S_CDI_DIR"))
        .env("RUST_LOG", "info,dranet_kubeletplugin=debug")
        .env_remove("POD_UID");
    Daemon::spawn(cmd, log)
}

/// Waits until `driver` logs that the kubelet registered it; the kubelet's log says why not.
fn wait_registered(kit: &Kit, driver: &Daemon, what: &str) {
    wait_for(
        what,
        LIMIT,
        || {
            driver
                .output()
                .contains("kubelet registered the plugin")
                .then_some(())
        },
        || {
            format!(
                "driver:\n{}\nkubelet:\n{}",
                driver.output(),
                tail(&kit.log("kubelet"), 40)
            )
        },
    );
}

fn pod_manifest(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - {{name: dev, resourceClaimTemplateName: minimal-one-dev}}
  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "env | grep MINIMAL_DEVICE; cat {METADATA}; echo; trap 'exit 0' TERM; sleep 100000 & wait"]
    resources:
      claims: [{{name: dev}}]
"#,
        image = "localhost/dranet-k8s/busybox:1"
    )
}

/// Where the container finds the metadata the driver gave at prepare for request `dev` of the
/// pod's claim `dev`.
const METADATA: &str = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/dev/dev/minimal.example.com-metadata.json";

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

pub(crate) fn the_stock_kubelet_registers_prepares_and_unprepares_through_the_example_driver(
    kit: &Kit,
) {
    let bin = example_binary().expect("examples/minimal_driver is built (by `cargo test`)");
    let started = Instant::now();
    let logs = tempfile::tempdir().unwrap();
    let cdi_dir = PathBuf::from(kit.var("DRANET_K8S_CDI_DIR"));
    let mut driver = start_driver(kit, &bin, logs.path().join("driver-1.log"));

    // 1. The kubelet registers the driver: GetInfo on the registration socket (with grpc-go's
    //    percent-encoded authority), then NotifyRegistrationStatus(registered).
    wait_registered(kit, &driver, "the kubelet to register the driver");
    kit.say(format_args!("registered after {:.1?}", started.elapsed()));

    // 2. Its slice appears, owned by the Node.
    let node_uid = kit.get_json(&["node", kit.node()])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let slice = wait_for(
        "the driver's ResourceSlice",
        LIMIT,
        || {
            let list = kit.get_json(&["resourceslices"]);
            list["items"]
                .as_array()?
                .iter()
                .find(|s| s["spec"]["driver"] == DRIVER)
                .cloned()
        },
        || driver.output(),
    );
    assert_eq!(slice["spec"]["nodeName"], kit.node());
    assert_eq!(slice["spec"]["devices"].as_array().unwrap().len(), 4);
    let owner = &slice["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["uid"], node_uid.as_str());

    // 3. A pod with a claim template for one device runs with the device's CDI environment.
    let devices = format!(
        "      requests:\n      - name: dev\n        exactly: {{deviceClassName: {DRIVER}}}\n"
    );
    // The class and template first, as a cluster has them before its pods: a pod applied with
    // them can meet a scheduler whose cache lacks the class yet, and wait out its backoff (13-15 s
    // seen on v1.36).
    kit.apply(&format!(
        "{}---{}",
        device_class(DRIVER, DRIVER),
        claim_template("minimal-one-dev", &devices),
    ));
    kit.apply(&pod_manifest("minimal-a"));
    wait_for(
        "pod minimal-a to be Ready",
        LIMIT,
        || kit.pod_ready("minimal-a").then_some(()),
        || {
            format!(
                "pod: {}\ndriver:\n{}",
                kit.kubectl_ok(&["describe", "pod", "minimal-a"]),
                driver.output()
            )
        },
    );
    let logs_a = wait_for(
        "the container's output",
        LIMIT,
        || {
            let out = kit.logs("minimal-a");
            out.contains("MINIMAL_DEVICE=dev").then_some(out)
        },
        || driver.output(),
    );
    kit.say(format_args!(
        "pod running after {:.1?}: {}",
        started.elapsed(),
        logs_a.trim()
    ));
    let claim_a = kit
        .pod_claim("minimal-a")
        .expect("pod minimal-a has a claim");
    // The device metadata the driver returned from prepare, in the file before the container ran.
    let device = logs_a
        .lines()
        .find_map(|l| l.strip_prefix("MINIMAL_DEVICE="))
        .expect("the device's environment")
        .to_string();
    let stream: Vec<serde_json::Value> = logs_a
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(stream.len(), 2, "v1beta1 and v1alpha1: {logs_a}");
    let m = &stream[1];
    assert_eq!(m["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
    assert_eq!(m["metadata"]["name"], claim_a.as_str());
    assert_eq!(m["metadata"]["generation"], 1);
    assert_eq!(m["podClaimName"], "dev");
    let d = &m["requests"][0]["devices"][0];
    assert_eq!(d["driver"], DRIVER);
    assert_eq!(d["name"], device.as_str(), "{m}");
    let index: i64 = device.trim_start_matches("dev").parse().expect("devN");
    assert_eq!(d["attributes"]["index"]["int"], index, "{m}");
    let spec_files = || {
        std::fs::read_dir(&cdi_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("minimal.example.com_dev-")
            })
            .count()
    };
    assert_eq!(spec_files(), 1, "one CDI spec for the prepared claim");

    // 4. Deleting the pod unprepares its claim: the driver is called, the CDI spec is gone.
    kit.kubectl_ok(&["delete", "pod", "minimal-a", "--wait=false"]);
    wait_for(
        "the claim of minimal-a to be unprepared",
        LIMIT,
        || {
            (driver.output().contains(&format!("default/{claim_a}"))
                && count(&driver.output(), "unprepared") >= 1
                && spec_files() == 0)
                .then_some(())
        },
        || driver.output(),
    );

    // 5. A second pod is prepared; the driver is killed with SIGKILL and restarted: the kubelet
    //    registers it again, and deleting the pod reaches the new process, which unprepares the
    //    claim the old one prepared (from the checkpoint).
    kit.apply(&pod_manifest("minimal-b"));
    wait_for(
        "pod minimal-b to be Ready",
        LIMIT,
        || kit.pod_ready("minimal-b").then_some(()),
        || driver.output(),
    );
    let claim_b = kit
        .pod_claim("minimal-b")
        .expect("pod minimal-b has a claim");
    driver.kill();
    let mut driver = start_driver(kit, &bin, logs.path().join("driver-2.log"));
    wait_registered(kit, &driver, "the kubelet to register the restarted driver");
    kit.kubectl_ok(&["delete", "pod", "minimal-b", "--wait=false"]);
    wait_for(
        "the restarted driver to unprepare the claim of minimal-b",
        LIMIT,
        || {
            let out = driver.output();
            (out.contains("unprepared")
                && out.contains(&format!("default/{claim_b}"))
                && spec_files() == 0)
                .then_some(())
        },
        || driver.output(),
    );
    // The cluster serves the next scenario: the objects this one made go.
    kit.kubectl_ok(&["delete", "deviceclass", DRIVER]);
    kit.kubectl_ok(&["delete", "resourceclaimtemplate", "minimal-one-dev"]);
    let status = driver.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "driver did not exit cleanly on SIGTERM: {status:?}\n{}",
        driver.output()
    );
}
