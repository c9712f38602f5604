//! The Kubernetes quantity library: `quantity()`, `isQuantity()`, comparisons and arithmetic.

use std::cmp::Ordering;

use dranet_core::{Quantity, QuantityError};

use super::{nso, string_arg};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

fn quantity_arg(v: &Value<'_>) -> R<Quantity> {
    match v {
        Value::Quantity(q) => Ok(*q),
        _ => nso(),
    }
}

pub(crate) fn quantity<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Quantity::parse(&s)
        .map(Value::Quantity)
        .map_err(|_| Error::msg("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
}

/// `isQuantity` asks only whether `ParseQuantity` reads the string, which holds any number of
/// digits in an arbitrary-precision decimal; ours stop at 38 significant ones, an error that does
/// not make the string less of a quantity.
pub(crate) fn is_quantity<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Ok(Value::Bool(!matches!(
        Quantity::parse(&s),
        Err(QuantityError::Format | QuantityError::Suffix)
    )))
}

pub(crate) fn quantity_sign<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(quantity_arg(&a[0])?.sign()))
}

fn quantity_cmp(a: &[Value<'_>]) -> R<Ordering> {
    Ok(quantity_arg(&a[0])?.cmp(&quantity_arg(&a[1])?))
}

pub(crate) fn quantity_compare_to<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(quantity_cmp(a)? as i64))
}
pub(crate) fn quantity_is_greater_than<'a>(
    _: &Activation<'a>,
    a: &mut [Value<'a>],
) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_cmp(a)? == Ordering::Greater))
}
pub(crate) fn quantity_is_less_than<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_cmp(a)? == Ordering::Less))
}

pub(crate) fn quantity_as_integer<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    quantity_arg(&a[0])?
        .as_integer()
        .map(Value::Int)
        .ok_or_else(|| Error::msg("cannot convert value to integer"))
}
pub(crate) fn quantity_is_integer<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_arg(&a[0])?.as_integer().is_some()))
}
pub(crate) fn quantity_as_float<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Double(quantity_arg(&a[0])?.as_f64()))
}

fn quantity_operand(v: &Value<'_>) -> R<Quantity> {
    match v {
        Value::Quantity(q) => Ok(*q),
        Value::Int(i) => Ok(Quantity::from_int(*i)),
        _ => nso(),
    }
}

pub(crate) fn quantity_add<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let q = quantity_arg(&a[0])?;
    q.checked_add(quantity_operand(&a[1])?)
        .map(Value::Quantity)
        .ok_or_else(|| Error::msg("quantity overflow"))
}
pub(crate) fn quantity_sub<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let q = quantity_arg(&a[0])?;
    q.checked_sub(quantity_operand(&a[1])?)
        .map(Value::Quantity)
        .ok_or_else(|| Error::msg("quantity overflow"))
}
