//! Every function of the environments the scheduler compiles selectors in, with its
//! overloads as cel-go declares them: CEL's standard definitions, optional types, cel-go's
//! strings (version 2), lists (version 3), sets and two-variable comprehension extensions,
//! and the Kubernetes quantity, semver (version 1), IP, CIDR, URL, regex, lists and format
//! libraries, and DRA's `includes` (1.36). Each declaration carries the version that introduced
//! it; the API server checks a new selector in an older environment ([`EnvType::New`]), which
//! lacks the declarations introduced since its compatibility version.

use super::funcs::{self as f, Imp};
use super::types::{self as t, Type};
use crate::version::KubernetesVersion;

/// A type in a declaration; `P(n)` is the overload's n-th type parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum D {
    Bool,
    Int,
    Uint,
    Double,
    Str,
    Bytes,
    Dyn,
    Dur,
    Ts,
    P(u8),
    L(&'static D),
    M(&'static D, &'static D),
    Ty(&'static D),
    Obj(&'static str),
    Opt(&'static D),
}

impl D {
    /// The checker's type, with type parameter `n` as `params[n]`.
    pub(crate) fn to_type(self, params: &[Type]) -> Type {
        match self {
            D::Bool => Type::Bool,
            D::Int => Type::Int,
            D::Uint => Type::Uint,
            D::Double => Type::Double,
            D::Str => Type::String,
            D::Bytes => Type::Bytes,
            D::Dyn => Type::Dyn,
            D::Dur => Type::Duration,
            D::Ts => Type::Timestamp,
            D::P(n) => params[usize::from(n)].clone(),
            D::L(e) => Type::list(e.to_type(params)),
            D::M(k, v) => Type::map(k.to_type(params), v.to_type(params)),
            D::Ty(e) => Type::type_of(e.to_type(params)),
            D::Obj(n) => Type::Object(n),
            D::Opt(e) => Type::optional(e.to_type(params)),
        }
    }

    /// False only when no binding can make an argument of type `t` assignable to this
    /// parameter (a list where a map is declared, an int where a string is): the checker then
    /// skips the overload without building its types. When unsure (type variables, `dyn`,
    /// `null`, objects and abstract types) it says true and the full check decides.
    pub(crate) fn may_accept(self, t: &Type) -> bool {
        match (self, t) {
            (D::P(_) | D::Dyn | D::Obj(_), _) => true,
            // A wrapper message is checked as its primitive.
            (_, Type::Wrapper(inner)) => self.may_accept(inner),
            (
                _,
                Type::Dyn
                | Type::Any
                | Type::Error
                | Type::Param(_)
                | Type::Null
                | Type::Object(_)
                | Type::Opaque(..),
            ) => !matches!(
                (self, t),
                (
                    D::Bool | D::Int | D::Uint | D::Double | D::Str | D::Bytes | D::L(_) | D::M(..),
                    Type::Opaque(..)
                )
            ),
            (D::Bool, Type::Bool)
            | (D::Int, Type::Int)
            | (D::Uint, Type::Uint)
            | (D::Double, Type::Double)
            | (D::Str, Type::String)
            | (D::Bytes, Type::Bytes)
            | (D::Dur, Type::Duration)
            | (D::Ts, Type::Timestamp)
            | (D::L(_), Type::List(_))
            | (D::M(..), Type::Map(..))
            | (D::Ty(_), Type::Type(_)) => true,
            _ => false,
        }
    }

    /// How many type parameters the type mentions (the highest index plus one).
    pub(crate) fn params(self) -> u8 {
        match self {
            D::P(n) => n + 1,
            D::L(e) | D::Ty(e) | D::Opt(e) => e.params(),
            D::M(k, v) => k.params().max(v.params()),
            _ => 0,
        }
    }
}

/// One overload.
#[derive(Debug)]
pub(crate) struct Ov {
    pub id: &'static str,
    pub member: bool,
    pub args: &'static [D],
    pub ret: D,
    /// `None` for the operators the evaluator itself implements.
    pub imp: Option<Imp>,
}

/// A function: its overloads, and an implementation for all of them when cel-go dispatches
/// on the values rather than on the overload.
#[derive(Debug)]
pub(crate) struct Func {
    pub name: &'static str,
    pub ovs: &'static [Ov],
    pub single: Option<Imp>,
    /// The Kubernetes minor version (1.x) whose CEL environment introduced the function's
    /// library (`IntroducedVersion` in k8s.io/apiserver's `environment/base.go` or DRA's
    /// `compile.go`). Only declarations newer than the oldest supported version's
    /// `NewExpressions` environment (1.33) carry theirs; the others are 0.
    pub since: u8,
}

/// The lists extension of cel-go, version 3, entered the base environment in 1.34
/// (`k8s.io/apiserver/pkg/cel/environment/base.go`).
const LISTS_V3: u8 = 34;

/// DRA's `includes` (`k8s.io/dynamic-resource-allocation/cel/compile.go`, 1.36): declared
/// with the DRAListTypeAttributes gate, which the API server's `NewExpressions` environment
/// honours and the scheduler's `StoredExpressions` one ignores. The gate is alpha and off in
/// 1.36 and 1.37, so their schedulers accept `includes` while their API servers refuse it in
/// a new selector (1.37's compatibility version, 1.36, has the declaration; the gate does not).
const DRA_INCLUDES: u8 = 36;

/// Whether a declaration's feature gate is on by default in the API servers this crate knows:
/// only `includes` has one (DRAListTypeAttributes, alpha and off in every supported version).
fn gate_on(f: &Func) -> bool {
    f.name != "includes"
}

/// Which of the API server's two CEL environments a selector is compiled in (the
/// `environment.Type` of Kubernetes), of which Kubernetes version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvType {
    /// `NewExpressions`: what a new ResourceClaim, ResourceClaimTemplate or DeviceClass is
    /// checked against: the base environment at the version's
    /// [`new_expressions_minor`](KubernetesVersion::new_expressions_minor), feature gates at their
    /// defaults.
    New(KubernetesVersion),
    /// `StoredExpressions`: every declaration of the version's build, feature gates ignored;
    /// what the scheduler compiles a stored selector in.
    Stored(KubernetesVersion),
}

impl EnvType {
    /// Whether this is the API server's environment for a new selector.
    pub(crate) fn is_new(self) -> bool {
        matches!(self, EnvType::New(_))
    }

    /// The Kubernetes version.
    pub(crate) fn version(self) -> KubernetesVersion {
        match self {
            EnvType::New(v) | EnvType::Stored(v) => v,
        }
    }

    /// The scheduler's environment of the same version.
    pub(crate) fn stored(self) -> EnvType {
        EnvType::Stored(self.version())
    }

    /// Whether this environment declares `f`.
    pub(crate) fn declares(self, f: &Func) -> bool {
        match self {
            EnvType::New(v) => u32::from(f.since) <= v.new_expressions_minor() && gate_on(f),
            EnvType::Stored(v) => u32::from(f.since) <= v.minor(),
        }
    }

    /// The function named `name`, if this environment declares it.
    pub(crate) fn lookup(self, name: &str) -> Option<&'static Func> {
        lookup(name).filter(|f| self.declares(f))
    }

    /// Whether `device.allowMultipleAllocations` is declared: for a new selector only with the
    /// DRAConsumableCapacity feature gate (alpha and off in 1.34, beta and on in 1.36); the
    /// stored environment ignores the gate and declares the newest `device` type.
    pub(crate) fn has_allow_multiple_allocations(self) -> bool {
        match self {
            EnvType::New(v) => v.declares_consumable_capacity(),
            EnvType::Stored(_) => true,
        }
    }
}

const A: D = D::P(0);
const B: D = D::P(1);
const LA: D = D::L(&A);
const MAB: D = D::M(&A, &B);
const LS: D = D::L(&D::Str);
const LDYN: D = D::L(&D::Dyn);
const Q: D = D::Obj(t::QUANTITY);
const SV: D = D::Obj(t::SEMVER);
const IPT: D = D::Obj(t::IP);
const CIDRT: D = D::Obj(t::CIDR);
const URLT: D = D::Obj(t::URL);
const FMT: D = D::Obj(t::FORMAT);
const OPTA: D = D::Opt(&A);
const OPTB: D = D::Opt(&B);

macro_rules! g {
    ($id:expr, [$($a:expr),*], $r:expr) => {
        Ov { id: $id, member: false, args: &[$($a),*], ret: $r, imp: None }
    };
    ($id:expr, [$($a:expr),*], $r:expr, $imp:expr) => {
        Ov { id: $id, member: false, args: &[$($a),*], ret: $r, imp: Some($imp) }
    };
}
macro_rules! m {
    ($id:expr, [$($a:expr),*], $r:expr) => {
        Ov { id: $id, member: true, args: &[$($a),*], ret: $r, imp: None }
    };
    ($id:expr, [$($a:expr),*], $r:expr, $imp:expr) => {
        Ov { id: $id, member: true, args: &[$($a),*], ret: $r, imp: Some($imp) }
    };
}

/// Overloads over the comparable types (`int`, `uint`, `double`, `bool`, `duration`,
/// `timestamp`, `string`, `bytes`), as cel-go's and Kubernetes' templated overloads.
macro_rules! comparable {
    ($mk:ident, $prefix:literal, $suffix:literal, $args:ident, $ret:ident) => {
        [
            $mk!(concat!($prefix, "int", $suffix), D::Int),
            $mk!(concat!($prefix, "uint", $suffix), D::Uint),
            $mk!(concat!($prefix, "double", $suffix), D::Double),
            $mk!(concat!($prefix, "bool", $suffix), D::Bool),
            $mk!(concat!($prefix, "duration", $suffix), D::Dur),
            $mk!(concat!($prefix, "timestamp", $suffix), D::Ts),
            $mk!(concat!($prefix, "string", $suffix), D::Str),
            $mk!(concat!($prefix, "bytes", $suffix), D::Bytes),
        ]
    };
}

macro_rules! funcs {
    ($($name:literal => $ovs:expr $(, single $s:expr)? $(, since $v:expr)?;)*) => {
        /// The function named `name`, if the scheduler's (stored) environment declares it; see
        /// [`EnvType::lookup`] for the environment of a new selector.
        pub(crate) fn lookup(name: &str) -> Option<&'static Func> {
            match name {
                $($name => {
                    static F: Func = Func {
                        name: $name,
                        ovs: &$ovs,
                        single: funcs!(@s $($s)?),
                        since: funcs!(@v $($v)?),
                    };
                    Some(&F)
                })*
                _ => None,
            }
        }
    };
    (@s) => { None };
    (@s $s:expr) => { Some($s) };
    (@v) => { 0 };
    (@v $v:expr) => { $v };
}

macro_rules! cmp_ovs {
    ($p:literal) => {
        [
            g!(concat!($p, "_bool"), [D::Bool, D::Bool], D::Bool),
            g!(concat!($p, "_int64"), [D::Int, D::Int], D::Bool),
            g!(concat!($p, "_int64_double"), [D::Int, D::Double], D::Bool),
            g!(concat!($p, "_int64_uint64"), [D::Int, D::Uint], D::Bool),
            g!(concat!($p, "_uint64"), [D::Uint, D::Uint], D::Bool),
            g!(concat!($p, "_uint64_double"), [D::Uint, D::Double], D::Bool),
            g!(concat!($p, "_uint64_int64"), [D::Uint, D::Int], D::Bool),
            g!(concat!($p, "_double"), [D::Double, D::Double], D::Bool),
            g!(concat!($p, "_double_int64"), [D::Double, D::Int], D::Bool),
            g!(concat!($p, "_double_uint64"), [D::Double, D::Uint], D::Bool),
            g!(concat!($p, "_string"), [D::Str, D::Str], D::Bool),
            g!(concat!($p, "_bytes"), [D::Bytes, D::Bytes], D::Bool),
            g!(concat!($p, "_timestamp"), [D::Ts, D::Ts], D::Bool),
            g!(concat!($p, "_duration"), [D::Dur, D::Dur], D::Bool),
        ]
    };
}

macro_rules! time_getter {
    ($name:literal, $imp:expr) => {
        [
            m!(concat!("timestamp_to_", $name), [D::Ts], D::Int, $imp),
            m!(
                concat!("timestamp_to_", $name, "_with_tz"),
                [D::Ts, D::Str],
                D::Int,
                $imp
            ),
        ]
    };
}

const LESS: [Ov; 14] = cmp_ovs!("less");
const LESS_EQ: [Ov; 14] = cmp_ovs!("less_equals");
const GREATER: [Ov; 14] = cmp_ovs!("greater");
const GREATER_EQ: [Ov; 14] = cmp_ovs!("greater_equals");

macro_rules! sort_ov {
    ($id:expr, $t:expr) => {
        Ov {
            id: $id,
            member: true,
            args: &[D::L(&$t)],
            ret: D::L(&$t),
            imp: None,
        }
    };
}
macro_rules! sort_keys_ov {
    ($id:expr, $t:expr) => {
        Ov {
            id: $id,
            member: true,
            args: &[LA, D::L(&$t)],
            ret: LA,
            imp: None,
        }
    };
}
macro_rules! is_sorted_ov {
    ($id:expr, $t:expr) => {
        Ov {
            id: $id,
            member: true,
            args: &[D::L(&$t)],
            ret: D::Bool,
            imp: None,
        }
    };
}
macro_rules! min_max_ov {
    ($id:expr, $t:expr) => {
        Ov {
            id: $id,
            member: true,
            args: &[D::L(&$t)],
            ret: $t,
            imp: None,
        }
    };
}

const SORT: [Ov; 8] = comparable!(sort_ov, "list_", "_sort", a, r);
const SORT_KEYS: [Ov; 8] = comparable!(sort_keys_ov, "list_", "_sortByAssociatedKeys", a, r);
const IS_SORTED: [Ov; 8] = comparable!(is_sorted_ov, "list_", "_is_sorted_bool", a, r);
const MIN: [Ov; 8] = comparable!(min_max_ov, "list_", "_min", a, r);
const MAX: [Ov; 8] = comparable!(min_max_ov, "list_", "_max", a, r);

funcs! {
    "_?_:_" => [g!("conditional", [D::Bool, A, A], A)];
    "_&&_" => [g!("logical_and", [D::Bool, D::Bool], D::Bool)];
    "_||_" => [g!("logical_or", [D::Bool, D::Bool], D::Bool)];
    "!_" => [g!("logical_not", [D::Bool], D::Bool)], single f::not;
    "@not_strictly_false" => [g!("not_strictly_false", [D::Bool], D::Bool)];
    "_==_" => [g!("equals", [A, A], D::Bool)], single f::eq;
    "_!=_" => [g!("not_equals", [A, A], D::Bool)], single f::ne;
    "_+_" => [
        g!("add_bytes", [D::Bytes, D::Bytes], D::Bytes),
        g!("add_double", [D::Double, D::Double], D::Double),
        g!("add_duration_duration", [D::Dur, D::Dur], D::Dur),
        g!("add_duration_timestamp", [D::Dur, D::Ts], D::Ts),
        g!("add_timestamp_duration", [D::Ts, D::Dur], D::Ts),
        g!("add_int64", [D::Int, D::Int], D::Int),
        g!("add_list", [LA, LA], LA),
        g!("add_string", [D::Str, D::Str], D::Str),
        g!("add_uint64", [D::Uint, D::Uint], D::Uint),
    ], single f::add;
    "_/_" => [
        g!("divide_double", [D::Double, D::Double], D::Double),
        g!("divide_int64", [D::Int, D::Int], D::Int),
        g!("divide_uint64", [D::Uint, D::Uint], D::Uint),
    ], single f::div;
    "_%_" => [
        g!("modulo_int64", [D::Int, D::Int], D::Int),
        g!("modulo_uint64", [D::Uint, D::Uint], D::Uint),
    ], single f::rem;
    "_*_" => [
        g!("multiply_double", [D::Double, D::Double], D::Double),
        g!("multiply_int64", [D::Int, D::Int], D::Int),
        g!("multiply_uint64", [D::Uint, D::Uint], D::Uint),
    ], single f::mul;
    "-_" => [
        g!("negate_double", [D::Double], D::Double),
        g!("negate_int64", [D::Int], D::Int),
    ], single f::neg;
    "_-_" => [
        g!("subtract_double", [D::Double, D::Double], D::Double),
        g!("subtract_duration_duration", [D::Dur, D::Dur], D::Dur),
        g!("subtract_int64", [D::Int, D::Int], D::Int),
        g!("subtract_timestamp_duration", [D::Ts, D::Dur], D::Ts),
        g!("subtract_timestamp_timestamp", [D::Ts, D::Ts], D::Dur),
        g!("subtract_uint64", [D::Uint, D::Uint], D::Uint),
    ], single f::sub;
    "_<_" => LESS, single f::lt;
    "_<=_" => LESS_EQ, single f::le;
    "_>_" => GREATER, single f::gt;
    "_>=_" => GREATER_EQ, single f::ge;
    "_[_]" => [
        g!("index_list", [LA, D::Int], A, f::index),
        g!("index_map", [MAB, A], B, f::index),
        g!("optional_list_index_int", [D::Opt(&LA), D::Int], OPTA, f::optional_container_index),
        g!("optional_map_index_value", [D::Opt(&MAB), A], OPTB, f::optional_container_index),
    ];
    "@in" => [
        g!("in_list", [A, LA], D::Bool),
        g!("in_map", [A, MAB], D::Bool),
    ], single f::in_;
    "size" => [
        g!("size_bytes", [D::Bytes], D::Int),
        m!("bytes_size", [D::Bytes], D::Int),
        g!("size_list", [LA], D::Int),
        m!("list_size", [LA], D::Int),
        g!("size_map", [MAB], D::Int),
        m!("map_size", [MAB], D::Int),
        g!("size_string", [D::Str], D::Int),
        m!("string_size", [D::Str], D::Int),
    ], single f::size;
    "type" => [g!("type", [A], D::Ty(&A))], single f::type_of;
    "bool" => [
        g!("bool_to_bool", [D::Bool], D::Bool, f::to_bool),
        g!("string_to_bool", [D::Str], D::Bool, f::to_bool),
    ];
    "bytes" => [
        g!("bytes_to_bytes", [D::Bytes], D::Bytes, f::to_bytes),
        g!("string_to_bytes", [D::Str], D::Bytes, f::to_bytes),
    ];
    "double" => [
        g!("double_to_double", [D::Double], D::Double, f::to_double),
        g!("int64_to_double", [D::Int], D::Double, f::to_double),
        g!("string_to_double", [D::Str], D::Double, f::to_double),
        g!("uint64_to_double", [D::Uint], D::Double, f::to_double),
    ];
    "duration" => [
        g!("duration_to_duration", [D::Dur], D::Dur, f::to_duration),
        g!("int64_to_duration", [D::Int], D::Dur, f::to_duration),
        g!("string_to_duration", [D::Str], D::Dur, f::to_duration),
    ];
    "dyn" => [g!("to_dyn", [A], D::Dyn)], single f::identity;
    "int" => [
        g!("int64_to_int64", [D::Int], D::Int, f::to_int),
        g!("double_to_int64", [D::Double], D::Int, f::to_int),
        g!("duration_to_int64", [D::Dur], D::Int, f::to_int),
        g!("string_to_int64", [D::Str], D::Int, f::to_int),
        g!("timestamp_to_int64", [D::Ts], D::Int, f::to_int),
        g!("uint64_to_int64", [D::Uint], D::Int, f::to_int),
    ];
    "string" => [
        g!("string_to_string", [D::Str], D::Str, f::to_string),
        g!("bool_to_string", [D::Bool], D::Str, f::to_string),
        g!("bytes_to_string", [D::Bytes], D::Str, f::to_string),
        g!("double_to_string", [D::Double], D::Str, f::to_string),
        g!("duration_to_string", [D::Dur], D::Str, f::to_string),
        g!("int64_to_string", [D::Int], D::Str, f::to_string),
        g!("timestamp_to_string", [D::Ts], D::Str, f::to_string),
        g!("uint64_to_string", [D::Uint], D::Str, f::to_string),
        g!("ip_to_string", [IPT], D::Str, f::to_string),
        g!("cidr_to_string", [CIDRT], D::Str, f::to_string),
    ];
    "timestamp" => [
        g!("timestamp_to_timestamp", [D::Ts], D::Ts, f::to_timestamp),
        g!("int64_to_timestamp", [D::Int], D::Ts, f::to_timestamp),
        g!("string_to_timestamp", [D::Str], D::Ts, f::to_timestamp),
    ];
    "uint" => [
        g!("uint64_to_uint64", [D::Uint], D::Uint, f::to_uint),
        g!("double_to_uint64", [D::Double], D::Uint, f::to_uint),
        g!("int64_to_uint64", [D::Int], D::Uint, f::to_uint),
        g!("string_to_uint64", [D::Str], D::Uint, f::to_uint),
    ];
    "contains" => [m!("contains_string", [D::Str, D::Str], D::Bool, f::contains)];
    "endsWith" => [m!("ends_with_string", [D::Str, D::Str], D::Bool, f::ends_with)];
    "startsWith" => [m!("starts_with_string", [D::Str, D::Str], D::Bool, f::starts_with)];
    "matches" => [
        g!("matches", [D::Str, D::Str], D::Bool, f::matches),
        m!("matches_string", [D::Str, D::Str], D::Bool, f::matches),
    ];
    "getFullYear" => time_getter!("year", f::get_full_year);
    "getMonth" => time_getter!("month", f::get_month);
    "getDayOfYear" => time_getter!("day_of_year", f::get_day_of_year);
    "getDayOfMonth" => time_getter!("day_of_month", f::get_day_of_month);
    "getDate" => time_getter!("day_of_month_1_based", f::get_date);
    "getDayOfWeek" => time_getter!("day_of_week", f::get_day_of_week);
    "getHours" => [
        m!("timestamp_to_hours", [D::Ts], D::Int, f::get_hours),
        m!("timestamp_to_hours_with_tz", [D::Ts, D::Str], D::Int, f::get_hours),
        m!("duration_to_hours", [D::Dur], D::Int, f::get_hours),
    ];
    "getMinutes" => [
        m!("timestamp_to_minutes", [D::Ts], D::Int, f::get_minutes),
        m!("timestamp_to_minutes_with_tz", [D::Ts, D::Str], D::Int, f::get_minutes),
        m!("duration_to_minutes", [D::Dur], D::Int, f::get_minutes),
    ];
    "getSeconds" => [
        m!("timestamp_to_seconds", [D::Ts], D::Int, f::get_seconds),
        m!("timestamp_to_seconds_tz", [D::Ts, D::Str], D::Int, f::get_seconds),
        m!("duration_to_seconds", [D::Dur], D::Int, f::get_seconds),
    ];
    "getMilliseconds" => [
        m!("timestamp_to_milliseconds", [D::Ts], D::Int, f::get_milliseconds),
        m!("timestamp_to_milliseconds_with_tz", [D::Ts, D::Str], D::Int, f::get_milliseconds),
        m!("duration_to_milliseconds", [D::Dur], D::Int, f::get_milliseconds),
    ];

    // Optional types.
    "optional.of" => [g!("optional_of", [A], OPTA, f::optional_of)];
    "optional.ofNonZeroValue" => [g!("optional_ofNonZeroValue", [A], OPTA, f::optional_of_non_zero)];
    "optional.none" => [g!("optional_none", [], OPTA, f::optional_none)];
    "value" => [m!("optional_value", [OPTA], A, f::opt_value)];
    "hasValue" => [m!("optional_hasValue", [OPTA], D::Bool, f::opt_has_value)];
    "or" => [m!("optional_or_optional", [OPTA, OPTA], OPTA, f::opt_or)];
    "orValue" => [m!("optional_orValue_value", [OPTA, A], A, f::opt_or_value)];
    "_?._" => [g!("select_optional_field", [D::Dyn, D::Str], OPTA)];
    "_[?_]" => [
        g!("list_optindex_optional_int", [LA, D::Int], OPTA, f::opt_index),
        g!("optional_list_optindex_optional_int", [D::Opt(&LA), D::Int], OPTA, f::opt_index),
        g!("map_optindex_optional_value", [MAB, A], OPTB, f::opt_index),
        g!("optional_map_optindex_optional_value", [D::Opt(&MAB), A], OPTB, f::opt_index),
    ];
    "first" => [m!("list_first", [LA], OPTA, f::list_first)];
    "last" => [m!("list_last", [LA], OPTA, f::list_last)];
    "optional.unwrap" => [g!("optional_unwrap", [D::L(&OPTA)], LA, f::optional_unwrap)];
    "unwrapOpt" => [m!("optional_unwrapOpt", [D::L(&OPTA)], LA, f::optional_unwrap)];

    // cel-go strings extension, version 2.
    "charAt" => [m!("string_char_at_int", [D::Str, D::Int], D::Str, f::char_at)];
    "indexOf" => [
        m!("string_index_of_string", [D::Str, D::Str], D::Int, f::index_of),
        m!("string_index_of_string_int", [D::Str, D::Str, D::Int], D::Int, f::index_of),
        m!("list_a_index_of_int", [LA, A], D::Int, f::list_index_of),
    ];
    "lastIndexOf" => [
        m!("string_last_index_of_string", [D::Str, D::Str], D::Int, f::last_index_of),
        m!("string_last_index_of_string_int", [D::Str, D::Str, D::Int], D::Int, f::last_index_of),
        m!("list_a_last_index_of_int", [LA, A], D::Int, f::list_last_index_of),
    ];
    "lowerAscii" => [m!("string_lower_ascii", [D::Str], D::Str, f::lower_ascii)];
    "upperAscii" => [m!("string_upper_ascii", [D::Str], D::Str, f::upper_ascii)];
    "replace" => [
        m!("string_replace_string_string", [D::Str, D::Str, D::Str], D::Str, f::replace),
        m!("string_replace_string_string_int", [D::Str, D::Str, D::Str, D::Int], D::Str, f::replace),
    ];
    "split" => [
        m!("string_split_string", [D::Str, D::Str], LS, f::split),
        m!("string_split_string_int", [D::Str, D::Str, D::Int], LS, f::split),
    ];
    "substring" => [
        m!("string_substring_int", [D::Str, D::Int], D::Str, f::substring),
        m!("string_substring_int_int", [D::Str, D::Int, D::Int], D::Str, f::substring),
    ];
    "trim" => [m!("string_trim", [D::Str], D::Str, f::trim)];
    "join" => [
        m!("list_join", [LS], D::Str, f::join),
        m!("list_join_string", [LS, D::Str], D::Str, f::join),
    ];
    "strings.quote" => [g!("strings_quote", [D::Str], D::Str, f::quote)];
    "format" => [m!("string_format", [D::Str, LDYN], D::Str, f::string_format)];

    // cel-go lists extension, version 3 (Kubernetes 1.34); its `sortBy` macro expands to
    // `@sortByAssociatedKeys`, so the parser expands it only where that is declared.
    "slice" => [m!("list_slice", [LA, D::Int, D::Int], LA, f::slice)], since LISTS_V3;
    "flatten" => [
        m!("list_flatten", [D::L(&LA)], LA, f::flatten),
        m!("list_flatten_int", [LDYN, D::Int], LDYN, f::flatten),
    ], since LISTS_V3;
    "sort" => SORT, single f::sort, since LISTS_V3;
    "@sortByAssociatedKeys" => SORT_KEYS, single f::sort_by_associated_keys, since LISTS_V3;
    "lists.range" => [g!("lists_range", [D::Int], D::L(&D::Int), f::lists_range)], since LISTS_V3;
    "reverse" => [m!("list_reverse", [LA], LA, f::reverse)], since LISTS_V3;
    "distinct" => [m!("list_distinct", [LA], LA, f::distinct)], since LISTS_V3;

    // DRA's `includes` (1.36): membership in a list attribute, or equality with a scalar.
    "includes" => [m!("dra_includes_dyn_dyn", [D::Dyn, D::Dyn], D::Bool, f::includes)],
        since DRA_INCLUDES;

    // cel-go sets extension.
    "sets.contains" => [g!("list_sets_contains_list", [LA, LA], D::Bool, f::sets_contains)];
    "sets.equivalent" => [g!("list_sets_equivalent_list", [LA, LA], D::Bool, f::sets_equivalent)];
    "sets.intersects" => [g!("list_sets_intersects_list", [LA, LA], D::Bool, f::sets_intersects)];

    // cel-go two-variable comprehensions: the map insertion their macros expand to.
    "cel.@mapInsert" => [
        g!("@mapInsert_map_key_value", [MAB, A, B], MAB, f::map_insert),
        g!("@mapInsert_map_map", [MAB, MAB], MAB, f::map_insert),
    ];

    // Kubernetes lists library.
    "isSorted" => IS_SORTED, single f::is_sorted;
    "sum" => [
        m!("list_int_sum_int", [D::L(&D::Int)], D::Int),
        m!("list_uint_sum_uint", [D::L(&D::Uint)], D::Uint),
        m!("list_double_sum_double", [D::L(&D::Double)], D::Double),
        m!("list_duration_sum_duration", [D::L(&D::Dur)], D::Dur),
    ], single f::sum;
    "min" => MIN, single f::min;
    "max" => MAX, single f::max;

    // Kubernetes regex library.
    "find" => [m!("string_find_string", [D::Str, D::Str], D::Str, f::find)];
    "findAll" => [
        m!("string_find_all_string", [D::Str, D::Str], LS, f::find_all),
        m!("string_find_all_string_int", [D::Str, D::Str, D::Int], LS, f::find_all),
    ];

    // Kubernetes URL library.
    "url" => [g!("string_to_url", [D::Str], URLT, f::url)];
    "isURL" => [g!("is_url_string", [D::Str], D::Bool, f::is_url)];
    "getScheme" => [m!("url_get_scheme", [URLT], D::Str, f::url_scheme)];
    "getHost" => [m!("url_get_host", [URLT], D::Str, f::url_host)];
    "getHostname" => [m!("url_get_hostname", [URLT], D::Str, f::url_hostname)];
    "getPort" => [m!("url_get_port", [URLT], D::Str, f::url_port)];
    "getEscapedPath" => [m!("url_get_escaped_path", [URLT], D::Str, f::url_escaped_path)];
    "getQuery" => [m!("url_get_query", [URLT], D::M(&D::Str, &LS), f::url_query)];

    // Kubernetes quantity library.
    "quantity" => [g!("string_to_quantity", [D::Str], Q, f::quantity)];
    "isQuantity" => [g!("is_quantity_string", [D::Str], D::Bool, f::is_quantity)];
    "sign" => [g!("quantity_sign", [Q], D::Int, f::quantity_sign)];
    "isGreaterThan" => [
        m!("quantity_is_greater_than", [Q, Q], D::Bool, f::quantity_is_greater_than),
        m!("semver_is_greater_than", [SV, SV], D::Bool, f::semver_is_greater_than),
    ];
    "isLessThan" => [
        m!("quantity_is_less_than", [Q, Q], D::Bool, f::quantity_is_less_than),
        m!("semver_is_less_than", [SV, SV], D::Bool, f::semver_is_less_than),
    ];
    "compareTo" => [
        m!("quantity_compare_to", [Q, Q], D::Int, f::quantity_compare_to),
        m!("semver_compare_to", [SV, SV], D::Int, f::semver_compare_to),
    ];
    "asApproximateFloat" => [m!("quantity_get_float", [Q], D::Double, f::quantity_as_float)];
    "asInteger" => [m!("quantity_get_int", [Q], D::Int, f::quantity_as_integer)];
    "isInteger" => [m!("quantity_is_integer", [Q], D::Bool, f::quantity_is_integer)];
    "add" => [
        m!("quantity_add", [Q, Q], Q, f::quantity_add),
        m!("quantity_add_int", [Q, D::Int], Q, f::quantity_add),
    ];
    "sub" => [
        m!("quantity_sub", [Q, Q], Q, f::quantity_sub),
        m!("quantity_sub_int", [Q, D::Int], Q, f::quantity_sub),
    ];

    // Kubernetes semver library, version 1.
    "semver" => [
        g!("string_to_semver", [D::Str], SV, f::semver),
        g!("string_bool_to_semver", [D::Str, D::Bool], SV, f::semver),
    ];
    "isSemver" => [
        g!("is_semver_string", [D::Str], D::Bool, f::is_semver),
        g!("is_semver_string_bool", [D::Str, D::Bool], D::Bool, f::is_semver),
    ];
    "major" => [m!("semver_major", [SV], D::Int, f::semver_major)];
    "minor" => [m!("semver_minor", [SV], D::Int, f::semver_minor)];
    "patch" => [m!("semver_patch", [SV], D::Int, f::semver_patch)];

    // Kubernetes IP and CIDR libraries.
    "ip" => [
        g!("string_to_ip", [D::Str], IPT, f::ip),
        m!("cidr_ip", [CIDRT], IPT, f::cidr_ip),
    ];
    "family" => [m!("ip_family", [IPT], D::Int, f::ip_family)];
    "ip.isCanonical" => [g!("ip_is_canonical", [D::Str], D::Bool, f::ip_is_canonical)];
    "isUnspecified" => [m!("ip_is_unspecified", [IPT], D::Bool, f::ip_is_unspecified)];
    "isLoopback" => [m!("ip_is_loopback", [IPT], D::Bool, f::ip_is_loopback)];
    "isLinkLocalMulticast" => [m!("ip_is_link_local_multicast", [IPT], D::Bool, f::ip_is_link_local_multicast)];
    "isLinkLocalUnicast" => [m!("ip_is_link_local_unicast", [IPT], D::Bool, f::ip_is_link_local_unicast)];
    "isGlobalUnicast" => [m!("ip_is_global_unicast", [IPT], D::Bool, f::ip_is_global_unicast)];
    "isIP" => [g!("is_ip", [D::Str], D::Bool, f::is_ip)];
    "cidr" => [g!("string_to_cidr", [D::Str], CIDRT, f::cidr)];
    "containsIP" => [
        m!("cidr_contains_ip_string", [CIDRT, D::Str], D::Bool, f::cidr_contains_ip),
        m!("cidr_contains_ip_ip", [CIDRT, IPT], D::Bool, f::cidr_contains_ip),
    ];
    "containsCIDR" => [
        m!("cidr_contains_cidr_string", [CIDRT, D::Str], D::Bool, f::cidr_contains_cidr),
        m!("cidr_contains_cidr", [CIDRT, CIDRT], D::Bool, f::cidr_contains_cidr),
    ];
    "prefixLength" => [m!("cidr_prefix_length", [CIDRT], D::Int, f::cidr_prefix_length)];
    "masked" => [m!("cidr_masked", [CIDRT], CIDRT, f::cidr_masked)];
    "isCIDR" => [g!("is_cidr", [D::Str], D::Bool, f::is_cidr)];

    // Kubernetes format library.
    "validate" => [m!("format-validate", [FMT, D::Str], D::Opt(&LS), f::format_validate)];
    "format.named" => [g!("format-named", [D::Str], D::Opt(&FMT), f::format_named)];
    "format.dns1123Label" => [g!("format.dns1123Label", [], FMT, f::format_dns1123Label)];
    "format.dns1123Subdomain" => [g!("format.dns1123Subdomain", [], FMT, f::format_dns1123Subdomain)];
    "format.dns1035Label" => [g!("format.dns1035Label", [], FMT, f::format_dns1035Label)];
    "format.qualifiedName" => [g!("format.qualifiedName", [], FMT, f::format_qualifiedName)];
    "format.dns1123LabelPrefix" => [g!("format.dns1123LabelPrefix", [], FMT, f::format_dns1123LabelPrefix)];
    "format.dns1123SubdomainPrefix" => [g!("format.dns1123SubdomainPrefix", [], FMT, f::format_dns1123SubdomainPrefix)];
    "format.dns1035LabelPrefix" => [g!("format.dns1035LabelPrefix", [], FMT, f::format_dns1035LabelPrefix)];
    "format.labelValue" => [g!("format.labelValue", [], FMT, f::format_labelValue)];
    "format.uri" => [g!("format.uri", [], FMT, f::format_uri)];
    "format.uuid" => [g!("format.uuid", [], FMT, f::format_uuid)];
    "format.byte" => [g!("format.byte", [], FMT, f::format_byte)];
    "format.date" => [g!("format.date", [], FMT, f::format_date)];
    "format.datetime" => [g!("format.datetime", [], FMT, f::format_datetime)];
}

/// Type identifiers: a type name used as a value (`int`, `google.protobuf.Duration`).
pub(crate) fn type_ident(name: &str) -> Option<Type> {
    let t = match name {
        "bool" => Type::Bool,
        "bytes" => Type::Bytes,
        "double" => Type::Double,
        "google.protobuf.Duration" => Type::Duration,
        "int" => Type::Int,
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        "null_type" => Type::Null,
        "string" => Type::String,
        "google.protobuf.Timestamp" => Type::Timestamp,
        "type" => Type::Type(None),
        "uint" => Type::Uint,
        "optional_type" => Type::optional(Type::Dyn),
        // Not `kubernetes.Quantity` or `kubernetes.Semver`: the scheduler does not declare
        // those names as identifiers.
        t::IP | t::CIDR | t::URL | t::FORMAT => Type::Object(match name {
            t::IP => t::IP,
            t::CIDR => t::CIDR,
            t::URL => t::URL,
            _ => t::FORMAT,
        }),
        _ => return None,
    };
    Some(Type::type_of(t))
}
