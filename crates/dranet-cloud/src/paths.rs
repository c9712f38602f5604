//! The answers of a path-tree metadata service (AWS's and Alibaba's `/latest/…`), by path: what a
//! live read collects, and the file format of `--aws-metadata-file` and
//! `--alibaba-metadata-file`, so that a saved file and a live read go through the same parser.

use std::collections::BTreeMap;

use crate::http::{Error, Result};

/// Answers by path relative to `/latest/` (`meta-data/placement/group-name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathMap(pub BTreeMap<String, String>);

impl PathMap {
    /// The answer at `path`, if the service had one.
    pub fn get(&self, path: &str) -> Option<&str> {
        self.0.get(path).map(String::as_str)
    }

    /// Records an answer.
    pub fn insert(&mut self, path: impl Into<String>, answer: impl Into<String>) {
        self.0.insert(path.into(), answer.into());
    }

    /// Parses a saved file: a JSON object from paths to answers. An answer is the text the
    /// service gave, or, for a JSON document such as the instance identity, that document.
    pub fn parse(what: &'static str, body: &[u8]) -> Result<Self> {
        let v: BTreeMap<String, serde_json::Value> = crate::http::json_object(what, body)?;
        let mut m = PathMap::default();
        for (path, answer) in v {
            let text = match answer {
                serde_json::Value::String(s) => s,
                serde_json::Value::Object(_) | serde_json::Value::Number(_) => answer.to_string(),
                other => {
                    return Err(Error::Invalid {
                        what,
                        reason: format!(
                            "{path:?}: expected the service's answer (text or a JSON document), got {other}"
                        ),
                    });
                }
            };
            m.insert(path.trim_start_matches('/'), text);
        }
        Ok(m)
    }
}
