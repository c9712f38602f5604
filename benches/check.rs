//! `dranet check` at cluster scale (issue 39): one GB300 template over the ResourceSlices of
//! 100, 1,000 and 5,000 nodes, two slices a node, from a file as `kubectl get resourceslices
//! -o json` writes it (about 16 kB a node). Each sample runs the binary, as an operator does:
//! reading and checking the file, every node's allocation, the table printed.

use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

// The tests' cluster builders; the bench uses some of them.
#[allow(dead_code)]
#[path = "../tests/support/cluster.rs"]
mod cluster;

fn check(slices: &Path) {
    let out = cluster::check_1nic_aligned(slices, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let mut group = c.benchmark_group("check_gb300_nodes");
    group.sample_size(10);
    for nodes in [100, 1000, 5000] {
        let path = tmp.path().join(format!("slices-{nodes}.json"));
        let text = cluster::list_json(cluster::gb300_slices(nodes, |_, _| {}));
        std::fs::write(&path, text).expect("write the cluster's slices");
        group.measurement_time(Duration::from_secs(if nodes > 1000 { 40 } else { 10 }));
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &path, |b, p| {
            b.iter(|| check(p))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
