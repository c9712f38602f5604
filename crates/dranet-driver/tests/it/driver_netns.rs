//! The driver's NRI hooks with real links in network namespaces the tests create (root only;
//! skipped with a message otherwise): pods started while the runtime could not reach the plugin,
//! what a failed attach tells the pod's owner, and a journal with an unreadable entry.

use std::sync::{Arc, Mutex};

use dranet_driver::NetworkDriver;
use dranet_driver::daemon::Instrumented;
use dranet_driver::daemon::metrics::DaemonMetrics;
use dranet_kubeletplugin::k8s_openapi::api::core::v1::Event;
use dranet_nri::{Namespace, NriPlugin, PodSandbox};

use crate::support::{self, Ns, can_run, claims, host_with_veth, pod};

struct Node {
    host: Ns,
    state: tempfile::TempDir,
    links: Vec<&'static str>,
}

impl Node {
    /// A host namespace with `v0` (configured like a real host link) and more plain veths.
    fn new(tag: &str, more: &[&'static str]) -> Node {
        let host = host_with_veth(tag);
        for l in more {
            host.ip(&[
                "link",
                "add",
                l,
                "type",
                "veth",
                "peer",
                "name",
                &format!("{l}p"),
            ]);
        }
        let mut links = vec!["v0"];
        links.extend_from_slice(more);
        Node {
            host,
            state: tempfile::tempdir().unwrap(),
            links,
        }
    }

    fn driver(&self) -> NetworkDriver {
        support::veth_driver(&self.host, self.state.path(), &self.links)
    }
}

/// The daemon's hooks around the node's driver, with the Events they record.
fn hooks(node: &Node) -> (Arc<Instrumented>, Arc<Mutex<Vec<Event>>>) {
    let (writer, events) = support::event_sink();
    let hooks = Instrumented::new(
        Arc::new(node.driver()),
        Arc::new(DaemonMetrics::new()),
        Some(writer),
        "node-a",
    );
    (hooks, events)
}

async fn wait_for_events(events: &Mutex<Vec<Event>>, n: usize) {
    for _ in 0..200 {
        if events.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Whether `word` appears in `text` as a word of its own (not inside a longer name).
fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
        .any(|w| w == word)
}

/// What a pod's owner may see names what is wrong in the claim's terms, and nothing of the
/// host: no host link name, no namespace path, no host route.
fn assert_no_host_details(text: &str, host_links: &[&str]) {
    for l in host_links {
        assert!(!has_word(text, l), "host link {l} in {text:?}");
    }
    for leak in [
        "/var/run/netns",
        "/run/netns",
        "dranet-t-",
        "10.2.0.0/16",
        "10.3.0.0/16",
        "/proc/",
    ] {
        assert!(!text.contains(leak), "{leak} in {text:?}");
    }
}

/// containerd starts pods without a plugin it cannot reach (or that timed out); at the next
/// Synchronize the live pods with prepared netdevs but nothing attached get them, and one that
/// cannot is reported on the pod as an Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_started_while_disconnected_get_their_links_at_synchronize() {
    if !can_run("pods_started_while_disconnected_get_their_links_at_synchronize") {
        return;
    }
    let node = Node::new("sync-h", &["v1"]);
    let host_before = node.host.dump();
    let pa = Ns::new("sync-pa");
    let pb = Ns::new("sync-pb");
    let (hooks, events) = hooks(&node);
    let d = hooks.driver().clone();
    d.prepare_claim(&claims::nic(
        "nic-a",
        "pa",
        "v0",
        serde_json::json!({"interface": {"name": "net1", "addresses": ["10.9.8.7/24"]}}),
    ))
    .await
    .unwrap();
    d.prepare_claim(&claims::nic(
        "nic-b",
        "pb",
        "v1",
        serde_json::json!({
            "interface": {"name": "net1", "addresses": ["10.9.9.7/24"]},
            "routes": [{"destination": "10.0.0.0/8", "gateway": "10.77.0.1"}]
        }),
    ))
    .await
    .unwrap();
    // Both pods run; the plugin saw neither start.
    let live = [pod("pa", &pa), pod("pb", &pb)];
    hooks.synchronize(&live, &[]).await.unwrap();
    // Answered at once; the work goes on in the background.
    assert!(hooks.wait_idle(std::time::Duration::from_secs(30)).await);
    let shown = pa.ip(&["addr", "show", "net1"]);
    assert!(shown.contains("10.9.8.7/24"), "{shown}");
    assert!(
        !pb.try_ip(&["link", "show", "net1"]),
        "pod b's attach rolled back"
    );
    wait_for_events(&events, 1).await;
    {
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        let ev = &events[0];
        assert_eq!(ev.reason.as_deref(), Some("NetworkDeviceAttachFailed"));
        assert_eq!(ev.involved_object.uid.as_deref(), Some("pb"));
        let msg = ev.message.clone().unwrap_or_default();
        assert!(
            msg.contains("route 10.0.0.0/8 via 10.77.0.1") && msg.contains("unreachable"),
            "{msg}"
        );
        assert_no_host_details(&msg, &["v0", "v1", "v0p", "v1p"]);
    }
    // A second Synchronize (another reconnect) changes nothing for pod a.
    hooks.synchronize(&live, &[]).await.unwrap();
    // Answered at once; the work goes on in the background.
    assert!(hooks.wait_idle(std::time::Duration::from_secs(30)).await);
    assert!(pa.try_ip(&["link", "show", "net1"]));
    for p in &live {
        hooks.stop_pod_sandbox(p).await.unwrap();
    }
    assert_eq!(node.host.dump(), host_before);
}

/// A failed attach's error (what the runtime reports on the pod) and Event say what is wrong in
/// the claim's terms, without the host's link names, paths or routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_errors_say_what_is_wrong_without_host_details() {
    if !can_run("attach_errors_say_what_is_wrong_without_host_details") {
        return;
    }
    let node = Node::new("msg-h", &[]);
    let host_before = node.host.dump();
    let p = Ns::new("msg-p");
    let (hooks, events) = hooks(&node);
    hooks
        .driver()
        .prepare_claim(&claims::nic(
            "nic",
            "pm",
            "v0",
            serde_json::json!({
                "interface": {"name": "net1", "addresses": ["10.9.8.7/24"]},
                "routes": [{"destination": "10.0.0.0/8", "gateway": "10.77.0.1"}]
            }),
        ))
        .await
        .unwrap();
    let err = hooks
        .run_pod_sandbox(&pod("pm", &p))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ml/nic")
            && err.contains("route 10.0.0.0/8 via 10.77.0.1")
            && err.contains("unreachable"),
        "{err}"
    );
    assert_no_host_details(&err, &["v0", "v0p"]);
    wait_for_events(&events, 1).await;
    let msg = events.lock().unwrap()[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(msg.contains("route 10.0.0.0/8 via 10.77.0.1"), "{msg}");
    assert_no_host_details(&msg, &["v0", "v0p"]);
    assert_eq!(node.host.dump(), host_before);

    // A pod namespace that went away: said as such, without its path.
    let gone = PodSandbox {
        namespaces: vec![Namespace {
            kind: "network".into(),
            path: "/var/run/netns/dranet-t-gone".into(),
        }],
        ..pod("pm", &p)
    };
    let err = hooks.run_pod_sandbox(&gone).await.unwrap_err().to_string();
    assert!(err.contains("network namespace"), "{err}");
    assert_no_host_details(&err, &["v0", "v0p"]);
}

/// A private flag the device does not have is refused at prepare (the claim author sees it on
/// the claim), not at every sandbox start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_private_flags_are_refused_at_prepare() {
    if !can_run("unknown_private_flags_are_refused_at_prepare") {
        return;
    }
    let node = Node::new("pflag-h", &[]);
    let d = node.driver();
    let err = d
        .prepare_claim(&claims::nic(
            "flags",
            "pf",
            "v0",
            serde_json::json!({"ethtool": {"privateFlags": {"legacy-rx": true}}}),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("legacy-rx") && err.contains("private flag"),
        "{err}"
    );
    assert_no_host_details(&err, &["v0", "v0p"]);
}

/// An unreadable journal entry does not keep a stopping pod's link from the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_journal_entry_does_not_block_stopping_a_pod() {
    if !can_run("an_unreadable_journal_entry_does_not_block_stopping_a_pod") {
        return;
    }
    let node = Node::new("jq-h", &[]);
    let host_before = node.host.dump();
    let p = Ns::new("jq-p");
    let d = node.driver();
    d.prepare_claim(&claims::nic(
        "nic",
        "pq",
        "v0",
        serde_json::json!({"interface": {"name": "net1"}}),
    ))
    .await
    .unwrap();
    d.start_pod(&pod("pq", &p)).await.unwrap();
    std::fs::write(node.state.path().join("podnet/torn.json"), b"{").unwrap();
    d.stop_pod(&pod("pq", &p)).await;
    assert_eq!(node.host.dump(), host_before);
    // And Synchronize goes on too.
    d.synchronize_pods(&[]).await.unwrap();
}

/// A device attached to a live pod is never taken by another sandbox, whatever the driver's
/// records say (here: the claim prepared again, for another pod, while the first still runs).
/// The refused pod's error and Event say so in its owner's terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_in_a_live_pod_is_never_taken_by_another() {
    if !can_run("a_device_in_a_live_pod_is_never_taken_by_another") {
        return;
    }
    let node = Node::new("inuse-h", &[]);
    let host_before = node.host.dump();
    let pa = Ns::new("inuse-pa");
    let pb = Ns::new("inuse-pb");
    let (hooks, events) = hooks(&node);
    let cfg = serde_json::json!({"interface": {"name": "net1"}});
    hooks
        .driver()
        .prepare_claim(&claims::nic("nic", "pa", "v0", cfg.clone()))
        .await
        .unwrap();
    hooks.run_pod_sandbox(&pod("pa", &pa)).await.unwrap();
    let in_a = pa.dump();
    hooks
        .driver()
        .prepare_claim(&claims::nic("nic", "pb", "v0", cfg))
        .await
        .unwrap();
    let err = hooks
        .run_pod_sandbox(&pod("pb", &pb))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("in use by another pod"), "{err}");
    assert_no_host_details(&err, &["v0", "v0p"]);
    assert_eq!(pa.dump(), in_a, "pod a keeps its link");
    assert!(!pb.try_ip(&["link", "show", "net1"]));
    wait_for_events(&events, 1).await;
    let msg = events.lock().unwrap()[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(msg.contains("in use by another pod"), "{msg}");
    hooks.stop_pod_sandbox(&pod("pa", &pa)).await.unwrap();
    assert_eq!(node.host.dump(), host_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_sharing_a_nic_each_get_a_child_and_lose_it_alone_even_across_a_restart() {
    if !can_run("pods_sharing_a_nic_each_get_a_child_and_lose_it_alone_even_across_a_restart") {
        return;
    }
    let node = Node::new("share-h", &[]);
    node.host.ip(&["link", "set", "v0p", "up"]);
    let host_before = node.host.dump();
    let (pa, pb) = (Ns::new("share-pa"), Ns::new("share-pb"));
    let pa_before = pa.dump();
    let (hooks, _) = hooks(&node);
    // One claim reserved for both pods: a passthrough NIC is refused for that, a child type not.
    let shared = |cfg: serde_json::Value| {
        claims::claim(
            "nic",
            &["pa", "pb"],
            &[("nic", "dev-v0")],
            vec![claims::opaque("FromClaim", None, cfg)],
        )
    };
    let err = hooks
        .driver()
        .prepare_claim(&shared(serde_json::json!({"interface": {"name": "net1"}})))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("can be in one pod only"), "{err}");
    let cfg = serde_json::json!({"interface": {"name": "net1", "type": "Macvlan",
        "addressing": "Unnumbered"}});
    hooks.driver().prepare_claim(&shared(cfg)).await.unwrap();
    hooks.run_pod_sandbox(&pod("pa", &pa)).await.unwrap();
    hooks.run_pod_sandbox(&pod("pb", &pb)).await.unwrap();
    for p in [&pa, &pb] {
        assert!(
            p.ip(&["-d", "link", "show", "net1"])
                .contains("macvlan mode bridge")
        );
    }
    assert!(
        node.host.try_ip(&["link", "show", "v0"]),
        "the NIC stays on the host"
    );
    let pb_running = pb.dump();

    // The daemon restarts; meanwhile pod a went away (its namespace is still mounted).
    drop(hooks);
    let (hooks, _) = self::hooks(&node);
    hooks
        .driver()
        .synchronize_pods(&[pod("pb", &pb)])
        .await
        .unwrap();
    assert_eq!(pa.dump(), pa_before, "pod a's child is deleted");
    assert_eq!(pb.dump(), pb_running, "pod b's child is untouched");

    hooks.stop_pod_sandbox(&pod("pb", &pb)).await.unwrap();
    assert!(!pb.try_ip(&["link", "show", "net1"]));
    assert_eq!(node.host.dump(), host_before, "the NIC is as it was");
}

/// A device allocated as a share (consumable capacity, `shareID` in the result) is refused to a
/// Passthrough claim, whose NIC would leave the host and the other claims' pods; a child type on
/// the same share is prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_allocation_refuses_passthrough_and_takes_a_child() {
    if !can_run("a_shared_allocation_refuses_passthrough_and_takes_a_child") {
        return;
    }
    let node = Node::new("shid-h", &[]);
    let d = node.driver();
    let shared = |name: &str, cfg: serde_json::Value| {
        let mut c = claims::nic(name, "ps", "v0", cfg);
        c.results[0].share_id = Some(format!("share-{name}"));
        c
    };
    let err = d
        .prepare_claim(&shared(
            "pt",
            serde_json::json!({"interface": {"name": "net1"}}),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("allocated as a share") && err.contains("Passthrough"),
        "{err}"
    );
    let child = serde_json::json!({"interface": {"name": "net1", "type": "Macvlan",
        "addressing": "Unnumbered"}});
    d.prepare_claim(&shared("c1", child.clone())).await.unwrap();
    d.prepare_claim(&shared("c2", child)).await.unwrap();
}

/// Two children in one pod whose names share upstream's routing table (`net15` and `net28`),
/// each from a claim of its own on one NIC: both get their source routing with a default route,
/// net15 in upstream's table and net28 in the next, whichever claim's attach comes first (the
/// two pods' claims sort the other way round). Stopping each pod leaves it and the host as they
/// were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_children_whose_names_share_a_table_each_get_their_routes() {
    if !can_run("a_pods_children_whose_names_share_a_table_each_get_their_routes") {
        return;
    }
    let node = Node::new("tbl-h", &[]);
    node.host
        .ip(&["route", "add", "default", "via", "10.1.0.1", "dev", "v0"]);
    let host_before = node.host.dump();
    let up = dranet_core::interface_type::table_for_name("net15");
    assert_eq!(dranet_core::interface_type::table_for_name("net28"), up);
    let (hooks, _) = hooks(&node);
    let child = |name: &str, address: &str| serde_json::json!({"interface": {"name": name, "type": "Macvlan", "addresses": [address]}});
    for (p, first, second, host_part) in [("pa", "a", "b", 1), ("pb", "b", "a", 2)] {
        let ns = Ns::new(&format!("tbl-{p}"));
        let before = ns.dump();
        let (ip15, ip28) = (
            format!("10.1.0.{host_part}5"),
            format!("10.1.0.{host_part}8"),
        );
        for (claim_name, name, ip) in [
            (format!("{first}-{p}-15"), "net15", &ip15),
            (format!("{second}-{p}-28"), "net28", &ip28),
        ] {
            hooks
                .driver()
                .prepare_claim(&claims::nic(
                    &claim_name,
                    p,
                    "v0",
                    child(name, &format!("{ip}/24")),
                ))
                .await
                .unwrap();
        }
        hooks.run_pod_sandbox(&pod(p, &ns)).await.unwrap();
        let rules = ns.ip(&["rule", "show"]);
        for (name, ip, table) in [("net15", &ip15, up), ("net28", &ip28, up + 1)] {
            assert!(
                rules.contains(&format!("32000:\tfrom {ip} lookup {table}")),
                "{p} {name}: {rules}"
            );
            let routes = ns.ip(&["route", "show", "table", &table.to_string()]);
            assert!(
                routes.contains(&format!("default via 10.1.0.1 dev {name}"))
                    && routes.contains(&format!("10.1.0.0/24 dev {name}")),
                "{p} {name}: table {table}: {routes}"
            );
        }
        hooks.stop_pod_sandbox(&pod(p, &ns)).await.unwrap();
        assert_eq!(ns.dump(), before, "{p} after stop");
    }
    assert_eq!(node.host.dump(), host_before);
}

/// A child claim given the address its NIC has on the node is refused at prepare, naming the
/// field, the address and the device, without the host's link; one the NIC takes after the
/// claim was prepared is refused at the pod's start, before anything is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_is_refused_the_address_of_its_nic() {
    if !can_run("a_child_is_refused_the_address_of_its_nic") {
        return;
    }
    let node = Node::new("chip-h", &[]);
    let (hooks, _) = hooks(&node);
    let child = |address: &str| serde_json::json!({"interface": {"name": "net1", "type": "Macvlan", "addresses": [address]}});
    for address in ["10.1.0.2/24", "fd00:1::2/64"] {
        let err = hooks
            .driver()
            .prepare_claim(&claims::nic("own", "pc", "v0", child(address)))
            .await
            .unwrap_err()
            .user_message();
        let ip = address.split('/').next().unwrap_or_default();
        assert!(
            err.contains("device dev-v0")
                && err.contains(&format!(
                    "interface.addresses[0]: {ip} is an address the shared NIC"
                )),
            "{err}"
        );
        assert_no_host_details(&err, &["v0", "v0p"]);
    }

    hooks
        .driver()
        .prepare_claim(&claims::nic("later", "pc", "v0", child("10.1.0.77/24")))
        .await
        .unwrap();
    node.host.ip(&["addr", "add", "10.1.0.77/24", "dev", "v0"]);
    let (host_before, p) = (node.host.dump(), Ns::new("chip-p"));
    let pod_before = p.dump();
    let err = hooks
        .run_pod_sandbox(&pod("pc", &p))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ml/later")
            && err.contains("dev-v0")
            && err.contains("10.1.0.77 is an address the shared NIC"),
        "{err}"
    );
    assert_no_host_details(&err, &["v0", "v0p"]);
    assert_eq!(p.dump(), pod_before);
    assert_eq!(node.host.dump(), host_before);
}
