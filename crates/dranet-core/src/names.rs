//! DRA device names: DNS-1123 labels derived from PCI addresses and interface names.
//!
//! The scheme is upstream dranet's, so claims and tooling written against it keep working:
//! a PCI function `0101:00:00.0` is `pci-0101-00-00-0`; a netdev without a PCI function keeps its
//! name when that is a valid DNS label (`eth1`, `veth-a`) and otherwise becomes `net-` + the
//! lowercase, unpadded RFC 4648 base32 of the name (`enp0s1_1` → `net-mvxha3ltgfptc`...).

use crate::PciAddress;

/// The DRA device name of a PCI function.
pub fn pci_device_name(addr: &PciAddress) -> String {
    let mut s = String::with_capacity(20);
    s.push_str("pci-");
    for c in addr.to_string().chars() {
        s.push(if c == ':' || c == '.' { '-' } else { c });
    }
    s
}

/// The DRA device name of a netdev that has no PCI function.
pub fn netdev_device_name(if_name: &str) -> String {
    if is_dns1123_label(if_name) {
        if_name.to_string()
    } else {
        format!("net-{}", base32_lower_nopad(if_name.as_bytes()))
    }
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending with an alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Why a name is not a DNS-1123 subdomain; the message says what is wrong, for one that also
/// names the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubdomainError {
    /// The name is empty.
    #[error("is empty")]
    Empty,
    /// The name is longer than 253 characters.
    #[error("is longer than 253 characters")]
    TooLong,
    /// A part is empty, has a character other than `[a-z0-9-]`, or starts or ends with `-`.
    #[error(
        "is not a DNS subdomain (lowercase letters, digits, '-' and '.', each part starting and \
         ending with a letter or digit)"
    )]
    BadLabel,
}

/// Checks a DNS-1123 subdomain, the form of Kubernetes object names (Node, ResourceSlice):
/// at most 253 characters, dot-separated labels of `[a-z0-9-]` that start and end with an
/// alphanumeric.
pub fn check_dns1123_subdomain(s: &str) -> Result<(), SubdomainError> {
    if s.is_empty() {
        return Err(SubdomainError::Empty);
    }
    if s.len() > 253 {
        return Err(SubdomainError::TooLong);
    }
    for label in s.split('.') {
        let ok_chars = label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if label.is_empty() || !ok_chars || label.starts_with('-') || label.ends_with('-') {
            return Err(SubdomainError::BadLabel);
        }
    }
    Ok(())
}

/// RFC 4648 base32, lowercase alphabet, no padding.
pub fn base32_lower_nopad(data: &[u8]) -> String {
    const ALPHA: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    let mut buf: u64 = 0;
    let mut bits = 0u32;
    for &byte in data {
        buf = (buf << 8) | u64::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHA[((buf >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHA[((buf << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_subdomains() {
        for ok in ["aks-gb300-0", "node1.example.com", "a"] {
            assert_eq!(check_dns1123_subdomain(ok), Ok(()), "{ok}");
        }
        for bad in ["(none)", "", "Node", "-a", "a..b", "a_b", &"a".repeat(254)] {
            assert!(check_dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pci_names() {
        let a = "0101:00:00.0".parse().unwrap();
        assert_eq!(pci_device_name(&a), "pci-0101-00-00-0");
        let b = "0000:8a:1f.7".parse().unwrap();
        assert_eq!(pci_device_name(&b), "pci-0000-8a-1f-7");
    }

    #[test]
    fn base32_matches_rfc4648_vectors() {
        // RFC 4648 section 10 test vectors, lowercased and unpadded.
        for (i, o) in [
            ("", ""),
            ("f", "my"),
            ("fo", "mzxq"),
            ("foo", "mzxw6"),
            ("foob", "mzxw6yq"),
            ("fooba", "mzxw6ytb"),
            ("foobar", "mzxw6ytboi"),
        ] {
            assert_eq!(base32_lower_nopad(i.as_bytes()), o);
        }
    }

    #[test]
    fn netdev_names() {
        assert_eq!(netdev_device_name("eth1"), "eth1");
        assert_eq!(netdev_device_name("veth-a"), "veth-a");
        // Upper case, dots and underscores are not DNS labels.
        assert_eq!(netdev_device_name("eth0.100"), "net-mv2gqmbogeyda");
        assert_eq!(netdev_device_name("Eth0"), "net-iv2gqma");
        assert_eq!(netdev_device_name("-x"), "net-fv4a");
        let long = netdev_device_name("abcdefghijklmno_");
        assert!(long.len() <= 63 && is_dns1123_label(&long), "{long}");
    }
}
