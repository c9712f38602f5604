//! What a pod of N NICs needs on this node, from what the running daemon measured: its
//! `pod_device_attach_duration_seconds{op="attach",devices}` histogram by pod size, against the
//! window RunPodSandbox answers within.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Finding, Status, finding};
use crate::daemon::metrics::{POD_SIZES, pod_size};

const HISTOGRAM: &str = "dranet_driver_pod_device_attach_duration_seconds";

/// One pod size's attach times.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sizes {
    /// Per size class ([`POD_SIZES`]): `(le, cumulative count)` buckets, sum and count.
    by_size: BTreeMap<String, Hist>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Hist {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Hist {
    /// The smallest bucket bound under which at least `q` of the pods attached.
    fn quantile_bound(&self, q: f64) -> Option<f64> {
        let want = self.count * q;
        self.buckets
            .iter()
            .filter(|(le, _)| le.is_finite())
            .find(|(_, n)| *n >= want)
            .map(|(le, _)| *le)
    }
}

/// The labels of a sample line, `{a="x",b="y"}`, as pairs (values have no `"` or `,` here).
fn labels(s: &str) -> Vec<(&str, &str)> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.trim(), v.trim().trim_matches('"')))
        })
        .collect()
}

/// Reads the daemon's `/metrics` text (Prometheus or OpenMetrics).
pub fn parse(text: &str) -> Sizes {
    let mut by_size: BTreeMap<String, Hist> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with(HISTOGRAM)) {
        let rest = &line[HISTOGRAM.len()..];
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels_text, value)) = rest.split_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let l = labels(labels_text);
        let get = |k: &str| l.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        if get("op") != Some("attach") {
            continue;
        }
        let Some(size) = get("devices") else {
            continue;
        };
        let h = by_size.entry(size.to_string()).or_default();
        match kind {
            "_bucket" => {
                let le = match get("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::INFINITY),
                    None => continue,
                };
                h.buckets.push((le, value));
            }
            "_sum" => h.sum = value,
            "_count" => h.count = value,
            _ => {}
        }
    }
    for h in by_size.values_mut() {
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Sizes { by_size }
}

/// What doctor knows to judge attach times.
#[derive(Debug, Clone)]
pub struct TimesInput {
    /// The daemon's metrics, or why they could not be read.
    pub metrics: Result<Sizes, String>,
    /// How long RunPodSandbox may take to answer with the pod attached.
    pub answer_within: Duration,
    /// Whether the hook holds a pod's first container (else CreateContainer refusals do).
    pub hook: bool,
    /// The NICs this node publishes.
    pub node_nics: usize,
}

fn ms(s: f64) -> String {
    format!("{:.0} ms", s * 1000.0)
}

/// One finding per pod size attached on this node, and one for a pod of all its NICs.
pub fn check(input: &TimesInput, out: &mut Vec<Finding>) {
    let sizes = match &input.metrics {
        Ok(s) => s,
        Err(e) => {
            out.push(finding(
                Status::Warn,
                "attach",
                format!("attach times unknown: the daemon's metrics could not be read ({e})"),
                Some(
                    "run doctor on a node where `dranet run` serves metrics, or pass --metrics-url",
                ),
            ));
            return;
        }
    };
    let window = input.answer_within.as_secs_f64();
    for size in POD_SIZES {
        let Some(h) = sizes.by_size.get(size).filter(|h| h.count > 0.0) else {
            continue;
        };
        let p95 = h.quantile_bound(0.95);
        let mean = h.sum / h.count;
        let within = p95.is_some_and(|b| b <= window);
        let (status, then, fix) = if within {
            (
                Status::Ok,
                "within it: attached before RunPodSandbox answers".to_string(),
                None,
            )
        } else if input.hook {
            (
                Status::Ok,
                "past it: their attach is deferred and the hook holds their first container until \
                 it ends"
                    .to_string(),
                None,
            )
        } else {
            (
                Status::Warn,
                "past it: without the hook their containers are refused until the attach ends \
                 (the kubelet retries, a slower start)"
                    .to_string(),
                Some("install the hook (Helm: hook.enabled)"),
            )
        };
        out.push(finding(
            status,
            "attach",
            format!(
                "pods of {size} NIC(s): {} attached here, mean {}, 95% within {}; RunPodSandbox \
                 answers within {}: {then}",
                h.count,
                ms(mean),
                p95.map_or_else(|| "more than the histogram's range".to_string(), ms),
                ms(window),
            ),
            fix,
        ));
    }
    if input.node_nics > 0 {
        let size = pod_size(input.node_nics);
        if !sizes.by_size.get(size).is_some_and(|h| h.count > 0.0) {
            out.push(finding(
                Status::Ok,
                "attach",
                format!(
                    "this node publishes {} NIC(s): no pod of {size} NICs has attached here yet, \
                     so its attach time is unmeasured; past {} it is deferred and its containers \
                     held until it ends",
                    input.node_nics,
                    ms(window)
                ),
                None,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::metrics::DaemonMetrics;

    /// The daemon's own encoder: pods of one NIC fast, pods of eight past the window.
    fn measured() -> Sizes {
        let m = DaemonMetrics::new();
        for _ in 0..10 {
            m.pod_devices("attach", true, Duration::from_millis(40), 1);
        }
        for _ in 0..4 {
            m.pod_devices("attach", true, Duration::from_millis(2500), 8);
        }
        m.pod_devices("detach", true, Duration::from_secs(9), 1);
        parse(&m.encode())
    }

    fn run(hook: bool, node_nics: usize) -> Vec<Finding> {
        let mut out = Vec::new();
        check(
            &TimesInput {
                metrics: Ok(measured()),
                answer_within: Duration::from_millis(1500),
                hook,
                node_nics,
            },
            &mut out,
        );
        out
    }

    #[test]
    fn pod_sizes_are_judged_against_the_answer_window() {
        let out = run(true, 8);
        assert_eq!(out.len(), 2, "{out:#?}");
        assert!(
            out[0]
                .message
                .starts_with("pods of 1 NIC(s): 10 attached here")
        );
        assert!(out[0].message.contains("within it"), "{}", out[0].message);
        assert!(
            out[1]
                .message
                .starts_with("pods of 5-8 NIC(s): 4 attached here, mean 2500 ms")
        );
        assert!(
            out[1].message.contains("the hook holds"),
            "{}",
            out[1].message
        );
        assert_eq!(out[1].status, Status::Ok);
        // Without the hook, a slower start is a warning with its fix.
        let out = run(false, 8);
        assert_eq!(out[1].status, Status::Warn);
        assert!(out[1].fix.is_some());
    }

    #[test]
    fn a_pod_of_all_the_nodes_nics_not_yet_seen_is_named() {
        let out = run(true, 16);
        let last = out.last().unwrap();
        assert!(
            last.message
                .contains("publishes 16 NIC(s): no pod of 9-16 NICs"),
            "{}",
            last.message
        );
    }

    #[test]
    fn unreadable_metrics_say_why() {
        let mut out = Vec::new();
        check(
            &TimesInput {
                metrics: Err("connection refused".into()),
                answer_within: Duration::from_millis(1500),
                hook: true,
                node_nics: 8,
            },
            &mut out,
        );
        assert_eq!(out[0].status, Status::Warn);
        assert!(out[0].message.contains("connection refused"));
    }
}
