//! DRA CEL selectors from arbitrary text: compile, then evaluate against a GB300 NIC. Errors
//! are fine (bad syntax, a missing attribute); panics and stack overflows are not.
#![no_main]

use dranet_alloc::cel::{AttributeValue, DeviceAttributes, DeviceView, Program, Quantity};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(program) = Program::compile(src) else {
        return;
    };
    let attrs = DeviceAttributes::new(
        "dra.net",
        [
            ("rdmaDevice", AttributeValue::String("mlx5_0".into())),
            ("numaNode", AttributeValue::Int(0)),
            ("rdma", AttributeValue::Bool(true)),
            (
                "resource.kubernetes.io/pcieRoot",
                AttributeValue::String("pci0101:00".into()),
            ),
            ("ids", AttributeValue::Ints(vec![0, 1])),
        ],
        std::iter::empty::<(&str, Quantity)>(),
    )
    .expect("fixed attributes");
    let _ = program.matches(&DeviceView {
        driver: "dra.net",
        attributes: &attrs,
        allow_multiple_allocations: false,
    });
});
