//! Compiled selectors kept across allocations, as the scheduler keeps its CEL cache: the same
//! DeviceClass and claim selectors come back for every pod, and compiling one costs more than
//! allocating with it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use super::error::CelError;
use super::program::Program;
use crate::version::KubernetesVersion;

/// A bounded cache of compiled selector expressions, least recently used out first.
///
/// Owned by the caller and shared (it is `Sync`) by every allocator that should reuse
/// compilations: hand it to [`crate::Options::programs`]. Compile errors are kept too, so
/// a broken selector is not recompiled for every pod. Expressions compile with
/// [`Program::compile_at`] the cache's version, so a cached program is exactly what compiling
/// anew gives.
///
/// ```
/// use dranet_alloc::cel::ProgramCache;
///
/// let cache = ProgramCache::new(64);
/// let a = cache.compile(r#"device.driver == "dra.net""#).unwrap();
/// let b = cache.compile(r#"device.driver == "dra.net""#).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// assert_eq!(cache.len(), 1);
/// ```
#[derive(Debug)]
pub struct ProgramCache {
    capacity: usize,
    /// The Kubernetes version whose CEL environment expressions compile in.
    version: KubernetesVersion,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Slot, BuildHasherDefault<WordHasher>>,
    /// Incremented on every use; an entry's `used` is the tick of its last use.
    tick: u64,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Slot {
    program: Result<Arc<Program>, CelError>,
    used: u64,
}

/// The word hash of attribute names ([`super::hash::hash_words`]) for expressions. A lookup hashes the
/// whole expression on every allocation's path (a claim's and its classes' selectors), where
/// SipHash was a tenth of deciding a claim on a small node. Not keyed: the cache holds at most
/// its capacity of expressions, so keys made to collide cost a scan of those, never a wrong
/// answer.
#[derive(Debug, Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = super::hash::hash_words(self.0, bytes);
    }
}

/// How a [`ProgramCache`] has been used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Expressions held now.
    pub entries: usize,
}

impl Default for ProgramCache {
    /// A cache of [`ProgramCache::DEFAULT_CAPACITY`] expressions.
    fn default() -> Self {
        ProgramCache::new(ProgramCache::DEFAULT_CAPACITY)
    }
}

impl ProgramCache {
    /// Room for the selectors of a node's DeviceClasses and the claims of its pods.
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A cache holding at most `capacity` expressions (at least one), compiled for the newest
    /// supported Kubernetes version.
    pub fn new(capacity: usize) -> ProgramCache {
        ProgramCache::for_version(KubernetesVersion::default(), capacity)
    }

    /// A cache holding at most `capacity` expressions (at least one), compiled as the API
    /// server of Kubernetes `version` admits them ([`Program::compile_at`]).
    pub fn for_version(version: KubernetesVersion, capacity: usize) -> ProgramCache {
        ProgramCache {
            capacity: capacity.max(1),
            version,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The Kubernetes version expressions compile for.
    pub fn version(&self) -> KubernetesVersion {
        self.version
    }

    /// The compiled `source`, compiled now unless the cache has it. The lock is not held while
    /// compiling, so two threads may compile the same new expression once each; both get an
    /// equal program.
    pub fn compile(&self, source: &str) -> Result<Arc<Program>, CelError> {
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some(slot) = inner.entries.get_mut(source) {
                slot.used = tick;
                let found = slot.program.clone();
                inner.hits += 1;
                return found;
            }
            inner.misses += 1;
        }
        let program = Program::compile_at(source, self.version).map(Arc::new);
        let mut inner = self.lock();
        if inner.entries.len() >= self.capacity && !inner.entries.contains_key(source) {
            // A linear scan: eviction happens once per miss of a full cache, and a cache this
            // size is scanned in microseconds, less than the compile it follows.
            if let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            {
                inner.entries.remove(&oldest);
            }
        }
        let used = inner.tick;
        inner.entries.insert(
            source.to_string(),
            Slot {
                program: program.clone(),
                used,
            },
        );
        program
    }

    /// Expressions held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hits, misses and size so far.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            hits: inner.hits,
            misses: inner.misses,
            entries: inner.entries.len(),
        }
    }

    /// Forgets every expression.
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    /// The cache stays usable after a panic elsewhere: its entries are complete values, never
    /// half-written.
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_returns_the_same_program_and_counts() {
        let c = ProgramCache::new(4);
        let a = c.compile("device.driver == 'a'").unwrap();
        let b = c.compile("device.driver == 'a'").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(
            c.stats(),
            CacheStats {
                hits: 1,
                misses: 1,
                entries: 1
            }
        );
    }

    #[test]
    fn errors_are_kept_and_equal_to_a_fresh_compile() {
        let c = ProgramCache::new(4);
        let first = c.compile("device.foo == 1").unwrap_err();
        let again = c.compile("device.foo == 1").unwrap_err();
        assert_eq!(first, again);
        assert_eq!(Program::compile("device.foo == 1").unwrap_err(), first);
        assert_eq!(c.stats().hits, 1);
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let c = ProgramCache::new(2);
        c.compile("device.driver == 'a'").unwrap();
        c.compile("device.driver == 'b'").unwrap();
        // `a` used again: `b` is now the oldest.
        c.compile("device.driver == 'a'").unwrap();
        c.compile("device.driver == 'c'").unwrap();
        assert_eq!(c.len(), 2);
        let before = c.stats().misses;
        c.compile("device.driver == 'a'").unwrap();
        assert_eq!(c.stats().misses, before, "a was kept");
        c.compile("device.driver == 'b'").unwrap();
        assert_eq!(c.stats().misses, before + 1, "b was evicted");
    }

    #[test]
    fn zero_capacity_still_works() {
        let c = ProgramCache::new(0);
        assert!(c.compile("true").is_ok());
        assert!(c.compile("false").is_ok());
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn shared_between_threads() {
        let c = Arc::new(ProgramCache::default());
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || c.compile(&format!("device.driver == '{}'", i % 2)))
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap().is_ok());
        }
        assert_eq!(c.len(), 2);
    }
}
