//! List functions: cel-go's lists extension (version 3) and the Kubernetes lists library.

use std::cmp::Ordering;

use super::arith::add;
use super::{int_arg, list_arg, tracked};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, compare, equal};

pub(crate) fn slice<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let (s, e) = (int_arg(&a[1])?, int_arg(&a[2])?);
    if s < 0 || e < 0 {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), negative indexes not supported"
        )));
    }
    if s > e {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), start index must be less than or equal to end index"
        )));
    }
    if (l.len() as i64) < e {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), list is length {}",
            l.len()
        )));
    }
    tracked::output(env, (e - s) as usize)?;
    Ok(Value::list(l[s as usize..e as usize].to_vec()))
}

fn flatten_into<'a>(l: &[Value<'a>], depth: i64, out: &mut Vec<Value<'a>>) {
    for v in l {
        match v {
            Value::List(inner) if depth > 0 => flatten_into(inner, depth - 1, out),
            v => out.push(v.clone()),
        }
    }
}

pub(crate) fn flatten<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let depth = if a.len() > 1 { int_arg(&a[1])? } else { 1 };
    if depth < 0 {
        return Err(Error::msg("level must be non-negative"));
    }
    tracked::flatten(env, depth, l.len())?;
    let mut out = Vec::new();
    flatten_into(l, depth, &mut out);
    Ok(Value::list(out))
}

fn sort_by_keys<'a>(list: &[Value<'a>], keys: &[Value<'a>]) -> R<Value<'a>> {
    if list.len() != keys.len() {
        return Err(Error::msg(format!(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, but got {} and {} elements respectively",
            list.len(),
            keys.len()
        )));
    }
    if list.is_empty() {
        return Ok(Value::list(Vec::new()));
    }
    let first = keys[0].type_name();
    if !matches!(
        keys[0],
        Value::Int(_)
            | Value::Uint(_)
            | Value::Double(_)
            | Value::Bool(_)
            | Value::Str(_)
            | Value::Bytes(_)
            | Value::Duration(_)
            | Value::Timestamp(..)
    ) {
        return Err(Error::msg("list elements must be comparable"));
    }
    if keys.iter().any(|k| k.type_name() != first) {
        return Err(Error::msg("list elements must have the same type"));
    }
    let mut idx: Vec<usize> = (0..list.len()).collect();
    idx.sort_by(|&i, &j| compare(&keys[i], &keys[j]).unwrap_or(Ordering::Equal));
    Ok(Value::list(
        idx.into_iter().map(|i| list[i].clone()).collect(),
    ))
}

pub(crate) fn sort<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    tracked::self_compare(env, &l)?;
    sort_by_keys(&l, &l)
}

pub(crate) fn sort_by_associated_keys<'a>(
    env: &Activation<'a>,
    a: &mut [Value<'a>],
) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    let k = list_arg(&a[1])?.clone();
    tracked::self_compare(env, &k)?;
    sort_by_keys(&l, &k)
}

pub(crate) fn lists_range<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let n = int_arg(&a[0])?;
    // One unit per element plus the list's creation, as the scheduler's cost tracker counts
    // (measured against it: 999,900 elements fit the budget, 999,990 do not); charged before
    // the list is built, so a huge range costs no memory.
    env.charge(u64::try_from(n.max(0)).unwrap_or(0).saturating_add(10))?;
    Ok(Value::list((0..n.max(0)).map(Value::Int).collect()))
}

pub(crate) fn reverse<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    tracked::output(env, l.len())?;
    Ok(Value::list(l.iter().rev().cloned().collect()))
}

pub(crate) fn distinct<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    tracked::self_compare(env, l)?;
    let mut out: Vec<Value<'a>> = Vec::new();
    for v in l.iter() {
        if !out.iter().any(|o| matches!(equal(o, v, env), Ok(true))) {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

pub(crate) fn is_sorted<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    for w in l.windows(2) {
        if compare(&w[0], &w[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

pub(crate) fn sum<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    // The zero of the element type the checker chose; an untyped empty list sums to int 0.
    let mut acc = match l.first() {
        Some(Value::Uint(_)) => Value::Uint(0),
        Some(Value::Double(_)) => Value::Double(0.0),
        Some(Value::Duration(_)) => Value::Duration(0),
        _ => Value::Int(0),
    };
    for v in l.iter() {
        let mut args = [acc, v.clone()];
        acc = add(env, &mut args)?;
    }
    Ok(acc)
}

fn min_max<'a>(a: &[Value<'a>], want: Ordering, name: &str) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let mut best: Option<&Value<'a>> = None;
    for v in l.iter() {
        best = Some(match best {
            None => v,
            Some(b) if compare(b, v)? == want => v,
            Some(b) => b,
        });
    }
    best.cloned()
        .ok_or_else(|| Error::msg(format!("{name} called on empty list")))
}

pub(crate) fn min<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    min_max(a, Ordering::Greater, "min")
}
pub(crate) fn max<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    min_max(a, Ordering::Less, "max")
}

pub(crate) fn list_index_of<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let pos = l
        .iter()
        .position(|v| matches!(equal(v, &a[1], env), Ok(true)));
    Ok(Value::Int(pos.map_or(-1, |p| p as i64)))
}

pub(crate) fn list_last_index_of<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let pos = l
        .iter()
        .rposition(|v| matches!(equal(v, &a[1], env), Ok(true)));
    Ok(Value::Int(pos.map_or(-1, |p| p as i64)))
}
