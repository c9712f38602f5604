//! CEL's operators: arithmetic with cel-go's overflow errors, `!`, comparisons and equality.

use std::cmp::Ordering;
use std::rc::Rc;

use super::time::ts_add;
use super::{int_overflow, nso, take, uint_overflow};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, compare, equal};

pub(crate) fn add<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let _ = env;
    Ok(match (take(a, 0), take(a, 1)) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_add(y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_add(y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x + y),
        (Value::Str(x), Value::Str(y)) => {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(&x);
            s.push_str(&y);
            Value::string(s)
        }
        (Value::Bytes(x), Value::Bytes(y)) => Value::Bytes([&x[..], &y[..]].concat().into()),
        (Value::List(x), Value::List(y)) => {
            if x.is_empty() {
                Value::List(y)
            } else if y.is_empty() {
                Value::List(x)
            } else {
                let mut v = Rc::try_unwrap(x).unwrap_or_else(|rc| (*rc).clone());
                v.extend(y.iter().cloned());
                Value::list(v)
            }
        }
        (Value::Duration(x), Value::Duration(y)) => Value::Duration(
            x.checked_add(y)
                .ok_or_else(|| Error::msg("integer overflow"))?,
        ),
        (Value::Timestamp(s, n, o), Value::Duration(d))
        | (Value::Duration(d), Value::Timestamp(s, n, o)) => ts_add(s, n, o, i128::from(d))?,
        _ => return nso(),
    })
}

pub(crate) fn sub<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (take(a, 0), take(a, 1)) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_sub(y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_sub(y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x - y),
        (Value::Duration(x), Value::Duration(y)) => Value::Duration(
            x.checked_sub(y)
                .ok_or_else(|| Error::msg("integer overflow"))?,
        ),
        (Value::Timestamp(s, n, o), Value::Duration(d)) => ts_add(s, n, o, -i128::from(d))?,
        (Value::Timestamp(s1, n1, _), Value::Timestamp(s2, n2, _)) => {
            let d =
                (i128::from(s1) - i128::from(s2)) * 1_000_000_000 + i128::from(n1) - i128::from(n2);
            Value::Duration(i64::try_from(d).map_err(|_| Error::msg("integer overflow"))?)
        }
        _ => return nso(),
    })
}

pub(crate) fn mul<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_mul(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_mul(*y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x * y),
        _ => return nso(),
    })
}

pub(crate) fn div<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(Error::msg("division by zero"));
        }
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_div(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => Value::Uint(x / y),
        (Value::Double(x), Value::Double(y)) => Value::Double(x / y),
        _ => return nso(),
    })
}

pub(crate) fn rem<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(Error::msg("modulus by zero"));
        }
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_rem(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => Value::Uint(x % y),
        _ => return nso(),
    })
}

pub(crate) fn neg<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match &a[0] {
        Value::Int(x) => Value::Int(x.checked_neg().map_or_else(int_overflow, Ok)?),
        Value::Double(x) => Value::Double(-x),
        Value::Duration(x) => Value::Duration(x.checked_neg().map_or_else(int_overflow, Ok)?),
        _ => return nso(),
    })
}

pub(crate) fn not<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Bool(b) => Ok(Value::Bool(!b)),
        _ => nso(),
    }
}

fn cmp_with<'a>(a: &[Value<'a>], f: fn(Ordering) -> bool) -> R<Value<'a>> {
    compare(&a[0], &a[1]).map(|o| Value::Bool(f(o)))
}
pub(crate) fn lt<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o == Ordering::Less)
}
pub(crate) fn le<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o != Ordering::Greater)
}
pub(crate) fn gt<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o == Ordering::Greater)
}
pub(crate) fn ge<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o != Ordering::Less)
}

pub(crate) fn eq<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    equal(&a[0], &a[1], env).map(Value::Bool)
}
pub(crate) fn ne<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    // cel-go: `a != b` is true unless `a == b` is exactly true, so a type whose equality errs
    // on a different kind (a version compared with a string) is simply unequal here.
    Ok(Value::Bool(!matches!(equal(&a[0], &a[1], env), Ok(true))))
}
