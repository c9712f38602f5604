//! The regular expressions one program's evaluations compiled (see [`RegexCache`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most patterns a [`RegexCache`] keeps: a selector's constants, with room for a few built
/// from attributes; past it a pattern is compiled for its one use.
pub(crate) const MAX_CACHED: usize = 64;

/// The patterns one program's evaluations compiled, shared by its clones: a selector's pattern
/// is nearly always a constant, compiled once instead of once per device (the scheduler compiles
/// constant patterns once too, with cel-go's regex optimisation). Keyed by the pattern alone:
/// a program evaluates with one version's Go syntax.
#[derive(Debug, Default)]
pub(crate) struct RegexCache {
    compiled: Mutex<HashMap<String, Result<Arc<regex::Regex>, String>>>,
}

impl RegexCache {
    /// `pattern` compiled by `compile`, from the cache when it was compiled before (its error
    /// too).
    pub(crate) fn get_or(
        &self,
        pattern: &str,
        compile: impl FnOnce(&str) -> Result<regex::Regex, String>,
    ) -> Result<Arc<regex::Regex>, String> {
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = compiled.get(pattern) {
            return r.clone();
        }
        let r = compile(pattern).map(Arc::new);
        if compiled.len() < MAX_CACHED {
            compiled.insert(pattern.to_string(), r.clone());
        }
        r
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}
