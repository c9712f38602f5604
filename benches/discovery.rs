//! Full discovery of fixture nodes next to the floor: the raw cost of the very same filesystem
//! accesses (recorded from one scan, replayed with no parsing).
//!
//! `cargo bench --bench discovery`

use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dranet_core::Discover;
use dranet_discovery::{Discovery, FixtureLinks, Options, Sysfs, SysfsEnumerator};

fn discovery(dir: &Path, sysfs: Sysfs) -> Discovery<SysfsEnumerator, FixtureLinks> {
    Discovery::new(
        sysfs,
        SysfsEnumerator,
        FixtureLinks {
            path: dir.join("links.json"),
        },
        Options::default(),
    )
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut nodes: Vec<(String, PathBuf)> = ["azure-nd-gb300-v6", "bm-mi300x-8", "sriov-64vf"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("testdata/nodes")
                    .join(n),
            )
        })
        .collect();
    for vfs in [128u32, 256, 512] {
        let dir = tmp.path().join(format!("sriov-{vfs}vf"));
        dranet_discovery::fixture::sriov_node(&dir, vfs).expect("generate");
        nodes.push((format!("sriov-{vfs}vf"), dir));
    }
    let mut g = c.benchmark_group("discovery");
    for (name, dir) in &nodes {
        let rec = discovery(dir, Sysfs::recording(dir.join("sys")));
        let inv = rec.discover().expect("discover");
        let accesses = rec.sysfs().recorded();
        g.throughput(Throughput::Elements(inv.devices.len() as u64));
        g.bench_with_input(BenchmarkId::new("full", name), dir, |b, dir| {
            let d = discovery(dir, Sysfs::new(dir.join("sys")));
            b.iter(|| d.discover().expect("discover"));
        });
        g.bench_with_input(BenchmarkId::new("floor", name), &accesses, |b, acc| {
            b.iter(|| acc.iter().map(|a| a.replay()).sum::<usize>());
        });
        eprintln!(
            "{name}: {} devices, {} filesystem accesses per scan",
            inv.devices.len(),
            accesses.len()
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
