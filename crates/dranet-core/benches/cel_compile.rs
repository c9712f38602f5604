//! What the API server's cost estimate adds to compiling a selector: `Program::compile` (type
//! check, validation and the estimate) against `Program::compile_for_scheduler` (the same
//! without the estimate), on selectors of the shapes claims use.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_core::cel::Program;

const SELECTORS: &[(&str, &str)] = &[
    ("driver", r#"device.driver == "dra.net""#),
    (
        "attribute",
        r#"device.attributes["dra.net"].rdma && device.attributes["dra.net"].numaNode == 0"#,
    ),
    (
        "pcie-root",
        r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:16" && device.attributes["dra.net"].ifName.startsWith("eth")"#,
    ),
    (
        "comprehension",
        r#"device.attributes.all(d, device.attributes[d].all(k, k.matches("^[a-z]+$")))"#,
    ),
];

fn compile(c: &mut Criterion) {
    for (name, src) in SELECTORS {
        let mut g = c.benchmark_group(format!("cel_compile/{name}"));
        g.bench_function("compile", |b| {
            b.iter(|| Program::compile(black_box(src)).map(|p| p.estimated_cost()))
        });
        g.bench_function("compile_for_scheduler", |b| {
            b.iter(|| Program::compile_for_scheduler(black_box(src)).map(|p| p.estimated_cost()))
        });
        g.finish();
    }
}

criterion_group!(benches, compile);
criterion_main!(benches);
