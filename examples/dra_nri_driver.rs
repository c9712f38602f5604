//! A DRA driver that is also an NRI plugin, in one process: the shape of dranet itself.
//!
//! The kubelet prepares a claim through the DRA side (`Driver`); the driver remembers which pods
//! reserved the claim (`status.reservedFor`) and which devices it got. When the runtime creates a
//! container of one of those pods, the NRI side (`NriPlugin`) adds the device nodes. Both traits
//! are imported from their crates without renames.
//!
//! Without a cluster, against the crates' fakes (API server, kubelet, runtime), playing one pod:
//!
//! ```text
//! cargo run --example dra_nri_driver -- --fake
//! ```
//!
//! On a node: `dra_nri_driver --node "$NODE_NAME" --nri-socket /var/run/nri/nri.sock`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use clap::Parser;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    Device, DeviceRequestAllocationResult, ResourceClaimConsumerReference,
};
use dranet_kubeletplugin::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeClient, KubeletPlugin,
    Prepared, PreparedDevice,
};
use dranet_nri::fake::FakeRuntime;
use dranet_nri::{
    Container, ContainerAdjustment, Event, EventMask, LinuxDevice, NriPlugin, PodSandbox,
    RunnerBuilder,
};

const DRIVER: &str = "accel.example.com";

/// One driver, two faces. Devices `accel0`…`accel3` are char devices 240:N.
#[derive(Default)]
struct Accel {
    /// Pod UID → device minors, filled at prepare, read at container creation.
    pods: Mutex<HashMap<String, Vec<u32>>>,
}

fn minor(device: &str) -> Result<u32, HandlerError> {
    device
        .strip_prefix("accel")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{device:?} is not one of this driver's devices").into())
}

impl Driver for Accel {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        let minors = claim
            .results
            .iter()
            .map(|r| minor(&r.device))
            .collect::<Result<Vec<_>, _>>()?;
        let reserved = claim
            .claim
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.clone())
            .unwrap_or_default();
        let mut pods = self.pods.lock().map_err(|_| "state lock poisoned")?;
        for consumer in reserved.iter().filter(|c| c.resource == "pods") {
            pods.entry(consumer.uid.clone())
                .or_default()
                .extend(&minors);
        }
        // The work happens in the NRI hook: no CDI devices to hand to the runtime.
        let devices = claim
            .results
            .iter()
            .map(|r| PreparedDevice::for_result(r, Vec::new()))
            .collect();
        Ok(Prepared {
            devices,
            state: Some(
                serde_json::json!({ "pods": reserved.iter().map(|c| &c.uid).collect::<Vec<_>>() }),
            ),
        })
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        if let dranet_kubeletplugin::PrepareState::Prepared(p) = &claim.state
            && let Some(uids) = p.state.as_ref().and_then(|s| s["pods"].as_array())
        {
            let mut pods = self.pods.lock().map_err(|_| "state lock poisoned")?;
            for uid in uids.iter().filter_map(|u| u.as_str()) {
                pods.remove(uid);
            }
        }
        Ok(())
    }
}

impl NriPlugin for Accel {
    async fn create_container(
        &self,
        pod: &PodSandbox,
        _: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        let minors = self
            .pods
            .lock()
            .map_err(|_| "state lock poisoned")?
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        let mut adj = ContainerAdjustment::new();
        for m in minors {
            adj.add_device(LinuxDevice::char(
                format!("/dev/accel{m}"),
                240,
                i64::from(m),
            ))?;
        }
        Ok(adj)
    }
}

#[derive(Parser)]
struct Args {
    /// Run against the crates' fakes and play one pod.
    #[arg(long)]
    fake: bool,
    #[arg(long, env = "NODE_NAME", default_value = "node-1")]
    node: String,
    #[arg(long, default_value = dranet_kubeletplugin::DEFAULT_KUBELET_ROOT_DIR)]
    kubelet_root_dir: PathBuf,
    #[arg(long, default_value = dranet_nri::DEFAULT_SOCKET_PATH)]
    nri_socket: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let accel = Arc::new(Accel::default());
    let devices: Vec<Device> = (0..4)
        .map(|i| Device {
            name: format!("accel{i}"),
            ..Default::default()
        })
        .collect();
    if !args.fake {
        let api = KubeClient::infer().await?.field_manager(DRIVER);
        let plugin = KubeletPlugin::builder(Arc::clone(&accel), api)
            .driver_name(DRIVER)
            .node_name(&args.node)
            .kubelet_root_dir(&args.kubelet_root_dir)
            .start()
            .await?;
        plugin.publish(devices)?;
        let nri = RunnerBuilder::new()
            .name("accel")
            .index(50)
            .socket(&args.nri_socket)
            .events(EventMask::of(&[Event::CreateContainer]))
            .build_shared(accel)?;
        tokio::select! {
            r = nri.run() => r?,
            e = plugin.failed() => return Err(e.into()),
            _ = tokio::signal::ctrl_c() => {}
        }
        plugin.shutdown().await?;
        return Ok(());
    }

    // The same process against the fakes: an API server, a kubelet, a container runtime.
    let dir = tempfile::tempdir()?;
    let api = FakeApiServer::start().await?;
    api.add_node(&args.node);
    let plugin = KubeletPlugin::builder(Arc::clone(&accel), api.client()?.field_manager(DRIVER))
        .driver_name(DRIVER)
        .node_name(&args.node)
        .kubelet_root_dir(dir.path())
        .start()
        .await?;
    plugin.publish(devices)?;
    let (ours, runtime_end) = tokio::net::UnixStream::pair()?;
    let nri = RunnerBuilder::new()
        .name("accel")
        .index(50)
        .from_env(false)
        .connection(ours)
        .events(EventMask::of(&[Event::CreateContainer]))
        .build_shared(Arc::clone(&accel))?;
    tokio::spawn(nri.run());
    let mut runtime = FakeRuntime::new(runtime_end);
    runtime.expect_registration().await?;
    runtime.configure("fake", "0").await?;

    // The scheduler allocated accel2 to a claim reserved for pod "pod-uid-1".
    let claim = ClaimRef {
        namespace: "default".into(),
        name: "accel-claim".into(),
        uid: "claim-uid-1".into(),
    };
    let mut object = allocated_claim(
        &claim,
        vec![DeviceRequestAllocationResult {
            driver: DRIVER.into(),
            pool: args.node.clone(),
            device: "accel2".into(),
            request: "accel".into(),
            ..Default::default()
        }],
    );
    if let Some(status) = object.status.as_mut() {
        status.reserved_for = Some(vec![ResourceClaimConsumerReference {
            resource: "pods".into(),
            name: "worker".into(),
            uid: "pod-uid-1".into(),
            ..Default::default()
        }]);
    }
    api.put_claim(object);
    let kubelet = FakeKubelet::connect(plugin.registration_socket()).await?;
    let prepared = kubelet.prepare(std::slice::from_ref(&claim)).await?;
    let error = &prepared.claims["claim-uid-1"].error;
    if !error.is_empty() {
        return Err(format!("prepare failed: {error}").into());
    }
    let pod = PodSandbox {
        uid: "pod-uid-1".into(),
        name: "worker".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    let adj = runtime
        .create_container(&pod, &Container::default())
        .await?;
    for d in adj.devices() {
        println!(
            "container of pod worker gets {} (c {}:{})",
            d.path, d.major, d.minor
        );
    }
    kubelet.unprepare(&[claim]).await?;
    let adj = runtime
        .create_container(&pod, &Container::default())
        .await?;
    println!("after unprepare: {} device(s)", adj.devices().len());
    plugin.shutdown().await?;
    Ok(())
}
