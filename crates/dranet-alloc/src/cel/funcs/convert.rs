//! The conversions `int()`, `uint()`, `double()`, `bool()`, `bytes()`, `string()`, with Go's
//! number syntax.

use super::gofloat::parse_go_float;
use super::time::{duration_string, timestamp_string};
use super::{conversion_error, int_overflow, nso, take, uint_overflow};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, format_double};

pub(crate) fn to_int<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(match &a[0] {
        Value::Int(i) => *i,
        Value::Uint(u) => i64::try_from(*u).map_or_else(|_| int_overflow(), Ok)?,
        Value::Double(d) => {
            if !d.is_finite() || *d <= i64::MIN as f64 || *d >= -(i64::MIN as f64) {
                return int_overflow();
            }
            *d as i64
        }
        Value::Str(s) => match parse_go_int(s) {
            Some(v) => v,
            None => return conversion_error("string", "int"),
        },
        Value::Duration(d) => *d,
        Value::Timestamp(s, ..) => *s,
        _ => return nso(),
    }))
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign and decimal digits only.
fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(crate) fn to_uint<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Uint(match &a[0] {
        Value::Uint(u) => *u,
        Value::Int(i) => u64::try_from(*i).map_or_else(|_| uint_overflow(), Ok)?,
        Value::Double(d) => {
            if !d.is_finite() || *d < 0.0 || *d >= 1.844_674_407_370_955_2e19 {
                return uint_overflow();
            }
            *d as u64
        }
        Value::Str(s) => {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return conversion_error("string", "uint");
            }
            match s.parse() {
                Ok(v) => v,
                Err(_) => return conversion_error("string", "uint"),
            }
        }
        _ => return nso(),
    }))
}

pub(crate) fn to_double<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Double(match &a[0] {
        Value::Double(d) => *d,
        Value::Int(i) => *i as f64,
        Value::Uint(u) => *u as f64,
        Value::Str(s) => match parse_go_float(s) {
            Some(v) => v,
            None => return conversion_error("string", "double"),
        },
        _ => return nso(),
    }))
}

pub(crate) fn to_bool<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(match &a[0] {
        Value::Bool(b) => *b,
        Value::Str(s) => match &**s {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return conversion_error("string", "bool"),
        },
        _ => return nso(),
    }))
}

pub(crate) fn to_bytes<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match &a[0] {
        Value::Bytes(b) => Value::Bytes(b.clone()),
        Value::Str(s) => Value::Bytes(s.as_bytes().into()),
        _ => return nso(),
    })
}

pub(crate) fn to_string<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match take(a, 0) {
        v @ Value::Str(_) => v,
        Value::Int(i) => Value::string(i.to_string()),
        Value::Uint(u) => Value::string(u.to_string()),
        Value::Double(d) => Value::string(format_double(d)),
        Value::Bool(b) => Value::string(b.to_string()),
        Value::Bytes(b) => match std::str::from_utf8(&b) {
            Ok(s) => Value::string(s.to_string()),
            Err(_) => {
                return Err(Error::msg(
                    "invalid UTF-8 in bytes, cannot convert to string",
                ));
            }
        },
        Value::Duration(d) => Value::string(duration_string(d)),
        Value::Timestamp(s, n, o) => Value::string(timestamp_string(s, n, o)),
        Value::Ip(ip) => Value::string(ip.to_string()),
        Value::Cidr(ip, p) => Value::string(format!("{ip}/{p}")),
        _ => return nso(),
    })
}
