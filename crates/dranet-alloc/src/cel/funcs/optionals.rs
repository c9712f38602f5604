//! Optional values: `optional.of`, `optional.none`, `.value()`, `.hasValue()`, `.or()`, `.orValue()`,
//! optional indexing and `[?]`.

use std::rc::Rc;

use super::{list_arg, nso, take};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

pub(crate) fn optional_of<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Optional(Some(Rc::new(take(a, 0)))))
}

/// Go's zero `time.Time`, 0001-01-01T00:00:00Z, in seconds since the Unix epoch.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

fn is_zero(env: &Activation<'_>, v: &Value<'_>) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Double(d) => *d == 0.0,
        Value::Str(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        m if m.is_map() => env.size(m) == 0,
        Value::Duration(d) => *d == 0,
        // Go's zero `time.Time` (year 1), not the Unix epoch.
        Value::Timestamp(s, n, _) => *s == GO_ZERO_TIME_UNIX && *n == 0,
        // cel-go's optional is no `Zeroer`: `optional.none()` is a value like any other here.
        _ => false,
    }
}

pub(crate) fn optional_of_non_zero<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let v = take(a, 0);
    Ok(if is_zero(env, &v) {
        Value::Optional(None)
    } else {
        Value::Optional(Some(Rc::new(v)))
    })
}

pub(crate) fn optional_none<'a>(_: &Activation<'a>, _: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Optional(None))
}

pub(crate) fn opt_value<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(Some(v)) => Ok((**v).clone()),
        Value::Optional(None) => Err(Error::msg("optional.none() dereference")),
        _ => nso(),
    }
}

pub(crate) fn opt_has_value<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(o) => Ok(Value::Bool(o.is_some())),
        _ => nso(),
    }
}

pub(crate) fn opt_or<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match (&a[0], &a[1]) {
        (Value::Optional(Some(_)), _) => Ok(take(a, 0)),
        (Value::Optional(None), Value::Optional(_)) => Ok(take(a, 1)),
        _ => nso(),
    }
}

pub(crate) fn opt_or_value<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(Some(v)) => Ok((**v).clone()),
        Value::Optional(None) => Ok(take(a, 1)),
        _ => nso(),
    }
}

/// `list[?i]`, `map[?k]`, and the same on an optional list or map.
pub(crate) fn opt_index<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let key = take(a, 1);
    let target = match take(a, 0) {
        Value::Optional(None) => return Ok(Value::Optional(None)),
        Value::Optional(Some(v)) => (*v).clone(),
        v => v,
    };
    let found = match &target {
        Value::List(l) => match key {
            Value::Int(i) => usize::try_from(i).ok().and_then(|i| l.get(i).cloned()),
            Value::Uint(u) => usize::try_from(u).ok().and_then(|i| l.get(i).cloned()),
            Value::Double(d) if d.fract() == 0.0 => usize::try_from(d as i64)
                .ok()
                .and_then(|i| l.get(i).cloned()),
            _ => return nso(),
        },
        m if m.is_map() => env.get(m, &key),
        _ => return nso(),
    };
    Ok(Value::Optional(found.map(Rc::new)))
}

/// `optional_list[i]` / `optional_map[k]`: an optional of the element.
pub(crate) fn optional_container_index<'a>(
    env: &Activation<'a>,
    a: &mut [Value<'a>],
) -> R<Value<'a>> {
    opt_index(env, a)
}

pub(crate) fn list_first<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    Ok(Value::Optional(l.first().cloned().map(Rc::new)))
}
pub(crate) fn list_last<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    Ok(Value::Optional(l.last().cloned().map(Rc::new)))
}

pub(crate) fn optional_unwrap<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let mut out = Vec::new();
    for v in l.iter() {
        match v {
            Value::Optional(Some(x)) => out.push((**x).clone()),
            Value::Optional(None) => {}
            _ => return nso(),
        }
    }
    Ok(Value::list(out))
}
