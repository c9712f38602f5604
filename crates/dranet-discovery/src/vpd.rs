//! PCI Vital Product Data (the `vpd` file of a function in sysfs), as the PCI Local Bus
//! Specification lays it out: a list of resources, the identifier string (large resource `0x82`),
//! the read-only keywords (`0x90`, VPD-R) and the writable ones (`0x91`, VPD-W), ended by the small
//! end tag `0x78`. Each keyword is two ASCII characters, a length byte and its data.
//!
//! ConnectX-8 pairs a NIC function with its Data Direct function by an equal read-only `V3`
//! keyword (what rdma-core's `rdma_topo` and mstflint read). The kernel makes `vpd` readable by
//! root only, and reading it polls config space: read it once per function and keep it.

use std::collections::BTreeMap;

/// What a function's VPD says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vpd {
    /// The identifier string (the product's name), if any.
    pub id: Option<String>,
    /// The read-only keywords (`PN`, `SN`, `V3`, ...), but the checksum `RV`.
    pub read_only: BTreeMap<String, Vec<u8>>,
}

impl Vpd {
    /// A read-only keyword's value as text: up to its first NUL, trimmed; `None` when absent,
    /// empty or not ASCII.
    pub fn text(&self, keyword: &str) -> Option<&str> {
        let v = self.read_only.get(keyword)?;
        let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
        let s = std::str::from_utf8(&v[..end]).ok()?.trim();
        (!s.is_empty() && s.is_ascii()).then_some(s)
    }
}

/// Why VPD bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VpdError {
    /// A resource or keyword runs past the data.
    #[error("VPD: {what} at byte {offset} runs past the {len} bytes read")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// How many bytes there are.
        len: usize,
    },
    /// A keyword name that is not two printable ASCII characters.
    #[error("VPD: keyword at byte {offset} is not two ASCII letters or digits")]
    Keyword {
        /// Where it starts.
        offset: usize,
    },
    /// The read-only section's checksum (`RV`) does not make its bytes sum to zero.
    #[error("VPD: the read-only section's checksum does not match")]
    Checksum,
}

const TAG_ID: u8 = 0x82;
const TAG_READ_ONLY: u8 = 0x90;
const TAG_END: u8 = 0x78;

/// Reads VPD bytes. Reading stops at the end tag; bytes after it (the kernel may give the
/// whole VPD space, padded) are not read. The read-only section's checksum (`RV`), when present,
/// must hold: the bytes from the start of the VPD through it sum to zero.
pub fn parse(b: &[u8]) -> Result<Vpd, VpdError> {
    let mut vpd = Vpd::default();
    let mut i = 0;
    while i < b.len() {
        let tag = b[i];
        if tag == TAG_END {
            break;
        }
        if tag & 0x80 == 0 {
            // A small resource other than the end: skip its data.
            i += 1 + usize::from(tag & 0x07);
            continue;
        }
        let len_bytes = b.get(i + 1..i + 3).ok_or(VpdError::Truncated {
            what: "a resource's length",
            offset: i,
            len: b.len(),
        })?;
        let len = usize::from(u16::from_le_bytes([len_bytes[0], len_bytes[1]]));
        let start = i + 3;
        let data = b.get(start..start + len).ok_or(VpdError::Truncated {
            what: "a resource",
            offset: i,
            len: b.len(),
        })?;
        match tag {
            TAG_ID => {
                let s = String::from_utf8_lossy(data).trim().to_string();
                vpd.id = (!s.is_empty()).then_some(s);
            }
            TAG_READ_ONLY => read_keywords(b, start, data, &mut vpd.read_only)?,
            // The writable keywords (`0x91`) and anything else: not read.
            _ => {}
        }
        i = start + len;
    }
    Ok(vpd)
}

/// The keywords of the read-only section `data` (at `start` of `all`), checking `RV`.
fn read_keywords(
    all: &[u8],
    start: usize,
    data: &[u8],
    out: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), VpdError> {
    let mut k = 0;
    while k + 3 <= data.len() {
        let name = &data[k..k + 2];
        if !name.iter().all(u8::is_ascii_alphanumeric) {
            return Err(VpdError::Keyword { offset: start + k });
        }
        let len = usize::from(data[k + 2]);
        let value = data.get(k + 3..k + 3 + len).ok_or(VpdError::Truncated {
            what: "a keyword",
            offset: start + k,
            len: all.len(),
        })?;
        if name == b"RV" {
            // Its first byte makes everything from the VPD's start through it sum to zero.
            let through = start + k + 3;
            let sum = all[..=through].iter().fold(0u8, |s, x| s.wrapping_add(*x));
            if !value.is_empty() && sum != 0 {
                return Err(VpdError::Checksum);
            }
            return Ok(());
        }
        out.insert(String::from_utf8_lossy(name).into_owned(), value.to_vec());
        k += 3 + len;
    }
    Ok(())
}

/// VPD bytes as a function of `id` and read-only `keywords` gives them, with a valid `RV`: for
/// fixtures and tests.
pub fn encode(id: &str, keywords: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = vec![TAG_ID];
    b.extend_from_slice(&(id.len() as u16).to_le_bytes());
    b.extend_from_slice(id.as_bytes());
    let mut ro = Vec::new();
    for (k, v) in keywords {
        ro.extend_from_slice(&k.as_bytes()[..2]);
        ro.push(v.len() as u8);
        ro.extend_from_slice(v);
    }
    // RV: the checksum byte.
    ro.extend_from_slice(b"RV");
    ro.push(1);
    let len = ro.len() + 1;
    b.push(TAG_READ_ONLY);
    b.extend_from_slice(&(len as u16).to_le_bytes());
    b.extend_from_slice(&ro);
    let sum = b.iter().fold(0u8, |s, x| s.wrapping_add(*x));
    b.push(0u8.wrapping_sub(sum));
    b.push(TAG_END);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connectx_vpd_gives_its_keywords() {
        let b = encode(
            "NVIDIA ConnectX-8 SuperNIC",
            &[
                ("PN", b"900-9X81Q-00CN-ST0"),
                ("SN", b"MT2412X00001"),
                ("V3", b"3c2e9a4b0c1d11efa000b83fd2a1c9e0\0\0"),
            ],
        );
        // The kernel's file may be padded past the end tag.
        let mut padded = b.clone();
        padded.extend_from_slice(&[0xff; 32]);
        for bytes in [&b, &padded] {
            let v = parse(bytes).unwrap();
            assert_eq!(v.id.as_deref(), Some("NVIDIA ConnectX-8 SuperNIC"));
            assert_eq!(v.text("SN"), Some("MT2412X00001"));
            assert_eq!(v.text("V3"), Some("3c2e9a4b0c1d11efa000b83fd2a1c9e0"));
            assert_eq!(v.text("V9"), None);
            assert!(!v.read_only.contains_key("RV"));
        }
    }

    #[test]
    fn broken_vpd_is_an_error_naming_where() {
        let good = encode("x", &[("V3", b"abc")]);
        // Cut inside the read-only section.
        let e = parse(&good[..good.len() - 6]).unwrap_err();
        assert!(matches!(e, VpdError::Truncated { .. }), "{e}");
        assert!(e.to_string().contains("runs past"), "{e}");
        // A changed byte breaks the checksum.
        let mut bad = good.clone();
        let v3 = bad.windows(2).position(|w| w == b"ab").unwrap();
        bad[v3] = b'x';
        assert_eq!(parse(&bad), Err(VpdError::Checksum));
        // A keyword name that is not one.
        let mut odd = good.clone();
        let k = odd.windows(2).position(|w| w == b"V3").unwrap();
        odd[k] = 0x01;
        assert!(matches!(parse(&odd), Err(VpdError::Keyword { .. })));
        // Nothing at all, or only the end tag: no keywords, no error.
        assert_eq!(parse(&[]), Ok(Vpd::default()));
        assert_eq!(parse(&[TAG_END]), Ok(Vpd::default()));
    }
}
