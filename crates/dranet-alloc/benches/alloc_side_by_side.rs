//! Side by side with the scheduler's allocator (issue 18): every case is written as YAML files
//! that `scripts/alloc-side-by-side.sh` also hands to allocbench (the Kubernetes 1.34.9
//! scheduler's allocator), so both engines decide on identical inputs.
//!
//! The cases are built in `cases/mod.rs` (shared with the instruction-count guard, `icount.rs`).
//! Each claim is measured three ways:
//!
//! - `cold`: the device index built from the typed ResourceSlices, the claim allocated, compiled
//!   selectors kept in a [`ProgramCache`] across iterations — what allocbench's default timing
//!   covers (NewAllocator + Allocate, the scheduler's CEL cache kept);
//! - `cold-cel`: the same with every DeviceClass and claim selector compiled anew, as allocbench
//!   `-cold-cel` (a new CEL cache every iteration);
//! - `warm`: the allocator (and the cache) kept, only the claim's allocation timed, as allocbench
//!   `-reuse`.
//!
//! A manifest (`case<TAB>claim<TAB>files…`) goes beside the case files in
//! `$CARGO_TARGET_TMPDIR/alloc-side-by-side/`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};

use dranet_alloc::cel::ProgramCache;
use dranet_alloc::{Allocator, Options};

mod cases;

fn side_by_side(c: &mut Criterion) {
    let mut manifest = String::new();
    for case in cases::cases() {
        let cache = Arc::new(ProgramCache::default());
        let cached = Options {
            programs: Some(Arc::clone(&cache)),
            ..Options::default()
        };
        let alloc =
            Allocator::with_options(&case.slices, &case.classes, &cached).expect("allocator");
        for t in &case.templates {
            let claim = &t.spec.spec;
            let tname = t.metadata.name.clone().unwrap_or_default();
            // Only claims that allocate are timed: the comparison is of decisions, not errors.
            if let Err(e) = alloc.allocate_spec(claim, &[]) {
                eprintln!("{}/{tname}: not timed: {e}", case.name);
                continue;
            }
            let files: Vec<String> = case.files.iter().map(|f| f.display().to_string()).collect();
            manifest.push_str(&format!("{}\t{tname}\t{}\n", case.name, files.join("\t")));
            let mut g = c.benchmark_group(format!("{}-{tname}", case.name));
            for mode in cases::Mode::ALL {
                g.bench_function(mode.name(), |b| {
                    b.iter(|| mode.run(black_box(&case), &alloc, &cached, black_box(claim)))
                });
            }
            g.finish();
        }
    }
    std::fs::write(cases::out_dir().join("manifest.tsv"), manifest).expect("manifest");
}

criterion_group!(benches, side_by_side);
criterion_main!(benches);
