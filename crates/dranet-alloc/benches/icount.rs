//! The instruction-count guard (issue 52): the allocator's hot paths counted in instructions
//! (callgrind's `Ir`), compared with the committed baseline `.ci/icount-baseline.txt`. Timings on
//! the 2-core CI machine drift by 2× from run to run; instruction counts do not, so a slip of a
//! few percent shows.
//!
//! `.ci/icount` builds it with the test profile (`cargo test --workspace --bench icount`: the
//! allocator optimised, its dependencies as the test build left them, so CI pays for one binary
//! and not a release build) and runs it; it re-runs itself under `valgrind --tool=callgrind` with
//! `--measure`, prints one row per path (baseline, now, change) and exits 1 when a path grew more
//! than [`MARGIN_PERCENT`] over its baseline. The counts are of that build, not of a release one.
//! After an intended change, `.ci/icount --bless` rewrites the baseline file, which is committed
//! with the change: the guard always compares with the file of the commit it runs on.
//!
//! Paths: `alloc/CASE/CLAIM/MODE` for every claim of the side-by-side bench's cases that
//! allocates (the same inputs, `cases/mod.rs`) in its three modes (cold, cold-cel, warm). Each is
//! run once outside the count (lazy statics, the cold mode's program cache), then `N` times
//! inside [`icount_measure`], the only function callgrind collects in; the row is the count over
//! `N`, so the set-up (YAML parsing, the kept allocator) is not in it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use dranet_alloc::cel::ProgramCache;
use dranet_alloc::{Allocator, Options};

// The side-by-side bench uses the case files' paths and output directory; this one does not.
#[allow(dead_code)]
mod cases;

/// How much a path may grow over its baseline, in percent, before the guard fails.
const MARGIN_PERCENT: f64 = 10.0;

/// The command that regenerates the baseline, printed wherever it is needed.
const BLESS: &str = ".ci/icount --bless";

/// The baseline, relative to the repository's root (as messages name it).
const BASELINE: &str = ".ci/icount-baseline.txt";

fn baseline_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(BASELINE)
}

/// Iterations per path: enough that a path's count is millions of instructions (the per-run
/// noise of hashing with random keys averages out), few enough that callgrind takes seconds.
fn iterations(case: &str) -> u32 {
    match case {
        "node1024" => 4,
        "pcie128" => 20,
        _ => 100,
    }
}

/// The measured loop. Callgrind collects only while inside this function (`--toggle-collect`)
/// and writes one dump after each call (`--dump-after`), found by its unmangled name.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn icount_measure(body: &mut dyn FnMut(), n: u32) {
    for _ in 0..n {
        body();
    }
}

/// Under callgrind: every path once outside the count, then `N` times inside it; one stdout line
/// `PATH<TAB>N` per call of [`icount_measure`], in the order of callgrind's dumps.
fn measure() -> Result<(), String> {
    for case in cases::cases() {
        let cached = Options {
            programs: Some(Arc::new(ProgramCache::default())),
            ..Options::default()
        };
        let kept = Allocator::with_options(&case.slices, &case.classes, &cached)
            .map_err(|e| format!("{}: allocator: {e}", case.name))?;
        let n = iterations(&case.name);
        for t in &case.templates {
            let claim = &t.spec.spec;
            let tname = t.metadata.name.as_deref().unwrap_or_default();
            // As the side-by-side bench: only claims that allocate are measured.
            if kept.allocate_spec(claim, &[]).is_err() {
                continue;
            }
            for mode in cases::Mode::ALL {
                let path = format!("alloc/{}/{tname}/{}", case.name, mode.name());
                mode.run(&case, &kept, &cached, claim)
                    .map_err(|e| format!("{path}: {e}"))?;
                icount_measure(
                    &mut || {
                        let _ = black_box(mode.run(black_box(&case), &kept, &cached, claim));
                    },
                    n,
                );
                println!("{path}\t{n}");
            }
        }
    }
    Ok(())
}

/// Runs this binary under callgrind and returns the instructions per iteration of each path.
fn count() -> Result<BTreeMap<String, u64>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let dir = std::env::temp_dir().join(format!("dranet-icount-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = count_in(&exe, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn count_in(exe: &Path, dir: &Path) -> Result<BTreeMap<String, u64>, String> {
    let out_file = dir.join("callgrind.out");
    let out = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "-q",
            "--collect-atstart=no",
            "--toggle-collect=icount_measure",
            "--dump-after=icount_measure",
            "--dump-line=no",
        ])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .arg("--measure")
        .output()
        .map_err(|e| {
            format!("valgrind: {e} (`.ci/icount` installs it; or apt-get install valgrind)")
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the measuring run failed ({}):\n{stderr}",
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    for (i, line) in stdout.lines().enumerate() {
        let (path, n) = line
            .split_once('\t')
            .ok_or_else(|| format!("the measuring run printed {line:?}"))?;
        let n: u64 = n.parse().map_err(|e| format!("{line:?}: {e}"))?;
        // Callgrind numbers its dumps from 1, in the order they were written.
        let dump = PathBuf::from(format!("{}.{}", out_file.display(), i + 1));
        let total = dump_total(&dump)?;
        counts.insert(path.to_string(), (total + n / 2) / n);
    }
    if counts.is_empty() {
        return Err(format!("the measuring run measured nothing:\n{stderr}"));
    }
    Ok(counts)
}

/// The `summary:` (or `totals:`) line of a callgrind dump: its instructions.
fn dump_total(dump: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(dump).map_err(|e| {
        format!(
            "{}: {e} (callgrind wrote no dump for this path)",
            dump.display()
        )
    })?;
    // A dump for another reason (a client request, the end of the program) would shift every
    // path's count onto the next path's name.
    if !text.contains("Trigger: --dump-after=icount_measure") {
        return Err(format!(
            "{}: not a dump after icount_measure",
            dump.display()
        ));
    }
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{}: no totals line", dump.display()))
}

fn read_baseline(file: &Path) -> Result<BTreeMap<String, u64>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("{BASELINE}: {e}; create it with `{BLESS}` and commit it"))?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(path), Some(ir), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!(
                "{BASELINE}:{}: expected `PATH INSTRUCTIONS`, got {line:?}",
                i + 1
            ));
        };
        let ir = ir
            .parse()
            .map_err(|e| format!("{BASELINE}:{}: {ir:?}: {e}", i + 1))?;
        out.insert(path.to_string(), ir);
    }
    Ok(out)
}

fn write_baseline(file: &Path, counts: &BTreeMap<String, u64>) -> Result<(), String> {
    let mut text = String::from(
        "# Instructions (callgrind Ir) per iteration of each hot path, checked by .ci/icount:\n\
         # a path more than 10 % over its line fails CI. After an intended change, regenerate\n\
         # this file and commit it with the change:\n",
    );
    let _ = writeln!(text, "#   {BLESS}");
    for (path, ir) in counts {
        let _ = writeln!(text, "{path} {ir}");
    }
    std::fs::write(file, text).map_err(|e| format!("{BASELINE}: {e}"))
}

/// Prints the table; returns the paths that fail the guard, each with why.
fn compare(base: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>) -> Vec<String> {
    let mut failed = Vec::new();
    let width = now
        .keys()
        .chain(base.keys())
        .map(String::len)
        .max()
        .unwrap_or(4);
    println!(
        "{:width$}  {:>10}  {:>10}  {:>8}",
        "path", "baseline", "now", "change"
    );
    for (path, &ir) in now {
        let Some(&b) = base.get(path) else {
            println!("{path:width$}  {:>10}  {ir:>10}  {:>8}", "-", "new");
            failed.push(format!("{path}: not in the baseline"));
            continue;
        };
        let change = (ir as f64 - b as f64) * 100.0 / b as f64;
        let mark = if change > MARGIN_PERCENT {
            failed.push(format!("{path}: {b} -> {ir} instructions ({change:+.1} %)"));
            "  FAIL"
        } else if change < -MARGIN_PERCENT {
            "  (faster: bless to keep it)"
        } else {
            ""
        };
        println!("{path:width$}  {b:>10}  {ir:>10}  {change:>+7.1}%{mark}");
    }
    for path in base.keys().filter(|p| !now.contains_key(*p)) {
        failed.push(format!("{path}: in the baseline but no longer measured"));
    }
    failed
}

fn run(args: &[String]) -> Result<bool, String> {
    let mut bless = false;
    for a in args {
        match a.as_str() {
            // `cargo bench` passes `--bench` (the guard also runs that way, counting a release build).
            "--bench" => {}
            "--bless" => bless = true,
            "--measure" => {
                measure()?;
                return Ok(true);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --bless, or none)"
                ));
            }
        }
    }
    let file = baseline_file();
    let now = count()?;
    if bless {
        write_baseline(&file, &now)?;
        println!("wrote {BASELINE} ({} paths)", now.len());
        return Ok(true);
    }
    let failed = compare(&read_baseline(&file)?, &now);
    if failed.is_empty() {
        return Ok(true);
    }
    eprintln!("\ninstruction counts off the baseline {BASELINE} (margin {MARGIN_PERCENT} %):");
    for f in &failed {
        eprintln!("  {f}");
    }
    eprintln!(
        "if the change is intended, regenerate the baseline and commit it with the change:\n  {BLESS}"
    );
    Ok(false)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("icount: {e}");
            ExitCode::from(2)
        }
    }
}
