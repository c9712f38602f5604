//! Building a well-known message from its evaluated fields as cel-go's type registry does
//! (`NewValue`): each value converted to its field's protobuf type, with cel-go's conversion
//! errors, then the message read back as the CEL value it stands for (a wrapper its primitive,
//! `Duration` a duration, `Struct` a map...).

use std::rc::Rc;

use super::json::{conversion_error, to_json_list, to_json_struct};
use super::{Message, Scalar, any};
use crate::cel::value::{Error, Map, MapView, R, Value};

/// Seconds between 0001-01-01 and the Unix epoch: Go's `time.Time` counts from the former, so a
/// timestamp whose seconds overflow with it wraps in the scheduler; such seconds are refused
/// here rather than wrapped (see [`timestamp`]).
const UNIX_TO_INTERNAL: i64 = 62_135_596_800;

/// The message `m` with `fields` set (in source order: a field named twice keeps the later
/// value, as cel-go's field map does).
pub(crate) fn construct<'a>(
    m: Message,
    fields: Vec<(&str, Value<'a>)>,
    maps: &dyn MapView<'a>,
) -> R<Value<'a>> {
    let mut set: Vec<(Scalar, Value<'a>)> = Vec::with_capacity(fields.len());
    let mut names: Vec<&str> = Vec::with_capacity(fields.len());
    for (name, v) in fields {
        let field = m
            .field(name)
            .ok_or_else(|| Error::msg(format!("no such field: {name}")))?;
        let stored = match (field.scalar, &v) {
            // A repeated or map field takes only a list or a map, whatever its elements.
            (Scalar::ValueMap, x) if !x.is_map() => return Err(unsupported_field(m, name, x)),
            (Scalar::ValueList, x) if !matches!(x, Value::List(_)) => {
                return Err(unsupported_field(m, name, x));
            }
            _ => store(field.scalar, v, maps).map_err(|e| {
                Error::msg(format!(
                    "field type conversion error for {}.{name} value type: {}",
                    m.name(),
                    e.message()
                ))
            })?,
        };
        match names.iter().position(|n| *n == name) {
            Some(i) => set[i].1 = stored,
            None => {
                names.push(name);
                set.push((field.scalar, stored));
            }
        }
    }
    let get = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .map(|i| set[i].1.clone())
    };
    Ok(match m {
        Message::Wrapper(s) => get("value").unwrap_or_else(|| zero(s)),
        Message::Duration | Message::Timestamp => {
            let secs = match get("seconds") {
                Some(Value::Int(s)) => s,
                _ => 0,
            };
            let nanos = match get("nanos") {
                Some(Value::Int(n)) => n as i32,
                _ => 0,
            };
            if m == Message::Duration {
                Value::Duration(duration(secs, nanos))
            } else {
                timestamp(secs, nanos)?
            }
        }
        Message::Struct => get("fields").unwrap_or_else(|| Value::Map(Rc::new(Map::default()))),
        Message::ListValue => get("values").unwrap_or_else(|| Value::list(Vec::new())),
        // A oneof: the field set last is the one the message holds; none set reads as null.
        Message::Value => match set.last() {
            Some((Scalar::NullEnum, _)) | None => Value::Null,
            Some((_, v)) => v.clone(),
        },
        Message::Any => {
            let url = get("type_url");
            let bytes = get("value");
            any::unpack(
                url.as_ref().and_then(Value::as_str).unwrap_or(""),
                match &bytes {
                    Some(Value::Bytes(b)) => b,
                    _ => &[],
                },
            )?
        }
    })
}

/// An absent wrapper `value`: the primitive's zero.
fn zero<'a>(s: Scalar) -> Value<'a> {
    match s {
        Scalar::Bool => Value::Bool(false),
        Scalar::Bytes => Value::Bytes(Rc::from(&[][..])),
        Scalar::Double | Scalar::Float => Value::Double(0.0),
        Scalar::Int32 | Scalar::Int64 => Value::Int(0),
        Scalar::Uint32 | Scalar::Uint64 => Value::Uint(0),
        _ => Value::str(""),
    }
}

/// `v` stored in a field of kind `s`, read back as a CEL value: 32-bit fields refuse what
/// overflows them, a `float` rounds to single precision, JSON fields convert.
fn store<'a>(s: Scalar, v: Value<'a>, maps: &dyn MapView<'a>) -> R<Value<'a>> {
    let mismatch = |v: &Value<'a>| Err(conversion_error(v, s.go_type()));
    match (s, &v) {
        (Scalar::Int64, Value::Int(_))
        | (Scalar::Uint64, Value::Uint(_))
        | (Scalar::Double, Value::Double(_))
        | (Scalar::Bool, Value::Bool(_))
        | (Scalar::String, Value::Str(_))
        | (Scalar::Bytes, Value::Bytes(_)) => Ok(v),
        (Scalar::Int32 | Scalar::NullEnum, Value::Int(i)) => i32::try_from(*i)
            .map(|i| Value::Int(i64::from(i)))
            .map_err(|_| Error::msg("integer overflow")),
        (Scalar::Uint32, Value::Uint(u)) => u32::try_from(*u)
            .map(|u| Value::Uint(u64::from(u)))
            .map_err(|_| Error::msg("unsigned integer overflow")),
        (Scalar::Float, Value::Double(d)) => Ok(Value::Double(f64::from(*d as f32))),
        (Scalar::StructMsg | Scalar::ValueMap, m) if m.is_map() => to_json_struct(m, maps),
        (Scalar::ListMsg | Scalar::ValueList, Value::List(l)) => to_json_list(l, maps),
        _ => mismatch(&v),
    }
}

/// cel-go's error for a repeated or map field given something else.
fn unsupported_field(m: Message, field: &str, v: &Value<'_>) -> Error {
    Error::msg(format!(
        "unsupported field type for {}.{field}: {}",
        m.name(),
        v.type_name()
    ))
}

/// Go's `durationpb.AsDuration`: seconds and nanoseconds in nanoseconds, saturated at the
/// limits of an `int64` on overflow.
fn duration(secs: i64, nanos: i32) -> i64 {
    let d = secs.wrapping_mul(1_000_000_000);
    let mut overflow = d / 1_000_000_000 != secs;
    let d = d.wrapping_add(i64::from(nanos));
    overflow |= secs < 0 && nanos < 0 && d > 0;
    overflow |= secs > 0 && nanos > 0 && d < 0;
    match overflow {
        true if secs < 0 => i64::MIN,
        true if secs > 0 => i64::MAX,
        _ => d,
    }
}

/// Go's `time.Unix(secs, nanos).UTC()`: nanoseconds outside a second carry into the seconds.
/// No range check, as the scheduler makes none (year 10000 is a timestamp there too); only
/// seconds at which Go's own representation wraps around are refused.
fn timestamp<'a>(secs: i64, nanos: i32) -> R<Value<'a>> {
    let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let s = total.div_euclid(1_000_000_000);
    let n = total.rem_euclid(1_000_000_000) as u32;
    match i64::try_from(s) {
        Ok(s) if s.checked_add(UNIX_TO_INTERNAL + 2 * 86_400).is_some() && s > i64::MIN / 2 => {
            Ok(Value::Timestamp(s, n, 0))
        }
        _ => Err(Error::msg("timestamp overflow")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_saturate_as_go() {
        assert_eq!(duration(1, 5), 1_000_000_005);
        assert_eq!(duration(1, -1), 999_999_999);
        assert_eq!(duration(i64::MAX, 0), i64::MAX);
        assert_eq!(duration(-i64::MAX, 0), i64::MIN);
        assert_eq!(duration(9_223_372_036, 854_775_807), i64::MAX);
        assert_eq!(duration(9_223_372_036, 854_775_808), i64::MAX);
    }

    #[test]
    fn timestamps_carry_nanos() {
        assert!(matches!(timestamp(0, -1), Ok(Value::Timestamp(-1, 999_999_999, 0))));
        assert!(matches!(
            timestamp(1, 2_000_000_001),
            Ok(Value::Timestamp(3, 1, 0))
        ));
        assert!(matches!(
            timestamp(253_402_300_800, 0),
            Ok(Value::Timestamp(253_402_300_800, 0, 0))
        ));
        assert!(timestamp(i64::MAX, 0).is_err());
    }
}
