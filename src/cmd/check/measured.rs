//! What the seeds measured a misplacement to cost: `dranet check`'s words added to the report's
//! placement warnings, for the GPU models measured (Azure ND nodes). The report itself
//! ([`dranet_alloc::report`]) gives the warning and the GPUs' model.

use dranet_alloc::report::{Report, Verdict};

/// What the seeds measured aligned against unaligned on a GPU model (NCCL all-reduce bus
/// bandwidth on Azure ND nodes), as a hint of what a cross-NUMA placement costs; `None` for
/// models not measured.
pub fn measured(model: &str) -> Option<&'static str> {
    if model.contains("GB300") {
        Some("measured on ND GB300 v6: about 25 GB/s per NIC unaligned against 56 GB/s aligned")
    } else if model.contains("MI300X") {
        Some(
            "measured on ND MI300X v5: 6.1 GB/s unaligned against 42.5 GB/s with 4 NICs on the GPUs' NUMA node",
        )
    } else {
        None
    }
}

/// Adds the measured cost to each placement warning of a claim whose GPUs' model was measured,
/// and to the reason its nodes are counted by.
pub fn add_costs(report: &mut Report) {
    for c in &mut report.claims {
        let Some(cost) = c.gpu_model.as_deref().and_then(measured) else {
            continue;
        };
        for w in &mut c.warnings {
            *w = format!("{w} ({cost})");
        }
        if c.verdict == Verdict::FitsUnaligned && !c.warnings.is_empty() {
            c.reason = Some(c.warnings.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_measured_models_have_a_cost() {
        assert!(measured("NVIDIA GB300").unwrap().contains("56 GB/s"));
        assert!(
            measured("AMD Instinct MI300X")
                .unwrap()
                .contains("42.5 GB/s")
        );
        assert_eq!(measured("NVIDIA H100"), None);
    }
}
