//! A report read per claim: its best verdict over the nodes, how many nodes give each verdict
//! and why (the nodes of one reason counted together), the one line per claim `dranet check`
//! ends with.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{ClaimReport, Report, Verdict};

/// One claim over the nodes it was checked on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimVerdict<'a> {
    /// Its first report (for the name and kind).
    pub claim: &'a ClaimReport,
    /// Its reports, one per node, in report order.
    pub reports: Vec<&'a ClaimReport>,
    /// The best verdict over its nodes.
    pub best: Verdict,
}

/// Each claim once, in report order, with its reports (one per node) and its best verdict.
pub fn per_claim(r: &Report) -> Vec<ClaimVerdict<'_>> {
    let mut out: Vec<ClaimVerdict<'_>> = Vec::new();
    let mut at: HashMap<(&str, &str), usize> = HashMap::new();
    for c in &r.claims {
        match at.entry((&c.kind, &c.name)) {
            Entry::Occupied(i) => {
                let v = &mut out[*i.get()];
                v.reports.push(c);
                v.best = v.best.min(c.verdict);
            }
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(ClaimVerdict {
                    claim: c,
                    reports: vec![c],
                    best: c.verdict,
                });
            }
        }
    }
    out
}

/// The nodes that give one verdict for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonGroup {
    /// The reason ([`ClaimReport::reason`]); `None` for the nodes where the claim fits, which
    /// need none.
    pub reason: Option<String>,
    /// The nodes, in report order.
    pub nodes: Vec<String>,
    /// How many nodes: those named, and a report without a node (slices that name none).
    pub count: usize,
}

/// How many nodes give one verdict, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerdictCount {
    /// The verdict.
    pub verdict: Verdict,
    /// How many nodes give it.
    pub count: usize,
    /// The nodes by reason, the largest group first (of equal ones, the first met).
    pub reasons: Vec<ReasonGroup>,
}

impl VerdictCount {
    /// Its nodes, in report order within each reason.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.reasons
            .iter()
            .flat_map(|g| g.nodes.iter().map(String::as_str))
    }
}

/// One claim over its nodes, for a reader of many nodes: the counts first, then the reasons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimSummary {
    /// `ResourceClaimTemplate` or `ResourceClaim`.
    pub kind: String,
    /// Claim or template name.
    pub name: String,
    /// The best verdict over its nodes.
    pub best: Verdict,
    /// How many nodes it was checked on.
    pub nodes: usize,
    /// Every verdict, best first, with its count (zero too).
    pub verdicts: Vec<VerdictCount>,
}

impl ClaimSummary {
    /// The count and reasons of one verdict.
    pub fn of(&self, v: Verdict) -> Option<&VerdictCount> {
        self.verdicts.iter().find(|c| c.verdict == v)
    }

    /// How many nodes give one verdict.
    pub fn count(&self, v: Verdict) -> usize {
        self.of(v).map_or(0, |c| c.count)
    }

    /// The reason that rules out the most nodes, with them: what to fix first when the claim
    /// fits nowhere.
    pub fn main_obstacle(&self) -> Option<&ReasonGroup> {
        self.of(Verdict::DoesNotFit)?.reasons.first()
    }
}

/// Every verdict, best first.
const VERDICTS: [Verdict; 4] = [
    Verdict::Fits,
    Verdict::FitsUnaligned,
    Verdict::DoesNotFit,
    Verdict::Invalid,
];

/// Each claim of the report summed up over its nodes, in report order.
pub fn summaries(r: &Report) -> Vec<ClaimSummary> {
    per_claim(r)
        .into_iter()
        .map(|v| ClaimSummary {
            kind: v.claim.kind.clone(),
            name: v.claim.name.clone(),
            best: v.best,
            nodes: v.reports.len(),
            verdicts: VERDICTS
                .into_iter()
                .map(|verdict| {
                    let reasons = groups(v.reports.iter().filter(|c| c.verdict == verdict));
                    VerdictCount {
                        verdict,
                        count: reasons.iter().map(|g| g.count).sum(),
                        reasons,
                    }
                })
                .collect(),
        })
        .collect()
}

/// The reports grouped by reason, the largest group first.
fn groups<'a>(reports: impl Iterator<Item = &'a &'a ClaimReport>) -> Vec<ReasonGroup> {
    let mut at: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    let mut out: Vec<ReasonGroup> = Vec::new();
    for c in reports {
        let reason = c.reason.as_deref();
        let i = *at.entry(reason).or_insert_with(|| {
            out.push(ReasonGroup {
                reason: reason.map(str::to_string),
                nodes: Vec::new(),
                count: 0,
            });
            out.len() - 1
        });
        out[i].count += 1;
        out[i].nodes.extend(c.node.clone());
    }
    // Stable: groups of one size stay in the order first met.
    out.sort_by_key(|g| std::cmp::Reverse(g.count));
    out
}

/// Nodes named in a summary line before it gives only their number.
const NAMED: usize = 3;

/// `a, b` or `912 nodes (a, b, c, …)`.
fn node_list<'a>(nodes: impl Iterator<Item = &'a str>, count: usize) -> String {
    let named: Vec<&str> = nodes.take(NAMED + 1).collect();
    if count <= NAMED && named.len() == count {
        return named.join(", ");
    }
    format!(
        "{count} nodes ({}, …)",
        named[..named.len().min(NAMED)].join(", ")
    )
}

/// One line per claim: where it fits and how, in the order of the report, e.g.
/// `ResourceClaimTemplate x: fits on node-a; does not fit on 1 other node(s)`. Many nodes are
/// counted rather than named; a claim that fits nowhere names what rules out the most nodes.
pub fn summarize(r: &Report) -> Vec<String> {
    summaries(r)
        .iter()
        .map(|s| format!("{} {}: {}", s.kind, s.name, summary_line(s)))
        .collect()
}

fn summary_line(s: &ClaimSummary) -> String {
    match s.best {
        Verdict::Invalid => "invalid (the scheduler would fail the pod)".to_string(),
        Verdict::DoesNotFit if s.nodes > 1 => {
            let mut line = format!("fits on none of {} nodes", s.nodes);
            if let Some(g) = s.main_obstacle()
                && let Some(reason) = &g.reason
            {
                line.push_str(&format!("; {} of them: {reason}", g.count));
            }
            line
        }
        Verdict::DoesNotFit => "does not fit".to_string(),
        Verdict::Fits | Verdict::FitsUnaligned => {
            let mut parts = Vec::new();
            for c in s.verdicts.iter().filter(|c| c.count > 0) {
                match (c.verdict, c.nodes().next()) {
                    (Verdict::Fits | Verdict::FitsUnaligned, None) => {
                        // The one report of slices that name no node.
                        parts.push(c.verdict.as_str().to_string())
                    }
                    (Verdict::Fits | Verdict::FitsUnaligned, Some(_)) => parts.push(format!(
                        "{} on {}",
                        c.verdict.as_str(),
                        node_list(c.nodes(), c.count)
                    )),
                    (v, _) => parts.push(format!("{} on {} other node(s)", v.as_str(), c.count)),
                }
            }
            parts.join("; ")
        }
    }
}
