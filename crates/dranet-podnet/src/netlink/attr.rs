//! Netlink attributes: a 4-byte header (length, type) and a value, padded to 4 bytes.

use std::io;

use super::{align, invalid};

/// `NLA_F_NESTED`: the value is itself attributes.
pub const NLA_F_NESTED: u16 = 1 << 15;
/// The type bits of an attribute's type field, without `NLA_F_NESTED` and
/// `NLA_F_NET_BYTEORDER`.
pub const NLA_TYPE_MASK: u16 = 0x3fff;
const HEADER_LEN: usize = 4;

/// An attribute to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr<'a> {
    /// A u8.
    U8(u16, u8),
    /// A u32.
    U32(u16, u32),
    /// A string, sent NUL-terminated.
    Str(u16, &'a str),
    /// No value: the attribute's presence is the fact.
    Flag(u16),
    /// Attributes inside this one (its type marked `NLA_F_NESTED`).
    Nested(u16, Vec<Attr<'a>>),
}

impl Attr<'_> {
    /// Appends this attribute, padded, to `out`. One longer than netlink's 16-bit length field
    /// can say is an error.
    pub fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        let kind = match self {
            Attr::U8(k, v) => {
                out.push(*v);
                *k
            }
            Attr::U32(k, v) => {
                out.extend_from_slice(&v.to_ne_bytes());
                *k
            }
            Attr::Str(k, s) => {
                out.extend_from_slice(s.as_bytes());
                out.push(0);
                *k
            }
            Attr::Flag(k) => *k,
            Attr::Nested(k, children) => {
                for c in children {
                    c.encode(out)?;
                }
                k | NLA_F_NESTED
            }
        };
        let len = u16::try_from(out.len() - start).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "netlink attribute {} is longer than 65535 bytes",
                    kind & NLA_TYPE_MASK
                ),
            )
        })?;
        out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        out[start + 2..start + HEADER_LEN].copy_from_slice(&kind.to_ne_bytes());
        out.resize(align(out.len()), 0);
        Ok(())
    }
}

/// The attributes in `buf` as `(type without flags, value)`. A length that does not fit the
/// buffer is an error.
pub fn parse(mut buf: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while buf.len() >= HEADER_LEN {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < HEADER_LEN || len > buf.len() {
            return Err(invalid("netlink attribute length out of bounds"));
        }
        out.push((kind, &buf[HEADER_LEN..len]));
        buf = &buf[align(len).min(buf.len())..];
    }
    Ok(out)
}

/// The value of the first attribute of type `kind`.
pub fn find<'a>(attrs: &[(u16, &'a [u8])], kind: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v)
}

/// A u16 value; `None` when it is not 2 bytes.
pub fn u16_value(v: &[u8]) -> Option<u16> {
    <[u8; 2]>::try_from(v).ok().map(u16::from_ne_bytes)
}

/// A u32 value; `None` when it is not 4 bytes.
pub fn u32_value(v: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(v).ok().map(u32::from_ne_bytes)
}

/// A string value, up to its NUL (bytes that are not UTF-8 replaced).
pub fn string_value(v: &[u8]) -> String {
    let text = v.split(|b| *b == 0).next().unwrap_or(&[]);
    String::from_utf8_lossy(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_padded_to_four_bytes_and_nested_ones_flagged() {
        let mut b = Vec::new();
        Attr::Nested(
            1,
            vec![
                Attr::Str(2, "eth0"),
                Attr::U8(3, 7),
                Attr::Flag(4),
                Attr::U32(5, 9),
            ],
        )
        .encode(&mut b)
        .unwrap();
        // 4 (outer header) + 12 ("eth0\0" padded) + 8 (u8 padded) + 4 (flag) + 8 (u32)
        assert_eq!(b.len(), 36);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), 36);
        assert_eq!(u16::from_ne_bytes([b[2], b[3]]), 1 | NLA_F_NESTED);
        // "eth0\0": length 9, padded with zeros to 12.
        assert_eq!(&b[4..16], &[9, 0, 2, 0, b'e', b't', b'h', b'0', 0, 0, 0, 0]);
        assert_eq!(&b[16..24], &[5, 0, 3, 0, 7, 0, 0, 0]);

        let top = parse(&b).unwrap();
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, 1, "the nested flag is not part of the type");
        let inner = parse(top[0].1).unwrap();
        assert_eq!(
            inner.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
        assert_eq!(string_value(find(&inner, 2).unwrap()), "eth0");
        assert_eq!(find(&inner, 4), Some(&[][..]));
        assert_eq!(u32_value(find(&inner, 5).unwrap()), Some(9));
        assert_eq!(u32_value(find(&inner, 3).unwrap()), None, "a u8 is no u32");
        assert_eq!(u16_value(&[1, 0, 0]), None);
        assert_eq!(find(&inner, 6), None);
    }

    #[test]
    fn truncated_attributes_are_errors_not_panics() {
        // A length beyond the buffer, and one shorter than the header.
        assert!(parse(&[8, 0, 1, 0]).is_err());
        assert!(parse(&[2, 0, 1, 0, 0, 0, 0, 0]).is_err());
        // A valid attribute, then one cut off in its value.
        let mut b = Vec::new();
        Attr::U32(1, 1).encode(&mut b).unwrap();
        Attr::U32(2, 2).encode(&mut b).unwrap();
        let e = parse(&b[..14]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // Fewer than 4 trailing bytes are no attribute.
        assert_eq!(parse(&b[..10]).unwrap().len(), 1);
        for len in 0..40usize {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = parse(&junk);
        }
    }

    #[test]
    fn an_attribute_too_long_for_its_length_field_is_an_error() {
        let name = "x".repeat(70_000);
        let e = Attr::Str(2, &name).encode(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("longer than 65535"), "{e}");
    }
}
