//! `google.protobuf.Any{type_url, value}` read as cel-go reads it: the packed message is decoded
//! from its protobuf wire form and unwrapped like a constructed one. Only the well-known types
//! are known here; an Any of any other type (or an empty or malformed one) is the error the
//! scheduler gives for an Any it cannot unpack, which prints the Any as protobuf text.

use std::rc::Rc;

use super::Message;
use super::read::{duration, timestamp, zero};
use crate::cel::value::{Error, Map, R, Value};

/// Nested Anys and messages deeper than this are refused (protobuf's own default limit).
const MAX_DEPTH: u32 = 100;

/// The value of an Any holding `value` of type `type_url` (`type.googleapis.com/NAME`).
pub(super) fn unpack<'a>(type_url: &str, value: &[u8]) -> R<Value<'a>> {
    unpack_at(type_url, value, 0).ok_or_else(|| {
        let mut text = String::new();
        if !type_url.is_empty() {
            text.push_str("type_url:");
            quote(&mut text, type_url.as_bytes());
        }
        if !value.is_empty() {
            if !text.is_empty() {
                text.push_str("  ");
            }
            text.push_str("value:");
            quote(&mut text, value);
        }
        Error::msg(format!(
            "unsupported conversion to ref.Val: (*dynamicpb.Message){text}"
        ))
    })
}

fn unpack_at<'a>(type_url: &str, value: &[u8], depth: u32) -> Option<Value<'a>> {
    if depth > MAX_DEPTH {
        return None;
    }
    let name = type_url.rsplit('/').next().filter(|n| !n.is_empty())?;
    let fields = parse(value)?;
    let last = |n: u32| fields.iter().rev().find(|(f, _)| *f == n).map(|(_, w)| *w);
    Some(match Message::find(name)? {
        Message::Wrapper(s) => {
            use super::Scalar as S;
            match (s, last(1)) {
                (S::Bool, Some(Wire::Varint(v))) => Value::Bool(v != 0),
                (S::Int64, Some(Wire::Varint(v))) => Value::Int(v as i64),
                (S::Int32, Some(Wire::Varint(v))) => Value::Int(i64::from(v as i32)),
                (S::Uint64, Some(Wire::Varint(v))) => Value::Uint(v),
                (S::Uint32, Some(Wire::Varint(v))) => Value::Uint(u64::from(v as u32)),
                (S::Double, Some(Wire::Fixed64(v))) => Value::Double(f64::from_bits(v)),
                (S::Float, Some(Wire::Fixed32(v))) => Value::Double(f64::from(f32::from_bits(v))),
                (S::String, Some(Wire::Bytes(b))) => Value::string(utf8(b)?),
                (S::Bytes, Some(Wire::Bytes(b))) => Value::Bytes(Rc::from(b)),
                (s, _) => zero(s),
            }
        }
        m @ (Message::Duration | Message::Timestamp) => {
            let secs = match last(1) {
                Some(Wire::Varint(v)) => v as i64,
                _ => 0,
            };
            let nanos = match last(2) {
                Some(Wire::Varint(v)) => v as i32,
                _ => 0,
            };
            if m == Message::Duration {
                Value::Duration(duration(secs, nanos))
            } else {
                timestamp(secs, nanos).ok()?
            }
        }
        Message::Struct => json_struct(&fields, depth)?,
        Message::ListValue => json_list(&fields, depth)?,
        Message::Value => json_value(&fields, depth)?,
        Message::Empty => Value::Empty,
        Message::Any => {
            let url = match last(1) {
                Some(Wire::Bytes(b)) => utf8(b)?,
                _ => String::new(),
            };
            let inner = match last(2) {
                Some(Wire::Bytes(b)) => b,
                _ => &[],
            };
            unpack_at(&url, inner, depth + 1)?
        }
    })
}

/// A `google.protobuf.Value` message's fields as the JSON value they hold (the last member of
/// its oneof on the wire; none is null).
fn json_value<'a>(fields: &[(u32, Wire<'_>)], depth: u32) -> Option<Value<'a>> {
    let mut out = Value::Null;
    for (n, w) in fields {
        out = match (n, w) {
            (1, Wire::Varint(_)) => Value::Null,
            (2, Wire::Fixed64(v)) => Value::Double(f64::from_bits(*v)),
            (3, Wire::Bytes(b)) => Value::string(utf8(b)?),
            (4, Wire::Varint(v)) => Value::Bool(*v != 0),
            (5, Wire::Bytes(b)) => json_struct(&nested(b, depth)?, depth + 1)?,
            (6, Wire::Bytes(b)) => json_list(&nested(b, depth)?, depth + 1)?,
            _ => continue,
        };
    }
    Some(out)
}

/// A `google.protobuf.Struct`: map entries (key 1, value 2) in field 1.
fn json_struct<'a>(fields: &[(u32, Wire<'_>)], depth: u32) -> Option<Value<'a>> {
    let mut out = Map::default();
    for (n, w) in fields {
        let (1, Wire::Bytes(entry)) = (n, w) else {
            continue;
        };
        let entry = nested(entry, depth)?;
        let mut key = String::new();
        let mut value = Value::Null;
        for (n, w) in &entry {
            match (n, w) {
                (1, Wire::Bytes(b)) => key = utf8(b)?,
                (2, Wire::Bytes(b)) => value = json_value(&nested(b, depth + 1)?, depth + 2)?,
                _ => {}
            }
        }
        out.insert(Value::string(key), value);
    }
    Some(Value::Map(Rc::new(out)))
}

/// A `google.protobuf.ListValue`: values in field 1.
fn json_list<'a>(fields: &[(u32, Wire<'_>)], depth: u32) -> Option<Value<'a>> {
    let mut out = Vec::new();
    for (n, w) in fields {
        if let (1, Wire::Bytes(b)) = (n, w) {
            out.push(json_value(&nested(b, depth)?, depth + 1)?);
        }
    }
    Some(Value::list(out))
}

fn nested<'b>(b: &'b [u8], depth: u32) -> Option<Vec<(u32, Wire<'b>)>> {
    if depth >= MAX_DEPTH {
        return None;
    }
    parse(b)
}

fn utf8(b: &[u8]) -> Option<String> {
    std::str::from_utf8(b).ok().map(str::to_string)
}

/// One field's value on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'b> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'b [u8]),
}

/// A message's fields in wire order; `None` when the bytes are not a protobuf message.
fn parse(mut b: &[u8]) -> Option<Vec<(u32, Wire<'_>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let tag = varint(&mut b)?;
        let field = u32::try_from(tag >> 3).ok().filter(|f| *f != 0)?;
        let wire = match tag & 7 {
            0 => Wire::Varint(varint(&mut b)?),
            1 => {
                let (v, rest) = b.split_first_chunk::<8>()?;
                b = rest;
                Wire::Fixed64(u64::from_le_bytes(*v))
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                let (v, rest) = b.split_at_checked(n)?;
                b = rest;
                Wire::Bytes(v)
            }
            5 => {
                let (v, rest) = b.split_first_chunk::<4>()?;
                b = rest;
                Wire::Fixed32(u32::from_le_bytes(*v))
            }
            // Groups (3, 4) are not in any well-known type; 6 and 7 are no wire type.
            _ => return None,
        };
        out.push((field, wire));
    }
    Some(out)
}

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (x, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A string or bytes field as protobuf text prints it (Go's `prototext`).
fn quote(out: &mut String, b: &[u8]) {
    out.push('"');
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    out.push_str(&format!("\\x{:02x}", c as u32));
                }
                c => out.push(c),
            }
        }
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_and_durations_unpack() {
        let url = "type.googleapis.com/google.protobuf.Int64Value";
        assert!(matches!(unpack(url, b"\x08\x01"), Ok(Value::Int(1))));
        assert!(matches!(unpack(url, b""), Ok(Value::Int(0))));
        let url = "type.googleapis.com/google.protobuf.Duration";
        assert!(matches!(
            unpack(url, b"\x08\x01"),
            Ok(Value::Duration(1_000_000_000))
        ));
    }

    #[test]
    fn unknown_or_malformed_is_the_schedulers_error() {
        let e = unpack("", b"").unwrap_err();
        assert_eq!(
            e.message(),
            "unsupported conversion to ref.Val: (*dynamicpb.Message)"
        );
        let url = "type.googleapis.com/google.protobuf.Int64Value";
        let e = unpack(url, b"\xff").unwrap_err();
        assert_eq!(
            e.message(),
            "unsupported conversion to ref.Val: (*dynamicpb.Message)\
             type_url:\"type.googleapis.com/google.protobuf.Int64Value\"  value:\"\\xff\""
        );
        assert!(matches!(
            unpack("type.googleapis.com/google.protobuf.Empty", b""),
            Ok(Value::Empty)
        ));
        assert!(unpack("type.googleapis.com/google.protobuf.FieldMask", b"").is_err());
    }

    #[test]
    fn json_messages_unpack() {
        // Value{list_value: ListValue{values: [Value{number_value: 1}, Value{string_value: "a"}]}}
        let one = [0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f];
        let a = [0x1a, 1, b'a'];
        let mut list = vec![0x0a, one.len() as u8];
        list.extend_from_slice(&one);
        list.extend_from_slice(&[0x0a, a.len() as u8]);
        list.extend_from_slice(&a);
        let mut value = vec![0x32, list.len() as u8];
        value.extend_from_slice(&list);
        let v = unpack("x/google.protobuf.Value", &value).unwrap();
        let Value::List(l) = v else { panic!("{v:?}") };
        assert!(matches!(l[0], Value::Double(d) if d == 1.0));
        assert_eq!(l[1].as_str(), Some("a"));
    }
}
