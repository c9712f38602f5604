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

/// Per-constraint state while searching, kept as the scheduler keeps it.
#[derive(Debug, Clone)]
pub(super) enum CState<'a> {
    /// Match: the values every device so far shares, and how many devices it counts (the
    /// values are stale when it counts none: the next device sets them).
    Common(Option<Vec<Scalar<'a>>>, usize),
    /// Distinct: the values taken.
    Taken(Vec<Scalar<'a>>),
    /// Distinct as Kubernetes 1.34 compares it (by pointer): only a missing attribute fails.
    Present,
    /// Distinct as Kubernetes 1.36 keeps it ([`DistinctAttribute::LastPerRequest`]): the value of
    /// the last device of each request (by request index; `None` for a list, which nothing
    /// equals), and how many devices it counts.
    ///
    /// [`DistinctAttribute::LastPerRequest`]: crate::DistinctAttribute::LastPerRequest
    PerRequest(Vec<(usize, Option<Scalar<'a>>)>, usize),
}

/// What undoing an `add` takes beyond the scheduler's own `remove` (which only counts down).
#[derive(Debug, Clone)]
pub(super) enum Undo<'a> {
    /// Nothing.
    Nothing,
    /// A match on list values narrowed its values: they come back.
    Values(Option<Vec<Scalar<'a>>>),
    /// Distinct values were taken from this length on.
    Taken(usize),
}

impl<'a> CState<'a> {
    /// The scheduler's `add` of request `r`'s device whose attribute is `v`: `None` when the
    /// device breaks the constraint (the state is then unchanged), else what undoing it needs.
    pub(super) fn add(&mut self, v: Option<AttrRef<'a>>, r: usize) -> Option<Undo<'a>> {
        let v = v?;
        match self {
            CState::Common(values, n) => {
                if *n == 0 || values.is_none() {
                    *values = Some(scalars(v));
                    *n = 1;
                    return Some(Undo::Nothing);
                }
                let common = values.as_ref()?;
                if let (Some(x), [only]) = (scalar(v), common.as_slice()) {
                    if x != *only {
                        return None;
                    }
                    *n += 1;
                    return Some(Undo::Nothing);
                }
                let vals = scalars(v);
                let inter: Vec<Scalar> = common
                    .iter()
                    .filter(|x| vals.contains(x))
                    .copied()
                    .collect();
                if inter.is_empty() {
                    return None;
                }
                *n += 1;
                Some(Undo::Values(values.replace(inter)))
            }
            CState::Taken(taken) => {
                let vals = scalars(v);
                if vals.iter().any(|x| taken.contains(x)) {
                    return None;
                }
                let at = taken.len();
                taken.extend(vals);
                Some(Undo::Taken(at))
            }
            CState::Present => Some(Undo::Nothing),
            CState::PerRequest(entries, n) => {
                let x = scalar(v);
                if *n > 0 {
                    // A list is of no known type: the scheduler refuses it after the first.
                    let x = x?;
                    if entries.iter().any(|(_, e)| *e == Some(x)) {
                        return None;
                    }
                }
                entries.retain(|(q, _)| *q != r);
                entries.push((r, x));
                *n = if *n == 0 { 1 } else { *n + 1 };
                Some(Undo::Nothing)
            }
        }
    }

    /// The scheduler's `remove` of request `r`'s device, then what `undo` restores: a match
    /// counts one device less; a per-request distinct forgets request `r`'s entry whatever
    /// other devices of the request are still taken.
    pub(super) fn remove(&mut self, r: usize, undo: Undo<'a>) {
        match self {
            CState::Common(values, n) => {
                *n = n.saturating_sub(1);
                if let Undo::Values(old) = undo {
                    *values = old;
                }
            }
            CState::Taken(taken) => {
                if let Undo::Taken(at) = undo {
                    taken.truncate(at);
                }
            }
            CState::Present => {}
            CState::PerRequest(entries, n) => {
                entries.retain(|(q, _)| *q != r);
                *n = n.saturating_sub(1);
            }
        }
    }

    /// The single value every device so far shares, when there is one.
    pub(super) fn single(&self) -> Option<&Scalar<'a>> {
        match self {
            CState::Common(Some(v), n) if *n > 0 => match v.as_slice() {
                [only] => Some(only),
                _ => None,
            },
            _ => None,
        }
    }
}
