//! Evaluating one compiled selector on one device: paid once per device and selector the
//! allocator or `dranet check` cannot decide by the shortcut for common shapes.
//!
//! `cargo bench -p dranet-alloc --bench cel_eval`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_alloc::cel::{DeviceAttributes, DeviceView, Program};
use dranet_core::AttributeValue;

/// Shapes that take the general evaluator, with a constant pattern where there is one.
const SELECTORS: &[(&str, &str)] = &[
    (
        "matches",
        r#"device.attributes["dra.net"].ifName.matches("^eth[0-9]+$")"#,
    ),
    (
        "find",
        r#"device.attributes["dra.net"].rdmaDevice.find("[0-9]+$") == "0""#,
    ),
    (
        "matches-in-macro",
        r#"["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"].exists(n, n.matches("^mlx5_[0-9]$") && n == device.attributes["dra.net"].rdmaDevice)"#,
    ),
    (
        "no-regex",
        r#"["mlx5_0", "mlx5_1"].exists(n, n == device.attributes["dra.net"].rdmaDevice)"#,
    ),
];

fn eval(c: &mut Criterion) {
    let attrs = DeviceAttributes::new(
        "dra.net",
        vec![
            ("ifName", AttributeValue::String("eth1".into())),
            ("rdmaDevice", AttributeValue::String("mlx5_0".into())),
        ],
        Vec::<(&str, dranet_core::Quantity)>::new(),
    )
    .expect("the bench's device");
    let view = DeviceView {
        driver: "dra.net",
        attributes: &attrs,
        allow_multiple_allocations: false,
    };
    for (name, src) in SELECTORS {
        let p = Program::compile_for_scheduler(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A selector that stopped matching would time an error path: fail loudly instead.
        assert_eq!(p.matches(&view), Ok(true), "{name}");
        c.bench_function(&format!("cel_eval/{name}"), |b| {
            b.iter(|| p.matches(black_box(&view)))
        });
    }
}

criterion_group!(benches, eval);
criterion_main!(benches);
