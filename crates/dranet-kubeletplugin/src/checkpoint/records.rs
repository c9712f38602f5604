//! The driver's own records in the checkpoint: [`DriverRecords`].

use std::collections::BTreeMap;

use super::Checkpoint;
use super::{MAX_STATE_DEPTH, json_depth};
use crate::error::{Error, Result};

/// The longest key of a driver record, in bytes.
pub const MAX_RECORD_KEY_BYTES: usize = 256;

/// What a driver keeps in the plugin's checkpoint beside its claims' prepared state: records
/// that must outlive a claim's entry, or exist before it is prepared (what a driver asked of
/// another system and must give back, say). The checkpoint lives on the kubelet's disk, so they
/// survive daemon restarts and node reboots alike, where a driver's own tmpfs state does not.
///
/// Each record is a JSON value under a key the driver chooses. [`DriverRecords::put`] and
/// [`DriverRecords::remove`] return once the change is on disk (by the checkpoint's crash-safe
/// write, batched with concurrent changes); a write that fails changes nothing, in memory or on
/// disk, and says why. With rolling updates both instances see one set of records.
///
/// The driver gets it from [`crate::Driver::restore_records`] when the plugin starts; a test or
/// a tool may take it from a checkpoint it opened ([`Checkpoint::records`]).
#[derive(Clone)]
pub struct DriverRecords {
    checkpoint: Checkpoint,
}

impl std::fmt::Debug for DriverRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverRecords")
            .field("checkpoint", &self.checkpoint.path())
            .finish()
    }
}

impl DriverRecords {
    pub(super) fn new(checkpoint: Checkpoint) -> Self {
        Self { checkpoint }
    }

    /// The record under `key`, if there is one.
    pub async fn get(&self, key: &str) -> Result<Option<serde_json::Value>> {
        self.checkpoint.reread_async().await?;
        Ok(self.checkpoint.lock().records.get(key).cloned())
    }

    /// Every record whose key starts with `prefix` (`""`: all), by key.
    pub async fn with_prefix(&self, prefix: &str) -> Result<BTreeMap<String, serde_json::Value>> {
        self.checkpoint.reread_async().await?;
        Ok(self
            .checkpoint
            .lock()
            .records
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    /// Records `value` under `key` (replacing what was there) and waits until it is on disk.
    /// A key must be 1 to [`MAX_RECORD_KEY_BYTES`] bytes without control characters, and a value
    /// at most [`MAX_STATE_DEPTH`] levels deep (what the checkpoint reads back).
    pub async fn put(&self, key: &str, value: serde_json::Value) -> Result<()> {
        check_key(key)?;
        let depth = json_depth(&value);
        if depth > MAX_STATE_DEPTH {
            return Err(Error::Record {
                key: key.to_string(),
                reason: format!(
                    "the value nests {depth} levels deep; the checkpoint keeps at most \
                     {MAX_STATE_DEPTH}"
                ),
            });
        }
        let key = key.to_string();
        self.checkpoint
            .update(move |c| {
                c.records.insert(key, value);
            })
            .await
    }

    /// Forgets the record under `key` and waits until that is on disk. Forgetting a record that
    /// is not there writes nothing.
    pub async fn remove(&self, key: &str) -> Result<()> {
        check_key(key)?;
        if !self.checkpoint.inner.shared && !self.checkpoint.lock().records.contains_key(key) {
            return Ok(());
        }
        let key = key.to_string();
        self.checkpoint
            .update(move |c| {
                c.records.remove(&key);
            })
            .await
    }
}

fn check_key(key: &str) -> Result<()> {
    let bad = |reason: String| {
        Err(Error::Record {
            key: key.chars().take(80).collect(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("a record's key may not be empty".into());
    }
    if key.len() > MAX_RECORD_KEY_BYTES {
        return bad(format!(
            "a record's key may take at most {MAX_RECORD_KEY_BYTES} bytes, this one takes {}",
            key.len()
        ));
    }
    if key.chars().any(char::is_control) {
        return bad("a record's key may not hold control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::entry;
    use crate::checkpoint::{CheckpointPolicy, Phase, tmp_path};
    use serde_json::json;

    #[tokio::test]
    async fn records_survive_reopen_beside_the_claims() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        cp.put(entry("a", Phase::Prepared)).await.unwrap();
        let r = cp.records();
        r.put("owed/u1", json!({"leases": ["x"]})).await.unwrap();
        r.put("owed/u2", json!(2)).await.unwrap();
        r.put("other", json!(3)).await.unwrap();
        r.remove("nonexistent").await.unwrap();

        let (again, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        let r = again.records();
        assert_eq!(again.get("a"), Some(entry("a", Phase::Prepared)));
        assert_eq!(
            r.get("owed/u1").await.unwrap(),
            Some(json!({"leases": ["x"]}))
        );
        let owed: Vec<String> = r.with_prefix("owed/").await.unwrap().into_keys().collect();
        assert_eq!(owed, ["owed/u1", "owed/u2"]);
        assert_eq!(r.with_prefix("").await.unwrap().len(), 3);
        // The claim's entry goes; the records stay.
        again.remove("a").await.unwrap();
        r.remove("owed/u1").await.unwrap();
        let (third, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert!(third.entries().is_empty());
        let left: Vec<String> = third
            .records()
            .with_prefix("")
            .await
            .unwrap()
            .into_keys()
            .collect();
        assert_eq!(left, ["other", "owed/u2"]);
    }

    #[tokio::test]
    async fn a_record_that_cannot_be_written_is_not_kept_in_memory_either() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        let r = cp.records();
        r.put("kept", json!(1)).await.unwrap();
        std::fs::create_dir(tmp_path(&path)).unwrap();
        let e = r.put("lost", json!(2)).await.unwrap_err();
        assert!(e.to_string().contains("checkpoint"), "{e}");
        assert_eq!(r.get("lost").await.unwrap(), None);
        let e = r.remove("kept").await.unwrap_err();
        assert!(e.to_string().contains("checkpoint"), "{e}");
        assert_eq!(r.get("kept").await.unwrap(), Some(json!(1)));
    }

    #[tokio::test]
    async fn two_instances_of_a_rolling_update_share_the_records() {
        use crate::metrics::{Metrics, NoMetrics};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let open = || {
            let metrics: Arc<dyn Metrics> = Arc::new(NoMetrics);
            Checkpoint::open_with_metrics(&path, CheckpointPolicy::Refuse, metrics, true)
                .unwrap()
                .0
        };
        let (old, new) = (open().records(), open().records());
        old.put("owed/u1", json!(1)).await.unwrap();
        assert_eq!(new.get("owed/u1").await.unwrap(), Some(json!(1)));
        // A change by one instance keeps what the other wrote since it last looked.
        new.put("owed/u2", json!(2)).await.unwrap();
        old.remove("owed/u1").await.unwrap();
        let left: Vec<String> = new
            .with_prefix("owed/")
            .await
            .unwrap()
            .into_keys()
            .collect();
        assert_eq!(left, ["owed/u2"]);
    }

    #[tokio::test]
    async fn bad_keys_and_values_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let (cp, _) =
            Checkpoint::open(dir.path().join("checkpoint"), CheckpointPolicy::Refuse).unwrap();
        let r = cp.records();
        for (key, why) in [
            ("", "empty"),
            ("a\nb", "control characters"),
            (&"k".repeat(MAX_RECORD_KEY_BYTES + 1), "256 bytes"),
        ] {
            let e = r.put(key, json!(1)).await.unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        let mut deep = json!(1);
        for _ in 0..MAX_STATE_DEPTH {
            deep = json!([deep]);
        }
        let e = r.put("deep", deep).await.unwrap_err().to_string();
        assert!(e.contains("\"deep\"") && e.contains("levels deep"), "{e}");
        assert!(r.with_prefix("").await.unwrap().is_empty());
    }
}
