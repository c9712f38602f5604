//! The checker's types and cel-go's rules for them: assignability with type parameters, the
//! "most general" of two types, substitution, and the names compile errors print.

use std::fmt;
use std::rc::Rc;

/// A CEL type as the checker sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Type {
    Error,
    Dyn,
    /// `google.protobuf.Any`: what the scheduler declares attribute values as; checked like `dyn`.
    Any,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List(Rc<Type>),
    Map(Rc<Type>, Rc<Type>),
    /// The type of a type value: `type(int)`; `None` is the bare `type`.
    #[allow(clippy::enum_variant_names)] // CEL's own name for it
    Type(Option<Rc<Type>>),
    /// An abstract type with parameters: `optional_type(int)`, `kubernetes.Quantity`.
    Opaque(&'static str, Rc<[Type]>),
    /// A message type: only `kubernetes.DRADevice`.
    Object(&'static str),
    /// A protobuf wrapper message of a primitive (`google.protobuf.Int64Value{}`): checked as
    /// the primitive that also takes `null`, as cel-go's nullable types are; `wrapper(int)`.
    Wrapper(Rc<Type>),
    /// A type variable of the checker.
    Param(u32),
}

pub(crate) const OPTIONAL: &str = "optional_type";
pub(crate) const QUANTITY: &str = "kubernetes.Quantity";
pub(crate) const SEMVER: &str = "kubernetes.Semver";
pub(crate) const IP: &str = "net.IP";
pub(crate) const CIDR: &str = "net.CIDR";
pub(crate) const URL: &str = "kubernetes.URL";
pub(crate) const FORMAT: &str = "kubernetes.NamedFormat";
pub(crate) const DEVICE: &str = "kubernetes.DRADevice";
/// `google.protobuf.Empty`, the one well-known message that stays a message when built.
pub(crate) const EMPTY: &str = "google.protobuf.Empty";

impl Type {
    pub(crate) fn list(t: Type) -> Type {
        Type::List(Rc::new(t))
    }
    pub(crate) fn map(k: Type, v: Type) -> Type {
        Type::Map(Rc::new(k), Rc::new(v))
    }
    pub(crate) fn optional(t: Type) -> Type {
        Type::Opaque(OPTIONAL, Rc::from(vec![t]))
    }
    pub(crate) fn type_of(t: Type) -> Type {
        Type::Type(Some(Rc::new(t)))
    }

    pub(crate) fn is_dyn(&self) -> bool {
        matches!(self, Type::Dyn | Type::Any)
    }
    fn is_dyn_or_error(&self) -> bool {
        matches!(self, Type::Dyn | Type::Any | Type::Error)
    }
    /// The value type of an optional, or the type itself.
    pub(crate) fn unwrap_optional(&self) -> (Type, bool) {
        match self {
            Type::Opaque(OPTIONAL, p) => (p[0].clone(), true),
            t => (t.clone(), false),
        }
    }

    /// The same type up to type variables and dyn-ness of parameters ("exact type"); a
    /// wrapper is exactly its primitive, as cel-go compares kinds and names, not nullability.
    pub(crate) fn exact(&self, o: &Type) -> bool {
        match (self, o) {
            (Type::Wrapper(a), b) | (b, Type::Wrapper(a)) => match b {
                Type::Wrapper(b) => a.exact(b),
                b => a.exact(b),
            },
            (Type::List(a), Type::List(b)) => a.exact(b),
            (Type::Map(k1, v1), Type::Map(k2, v2)) => k1.exact(k2) && v1.exact(v2),
            (Type::Type(Some(a)), Type::Type(Some(b))) => a.exact(b),
            (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
                n1 == n2
                    && p1.len() == p2.len()
                    && p1.iter().zip(p2.iter()).all(|(a, b)| a.exact(b))
            }
            _ => self == o,
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Type::Error => 0,
            Type::Dyn => 1,
            Type::Any => 2,
            Type::Null => 3,
            Type::Bool => 4,
            Type::Int => 5,
            Type::Uint => 6,
            Type::Double => 7,
            Type::String => 8,
            Type::Bytes => 9,
            Type::Duration => 10,
            Type::Timestamp => 11,
            Type::List(_) => 12,
            Type::Map(..) => 13,
            Type::Type(_) => 14,
            Type::Opaque(..) => 15,
            Type::Object(_) => 16,
            Type::Param(_) => 17,
            Type::Wrapper(t) => t.kind(),
        }
    }

    fn params(&self) -> Vec<Type> {
        match self {
            Type::List(e) => vec![(**e).clone()],
            Type::Map(k, v) => vec![(**k).clone(), (**v).clone()],
            Type::Opaque(_, p) => p.to_vec(),
            Type::Type(Some(t)) => vec![(**t).clone()],
            _ => Vec::new(),
        }
    }

    /// cel-go's `IsAssignableType` for the primitive and well-known kinds.
    fn assignable_from(&self, t1: &Type) -> bool {
        match self {
            // Wrapper-less primitives take only themselves (and null is handled by callers).
            _ if self.kind() == t1.kind() && self.params().is_empty() => match (self, t1) {
                (Type::Object(a), Type::Object(b)) => a == b,
                _ => true,
            },
            Type::Any => true,
            _ => false,
        }
    }
}

/// cel-go's `TypeName()` of a checked type, as its format validator and the message
/// construction checker print it.
pub(crate) fn type_name(t: &Type) -> String {
    match t {
        Type::Any => "google.protobuf.Any".into(),
        Type::Null => "null_type".into(),
        Type::Duration => "google.protobuf.Duration".into(),
        Type::Timestamp => "google.protobuf.Timestamp".into(),
        Type::List(_) => "list".into(),
        Type::Map(..) => "map".into(),
        Type::Type(_) => "type".into(),
        Type::Opaque(n, _) | Type::Object(n) => (*n).into(),
        Type::Wrapper(t) => type_name(t),
        other => other.to_string(),
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Error => f.write_str("!error!"),
            Type::Dyn => f.write_str("dyn"),
            Type::Any => f.write_str("any"),
            Type::Null => f.write_str("null"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Duration => f.write_str("duration"),
            Type::Timestamp => f.write_str("timestamp"),
            Type::List(e) => write!(f, "list({e})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Type(None) => f.write_str("type"),
            Type::Type(Some(t)) => write!(f, "type({t})"),
            Type::Opaque(n, p) if p.is_empty() => f.write_str(n),
            Type::Opaque(n, p) => {
                write!(f, "{n}(")?;
                for (i, t) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
            Type::Object(n) => f.write_str(n),
            Type::Param(i) => write!(f, "_var{i}"),
            Type::Wrapper(t) => write!(f, "wrapper({t})"),
        }
    }
}

/// Type-variable bindings. cel-go copies them for each tentative match and keeps the copy on
/// success; here a tentative match changes them in place and a failed one is undone from a
/// log, which gives the same bindings without copying them for every overload tried.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mapping {
    bindings: Vec<(u32, Type)>,
    undo: Vec<Undo>,
}

#[derive(Debug, Clone)]
enum Undo {
    Pushed,
    Replaced(usize, Type),
}

impl Mapping {
    pub(crate) fn find(&self, p: u32) -> Option<&Type> {
        self.bindings
            .iter()
            .rev()
            .find(|(k, _)| *k == p)
            .map(|(_, t)| t)
    }
    pub(crate) fn add(&mut self, p: u32, t: Type) {
        if let Some(i) = self.bindings.iter().position(|(k, _)| *k == p) {
            let old = std::mem::replace(&mut self.bindings[i].1, t);
            self.undo.push(Undo::Replaced(i, old));
        } else {
            self.bindings.push((p, t));
            self.undo.push(Undo::Pushed);
        }
    }

    /// Runs a tentative match: its bindings stay when it returns true and are undone when it
    /// returns false.
    fn attempt(&mut self, f: impl FnOnce(&mut Mapping) -> bool) -> bool {
        let mark = self.undo.len();
        let ok = f(self);
        if !ok {
            while self.undo.len() > mark {
                match self.undo.pop() {
                    Some(Undo::Pushed) => {
                        self.bindings.pop();
                    }
                    Some(Undo::Replaced(i, old)) => self.bindings[i].1 = old,
                    None => break,
                }
            }
        }
        if mark == 0 {
            // Nothing outside can undo past this point: the log is no longer needed.
            self.undo.clear();
        }
        ok
    }
}

fn is_equal_or_less_specific(t1: &Type, t2: &Type) -> bool {
    if t1.is_dyn() || matches!(t1, Type::Param(_)) {
        return true;
    }
    if t2.is_dyn() || matches!(t2, Type::Param(_)) {
        return false;
    }
    if t1.kind() != t2.kind() {
        return false;
    }
    match (t1, t2) {
        (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
            n1 == n2
                && p1.len() == p2.len()
                && p1
                    .iter()
                    .zip(p2.iter())
                    .all(|(a, b)| is_equal_or_less_specific(a, b))
        }
        (Type::List(a), Type::List(b)) => is_equal_or_less_specific(a, b),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => {
            is_equal_or_less_specific(k1, k2) && is_equal_or_less_specific(v1, v2)
        }
        (Type::Type(_), Type::Type(_)) => true,
        _ => t1.exact(t2),
    }
}

/// The more general of two types known to unify.
pub(crate) fn most_general(t1: &Type, t2: &Type) -> Type {
    if is_equal_or_less_specific(t1, t2) {
        t1.clone()
    } else {
        t2.clone()
    }
}

fn not_referenced_in(m: &Mapping, t: &Type, within: &Type) -> bool {
    if t.exact(within) {
        return false;
    }
    match within {
        Type::Param(p) => match m.find(*p) {
            None => true,
            Some(sub) => not_referenced_in(m, t, &sub.clone()),
        },
        Type::Opaque(..) | Type::List(_) | Type::Map(..) | Type::Type(_) => {
            within.params().iter().all(|pt| not_referenced_in(m, t, pt))
        }
        _ => true,
    }
}

/// Whether `t2` (or its binding) is a valid substitution for `t1`; the second flag tells
/// whether `t2` already had a binding.
fn is_valid_type_substitution(m: &mut Mapping, t1: &Type, t2: &Type) -> (bool, bool) {
    if t1.kind() == t2.kind() && t1.exact(t2) {
        return (true, true);
    }
    let Type::Param(p2) = t2 else {
        return (false, false);
    };
    if let Some(t2sub) = m.find(*p2).cloned() {
        if t1.kind() == t2sub.kind() && t1.exact(&t2sub) {
            return (true, true);
        }
        if internal_is_assignable(m, t1, &t2sub) {
            let t2new = most_general(t1, &t2sub);
            if not_referenced_in(m, t2, &t2new) {
                m.add(*p2, t2new);
            }
            return (true, true);
        }
        return (false, true);
    }
    if not_referenced_in(m, t2, t1) {
        m.add(*p2, t1.clone());
        return (true, false);
    }
    (false, false)
}

fn is_legacy_nullable(t: &Type) -> bool {
    matches!(
        t,
        Type::Opaque(..) | Type::Object(_) | Type::Any | Type::Duration | Type::Timestamp
    )
}

/// cel-go's `internalIsAssignable`: whether `t1` is assignable to `t2`, binding variables.
pub(crate) fn internal_is_assignable(m: &mut Mapping, t1: &Type, t2: &Type) -> bool {
    if let Type::Param(_) = t2 {
        let (valid, has_sub) = is_valid_type_substitution(m, t1, t2);
        if valid {
            return true;
        }
        if has_sub {
            return false;
        }
    }
    if let Type::Param(_) = t1 {
        return is_valid_type_substitution(m, t2, t1).0;
    }
    if t1.is_dyn_or_error() || t2.is_dyn_or_error() {
        return true;
    }
    if matches!(t1, Type::Null) {
        return is_legacy_nullable(t2) || matches!(t2, Type::Null | Type::Wrapper(_));
    }
    if matches!(t2, Type::Null) {
        return is_legacy_nullable(t1) || matches!(t1, Type::Wrapper(_));
    }
    match t1 {
        Type::Bool
        | Type::Bytes
        | Type::Double
        | Type::Int
        | Type::String
        | Type::Uint
        | Type::Any
        | Type::Duration
        | Type::Timestamp
        | Type::Object(_)
        | Type::Wrapper(_) => t2.assignable_from(t1),
        Type::Type(_) => matches!(t2, Type::Type(_)),
        Type::Opaque(n1, p1) => match t2 {
            Type::Opaque(n2, p2) => n1 == n2 && assignable_list(m, p1, p2),
            _ => false,
        },
        Type::List(e1) => match t2 {
            Type::List(e2) => internal_is_assignable(m, e1, e2),
            _ => false,
        },
        Type::Map(k1, v1) => match t2 {
            Type::Map(k2, v2) => {
                internal_is_assignable(m, k1, k2) && internal_is_assignable(m, v1, v2)
            }
            _ => false,
        },
        _ => false,
    }
}

fn assignable_list(m: &mut Mapping, l1: &[Type], l2: &[Type]) -> bool {
    l1.len() == l2.len()
        && l1
            .iter()
            .zip(l2.iter())
            .all(|(a, b)| internal_is_assignable(m, a, b))
}

/// Whether `t1` is assignable to `t2`; the bindings this needs are added to `m` only when it is.
pub(crate) fn is_assignable(m: &mut Mapping, t1: &Type, t2: &Type) -> bool {
    m.attempt(|m| internal_is_assignable(m, t1, t2))
}

/// [`is_assignable`] for lists of types, pairwise.
pub(crate) fn is_assignable_list(m: &mut Mapping, l1: &[Type], l2: &[Type]) -> bool {
    m.attempt(|m| assignable_list(m, l1, l2))
}

/// Whether `t` mentions a type variable anywhere.
fn has_param(t: &Type) -> bool {
    match t {
        Type::Param(_) => true,
        Type::List(e) => has_param(e),
        Type::Map(k, v) => has_param(k) || has_param(v),
        Type::Type(Some(p)) => has_param(p),
        Type::Opaque(_, p) => p.iter().any(has_param),
        _ => false,
    }
}

/// Replaces bound type variables; unbound ones become `dyn` when `to_dyn`.
pub(crate) fn substitute(m: &Mapping, t: &Type, to_dyn: bool) -> Type {
    // Most types have no variables: share them instead of rebuilding every level.
    if !has_param(t) {
        return t.clone();
    }
    match t {
        Type::Param(p) => match m.find(*p) {
            Some(sub) => substitute(m, sub, to_dyn),
            None if to_dyn => Type::Dyn,
            None => t.clone(),
        },
        Type::Opaque(n, p) => Type::Opaque(
            n,
            p.iter()
                .map(|x| substitute(m, x, to_dyn))
                .collect::<Vec<_>>()
                .into(),
        ),
        Type::List(e) => Type::list(substitute(m, e, to_dyn)),
        Type::Map(k, v) => Type::map(substitute(m, k, to_dyn), substitute(m, v, to_dyn)),
        Type::Type(Some(p)) => Type::type_of(substitute(m, p, to_dyn)),
        _ => t.clone(),
    }
}
