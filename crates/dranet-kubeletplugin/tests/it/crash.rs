//! Crash safety: the plugin process is killed with SIGKILL between writing its checkpoint and
//! replying (and, separately, inside the driver's prepare), then restarted; prepare and unprepare
//! must still do the right thing.
//!
//! The plugin runs in a child process: this test binary re-executed with `--ignored --exact
//! crash_helper_process` and its settings in environment variables.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use dranet_kubeletplugin::checkpoint::{self, Phase};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_kubeletplugin::{
    ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeletPlugin, Metrics, PrepareState,
    Prepared,
};

const ENV_API: &str = "DRANET_CRASH_API";
const ENV_DIR: &str = "DRANET_CRASH_DIR";
const ENV_BLOCK_WRITE: &str = "DRANET_CRASH_BLOCK_WRITE";
const ENV_BLOCK_PREPARE: &str = "DRANET_CRASH_BLOCK_PREPARE";

/// The child's driver: appends each call to `<dir>/driver.log`, optionally blocking in prepare.
struct LogDriver {
    log: PathBuf,
    block_prepare: bool,
}

fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    f.sync_all().unwrap();
}

impl Driver for LogDriver {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        append(&self.log, &format!("prepare {}", claim.claim_ref.uid));
        if self.block_prepare {
            std::future::pending::<()>().await;
        }
        Ok(prepared_for(&claim.results))
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        let state = match &claim.state {
            PrepareState::Prepared(p) => {
                format!(
                    "prepared {}",
                    p.devices
                        .iter()
                        .map(|d| d.device.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }
            PrepareState::Interrupted => "interrupted".into(),
            other => format!("{other:?}"),
        };
        append(
            &self.log,
            &format!("unprepare {} {state}", claim.claim_ref.uid),
        );
        Ok(())
    }
}

/// Blocks forever after the Nth checkpoint write is on disk, i.e. before the reply goes out, and
/// says so with a marker file for the parent.
struct BlockAfterWrite {
    n: usize,
    seen: AtomicUsize,
    marker: PathBuf,
}

impl Metrics for BlockAfterWrite {
    fn checkpoint_write(&self, ok: bool, _elapsed: Duration) {
        if ok && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.n {
            append(&self.marker, "checkpoint written");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of the crash tests"]
async fn crash_helper_process() {
    let (Ok(url), Ok(dir)) = (std::env::var(ENV_API), std::env::var(ENV_DIR)) else {
        panic!(
            "crash_helper_process needs {ENV_API} and {ENV_DIR}; it is started by the crash tests"
        );
    };
    let dir = PathBuf::from(dir);
    let driver = LogDriver {
        log: dir.join("driver.log"),
        block_prepare: std::env::var(ENV_BLOCK_PREPARE).is_ok(),
    };
    let api = dranet_kubeletplugin::KubeClient::for_url(&url)
        .unwrap()
        .field_manager(DRIVER);
    let mut builder = KubeletPlugin::builder(driver, api)
        .driver_name(DRIVER)
        .node_name(NODE)
        .kubelet_root_dir(dir.join("kubelet"));
    if let Some(n) = std::env::var(ENV_BLOCK_WRITE)
        .ok()
        .and_then(|n| n.parse().ok())
    {
        builder = builder.metrics(Arc::new(BlockAfterWrite {
            n,
            seen: AtomicUsize::new(0),
            marker: dir.join("blocked"),
        }));
    }
    let _plugin = builder.start().await.unwrap();
    std::future::pending::<()>().await;
}

/// The child process; killed with SIGKILL when dropped.
struct PluginProcess(Child);

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl PluginProcess {
    fn spawn(api: &FakeApiServer, dir: &Path, env: &[(&str, &str)]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--ignored",
            "--exact",
            "crash::crash_helper_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_API, api.url())
        .env(ENV_DIR, dir)
        .env_remove(ENV_BLOCK_WRITE)
        .env_remove(ENV_BLOCK_PREPARE)
        .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self(cmd.spawn().unwrap())
    }

    /// SIGKILL: no destructor, no socket cleanup, nothing flushed that was not already.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

fn reg_socket(dir: &Path) -> PathBuf {
    dir.join("kubelet/plugins_registry")
        .join(format!("{DRIVER}-reg.sock"))
}

async fn connect(dir: &Path) -> FakeKubelet {
    for _ in 0..500 {
        if let Ok(k) = FakeKubelet::connect(&reg_socket(dir)).await {
            return k;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("plugin process did not come up");
}

fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("driver.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn checkpoint_entries(
    dir: &Path,
) -> std::collections::BTreeMap<String, checkpoint::CheckpointEntry> {
    let bytes = std::fs::read(dir.join("kubelet/plugins").join(DRIVER).join("checkpoint")).unwrap();
    checkpoint::decode(&bytes).unwrap().claims
}

/// The plugin reads its claims from the fake API server (`FakeApiServer`); the name says so.
mod fake_apiserver {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigkill_between_checkpoint_and_reply_then_restart() {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        api.put_claim(claim("c1", vec![result(DRIVER, "eth1", "nic")]));

        // Write 1 records "preparing", write 2 records the driver's result; block after that.
        let child = PluginProcess::spawn(&api, dir.path(), &[(ENV_BLOCK_WRITE, "2")]);
        let kubelet = connect(dir.path()).await;
        let call = tokio::spawn(async move { kubelet.prepare(&[claim_ref("c1")]).await });
        assert!(
            eventually(20, || dir.path().join("blocked").exists()).await,
            "never reached the checkpoint"
        );
        child.kill();
        let lost = call.await.unwrap();
        assert!(
            lost.is_err(),
            "the kubelet must not have had a reply: {lost:?}"
        );
        assert_eq!(
            checkpoint_entries(dir.path())["uid-c1"].phase,
            Phase::Prepared
        );
        assert!(
            reg_socket(dir.path()).exists(),
            "SIGKILL leaves the socket behind"
        );

        // Restart: the stale sockets are replaced, the kubelet retries and gets the same answer
        // without the driver preparing twice.
        let _child = PluginProcess::spawn(&api, dir.path(), &[]);
        let kubelet = connect(dir.path()).await;
        let resp = kubelet.prepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        assert_eq!(resp.claims["uid-c1"].devices[0].device_name, "eth1");
        assert_eq!(log_lines(dir.path()), vec!["prepare uid-c1"]);

        let resp = kubelet.unprepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        assert_eq!(
            log_lines(dir.path()),
            vec!["prepare uid-c1", "unprepare uid-c1 prepared eth1"]
        );
        assert!(!checkpoint_entries(dir.path()).contains_key("uid-c1"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigkill_inside_driver_prepare_then_restart() {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        api.put_claim(claim("c2", vec![result(DRIVER, "eth2", "nic")]));
        api.put_claim(claim("c3", vec![result(DRIVER, "eth3", "nic")]));

        let child = PluginProcess::spawn(&api, dir.path(), &[(ENV_BLOCK_PREPARE, "1")]);
        let kubelet = connect(dir.path()).await;
        let call =
            tokio::spawn(async move { kubelet.prepare(&[claim_ref("c2"), claim_ref("c3")]).await });
        assert!(
            eventually(20, || log_lines(dir.path()).len() == 2).await,
            "driver never called"
        );
        child.kill();
        assert!(call.await.unwrap().is_err());
        let entries = checkpoint_entries(dir.path());
        assert_eq!(entries["uid-c2"].phase, Phase::Preparing);
        assert_eq!(entries["uid-c3"].phase, Phase::Preparing);

        let _child = PluginProcess::spawn(&api, dir.path(), &[]);
        let kubelet = connect(dir.path()).await;
        // The kubelet retries c2: an interrupted prepare runs again.
        let resp = kubelet.prepare(&[claim_ref("c2")]).await.unwrap();
        assert_eq!(resp.claims["uid-c2"].devices[0].device_name, "eth2");
        // The pod of c3 went away meanwhile: unprepare still reaches the driver to clean up.
        let resp = kubelet.unprepare(&[claim_ref("c3")]).await.unwrap();
        assert_eq!(resp.claims["uid-c3"].error, "");
        let lines = log_lines(dir.path());
        assert_eq!(
            lines.iter().filter(|l| *l == "prepare uid-c2").count(),
            2,
            "{lines:?}"
        );
        assert!(
            lines.contains(&"unprepare uid-c3 interrupted".to_string()),
            "{lines:?}"
        );
        let entries = checkpoint_entries(dir.path());
        assert_eq!(entries["uid-c2"].phase, Phase::Prepared);
        assert!(!entries.contains_key("uid-c3"));
    }
}
