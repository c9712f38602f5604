//! Discovery of the real host (udev + netlink) from every kind of caller an embedder has: plain
//! sync code, and inside tokio runtimes of both flavours (a driver's `#[tokio::main]`), where the
//! netlink dump used to start its own runtime and panic ("Cannot start a runtime from within a
//! runtime").

use std::path::Path;
use std::sync::Arc;

use dranet_core::Discover;

fn discovery() -> impl Discover<Error = dranet_discovery::Error> + Send + Sync + 'static {
    dranet_discovery::host(Path::new("/sys"), Default::default())
}

#[test]
fn discover_from_plain_sync_code() {
    let inv = discovery().discover().unwrap();
    // Whatever this host has, the scan ran through netlink to the end.
    let _ = inv.devices.len();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_inside_a_multi_thread_runtime() {
    let sync = discovery().discover().unwrap();
    let asynchronous = Arc::new(dranet_discovery::host(
        Path::new("/sys"),
        Default::default(),
    ))
    .discover_async()
    .await
    .unwrap();
    assert_eq!(
        sync.devices.iter().map(|d| &d.name).collect::<Vec<_>>(),
        asynchronous
            .devices
            .iter()
            .map(|d| &d.name)
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn discover_inside_a_current_thread_runtime() {
    discovery().discover().unwrap();
    Arc::new(dranet_discovery::host(
        Path::new("/sys"),
        Default::default(),
    ))
    .discover_async()
    .await
    .unwrap();
}
