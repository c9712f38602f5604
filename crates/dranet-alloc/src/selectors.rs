//! A DeviceClass's or a request's selectors, compiled.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::DeviceSelector;

use crate::cel::{CelError, Program, ProgramCache};
use crate::device::Device;
use crate::one_or_many::OneOrMany;
use crate::version::KubernetesVersion;

/// A selector list compiled, or the expression (empty for a selector without `cel`) that
/// does not compile and why.
pub(crate) type Programs = Result<OneOrMany<Arc<Program>>, (String, CelError)>;

/// Compiles a selector list; the error names the expression (empty when a selector has no
/// `cel`). Claims and classes are compiled as the API server of `version` admits them, cost
/// limit included ([`Program::compile_at`]): one it would refuse to store never reaches the
/// scheduler, so allocating it would answer a question no cluster asks. For every selector it
/// admits, the program is the scheduler's. A cache compiles for its own version, which the
/// allocator checked is `version`.
pub(crate) fn selector_programs(
    selectors: &[DeviceSelector],
    cache: Option<&ProgramCache>,
    version: KubernetesVersion,
) -> Programs {
    let mut out = OneOrMany::Empty;
    for s in selectors {
        match &s.cel {
            Some(c) => {
                let program = match cache {
                    Some(cache) => cache.compile(&c.expression),
                    None => Program::compile_at(&c.expression, version).map(Arc::new),
                };
                out.push(program.map_err(|e| (c.expression.clone(), e))?)
            }
            None => {
                return Err((
                    String::new(),
                    CelError::Syntax {
                        position: 0,
                        message: "selector has no cel expression".into(),
                    },
                ));
            }
        }
    }
    Ok(out)
}

/// What a device's selectors say for one request.
#[derive(Debug, Clone)]
pub(crate) enum Match {
    No,
    Yes,
    /// Selector `.0` failed to evaluate with message `.1`.
    Err(Box<(usize, String)>),
}

pub(crate) fn selectors_match(programs: &[Arc<Program>], d: &Device) -> Match {
    for (i, p) in programs.iter().enumerate() {
        // The common shapes read the device's slice; the index is built for the others.
        match p.matches_device(d) {
            Ok(true) => {}
            Ok(false) => return Match::No,
            Err(e) => return Match::Err(Box::new((i, e.to_string()))),
        }
    }
    Match::Yes
}
