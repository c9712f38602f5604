//! Rolling updates: two instances of the driver side by side on one node (a DaemonSet with
//! `maxSurge: 1`), sharing the plugin directory and checkpoint, against the fake API server.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use dranet_kubeletplugin::Backoff;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_kubeletplugin::{Error, KubeletPlugin, PrepareState};

const OLD_POD: &str = "0a6f3c1e-5a1b-4c2d-8e3f-123456789abc";
const NEW_POD: &str = "1b7f4d2f-6b2c-4d3e-9f40-23456789abcd";

async fn instance(
    api: &FakeApiServer,
    dir: &Path,
    pod_uid: &str,
) -> (KubeletPlugin, RecordingDriver) {
    let driver = RecordingDriver::default();
    let plugin =
        KubeletPlugin::builder(driver.clone(), api.client().unwrap().field_manager(DRIVER))
            .driver_name(DRIVER)
            .node_name(NODE)
            .kubelet_root_dir(dir)
            .rolling_update(pod_uid)
            .retry_backoff(Backoff {
                initial: Duration::from_millis(20),
                max: Duration::from_millis(200),
            })
            .start()
            .await
            .unwrap();
    (plugin, driver)
}

/// One running instance, and the kubelet's connection to it.
struct Instance {
    plugin: KubeletPlugin,
    driver: RecordingDriver,
    kubelet: FakeKubelet,
}

/// An old and a new instance on one node, with one allocated claim `<name>` for `eth<n>`.
async fn pair(
    claim_name: &str,
    device: &str,
) -> (tempfile::TempDir, FakeApiServer, Instance, Instance) {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start().await.unwrap();
    api.add_node(NODE);
    api.put_claim(claim(claim_name, vec![result(DRIVER, device, "nic")]));
    let mut both = Vec::new();
    for pod in [OLD_POD, NEW_POD] {
        let (plugin, driver) = instance(&api, dir.path(), pod).await;
        let kubelet = FakeKubelet::connect(plugin.registration_socket())
            .await
            .unwrap();
        both.push(Instance {
            plugin,
            driver,
            kubelet,
        });
    }
    let new = both.pop().unwrap();
    let old = both.pop().unwrap();
    (dir, api, old, new)
}

fn published(api: &FakeApiServer) -> usize {
    api.slices()
        .iter()
        .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
        .sum()
}

/// Claims and slices live in the fake API server (`FakeApiServer`); the name says so.
mod fake_apiserver {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_prepared_by_one_instance_is_known_to_the_other() {
        let (dir, _api, old, new) = pair("c1", "eth1").await;
        let (to_old, to_new) = (&old.kubelet, &new.kubelet);
        let (old_driver, new_driver) = (&old.driver, &new.driver);
        let (old, new) = (old.plugin, new.plugin);

        // Distinct sockets, so the kubelet can reach both.
        assert_ne!(old.registration_socket(), new.registration_socket());
        assert_ne!(old.dra_socket(), new.dra_socket());
        assert!(
            old.registration_socket()
                .ends_with(format!("{DRIVER}-{OLD_POD}-reg.sock"))
        );
        assert!(old.dra_socket().ends_with(format!("dra-{OLD_POD}.sock")));
        assert_eq!(to_new.info().endpoint, new.dra_socket().to_string_lossy());

        let resp = to_old.prepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        // A retry that reaches the other instance is answered from the shared checkpoint.
        let resp = to_new.prepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].devices[0].device_name, "eth1");
        assert!(new_driver.rec().prepares.is_empty(), "prepared twice");

        // And the other instance unprepares it with what the first one prepared.
        let resp = to_new.unprepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        match &new_driver.rec().unprepares[..] {
            [(c, PrepareState::Prepared(p))] => {
                assert_eq!(c.uid, "uid-c1");
                assert_eq!(p.devices[0].device, "eth1");
            }
            other => panic!("unexpected unprepare calls: {other:?}"),
        }
        // Both now agree the claim is gone: unprepare through the first one is a no-op.
        let resp = to_old.unprepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        assert!(old_driver.rec().unprepares.is_empty());
        assert!(
            !dir.path()
                .join("plugins")
                .join(DRIVER)
                .join("claims/uid-c1.lock")
                .exists(),
            "lock file of a finished claim left behind"
        );
        old.shutdown().await.unwrap();
        new.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_claim_asked_of_both_instances_at_once_is_prepared_once() {
        let (_dir, _api, old, new) = pair("c2", "eth2").await;
        old.driver.rec().delay = Duration::from_millis(300);
        new.driver.rec().delay = Duration::from_millis(300);
        let c2 = [claim_ref("c2")];
        let (a, b) = tokio::join!(old.kubelet.prepare(&c2), new.kubelet.prepare(&c2));
        for r in [a.unwrap(), b.unwrap()] {
            assert_eq!(r.claims["uid-c2"].error, "");
            assert_eq!(r.claims["uid-c2"].devices[0].device_name, "eth2");
        }
        let calls = old.driver.rec().prepares.len() + new.driver.rec().prepares.len();
        assert_eq!(calls, 1, "the driver prepared the claim {calls} times");
        old.plugin.shutdown().await.unwrap();
        new.plugin.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_one_instance_publishes_and_the_new_one_takes_over_when_the_old_exits() {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        let (old, _) = instance(&api, dir.path(), OLD_POD).await;
        old.publish(devices(2)).unwrap();
        assert!(eventually(10, || published(&api) == 2).await);

        let (new, _) = instance(&api, dir.path(), NEW_POD).await;
        new.publish(devices(3)).unwrap();
        // Two versions publishing at once would overwrite each other on every watch event.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            published(&api),
            2,
            "the new instance published alongside the old"
        );
        let writes = api.write_counts();

        old.shutdown().await.unwrap();
        assert!(
            eventually(10, || published(&api) == 3).await,
            "the new instance did not take over"
        );
        assert!(api.write_counts().total() > writes.total());
        new.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_rolling_update_needs_the_pod_uid() {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApiServer::start().await.unwrap();
        let e = builder_for(RecordingDriver::default(), &api, dir.path())
            .rolling_update("my-pod")
            .start()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("\"my-pod\""), "{e}");
    }
}
