//! Compiling one selector (parse, type check, the API server's validators, planning): paid once
//! per DeviceClass and claim selector when no `ProgramCache` holds it, on the allocator's
//! `cold-cel` path and in `dranet check`.
//!
//! `cargo bench -p dranet-core --bench cel_compile`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_core::cel::Program;

/// Shapes from the seeds' claim templates and DeviceClasses, and two heavier ones.
const SELECTORS: &[(&str, &str)] = &[
    ("driver", r#"device.driver == "dra.net""#),
    (
        "attr-eq-string",
        r#"device.attributes["resource.kubernetes.io"].pciBusID == "0008:06:00.0""#,
    ),
    (
        "two-attrs",
        r#"device.attributes["dra.net"]["rdma"] == true && device.attributes["dra.net"]["numaNode"] == 0"#,
    ),
    (
        "macro-and-semver",
        r#"device.attributes["dra.net"].ifName.startsWith("eth") && ["mlx5_0", "mlx5_1"].exists(n, n == device.attributes["dra.net"].rdmaDevice) && device.attributes["dra.net"].firmware.isGreaterThan(semver("1.2.0"))"#,
    ),
    (
        "quantity",
        r#"device.capacity["dra.net"].memory.compareTo(quantity("80Gi")) >= 0"#,
    ),
];

fn compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("cel_compile");
    for (name, src) in SELECTORS {
        // A selector that stops compiling would time an error path: fail loudly instead.
        if let Err(e) = Program::compile(src) {
            panic!("{name}: {e}");
        }
        g.bench_function(*name, |b| {
            b.iter(|| Program::compile(black_box(src)).is_ok())
        });
    }
    g.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);
