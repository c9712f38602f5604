//! The checkpoint file's format: one header line and a JSON body,
//!
//! ```text
//! dranet-kubeletplugin-checkpoint v1 crc32=1c291ca3 len=57
//! {"claims":{...},"records":{...}}
//! ```
//!
//! read back only when the header's magic word, version, length and CRC-32 all check out.
//!
//! `records` (the driver's own, see [`crate::DriverRecords`]) came after the first files were
//! written: a body without it reads as no records, and a checkpoint without records is written
//! without it, byte for byte as before. A version that predates it reads a file with records
//! and ignores them (and drops them at its next write): the format stays `v1`, so that going
//! back to such a version never stops a node's plugin from starting.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::driver::{ClaimRef, Prepared};

const MAGIC: &str = "dranet-kubeletplugin-checkpoint";
const VERSION: &str = "v1";

/// How far prepare got for a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The driver was called but has not returned successfully.
    Preparing,
    /// The driver returned; the entry holds its result.
    Prepared,
}

/// One claim in the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    /// The claim.
    pub claim: ClaimRef,
    /// How far prepare got.
    pub phase: Phase,
    /// The driver's result, once [`Phase::Prepared`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<Prepared>,
    /// The pod's name for the claim (`spec.resourceClaims[].name`) when the claim was generated
    /// from a template (its `resource.kubernetes.io/pod-claim-name` annotation): the device
    /// metadata's container path depends on it, and a restart must write the same spec. Missing
    /// (and in checkpoints written before it existed): a claim the pod names directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_claim_name: Option<String>,
}

/// What a checkpoint holds: the claims, and the driver's own records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Contents {
    /// Each claim's entry, by claim UID.
    pub claims: BTreeMap<String, CheckpointEntry>,
    /// The driver's records, by key ([`crate::DriverRecords`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub records: BTreeMap<String, serde_json::Value>,
}

/// Encodes `contents` as the checkpoint file's bytes.
pub fn encode(contents: &Contents) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail; fall back to an empty body rather than panic.
    let body = serde_json::to_vec(contents).unwrap_or_else(|_| b"{\"claims\":{}}".to_vec());
    let mut out = format!(
        "{MAGIC} {VERSION} crc32={:08x} len={}\n",
        crc32(&body),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Why checkpoint bytes cannot be trusted, said precisely.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckpointDefect {
    /// No newline ends the header.
    #[error("no header line (file truncated?)")]
    NoHeader,
    /// The header line is not UTF-8.
    #[error("header is not UTF-8")]
    HeaderNotUtf8,
    /// The header does not start with the format's magic word.
    #[error("header {header:?} does not start with {:?}", MAGIC)]
    Magic {
        /// The header line.
        header: String,
    },
    /// A format version this code does not read.
    #[error("unsupported checkpoint version {found:?}, want {:?}", VERSION)]
    Version {
        /// The version the header names, if any.
        found: Option<String>,
    },
    /// The header lacks a readable `crc32=` field.
    #[error("header {header:?} has no valid crc32= field")]
    NoChecksum {
        /// The header line.
        header: String,
    },
    /// The header lacks a readable `len=` field.
    #[error("header {header:?} has no valid len= field")]
    NoLength {
        /// The header line.
        header: String,
    },
    /// The body is not as long as the header says.
    #[error("body is {actual} bytes, header says {expected} (torn write?)")]
    Length {
        /// Length in the header.
        expected: usize,
        /// Length of the body.
        actual: usize,
    },
    /// The body's CRC-32 is not the header's.
    #[error(
        "checksum mismatch: header says {expected:08x}, body has {actual:08x} (edited or corrupted)"
    )]
    Checksum {
        /// CRC-32 in the header.
        expected: u32,
        /// CRC-32 of the body.
        actual: u32,
    },
    /// The body is not the checkpoint's JSON.
    #[error("body is not a valid checkpoint: {0}")]
    Body(#[source] Arc<serde_json::Error>),
    /// An entry is filed under another claim UID than its own.
    #[error("entry keyed {key:?} is for claim UID {uid:?}")]
    KeyMismatch {
        /// The key.
        key: String,
        /// The entry's claim UID.
        uid: String,
    },
}

/// Decodes checkpoint bytes, saying precisely what is wrong when they do not check out.
pub fn decode(bytes: &[u8]) -> std::result::Result<Contents, CheckpointDefect> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(CheckpointDefect::NoHeader)?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| CheckpointDefect::HeaderNotUtf8)?;
    let body = &bytes[nl + 1..];
    let mut parts = header.split(' ');
    if parts.next() != Some(MAGIC) {
        return Err(CheckpointDefect::Magic {
            header: header.into(),
        });
    }
    match parts.next() {
        Some(VERSION) => {}
        other => {
            return Err(CheckpointDefect::Version {
                found: other.map(str::to_string),
            });
        }
    }
    let crc = parts
        .next()
        .and_then(|p| p.strip_prefix("crc32="))
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| CheckpointDefect::NoChecksum {
            header: header.into(),
        })?;
    let len = parts
        .next()
        .and_then(|p| p.strip_prefix("len="))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| CheckpointDefect::NoLength {
            header: header.into(),
        })?;
    if body.len() != len {
        return Err(CheckpointDefect::Length {
            expected: len,
            actual: body.len(),
        });
    }
    let actual = crc32(body);
    if actual != crc {
        return Err(CheckpointDefect::Checksum {
            expected: crc,
            actual,
        });
    }
    let parsed: Contents =
        serde_json::from_slice(body).map_err(|e| CheckpointDefect::Body(Arc::new(e)))?;
    for (uid, entry) in &parsed.claims {
        if uid != &entry.claim.uid {
            return Err(CheckpointDefect::KeyMismatch {
                key: uid.clone(),
                uid: entry.claim.uid.clone(),
            });
        }
    }
    Ok(parsed)
}

/// CRC-32 (IEEE 802.3, reflected), table driven.
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::entry;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn garbage_is_rejected_not_panicked_on() {
        for bad in [
            &b""[..],
            b"\n",
            b"hello\n{}",
            b"dranet-kubeletplugin-checkpoint v9 crc32=0 len=0\n",
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        let mut c = Contents::default();
        c.claims
            .insert("x".to_string(), entry("y", Phase::Prepared));
        let err = decode(&encode(&c)).unwrap_err().to_string();
        assert!(err.contains("keyed \"x\""), "{err}");
    }

    #[test]
    fn every_truncation_and_every_changed_byte_is_detected() {
        let mut c = Contents::default();
        for uid in ["a", "b"] {
            c.claims
                .insert(uid.to_string(), entry(uid, Phase::Prepared));
        }
        c.records
            .insert("owed/a".into(), serde_json::json!({"leases": [1, 2]}));
        let good = encode(&c);
        assert_eq!(decode(&good).unwrap(), c);
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated to {len} bytes");
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad).is_err(), "byte {i} changed");
        }
    }

    /// A file as the plugin wrote it before driver records existed (no `records` in the body).
    const BEFORE_RECORDS: &str = "dranet-kubeletplugin-checkpoint v1 crc32=ea148a63 len=241\n\
        {\"claims\":{\"a\":{\"claim\":{\"namespace\":\"ns\",\"name\":\"c-a\",\
        \"uid\":\"a\"},\"phase\":\"prepared\",\
        \"prepared\":{\"devices\":[{\"requests\":[\"nic\"],\"pool\":\"node1\",\
        \"device\":\"eth1\",\"cdi_device_ids\":[\"example.com/net=eth1\"]}],\
        \"state\":{\"netns\":\"/proc/1/ns/net\"}}}}}";

    #[test]
    fn a_file_from_before_driver_records_reads_and_is_written_as_it_was() {
        let c = decode(BEFORE_RECORDS.as_bytes()).unwrap();
        assert_eq!(c.claims.len(), 1);
        assert_eq!(c.claims["a"], entry("a", Phase::Prepared));
        assert!(c.records.is_empty());
        // Without records, the body is what a version without them reads, byte for byte.
        assert_eq!(encode(&c), BEFORE_RECORDS.as_bytes());
    }
}
