//! The state of a link given to a pod, read inside the pod's namespace (root only; skipped with
//! a message otherwise): a link set down in the pod is a fault, and up again it is not.

use crate::support::{can_run, host_with_veth, pod_and_podnet, req};
use dranet_core::NetworkConfig;
use dranet_core::health::Fault;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_down_inside_the_pod_is_a_fault_until_it_is_up_again() {
    if !can_run("a_link_down_inside_the_pod_is_a_fault_until_it_is_up_again") {
        return;
    }
    let h = host_with_veth("health-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "health-p");
    let key = "claim-1.v0";
    assert!(
        pn.pod_link_faults().await.is_empty(),
        "nothing attached yet"
    );
    let cfg = NetworkConfig::default();
    let attached = pn
        .attach(&req(key, "sandbox-1", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    let name = attached.pod_name.clone();

    // The host no longer sees it: only the pod's namespace tells.
    assert!(!h.try_ip(&["link", "show", "v0"]));
    let faults = pn.pod_link_faults().await;
    assert_eq!(faults.get(key), Some(&None), "{faults:?}");

    // Set down in the pod: the pod's choice, not a fault (the host's rule for admin-down).
    p.ip(&["link", "set", &name, "down"]);
    let faults = pn.pod_link_faults().await;
    assert_eq!(faults.get(key), Some(&None), "{faults:?}");

    // Its peer on the host going down takes the carrier away from a link that is up: a fault.
    p.ip(&["link", "set", &name, "up"]);
    h.ip(&["link", "set", "v0p", "down"]);
    let faults = pn.pod_link_faults().await;
    assert!(
        matches!(faults.get(key), Some(Some(Fault::LinkDown { state, .. }))
            if dranet_core::health::NO_CARRIER_STATES.contains(&state.as_str())),
        "{faults:?}"
    );

    h.ip(&["link", "set", "v0p", "up"]);
    let faults = pn.pod_link_faults().await;
    assert_eq!(faults.get(key), Some(&None), "{faults:?}");

    // Given back: no longer the pod's to report.
    pn.detach(key).await.unwrap();
    assert!(pn.pod_link_faults().await.is_empty());
}
