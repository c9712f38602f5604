//! Compiling one selector: paid once per DeviceClass and claim selector when no `ProgramCache`
//! holds it (the allocator's `cold-cel` path, `dranet check`). `compile` is what the API server
//! runs (parse, type check, validators and the cost estimate); `compile_for_scheduler` the same
//! without the estimate, as the scheduler compiles.
//!
//! `cargo bench -p dranet-alloc --bench cel_compile`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_alloc::cel::Program;

/// Shapes from the seeds' claim templates and DeviceClasses, and heavier ones.
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
        "pcie-root",
        r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:16" && device.attributes["dra.net"].ifName.startsWith("eth")"#,
    ),
    (
        "macro-and-semver",
        r#"device.attributes["dra.net"].ifName.startsWith("eth") && ["mlx5_0", "mlx5_1"].exists(n, n == device.attributes["dra.net"].rdmaDevice) && device.attributes["dra.net"].firmware.isGreaterThan(semver("1.2.0"))"#,
    ),
    (
        "quantity",
        r#"device.capacity["dra.net"].memory.compareTo(quantity("80Gi")) >= 0"#,
    ),
    (
        "comprehension",
        r#"device.attributes.all(d, device.attributes[d].all(k, k.matches("^[a-z]+$")))"#,
    ),
];

fn compile(c: &mut Criterion) {
    for (name, src) in SELECTORS {
        // A selector that stops compiling would time an error path: fail loudly instead.
        if let Err(e) = Program::compile(src) {
            panic!("{name}: {e}");
        }
        let mut g = c.benchmark_group(format!("cel_compile/{name}"));
        g.bench_function("compile", |b| b.iter(|| Program::compile(black_box(src))));
        g.bench_function("compile_for_scheduler", |b| {
            b.iter(|| Program::compile_for_scheduler(black_box(src)))
        });
        g.finish();
    }
}

criterion_group!(benches, compile);
criterion_main!(benches);
