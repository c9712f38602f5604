//! Attach of one netdev with 2 addresses and 2 routes into a pod netns, and its detach with the
//! full host restore. Needs root (network namespaces); prints why and does nothing otherwise.
//!
//! `cargo bench -p dranet-podnet --bench podnet`

use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_core::{NetworkConfig, RouteConfig};
use dranet_podnet::netns::Netns;
use dranet_podnet::{AttachRequest, PodNet};

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().map(|s| s.success());
    assert!(matches!(ok, Ok(true)), "ip {args:?} failed");
}

struct Netnses(Vec<String>);
impl Drop for Netnses {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn bench(c: &mut Criterion) {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        eprintln!("SKIP podnet benches: need root for network namespaces");
        return;
    }
    let (h, p) = (
        format!("dranet-b-h-{}", std::process::id()),
        format!("dranet-b-p-{}", std::process::id()),
    );
    ip(&["netns", "add", &h]);
    ip(&["netns", "add", &p]);
    let _guard = Netnses(vec![h.clone(), p.clone()]);
    ip(&[
        "-n", &h, "link", "add", "v0", "type", "veth", "peer", "name", "v0p",
    ]);
    ip(&["-n", &h, "link", "set", "v0p", "up"]);
    ip(&["-n", &h, "addr", "add", "10.1.0.2/24", "dev", "v0"]);
    ip(&["-n", &h, "addr", "add", "10.1.1.2/24", "dev", "v0"]);
    ip(&["-n", &h, "link", "set", "v0", "up"]);
    ip(&["-n", &h, "route", "add", "10.2.0.0/16", "via", "10.1.0.1"]);
    ip(&[
        "-n",
        &h,
        "route",
        "add",
        "10.3.0.0/16",
        "via",
        "10.1.0.1",
        "table",
        "100",
    ]);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let journal = tempfile::tempdir_in(
        std::env::var("DRANET_BENCH_JOURNAL_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .expect("tempdir");
    let pn = PodNet::new(
        Netns::open(format!("/var/run/netns/{h}")).expect("host netns"),
        journal.path(),
    )
    .expect("podnet");
    let pod = std::path::PathBuf::from(format!("/var/run/netns/{p}"));
    // In the pod: the host's 2 addresses (the default) and 2 routes.
    let cfg = NetworkConfig {
        routes: vec![
            RouteConfig {
                destination: "172.16.0.0/16".into(),
                gateway: "10.1.0.1".into(),
                ..Default::default()
            },
            RouteConfig {
                destination: "172.17.0.0/16".into(),
                gateway: "10.1.1.1".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let req = AttachRequest {
        key: "bench",
        owner: "bench",
        link: "v0",
        pod_netns: &pod,
        config: &cfg,
        rdma_device: None,
        source_table: None,
    };
    let mut g = c.benchmark_group("podnet");
    g.sample_size(50);
    g.bench_function("attach_2_addresses_2_routes", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                rt.block_on(pn.attach(&req)).expect("attach");
                total += t.elapsed();
                rt.block_on(pn.detach("bench")).expect("detach");
            }
            total
        })
    });
    g.bench_function("detach_full_restore", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(pn.attach(&req)).expect("attach");
                let t = Instant::now();
                rt.block_on(pn.detach("bench")).expect("detach");
                total += t.elapsed();
            }
            total
        })
    });
    // The kernel's own cost: one bare RTM_SETLINK netns move (no config, no journal), timed
    // one way; attach and detach each contain one such move.
    g.bench_function("kernel_netns_move_only", |b| {
        use rtnetlink::packet_route::RouteNetlinkMessage;
        use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
        use std::os::fd::{AsFd, AsRawFd};
        let hns = Netns::open(format!("/var/run/netns/{h}")).expect("host netns");
        let pns = Netns::open(&pod).expect("pod netns");
        let (hr, pr) = rt.block_on(async {
            (
                hns.rtnl().await.expect("rtnl"),
                pns.rtnl().await.expect("rtnl"),
            )
        });
        let mv = |r: &dranet_podnet::netns::Rtnl, to: &Netns| {
            rt.block_on(async {
                let l = r.link_by_name("v0").await.expect("dump").expect("v0");
                let mut m = LinkMessage::default();
                m.header.index = l.header.index;
                m.attributes
                    .push(LinkAttribute::NetNsFd(to.as_fd().as_raw_fd()));
                r.request(RouteNetlinkMessage::SetLink(m), 0)
                    .await
                    .expect("move");
            })
        };
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                mv(&hr, &pns);
                total += t.elapsed();
                mv(&pr, &hns);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
