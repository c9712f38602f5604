//! Building a well-known message from its evaluated fields as cel-go's type registry does
//! (`NewValue`): each value converted to its field's protobuf type, with cel-go's conversion
//! errors, then the message read back as the CEL value it stands for (a wrapper its primitive,
//! `Duration` a duration, `Struct` a map...).

use std::rc::Rc;

use super::json::{conversion_error, to_json_list, to_json_struct};
use super::read::{duration, timestamp, zero};
use super::{Message, Scalar, any};
use crate::cel::value::{Error, Map, MapView, R, Value};

/// The message `m` with `fields` set (in source order; a field named twice keeps the later
/// value).
pub(crate) fn construct<'a>(
    m: Message,
    fields: Vec<(&str, Value<'a>)>,
    maps: &dyn MapView<'a>,
) -> R<Value<'a>> {
    // cel-go collects the fields in a map first (a later value replaces an earlier one, which is
    // then never converted), and converts them after.
    let mut names: Vec<&str> = Vec::with_capacity(fields.len());
    let mut values: Vec<Value<'a>> = Vec::with_capacity(fields.len());
    for (name, v) in fields {
        match names.iter().position(|n| *n == name) {
            Some(i) => values[i] = v,
            None => {
                names.push(name);
                values.push(v);
            }
        }
    }
    let mut set: Vec<(Scalar, Value<'a>)> = Vec::with_capacity(names.len());
    for (name, v) in names.iter().copied().zip(values) {
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
        set.push((field.scalar, stored));
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
        Message::Empty => Value::Empty,
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
