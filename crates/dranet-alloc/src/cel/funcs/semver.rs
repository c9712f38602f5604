//! The Kubernetes semver library: `semver()`, `isSemver()`, its parts and comparisons.

use std::cmp::Ordering;
use std::rc::Rc;

use dranet_core::Semver;

use super::{nso, string_arg};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, Ver};

fn semver_arg<'b, 'a>(v: &'b Value<'a>) -> R<&'b Semver> {
    match v {
        Value::Semver(s) => Ok(s),
        _ => nso(),
    }
}

pub(crate) fn semver<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let normalize = matches!(a.get(1), Some(Value::Bool(true)));
    let v = if normalize {
        Semver::parse_tolerant(&s)
    } else {
        Semver::parse(&s)
    };
    v.map(|v| Value::Semver(Ver::O(Rc::new(v))))
        .map_err(|e| Error::msg(e.to_string()))
}

pub(crate) fn is_semver<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let normalize = matches!(a.get(1), Some(Value::Bool(true)));
    Ok(Value::Bool(if normalize {
        Semver::parse_tolerant(&s).is_ok()
    } else {
        Semver::parse(&s).is_ok()
    }))
}

pub(crate) fn semver_major<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.major as i64))
}
pub(crate) fn semver_minor<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.minor as i64))
}
pub(crate) fn semver_patch<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.patch as i64))
}

fn semver_cmp(a: &[Value<'_>]) -> R<Ordering> {
    Ok(semver_arg(&a[0])?.cmp(semver_arg(&a[1])?))
}
pub(crate) fn semver_compare_to<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_cmp(a)? as i64))
}
pub(crate) fn semver_is_greater_than<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(semver_cmp(a)? == Ordering::Greater))
}
pub(crate) fn semver_is_less_than<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(semver_cmp(a)? == Ordering::Less))
}
