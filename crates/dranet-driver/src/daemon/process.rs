//! The standard `process_*` metrics of a Prometheus client (start time, CPU, memory, file
//! descriptors), read from `/proc/self` on each scrape: upstream's Go client exports them and
//! its dashboards and tests use them (`process_start_time_seconds`).

use std::fs;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads this process's figures at each scrape; a figure `/proc` does not give is left out.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self` says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProcessStats {
    pub start_time_seconds: Option<f64>,
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<f64>,
    pub virtual_memory_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the C library; no memory is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Parses `/proc/self/stat` (after the command name, which may hold spaces), `/proc/stat`'s
/// `btime`, `/proc/self/status`'s `VmRSS` and `/proc/self/limits`' open files.
pub(crate) fn parse(
    stat: &str,
    proc_stat: &str,
    status: &str,
    limits: &str,
    ticks: f64,
) -> ProcessStats {
    let mut s = ProcessStats::default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // Field numbers of proc(5), less the 2 before the `)`, less 1 for 0-based.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(u), Some(st)) = (field(14), field(15)) {
        s.cpu_seconds = Some((u + st) / ticks);
    }
    s.virtual_memory_bytes = field(23);
    let btime = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    if let (Some(b), Some(start)) = (btime, field(22)) {
        s.start_time_seconds = Some(b + start / ticks);
    }
    s.resident_memory_bytes = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb * 1024.0);
    s.max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok());
    s
}

fn read() -> ProcessStats {
    let r = |p: &str| fs::read_to_string(p).unwrap_or_default();
    let mut s = parse(
        &r("/proc/self/stat"),
        &r("/proc/stat"),
        &r("/proc/self/status"),
        &r("/proc/self/limits"),
        clock_ticks(),
    );
    s.open_fds = fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
    s
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            let e = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?;
            c.encode(e)?;
        }
        for (name, help, v) in [
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_memory_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
        ] {
            if let Some(v) = v {
                let g = ConstGauge::new(v);
                let e = encoder.encode_descriptor(name, help, None, g.metric_type())?;
                g.encode(e)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_and_a_command_with_spaces_does_not_shift_fields() {
        let stat = "42 (dranet (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 \
                    1000 123456789 2048 18446744073709551615";
        let s = parse(
            stat,
            "cpu  1 2 3\nbtime 1700000000\n",
            "Name:\tdranet\nVmRSS:\t  2048 kB\n",
            "Limit                     Soft Limit           Hard Limit           Units\n\
             Max open files            1048576              1048576              files\n",
            100.0,
        );
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(s.virtual_memory_bytes, Some(123456789.0));
        assert_eq!(s.resident_memory_bytes, Some(2048.0 * 1024.0));
        assert_eq!(s.max_fds, Some(1048576.0));
        assert_eq!(parse("", "", "", "", 100.0), ProcessStats::default());
    }
}
