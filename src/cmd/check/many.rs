//! The table of a claim checked on many nodes: counts first (how many nodes give each verdict,
//! and why, the reasons that rule out the most nodes first), then one row per node in the
//! report's order, instead of every node's device table.

use std::io::Write;

use dranet_alloc::report::{self, ClaimReport, Report};

/// Above this many nodes a claim's nodes are one row each, after its counts; at most this many,
/// each gets its device table, as one node does.
pub const DETAILED_NODES: usize = 8;

/// Whether `r` has a claim checked on more than [`DETAILED_NODES`] nodes.
pub fn is_many(r: &Report) -> bool {
    report::per_claim(r)
        .iter()
        .any(|v| v.reports.len() > DETAILED_NODES)
}

/// Every claim's counts by verdict and reason, then its nodes, one row each.
pub fn render(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let per_claim = report::per_claim(r);
    for (i, (s, v)) in report::summaries(r).iter().zip(&per_claim).enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{} {} on {} nodes:", s.kind, s.name, s.nodes)?;
        let mut rows = Vec::new();
        for c in &s.verdicts {
            rows.push(vec![c.verdict.as_str().to_string(), c.count.to_string()]);
        }
        write!(out, "{}", super::super::aligned(&rows, "  "))?;
        let reasons: Vec<_> = s
            .verdicts
            .iter()
            .flat_map(|c| c.reasons.iter().map(move |g| (c.verdict, g)))
            .filter_map(|(verdict, g)| Some((verdict, g.count, g.reason.as_deref()?)))
            .collect();
        if !reasons.is_empty() {
            writeln!(out, "  why, by number of nodes:")?;
            for (verdict, count, reason) in reasons {
                writeln!(out, "    {count:>6}  {}: {reason}", verdict.as_str())?;
            }
        }
        writeln!(out)?;
        let mut rows = vec![
            ["NODE", "VERDICT", "DEVICES", "REASON"]
                .map(String::from)
                .to_vec(),
        ];
        rows.extend(v.reports.iter().map(|c| row(c)));
        write!(out, "{}", super::super::aligned(&rows, ""))?;
    }
    Ok(())
}

/// A node's row: its verdict, the devices the claim gets there, or why it gets none.
fn row(c: &ClaimReport) -> Vec<String> {
    let devices: Vec<&str> = c.devices.iter().map(|d| d.device.as_str()).collect();
    vec![
        c.node.clone().unwrap_or_else(|| "-".into()),
        c.verdict.as_str().to_string(),
        if devices.is_empty() {
            "-".into()
        } else {
            devices.join(",")
        },
        c.reason.clone().unwrap_or_else(|| "-".into()),
    ]
}
