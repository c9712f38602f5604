//! `matchAttribute` and `distinctAttribute` while searching: attribute values as the scheduler
//! compares them, and the state of a constraint as devices are added.

use crate::cel::{AttributeValue, Semver};
use crate::device::AttrRef;

/// A scalar of an attribute value, for constraint comparison (lists are sets of these).
#[derive(Debug, Clone, Copy)]
pub(super) enum Scalar<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Ver(&'a Semver),
}

impl PartialEq for Scalar<'_> {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Str(a), Scalar::Str(b)) => a == b,
            // The scheduler compares the version strings: build metadata counts.
            (Scalar::Ver(a), Scalar::Ver(b)) => a == b && a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

pub(super) fn scalar(v: AttrRef<'_>) -> Option<Scalar<'_>> {
    Some(match v {
        AttrRef::Bool(b) => Scalar::Bool(b),
        AttrRef::Int(i) => Scalar::Int(i),
        AttrRef::Str(s) => Scalar::Str(s),
        AttrRef::Value(AttributeValue::Bool(b)) => Scalar::Bool(*b),
        AttrRef::Value(AttributeValue::Int(i)) => Scalar::Int(*i),
        AttrRef::Value(AttributeValue::String(s)) => Scalar::Str(s),
        AttrRef::Value(AttributeValue::Version(v)) => Scalar::Ver(v),
        AttrRef::Value(AttributeValue::Ints(_) | AttributeValue::Strings(_)) => return None,
    })
}

pub(super) fn scalars(v: AttrRef<'_>) -> Vec<Scalar<'_>> {
    match v {
        AttrRef::Value(AttributeValue::Ints(l)) => l.iter().map(|i| Scalar::Int(*i)).collect(),
        AttrRef::Value(AttributeValue::Strings(l)) => l.iter().map(|s| Scalar::Str(s)).collect(),
        other => scalar(other).into_iter().collect(),
    }
}

/// Per-constraint state while searching.
#[derive(Debug, Clone)]
pub(super) enum CState<'a> {
    /// Match: values every device so far shares (`None` before the first device).
    Common(Option<Vec<Scalar<'a>>>),
    /// Distinct: values already taken.
    Taken(Vec<Scalar<'a>>),
}

/// A scalar value as the scheduler compares it, as a map key: borrowed, so indexing and
/// counting devices by value allocates nothing (versions compare by their text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum ValueKey<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Ver(String),
}

/// [`value_key`] of a scalar.
pub(super) fn scalar_key<'a>(s: &Scalar<'a>) -> ValueKey<'a> {
    match *s {
        Scalar::Bool(b) => ValueKey::Bool(b),
        Scalar::Int(i) => ValueKey::Int(i),
        Scalar::Str(s) => ValueKey::Str(s),
        Scalar::Ver(v) => ValueKey::Ver(v.to_string()),
    }
}

/// The key of a scalar value; `None` for lists.
pub(super) fn value_key(v: AttrRef<'_>) -> Option<ValueKey<'_>> {
    scalar(v).as_ref().map(scalar_key)
}

/// The constraint state after adding a device with value `v`: `None` when it breaks the
/// constraint, `Some(None)` when the state does not change.
pub(super) fn next_state<'a>(state: &CState<'a>, v: AttrRef<'a>) -> Option<Option<CState<'a>>> {
    match state {
        CState::Common(None) => Some(Some(CState::Common(Some(scalars(v))))),
        CState::Common(Some(common)) => {
            // A scalar equal to the single common value leaves the state as it is.
            if let (Some(x), [only]) = (scalar(v), common.as_slice()) {
                return (x == *only).then_some(None);
            }
            let vals = scalars(v);
            let inter: Vec<Scalar> = common
                .iter()
                .filter(|x| vals.contains(x))
                .copied()
                .collect();
            (!inter.is_empty()).then_some(Some(CState::Common(Some(inter))))
        }
        CState::Taken(taken) => {
            let vals = scalars(v);
            if vals.iter().any(|x| taken.contains(x)) {
                return None;
            }
            let mut t = taken.clone();
            t.extend(vals);
            Some(Some(CState::Taken(t)))
        }
    }
}
