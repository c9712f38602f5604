//! What the driver's tests share: the test kit's network namespaces (built and inspected with
//! iproute2, an independent oracle: the tests never judge our netlink code with our netlink
//! code), and drivers and pods on them.

#![allow(dead_code)]

pub mod claims;

// The bench includes this module too and uses less of it.
#[allow(unused_imports)]
pub use dranet_testkit::netns::{Ns, host_with_veth};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dranet_core::{Discover, Netdev, NetworkDevice};
use dranet_driver::{NetworkDriver, NetworkDriverBuilder, Rescan};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::AllocatedDeviceStatus;
use dranet_nri::{Namespace, PodSandbox};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;

/// A driver's builder for the node whose sysfs is `sysfs`, its state under `state` (the same
/// `state` again: as after a restart), in this network namespace, RDMA in shared mode; each
/// rescan counted in `scans`.
pub fn driver_builder(sysfs: &Path, state: &Path, scans: Arc<AtomicUsize>) -> NetworkDriverBuilder {
    let sysfs = sysfs.to_path_buf();
    let rescan: Rescan = Arc::new(move || {
        scans.fetch_add(1, Ordering::SeqCst);
        dranet_discovery::host(&sysfs, Default::default())
            .discover()
            .map_err(|e| e.to_string())
    });
    let podnet = PodNet::new(Netns::current().unwrap(), state.join("podnet")).unwrap();
    NetworkDriver::builder(podnet, state.join("driver"), rescan).rdma_mode(NetnsMode::Shared)
}

/// Root and iproute2 are needed; without them the test prints why and passes.
pub fn can_run(test: &str) -> bool {
    dranet_testkit::root::can_run_netns(test)
}

/// A veth end as a netdev device, published as `dev-<name>` so that messages can be checked for
/// the host's link name apart from the device's.
pub fn veth(name: &str) -> NetworkDevice {
    NetworkDevice {
        name: format!("dev-{name}"),
        pci: None,
        netdev: Some(Netdev {
            name: name.into(),
            kind: Some("veth".into()),
            virtual_: true,
            ..Default::default()
        }),
        rdma: None,
    }
}

/// A driver whose node has the veth ends `links` of `host` (as [`veth`] devices), its state
/// under `state` (the same `state` again: as after a restart), RDMA in shared mode.
pub fn veth_driver(host: &Ns, state: &Path, links: &[&str]) -> NetworkDriver {
    veth_driver_with(host, state, links, |b| b)
}

/// [`veth_driver`], its builder first given to `more`.
pub fn veth_driver_with(
    host: &Ns,
    state: &Path,
    links: &[&str],
    more: impl FnOnce(NetworkDriverBuilder) -> NetworkDriverBuilder,
) -> NetworkDriver {
    let devices: Vec<NetworkDevice> = links.iter().map(|l| veth(l)).collect();
    let rescan: Rescan = Arc::new(move || {
        Ok(dranet_core::Inventory {
            devices: devices.clone(),
            ..Default::default()
        })
    });
    let podnet = PodNet::new(Netns::open(host.path()).unwrap(), state.join("podnet")).unwrap();
    more(NetworkDriver::builder(podnet, state.join("driver"), rescan).rdma_mode(NetnsMode::Shared))
        .build()
        .unwrap()
}

/// The claim status entries a driver writes, each write's in turn.
pub type Statuses = Arc<std::sync::Mutex<Vec<Vec<AllocatedDeviceStatus>>>>;

/// A claim status writer that keeps what it is given, and the list it keeps.
pub fn status_sink() -> (dranet_driver::StatusWriter, Statuses) {
    let written: Statuses = Arc::default();
    let sink = written.clone();
    let writer: dranet_driver::StatusWriter = Arc::new(move |_ns, _name, devices| {
        sink.lock().unwrap().push(devices);
        Box::pin(async { Ok(()) })
    });
    (writer, written)
}

/// Pod `pod-<uid>` (namespace `ml`, sandbox `sandbox-<uid>`) in the network namespace `netns`.
pub fn pod(uid: &str, netns: &Ns) -> PodSandbox {
    PodSandbox {
        id: format!("sandbox-{uid}"),
        name: format!("pod-{uid}"),
        namespace: "ml".into(),
        uid: uid.into(),
        namespaces: vec![Namespace {
            kind: "network".into(),
            path: netns.path().display().to_string(),
        }],
        ..Default::default()
    }
}

/// An Event writer for the daemon's hooks that keeps what it is given, and the list it keeps.
pub fn event_sink() -> (
    dranet_driver::daemon::EventWriter,
    Arc<std::sync::Mutex<Vec<dranet_kubeletplugin::k8s_openapi::api::core::v1::Event>>>,
) {
    let events: Arc<std::sync::Mutex<Vec<_>>> = Arc::default();
    let sink = events.clone();
    let writer: dranet_driver::daemon::EventWriter = Arc::new(move |ev| {
        sink.lock().unwrap().push(ev);
        Box::pin(async { Ok(()) })
    });
    (writer, events)
}
