//! Embedding dranet's discovery in another tool: for each GPU, the NICs closest to it.
//!
//! `cargo run --example nearest_nics -- testdata/nodes/bm-mi300x-8/sys` (or `/sys`).

use dranet_core::{Discover, topology};

fn main() {
    let sysfs = std::env::args().nth(1).unwrap_or_else(|| "/sys".into());
    let inv =
        match dranet_discovery::host(std::path::Path::new(&sysfs), Default::default()).discover() {
            Ok(inv) => inv,
            Err(e) => {
                eprintln!("nearest_nics: {e}");
                std::process::exit(1);
            }
        };
    for gpu in &inv.gpus {
        let mut nics: Vec<_> = inv
            .devices
            .iter()
            .filter_map(|d| Some((topology::relation(gpu, d.pci.as_ref()?), d)))
            .collect();
        nics.sort_by_key(|(r, d)| (*r, d.name.clone()));
        let best: Vec<String> = nics
            .iter()
            .take_while(|(r, _)| Some(*r) == nics.first().map(|n| n.0))
            .map(|(r, d)| {
                format!(
                    "{} ({r}, {})",
                    d.name,
                    d.rdma.as_ref().map_or("-", |l| l.name.as_str())
                )
            })
            .collect();
        println!("GPU {}: {}", gpu.address, best.join(", "));
    }
}
