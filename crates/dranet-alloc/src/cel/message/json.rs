//! CEL values into `google.protobuf.Value` (JSON) and back, as cel-go converts a value stored
//! in a `Struct`, `Value` or `ListValue` field: numbers become doubles (an integer beyond
//! ±(2^53 - 1) its decimal string), bytes base64, durations and timestamps their strings, maps
//! with string keys structs; reading the message back gives those JSON values as CEL values.

use std::rc::Rc;

use crate::cel::funcs::{duration_string, timestamp_string};
use crate::cel::value::{Error, Map, MapView, R, Value};

/// The largest integer a double holds exactly with its neighbours (cel-go's `maxIntJSON`).
const MAX_INT_JSON: i64 = (1 << 53) - 1;

/// cel-go's message when `v` does not convert to the Go type `go` (each CEL type words it
/// its own way).
pub(super) fn conversion_error(v: &Value<'_>, go: &str) -> Error {
    Error::msg(match v {
        Value::Int(_) => format!("unsupported type conversion from 'int' to {go}"),
        Value::Uint(_) => format!("unsupported type conversion from 'uint' to {go}"),
        Value::Double(_) => format!("type conversion error from Double to '{go}'"),
        Value::Bool(_) => format!("type conversion error from bool to '{go}'"),
        Value::Bytes(_) => format!("type conversion error from Bytes to '{go}'"),
        Value::Str(_) => format!("unsupported native conversion from string to '{go}'"),
        Value::Null => format!("type conversion error from 'null_type' to '{go}'"),
        Value::Duration(_) => format!("type conversion error from 'Duration' to '{go}'"),
        Value::Timestamp(..) => format!("type conversion error from 'Timestamp' to '{go}'"),
        Value::List(_) => format!("type conversion error from list to '{go}'"),
        Value::Type(_) => "type conversion not supported for 'type'".to_string(),
        m if m.is_map() => format!("type conversion error from map to '{go}'"),
        // The Kubernetes types name themselves without their namespace (`'Semver'`).
        other => {
            let name = other.type_name();
            let short = name.rsplit('.').next().unwrap_or(name);
            format!("type conversion error from '{short}' to '{go}'")
        }
    })
}

/// `v` as a `google.protobuf.Value`, read back as a CEL value.
pub(super) fn to_json<'a>(v: &Value<'a>, maps: &dyn MapView<'a>) -> R<Value<'a>> {
    Ok(match v {
        Value::Null => Value::Null,
        Value::Bool(b) => Value::Bool(*b),
        Value::Int(i) if (-MAX_INT_JSON..=MAX_INT_JSON).contains(i) => Value::Double(*i as f64),
        Value::Int(i) => Value::string(i.to_string()),
        Value::Uint(u) if *u <= MAX_INT_JSON as u64 => Value::Double(*u as f64),
        Value::Uint(u) => Value::string(u.to_string()),
        Value::Double(d) => Value::Double(*d),
        Value::Str(_) => v.clone(),
        Value::Bytes(b) => Value::string(base64(b)),
        Value::Duration(d) => Value::string(duration_string(*d)),
        Value::Timestamp(s, n, off) => Value::string(timestamp_string(*s, *n, *off)),
        Value::List(l) => to_json_list(l, maps)?,
        Value::Optional(Some(inner)) => to_json(inner, maps)?,
        Value::Optional(None) => return Err(Error::msg("optional.none() dereference")),
        // A message as its JSON form: an Empty is `{}`.
        Value::Empty => Value::Map(Rc::new(Map::default())),
        m if m.is_map() => to_json_struct(m, maps)?,
        other => return Err(conversion_error(other, "*structpb.Value")),
    })
}

/// A list as a `google.protobuf.ListValue`.
pub(super) fn to_json_list<'a>(l: &[Value<'a>], maps: &dyn MapView<'a>) -> R<Value<'a>> {
    let out = l.iter().map(|x| to_json(x, maps)).collect::<R<Vec<_>>>()?;
    Ok(Value::list(out))
}

/// A map with string keys as a `google.protobuf.Struct`.
pub(super) fn to_json_struct<'a>(m: &Value<'a>, maps: &dyn MapView<'a>) -> R<Value<'a>> {
    let mut out = Map::default();
    for k in maps.keys(m) {
        if !matches!(k, Value::Str(_)) {
            return Err(conversion_error(&k, "string"));
        }
        let v = maps.get(m, &k).unwrap_or(Value::Null);
        out.insert(k, to_json(&v, maps)?);
    }
    Ok(Value::Map(Rc::new(out)))
}

/// Standard base64 with padding, as Go's `base64.StdEncoding`.
fn base64(b: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, x)| n | u32::from(*x) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_go() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"x"), "eA==");
        assert_eq!(base64(b"xy"), "eHk=");
        assert_eq!(base64(b"xyz"), "eHl6");
        assert_eq!(base64(&[0xff, 0xfe, 0xfd, 0xfc]), "//79/A==");
    }
}
