//! Hostile and odd requests: each case reproduces a defect that was found (issue 20) and checks
//! the behaviour a driver author relies on instead.

use std::time::Duration;

use crate::common::*;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_kubeletplugin::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeletPlugin, PrepareState,
    Prepared,
};

/// A driver whose prepare state nests 200 levels: more than a checkpoint can read back.
#[derive(Clone, Default)]
struct DeepState(std::sync::Arc<std::sync::Mutex<Vec<PrepareState>>>);

impl Driver for DeepState {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        let mut state = serde_json::json!("leaf");
        for _ in 0..200 {
            state = serde_json::json!({ "x": state });
        }
        let mut p = prepared_for(&claim.results);
        p.state = Some(state);
        Ok(p)
    }
    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        self.0.lock().unwrap().push(claim.state);
        Ok(())
    }
}

#[tokio::test]
async fn a_prepare_state_the_checkpoint_cannot_read_back_fails_that_claim_only() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start().await.unwrap();
    api.add_node(NODE);
    api.put_claim(claim("deep", vec![result(DRIVER, "eth1", "nic")]));
    let driver = DeepState::default();
    let start = || async {
        KubeletPlugin::builder(driver.clone(), api.client().unwrap())
            .driver_name(DRIVER)
            .node_name(NODE)
            .kubelet_root_dir(dir.path())
            .start()
            .await
            .unwrap()
    };
    let plugin = start().await;
    let kubelet = FakeKubelet::connect(plugin.registration_socket())
        .await
        .unwrap();
    let resp = kubelet.prepare(&[claim_ref("deep")]).await.unwrap();
    let err = &resp.claims["uid-deep"].error;
    assert!(
        err.contains("nests 201 levels") && err.contains("at most 100"),
        "{err}"
    );
    plugin.shutdown().await.unwrap();

    // The restart reads the checkpoint fine, and unprepare cleans up the interrupted prepare.
    let plugin = start().await;
    let kubelet = FakeKubelet::connect(plugin.registration_socket())
        .await
        .unwrap();
    let resp = kubelet.unprepare(&[claim_ref("deep")]).await.unwrap();
    assert_eq!(resp.claims["uid-deep"].error, "");
    assert!(matches!(
        driver.0.lock().unwrap().as_slice(),
        [PrepareState::Interrupted]
    ));
    plugin.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_request_naming_another_claims_uid_cannot_reach_that_claim() {
    let h = Harness::start().await;
    h.api
        .put_claim(claim("a1", vec![result(DRIVER, "eth1", "nic")]));
    let ok = h.kubelet.prepare(&[claim_ref("a1")]).await.unwrap();
    assert_eq!(ok.claims["uid-a1"].error, "");
    let impostor = ClaimRef {
        namespace: "team-b".into(),
        name: "does-not-exist".into(),
        uid: "uid-a1".into(),
    };
    let resp = h
        .kubelet
        .prepare(std::slice::from_ref(&impostor))
        .await
        .unwrap();
    let err = &resp.claims["uid-a1"].error;
    assert!(
        err.contains("default/a1") && err.contains("team-b/does-not-exist"),
        "{err}"
    );
    assert!(
        resp.claims["uid-a1"].devices.is_empty(),
        "no devices of team-a's claim"
    );
    let resp = h.kubelet.unprepare(&[impostor]).await.unwrap();
    assert!(!resp.claims["uid-a1"].error.is_empty());
    assert!(
        h.driver.rec().unprepares.is_empty(),
        "team-a's claim was not torn down"
    );
    // The real owner still gets its answer.
    let again = h.kubelet.prepare(&[claim_ref("a1")]).await.unwrap();
    assert_eq!(again, ok);
}

#[tokio::test]
async fn a_uid_listed_twice_is_answered_explicitly() {
    let h = Harness::start().await;
    h.api
        .put_claim(claim("d1", vec![result(DRIVER, "eth1", "nic")]));
    // The same claim twice: done once, answered.
    let resp = h
        .kubelet
        .prepare(&[claim_ref("d1"), claim_ref("d1")])
        .await
        .unwrap();
    assert_eq!(resp.claims["uid-d1"].error, "");
    assert_eq!(h.driver.rec().prepares.len(), 1);
    // One UID for two different claims: neither is acted on, and the error says why.
    let other = ClaimRef {
        namespace: "default".into(),
        name: "other".into(),
        uid: "uid-d1".into(),
    };
    let resp = h
        .kubelet
        .unprepare(&[claim_ref("d1"), other])
        .await
        .unwrap();
    let err = &resp.claims["uid-d1"].error;
    assert!(
        err.contains("listed for different claims") && err.contains("default/other"),
        "{err}"
    );
    assert!(h.driver.rec().unprepares.is_empty());
}

#[tokio::test]
async fn a_call_with_many_claims_runs_a_bounded_number_at_once() {
    let h = Harness::start().await;
    h.driver.rec().delay = Duration::from_millis(20);
    let n = 3 * dranet_kubeletplugin::MAX_CLAIMS_IN_FLIGHT;
    for i in 0..n {
        h.api.put_claim(claim(
            &format!("m{i}"),
            vec![result(DRIVER, &format!("eth{i}"), "nic")],
        ));
    }
    let refs: Vec<_> = (0..n).map(|i| claim_ref(&format!("m{i}"))).collect();
    let resp = h.kubelet.prepare(&refs).await.unwrap();
    assert_eq!(resp.claims.len(), n);
    assert!(resp.claims.values().all(|e| e.error.is_empty()));
    let max = h.driver.rec().max_parallel;
    assert!(
        max > 1 && max <= dranet_kubeletplugin::MAX_CLAIMS_IN_FLIGHT,
        "{max} claims ran at once"
    );
}

#[tokio::test]
async fn a_failed_prepare_leaves_no_lock_file_in_rolling_mode() {
    let h = Harness::start_with(|b| b.rolling_update("0a6f3c1e-5a1b-4c2d-8e3f-123456789abc")).await;
    h.api
        .put_claim(claim("f1", vec![result(DRIVER, "eth1", "nic")]));
    h.driver.rec().fail_prepare.insert("f1".into());
    let resp = h.kubelet.prepare(&[claim_ref("f1")]).await.unwrap();
    assert!(!resp.claims["uid-f1"].error.is_empty());
    // A claim that is not allocated fails before the driver: no lock file either.
    let resp = h.kubelet.prepare(&[claim_ref("missing")]).await.unwrap();
    assert!(!resp.claims["uid-missing"].error.is_empty());
    let mut stack = vec![h.dir.path().to_path_buf()];
    let mut locks = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "lock")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("uid-"))
            {
                locks.push(p);
            }
        }
    }
    assert!(locks.is_empty(), "left behind: {locks:?}");
}

#[tokio::test]
async fn claim_names_that_could_change_the_api_path_are_refused() {
    let h = Harness::start().await;
    for (ns, name) in [
        ("default", "a/../../nodes/x"),
        ("default", "a?watch=true"),
        ("Default", "a"),
        ("default", "a%2F"),
    ] {
        let r = ClaimRef {
            namespace: ns.into(),
            name: name.into(),
            uid: "uid-x".into(),
        };
        let resp = h.kubelet.prepare(&[r]).await.unwrap();
        let err = &resp.claims["uid-x"].error;
        assert!(err.contains("DNS-1123"), "{ns}/{name}: {err}");
    }
    assert!(h.driver.rec().prepares.is_empty());
}

#[test]
fn a_state_at_the_depth_limit_reads_back_from_the_checkpoint() {
    use dranet_kubeletplugin::checkpoint::{CheckpointEntry, Contents, Phase, decode, encode};
    let mut state = serde_json::json!("leaf");
    for _ in 1..dranet_kubeletplugin::MAX_STATE_DEPTH {
        state = serde_json::json!([state]);
    }
    let mut c = Contents::default();
    c.claims.insert(
        "uid-x".to_string(),
        CheckpointEntry {
            claim: claim_ref("x"),
            phase: Phase::Prepared,
            prepared: Some(Prepared {
                devices: Vec::new(),
                state: Some(state),
            }),
            pod_claim_name: None,
        },
    );
    assert_eq!(decode(&encode(&c)).unwrap(), c);
}
