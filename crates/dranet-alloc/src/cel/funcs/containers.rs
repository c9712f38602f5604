//! Indexing, `in`, `size()`, `type()` over lists, maps and the device's attribute maps, and the
//! map insertion of two-variable comprehensions.

use std::rc::Rc;

use super::{nso, take};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, equal, format_double};

pub(crate) fn index<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let key = take(a, 1);
    let target = take(a, 0);
    index_value(env, target, key)
}

pub(crate) fn index_value<'a>(
    env: &Activation<'a>,
    target: Value<'a>,
    key: Value<'a>,
) -> R<Value<'a>> {
    match &target {
        Value::List(l) => {
            let i = match key {
                Value::Int(i) => i,
                Value::Uint(u) => i64::try_from(u).map_err(|_| Error::msg("integer overflow"))?,
                Value::Double(d) => {
                    if d.fract() != 0.0 || !d.is_finite() {
                        return Err(Error::msg(format!(
                            "unsupported index value {}",
                            format_double(d)
                        )));
                    }
                    d as i64
                }
                _ => return nso(),
            };
            usize::try_from(i)
                .ok()
                .and_then(|i| l.get(i).cloned())
                .ok_or_else(|| Error::msg(format!("index out of bounds: {i}")))
        }
        t if t.is_map() => match env.get(t, &key) {
            Some(v) => Ok(v),
            None => Err(no_such_key(t, &key)),
        },
        Value::Optional(_) => nso(),
        _ => nso(),
    }
}

/// cel-go's "no such key" error; on a device's attribute domain it also names the qualified
/// attribute the device lacks, which is what a user has to fix.
pub(crate) fn no_such_key(map: &Value<'_>, key: &Value<'_>) -> Error {
    let k = key_text(key);
    match map {
        Value::Domain(d) => Error::msg(format!(
            "no such key: {k} (device has no attribute {}/{k})",
            &**d
        )),
        Value::CapDomain(d) => Error::msg(format!(
            "no such key: {k} (device has no capacity {}/{k})",
            &**d
        )),
        _ => Error::msg(format!("no such key: {k}")),
    }
}

/// A key as `%v` prints it in cel-go's "no such key" errors.
pub(crate) fn key_text(k: &Value<'_>) -> String {
    match k {
        Value::Str(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => format_double(*d),
        Value::Bool(b) => b.to_string(),
        Value::Null => "<nil>".into(),
        v => v.type_name().to_string(),
    }
}

pub(crate) fn in_<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, c) = (&a[0], &a[1]);
    match c {
        Value::List(l) => {
            for e in l.iter() {
                if let Ok(true) = equal(e, x, env) {
                    return Ok(Value::Bool(true));
                }
            }
            Ok(Value::Bool(false))
        }
        m if m.is_map() => Ok(Value::Bool(env.contains(m, x))),
        _ => nso(),
    }
}

pub(crate) fn size<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(match &a[0] {
        Value::Str(s) => s.chars().count() as i64,
        Value::Bytes(b) => b.len() as i64,
        Value::List(l) => l.len() as i64,
        m if m.is_map() => env.size(m) as i64,
        _ => return Err(Error::msg("no such overload: size")),
    }))
}

pub(crate) fn type_of<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::typ(a[0].type_name()))
}

pub(crate) fn identity<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(take(a, 0))
}

pub(crate) fn map_insert<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let m = take(a, 0);
    let mut map = env.to_map(&m);
    if a.len() == 3 {
        let k = take(a, 1);
        if map.find(&k).is_some() {
            return Err(Error::msg(format!(
                "insert failed: key {} already exists",
                key_text(&k)
            )));
        }
        map.insert(k, take(a, 2));
    } else {
        let other = take(a, 1);
        let om = env.to_map(&other);
        for (k, v) in om.entries {
            if map.find(&k).is_some() {
                return Err(Error::msg(format!(
                    "insert failed: key {} already exists",
                    key_text(&k)
                )));
            }
            map.insert(k, v);
        }
    }
    Ok(Value::Map(Rc::new(map)))
}

/// `x in [constant list]` as cel-go's planner rewrites it: a lookup in a hash set of the
/// elements, where an integer element also stands as its double (rounded) and a non-negative
/// one as its uint, and an integral double as its int and uint where it converts exactly. So
/// `9223372036854775807 in [dyn(9223372036854775808.0)]` is false although the two compare
/// equal. `None` where cel-go keeps the plain `in`: an element that is not a string, bool or
/// number, or a left side a Go map cannot look up.
#[allow(clippy::cast_precision_loss, clippy::float_cmp)]
pub(crate) fn set_membership(v: &Value<'_>, elems: &[Value<'_>]) -> Option<bool> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    const TWO_64: f64 = 18_446_744_073_709_551_616.0;
    if !matches!(
        v,
        Value::Int(_)
            | Value::Uint(_)
            | Value::Double(_)
            | Value::Str(_)
            | Value::Bool(_)
            | Value::Null
            | Value::Duration(_)
            | Value::Timestamp(..)
    ) {
        return None;
    }
    let mut found = false;
    for e in elems {
        found |= match (e, v) {
            (Value::Int(i), Value::Int(x)) => i == x,
            (Value::Int(i), Value::Double(x)) => *i as f64 == *x,
            (Value::Int(i), Value::Uint(x)) => u64::try_from(*i).is_ok_and(|i| i == *x),
            (Value::Uint(u), Value::Uint(x)) => u == x,
            (Value::Uint(u), Value::Double(x)) => *u as f64 == *x,
            (Value::Uint(u), Value::Int(x)) => i64::try_from(*u).is_ok_and(|u| u == *x),
            (Value::Double(d), Value::Double(x)) => d == x,
            (Value::Double(d), Value::Int(x)) => {
                d.fract() == 0.0 && *d >= -TWO_63 && *d < TWO_63 && *d as i64 == *x
            }
            (Value::Double(d), Value::Uint(x)) => {
                d.fract() == 0.0 && *d >= 0.0 && *d < TWO_64 && *d as u64 == *x
            }
            (Value::Str(s), Value::Str(x)) => **s == **x,
            (Value::Bool(b), Value::Bool(x)) => b == x,
            (
                Value::Int(_) | Value::Uint(_) | Value::Double(_) | Value::Str(_) | Value::Bool(_),
                _,
            ) => false,
            _ => return None,
        };
    }
    Some(found)
}
