//! A minimal DRA driver built on `dranet-kubeletplugin`: four fake devices (attribute `index`),
//! prepared by writing a CDI spec for the claim (each device sets `MINIMAL_DEVICE=<device>` in
//! the container) and handing out its CDI device IDs, with the device metadata (KEP-5304) of each
//! request given at prepare: the container reads its devices' attributes at
//! `/var/run/kubernetes.io/dra-device-attributes/…/minimal.example.com-metadata.json`.
//!
//! On a node (as root, with a kubeconfig; NODE_NAME is the kubelet's node name):
//!
//! ```text
//! minimal_driver --node "$NODE_NAME" [--kubelet-root-dir /var/lib/kubelet] [--cdi-dir /var/run/cdi]
//! ```
//!
//! `RUST_LOG` sets the log level (default `info`).
//!
//! Without one, against an in-process fake API server and a temporary kubelet directory, playing
//! the kubelet once:
//!
//! ```text
//! cargo run --example minimal_driver -- --fake-apiserver --kubelet-root-dir /tmp/kubelet --run-for 2
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use dranet_kubeletplugin::cdi::{CdiDevice, CdiWriter, ContainerEdits};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeApi, KubeClient,
    KubeletPlugin, Prepared, PreparedDevice, PreparedMetadata,
};
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceRequestAllocationResult};

/// What device `dev<i>` is published with: its index.
fn attributes(device: &str) -> BTreeMap<String, DeviceAttribute> {
    let index = device.strip_prefix("dev").and_then(|i| i.parse().ok());
    BTreeMap::from_iter(index.map(|i| {
        (
            "index".to_string(),
            DeviceAttribute {
                int: Some(i),
                ..Default::default()
            },
        )
    }))
}

/// The driver: a CDI spec per claim, whose IDs the kubelet hands to the runtime.
struct Minimal {
    cdi: CdiWriter,
}

impl Driver for Minimal {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        let uid = &claim.claim_ref.uid;
        let edits = |dev: &str| ContainerEdits::default().env(format!("MINIMAL_DEVICE={dev}"));
        let ids = self.cdi.write_claim(
            uid,
            claim
                .results
                .iter()
                .map(|r| CdiDevice::new(&r.device, edits(&r.device)))
                .collect(),
        )?;
        let devices = claim
            .results
            .iter()
            .zip(ids)
            .map(|(r, id)| PreparedDevice {
                requests: vec![r.request.clone()],
                pool: r.pool.clone(),
                device: r.device.clone(),
                cdi_device_ids: vec![id],
                share_id: None,
                // Known now: the device metadata file says it before the container starts.
                metadata: Some(PreparedMetadata {
                    attributes: attributes(&r.device),
                    network_data: None,
                }),
            })
            .collect();
        tracing::info!(claim = %claim.claim_ref, "prepared");
        Ok(Prepared {
            devices,
            state: None,
        })
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        self.cdi.remove_claim(&claim.claim_ref.uid)?;
        tracing::info!(claim = %claim.claim_ref, "unprepared");
        Ok(())
    }
}

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "minimal.example.com")]
    driver: String,
    #[arg(long, env = "NODE_NAME", default_value = "node-1")]
    node: String,
    #[arg(long, default_value = dranet_kubeletplugin::DEFAULT_KUBELET_ROOT_DIR)]
    kubelet_root_dir: PathBuf,
    /// Where the container runtime reads CDI specs (default /var/run/cdi; with
    /// --fake-apiserver, <kubelet-root-dir>/cdi).
    #[arg(long)]
    cdi_dir: Option<PathBuf>,
    /// This pod's UID (downward API `metadata.uid`): lets a DaemonSet update with `maxSurge: 1`.
    #[arg(long, env = "POD_UID")]
    pod_uid: Option<String>,
    /// Use an in-process fake API server instead of a cluster, and play the kubelet once.
    #[arg(long)]
    fake_apiserver: bool,
    /// Stop after this many seconds instead of waiting for Ctrl-C or SIGTERM.
    #[arg(long)]
    run_for: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Display, with every cause: what an operator needs, not a Debug dump.
            let mut msg = format!("minimal_driver: error: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!("\n  caused by: {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let fake = if args.fake_apiserver {
        Some(FakeApiServer::start().await?)
    } else {
        None
    };
    let api = match &fake {
        Some(f) => {
            f.add_node(&args.node);
            f.client()?.field_manager(&args.driver)
        }
        None => KubeClient::infer()
            .await
            .map_err(|e| {
                format!("{e}\nno cluster to talk to: run in a cluster, set KUBECONFIG, or try --fake-apiserver")
            })?
            .field_manager(&args.driver),
    };
    let cdi_dir = args.cdi_dir.clone().unwrap_or_else(|| {
        if fake.is_some() {
            args.kubelet_root_dir.join("cdi")
        } else {
            PathBuf::from("/var/run/cdi")
        }
    });
    let driver = Minimal {
        cdi: CdiWriter::new(&cdi_dir, format!("{}/dev", args.driver))?,
    };
    let mut builder = KubeletPlugin::builder(driver, api.clone())
        .driver_name(&args.driver)
        .node_name(&args.node)
        .kubelet_root_dir(&args.kubelet_root_dir)
        .device_metadata(&cdi_dir);
    if let Some(uid) = &args.pod_uid {
        builder = builder.rolling_update(uid);
    }
    let plugin = builder.start().await?;
    plugin.publish(
        (0..4)
            .map(|i| {
                let name = format!("dev{i}");
                Device {
                    attributes: Some(attributes(&name)),
                    name,
                    ..Default::default()
                }
            })
            .collect(),
    )?;
    println!(
        "serving {} and {}; CDI specs in {}",
        plugin.registration_socket().display(),
        plugin.dra_socket().display(),
        cdi_dir.display()
    );

    if let Some(f) = &fake {
        // Allocate dev0 to a claim as the scheduler would, then call the plugin as the kubelet does.
        let claim = ClaimRef {
            namespace: "default".into(),
            name: "demo".into(),
            uid: "demo-uid".into(),
        };
        let dev0 = DeviceRequestAllocationResult {
            driver: args.driver.clone(),
            pool: args.node.clone(),
            device: "dev0".into(),
            request: "req".into(),
            ..Default::default()
        };
        f.put_claim(allocated_claim(&claim, vec![dev0]));
        let kubelet = FakeKubelet::connect(plugin.registration_socket()).await?;
        let prepared = kubelet.prepare(std::slice::from_ref(&claim)).await?;
        println!("prepare: {:?}", prepared.claims.get("demo-uid"));
        kubelet.unprepare(&[claim]).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let slices = api.list_slices(&args.node, &args.driver).await?.items;
        println!(
            "published {} ResourceSlice(s): {:?}",
            slices.len(),
            slices.iter().map(|s| &s.metadata.name).collect::<Vec<_>>()
        );
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let run_for = Duration::from_secs(args.run_for.unwrap_or(u64::MAX / 4));
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
        _ = tokio::time::sleep(run_for) => {},
    }
    plugin.shutdown().await?;
    println!("stopped; sockets removed");
    Ok(())
}
