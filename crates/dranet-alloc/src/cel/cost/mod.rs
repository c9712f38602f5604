//! The API server's compile-time cost estimate of a selector: the worst-case cost it computes
//! when a ResourceClaim, ResourceClaimTemplate or DeviceClass is created, and refuses the object
//! ("too complex, exceeds cost limit") when that worst case exceeds [`MAX_SELECTOR_COST`].
//!
//! Three estimators of Kubernetes 1.34 stacked as the API server stacks them, reimplemented from
//! their published rules:
//!
//! - cel-go v0.26's checker estimate: a cost per node kind (identifiers and field selections 1,
//!   literals 0, list literals 10, map literals 30, a comprehension its range size times its loop
//!   body), sizes propagated through literals, concatenations, conditionals and comprehensions,
//!   and per-overload costs of the standard functions; `has()` costs nothing (the Kubernetes base
//!   environment turns the presence-test cost off); the lists and sets extensions bring their own
//!   estimates.
//! - the Kubernetes library estimator: costs of the strings, regex, URL, IP/CIDR, quantity,
//!   semver, format and lists libraries, looked up by function name.
//! - the DRA size estimator: what is known about `device`: `driver` has at most 63 characters,
//!   `attributes` and `capacity` have at most 32 domains of at most 32 entries, domains have at
//!   most 63 characters, names 32, and an attribute value at most 64 (a string's length).
//!
//! cel-go tracks where a value comes from as a path of names (`device`, `attributes`,
//! `@values`, ...) built with Go's `append`, which shares the backing array between two paths
//! appended to the same parent when it has spare capacity. A two-variable comprehension over
//! `device.attributes["d"]` therefore gives its key variable the path of the value variable, and
//! the API server sizes that key like an attribute value (64) rather than a name (32). [`Path`]
//! keeps Go's sharing so the estimate agrees with the API server's, quirks included.

mod functions;
mod paths;

use paths::{Path, Paths};

use super::ast::{ACCU, Comprehension, Expr, Id, Kind, Lit};
use super::check::Ref;
use super::types::{self as t, Type};

/// The API server's limit on a selector's estimated cost
/// (`resource.k8s.io` `CELSelectorExpressionMaxCost`).
pub const MAX_SELECTOR_COST: u64 = 1_000_000;

/// Longest driver name (`DriverNameMaxLength`).
const DRIVER_NAME_MAX: u64 = 63;
/// Most attributes and capacities a device has (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`),
/// which also bounds the number of domains.
const ATTRIBUTES_MAX: u64 = 32;
/// Longest domain of a qualified name (`DeviceMaxDomainLength`).
const DOMAIN_MAX: u64 = 63;
/// Longest attribute or capacity name (`DeviceMaxIDLength`).
const ID_MAX: u64 = 32;
/// Longest attribute value (`DeviceAttributeMaxValueLength`).
const ATTRIBUTE_VALUE_MAX: u64 = 64;

/// Cost of reading an identifier or selecting a field.
const SELECT_COST: u64 = 1;
/// Base cost of a list literal.
const LIST_CREATE_COST: u64 = 10;
/// Base cost of a map literal.
const MAP_CREATE_COST: u64 = 30;
/// Base cost of a message literal.
const STRUCT_CREATE_COST: u64 = 40;
/// Cost per character of traversing a string.
const STRING_TRAVERSAL: f64 = 0.1;
/// Cost per character of a regular expression, per unit of the matched string.
const REGEX_LENGTH: f64 = 0.25;
/// Longest regular expression of a named format (`MaxNameFormatRegexSize`).
const FORMAT_REGEX_MAX: f64 = 128.0;
/// Longest format name (`MaxFormatSize`).
const FORMAT_NAME_MAX: u64 = 64;

/// The estimated cost of evaluating a selector on one device, in CEL cost units: the least and
/// the most evaluation can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostEstimate {
    /// The cheapest evaluation.
    pub min: u64,
    /// The worst case: what the API server compares with [`MAX_SELECTOR_COST`].
    pub max: u64,
}

// The arithmetic of estimates and sizes is `#[inline]`: the call costs in `functions` use it
// from another module, where it would otherwise not be inlined (callgrind: ~0.5% of a compile).
/// An estimate and a size are both `min..=max` intervals, which add, multiply (saturating) and
/// join alike.
macro_rules! interval_arithmetic {
    ($t:ident) => {
        impl $t {
            #[inline]
            fn fixed(v: u64) -> $t {
                $t { min: v, max: v }
            }
            #[inline]
            fn add(self, o: $t) -> $t {
                $t {
                    min: self.min.saturating_add(o.min),
                    max: self.max.saturating_add(o.max),
                }
            }
            #[inline]
            fn mul(self, o: $t) -> $t {
                $t {
                    min: self.min.saturating_mul(o.min),
                    max: self.max.saturating_mul(o.max),
                }
            }
            #[inline]
            fn union(self, o: $t) -> $t {
                $t {
                    min: self.min.min(o.min),
                    max: self.max.max(o.max),
                }
            }
        }
    };
}

interval_arithmetic!(CostEstimate);

impl CostEstimate {
    #[inline]
    fn factor(self, f: f64) -> CostEstimate {
        CostEstimate {
            min: mul_factor(self.min, f),
            max: mul_factor(self.max, f),
        }
    }
}

/// The size of a string (characters), bytes, list or map a node can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    min: u64,
    max: u64,
}

const UNKNOWN: Size = Size {
    min: 0,
    max: u64::MAX,
};

interval_arithmetic!(Size);

impl Size {
    #[inline]
    fn up_to(max: u64) -> Size {
        Size { min: 0, max }
    }
    /// The cost of handling each unit at `f` (rounded up).
    #[inline]
    fn factor(self, f: f64) -> CostEstimate {
        CostEstimate {
            min: mul_factor(self.min, f),
            max: mul_factor(self.max, f),
        }
    }
    /// The cost of doing `c` once per unit.
    #[inline]
    fn times(self, c: CostEstimate) -> CostEstimate {
        CostEstimate {
            min: self.min.saturating_mul(c.min),
            max: self.max.saturating_mul(c.max),
        }
    }
    #[inline]
    fn as_cost(self) -> CostEstimate {
        CostEstimate {
            min: self.min,
            max: self.max,
        }
    }
}

/// `x * f` rounded up, saturating at `u64::MAX` (cel-go's float arithmetic, bit for bit).
#[inline]
fn mul_factor(x: u64, f: f64) -> u64 {
    const TWO_TO_64: f64 = 18_446_744_073_709_551_616.0;
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > TWO_TO_64 / f {
        return u64::MAX;
    }
    let c = (xf * f).ceil();
    if c >= TWO_TO_64 { u64::MAX } else { c as u64 }
}

/// Whether a container's entries are list items or map entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    List,
    Map,
}

/// The sizes of a container's keys (indexes) and values, when both are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntrySize {
    container: Container,
    key: Size,
    val: Size,
}

fn union_entries(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
    let (a, b) = (a?, b?);
    Some(EntrySize {
        container: a.container,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

/// A call's argument or receiver as the function estimators see it.
struct Node<'a> {
    expr: &'a Expr,
    ty: Option<&'a Type>,
    size: Option<Size>,
    /// The DRA size estimate of the node's path.
    declared: Option<Size>,
    /// The DRA size estimate of the node's items, when the node has a path.
    items_declared: Option<Size>,
}

/// A call's estimate: its own cost (arguments included) and, when known, its result's size.
struct CallEstimate {
    cost: CostEstimate,
    result: Option<Size>,
}

impl CallEstimate {
    #[inline]
    fn cost(cost: CostEstimate) -> Option<CallEstimate> {
        Some(CallEstimate { cost, result: None })
    }
    #[inline]
    fn sized(cost: CostEstimate, result: Size) -> Option<CallEstimate> {
        Some(CallEstimate {
            cost,
            result: Some(result),
        })
    }
}

/// A comprehension or `cel.bind` variable in scope.
#[derive(Debug, Clone)]
struct LocalVar<'a> {
    name: &'a str,
    path: Path,
    size: Option<Size>,
    entry: Option<EntrySize>,
}

struct Coster<'a> {
    types: &'a [Type],
    refs: &'a [Ref],
    paths: Vec<Path>,
    arena: Paths<'a>,
    sizes: Vec<Option<Size>>,
    entries: Vec<Option<EntrySize>>,
    vars: Vec<LocalVar<'a>>,
}

/// The API server's worst-case cost estimate of a checked expression; `types` and `refs` are the
/// checker's tables, indexed by node id.
pub(crate) fn estimate<'a>(e: &'a Expr, types: &'a [Type], refs: &'a [Ref]) -> CostEstimate {
    let n = types.len();
    let mut c = Coster {
        types,
        refs,
        paths: vec![Path::default(); n],
        arena: Paths::default(),
        sizes: vec![None; n],
        entries: vec![None; n],
        vars: Vec::new(),
    };
    c.cost(e)
}

/// The overload ids the checker resolved for a call.
fn overload_ids(r: Option<&Ref>) -> impl Iterator<Item = &'static str> + '_ {
    let (f, ovs) = match r {
        Some(Ref::Func(f, ovs)) => (Some(*f), ovs.as_slice()),
        _ => (None, &[][..]),
    };
    ovs.iter()
        .filter_map(move |i| f?.ovs.get(usize::from(*i)).map(|o| o.id))
}

fn container_of(t: &Type) -> Option<Container> {
    match t {
        Type::List(_) => Some(Container::List),
        Type::Map(..) => Some(Container::Map),
        _ => None,
    }
}

/// Types whose values all have size 1.
fn is_scalar(t: &Type) -> bool {
    match t {
        Type::Bool | Type::Double | Type::Duration | Type::Int | Type::Timestamp | Type::Uint => {
            true
        }
        Type::Opaque(t::OPTIONAL, p) => p.first().is_some_and(is_scalar),
        _ => false,
    }
}

/// The size of a literal or aggregate literal, known from the expression alone.
fn literal_size(e: &Expr) -> Option<Size> {
    Some(Size::fixed(match &e.kind {
        Kind::Lit(Lit::String(s)) => s.chars().count() as u64,
        Kind::Lit(Lit::Bytes(b)) => b.len() as u64,
        Kind::Lit(_) => 1,
        Kind::List { elems, .. } => elems.len() as u64,
        Kind::Map { entries } => entries.len() as u64,
        _ => return None,
    }))
}

/// An integer literal argument as the lists extension reads it: negative is 0, anything but an
/// integer literal is `default`.
fn int_literal(n: &Node<'_>, default: u64) -> u64 {
    match n.expr.kind {
        Kind::Lit(Lit::Int(v)) => u64::try_from(v).unwrap_or(0),
        _ => default,
    }
}

impl<'a> Coster<'a> {
    fn ty(&self, id: Id) -> Option<&'a Type> {
        self.types.get(id as usize)
    }

    fn var(&self, name: &str) -> Option<&LocalVar<'a>> {
        self.vars.iter().rev().find(|v| v.name == name)
    }

    fn pop_var(&mut self, name: &str) {
        if let Some(i) = self.vars.iter().rposition(|v| v.name == name) {
            self.vars.remove(i);
        }
    }

    fn path(&self, e: &Expr) -> Path {
        if let Kind::Ident(n) = &e.kind
            && let Some(v) = self.var(n)
        {
            return v.path;
        }
        self.paths.get(e.id as usize).copied().unwrap_or_default()
    }

    fn set_path(&mut self, e: &Expr, p: Path) {
        if let Some(slot) = self.paths.get_mut(e.id as usize) {
            *slot = p;
        }
    }

    fn set_size(&mut self, e: &Expr, s: Option<Size>) {
        if let (Some(s), Some(slot)) = (s, self.sizes.get_mut(e.id as usize)) {
            *slot = Some(s);
        }
    }

    fn set_entry(&mut self, e: &Expr, s: Option<EntrySize>) {
        if let (Some(s), Some(slot)) = (s, self.entries.get_mut(e.id as usize)) {
            *slot = Some(s);
        }
    }

    fn size(&mut self, e: &Expr) -> Option<Size> {
        if let Some(s) = self.sizes.get(e.id as usize).copied().flatten() {
            return Some(s);
        }
        if let Some(s) = literal_size(e) {
            return Some(s);
        }
        if let Some(s) = self.arena.declared(self.path(e), None) {
            self.set_size(e, Some(s));
            return Some(s);
        }
        if self.ty(e.id).is_some_and(is_scalar) {
            return Some(Size::fixed(1));
        }
        if let Kind::Ident(n) = &e.kind {
            return self.var(n).and_then(|v| v.size);
        }
        None
    }

    fn size_or_unknown(&mut self, e: &Expr) -> Size {
        self.size(e).unwrap_or(UNKNOWN)
    }

    fn entry(&self, e: &Expr) -> Option<EntrySize> {
        if let Some(s) = self.entries.get(e.id as usize).copied().flatten() {
            return Some(s);
        }
        if let Kind::Ident(n) = &e.kind {
            return self.var(n).and_then(|v| v.entry);
        }
        None
    }

    fn node(&mut self, e: &'a Expr) -> Node<'a> {
        let path = self.path(e);
        let names = self.arena.get(path);
        // Paths rooted at a macro's accumulator are not given to the estimators.
        let hidden = names
            .first()
            .is_some_and(|f| *f == ACCU || *f == "__result__");
        let (declared, items_declared) = if hidden || names.is_empty() {
            (None, None)
        } else {
            (
                self.arena.declared(path, None),
                self.arena.declared(path, Some("@items")),
            )
        };
        Node {
            expr: e,
            ty: self.ty(e.id),
            size: self.size(e),
            declared,
            items_declared,
        }
    }

    fn cost(&mut self, e: &'a Expr) -> CostEstimate {
        super::stack::with_stack(|| self.cost_node(e))
    }

    fn cost_node(&mut self, e: &'a Expr) -> CostEstimate {
        match &e.kind {
            Kind::Lit(_) => CostEstimate::fixed(0),
            Kind::Ident(name) => {
                let p = match self.var(name) {
                    Some(v) => v.path,
                    None => self.arena.root(name),
                };
                self.set_path(e, p);
                CostEstimate::fixed(SELECT_COST)
            }
            Kind::Select {
                operand,
                field,
                test_only,
            } => {
                // `has()` costs its operand only: the Kubernetes environment gives the presence
                // test itself no cost.
                if *test_only {
                    return self.cost(operand);
                }
                let mut sum = self.cost(operand);
                if matches!(
                    self.ty(operand.id),
                    Some(Type::Map(..) | Type::Object(_) | Type::Param(_))
                ) {
                    sum = sum.add(CostEstimate::fixed(SELECT_COST));
                }
                let p = self.arena.append(self.path(operand), field);
                self.set_path(e, p);
                sum
            }
            Kind::Call { target, func, args } => self.cost_call(e, target.as_deref(), func, args),
            Kind::List { elems, .. } => {
                let mut sum = CostEstimate::fixed(0);
                let mut item = if elems.is_empty() {
                    Size::fixed(0)
                } else {
                    Size {
                        min: u64::MAX,
                        max: 0,
                    }
                };
                for x in elems {
                    sum = sum.add(self.cost(x));
                    item = item.union(self.size_or_unknown(x));
                }
                self.set_entry(
                    e,
                    Some(EntrySize {
                        container: Container::List,
                        key: Size::fixed(1),
                        val: item,
                    }),
                );
                sum.add(CostEstimate::fixed(LIST_CREATE_COST))
            }
            Kind::Map { entries } => {
                let mut sum = CostEstimate::fixed(0);
                let empty = Size {
                    min: if entries.is_empty() { 0 } else { u64::MAX },
                    max: 0,
                };
                let (mut key, mut val) = (empty, empty);
                for en in entries {
                    sum = sum.add(self.cost(&en.key));
                    sum = sum.add(self.cost(&en.value));
                    key = key.union(self.size_or_unknown(&en.key));
                    val = val.union(self.size_or_unknown(&en.value));
                }
                self.set_entry(
                    e,
                    Some(EntrySize {
                        container: Container::Map,
                        key,
                        val,
                    }),
                );
                sum.add(CostEstimate::fixed(MAP_CREATE_COST))
            }
            Kind::Struct { fields, .. } => {
                let mut sum = CostEstimate::fixed(0);
                for (_, _, v, _) in fields {
                    sum = sum.add(self.cost(v));
                }
                sum.add(CostEstimate::fixed(STRUCT_CREATE_COST))
            }
            Kind::Comprehension(c) => {
                if is_bind(c) {
                    self.cost_bind(e, c)
                } else {
                    self.cost_comprehension(e, c)
                }
            }
        }
    }

    // Always inlined into `cost_node`, as it was when the call costs were in this file: split
    // into their own module, the compiler kept it apart and a compile with the cost estimate
    // took 3-4% more instructions (callgrind).
    #[inline(always)]
    fn cost_call(
        &mut self,
        e: &'a Expr,
        target: Option<&'a Expr>,
        func: &str,
        args: &'a [Expr],
    ) -> CostEstimate {
        // `dyn()` only turns type checking off: its argument's cost plus one.
        if func == "dyn"
            && let [arg] = args
        {
            let c = self.cost(arg);
            let s = self.size(arg);
            self.set_size(e, s);
            let en = self.entry(arg);
            self.set_entry(e, en);
            return CostEstimate::fixed(1).add(c);
        }
        let mut arg_costs = Vec::with_capacity(args.len());
        let mut nodes = Vec::with_capacity(args.len());
        for a in args {
            arg_costs.push(self.cost(a));
            nodes.push(self.node(a));
        }
        let refs = self.refs;
        let mut ids = overload_ids(refs.get(e.id as usize)).peekable();
        if ids.peek().is_none() {
            return CostEstimate::fixed(0);
        }
        let mut sum = CostEstimate::fixed(0);
        let target_node = match target {
            Some(t) => {
                sum = sum.add(self.cost(t));
                Some(self.node(t))
            }
            None => None,
        };
        let mut fn_cost = CostEstimate {
            min: u64::MAX,
            max: 0,
        };
        let mut result: Option<Size> = None;
        for id in ids {
            let est = self.function_cost(e, func, id, target_node.as_ref(), &nodes, &arg_costs);
            fn_cost = fn_cost.union(est.cost);
            if let Some(r) = est.result {
                result = Some(match result {
                    None => r,
                    Some(prev) => prev.union(r),
                });
            }
            let index = match id {
                "index_list" => Some("@items"),
                "index_map" => Some("@values"),
                _ => None,
            };
            if let (Some(sub), Some(container)) = (index, args.first()) {
                result = self.entry(container).map(|en| en.val);
                let p = self.arena.append(self.path(container), sub);
                self.set_path(e, p);
            }
            if result.is_none() {
                result = self.size(e);
            }
        }
        self.set_size(e, result);
        sum.add(fn_cost)
    }

    fn push_local(&mut self, name: &'a str, e: &'a Expr) {
        let path = self.path(e);
        let entry = self.entry(e);
        let size = self.size(e);
        self.vars.push(LocalVar {
            name,
            path,
            size,
            entry,
        });
    }

    /// The container kind of a comprehension's range: from its literal, else from its type.
    fn range_container(&self, range: &Expr, entry: Option<EntrySize>) -> Option<Container> {
        entry
            .map(|en| en.container)
            .or_else(|| self.ty(range.id).and_then(container_of))
    }

    /// An iteration variable: `key` for the first of two (index or key), `value` for the second,
    /// `single` for the one variable of a classic comprehension.
    fn push_iter(&mut self, name: &'a str, range: &'a Expr, role: IterRole) {
        let entry = self.entry(range);
        let list = self.range_container(range, entry) == Some(Container::List);
        let (size, sub) = match (role, list) {
            (IterRole::Key, false) | (IterRole::Single, false) => (entry.map(|x| x.key), "@keys"),
            (IterRole::Key, true) => (entry.map(|x| x.key), "@indices"),
            (IterRole::Value, false) => (entry.map(|x| x.val), "@values"),
            (IterRole::Value, true) | (IterRole::Single, true) => (entry.map(|x| x.val), "@items"),
        };
        let path = self.arena.append(self.path(range), sub);
        self.vars.push(LocalVar {
            name,
            path,
            size,
            entry: None,
        });
    }

    fn cost_comprehension(&mut self, e: &'a Expr, c: &'a Comprehension) -> CostEstimate {
        let mut sum = self.cost(&c.range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local(&c.accu_var, &c.accu_init);
        match &c.iter_var2 {
            Some(v2) => {
                self.push_iter(&c.iter_var, &c.range, IterRole::Key);
                self.push_iter(v2, &c.range, IterRole::Value);
            }
            None => self.push_iter(&c.iter_var, &c.range, IterRole::Single),
        }
        let loop_cost = self.cost(&c.cond);
        let step_cost = self.cost(&c.step);
        self.pop_var(&c.iter_var);
        if let Some(v2) = &c.iter_var2 {
            self.pop_var(v2);
        }
        sum = sum.add(self.cost(&c.result));
        self.pop_var(&c.accu_var);
        let count = self.size_or_unknown(&c.range);
        sum = sum.add(count.times(step_cost.add(loop_cost)));
        match &c.accu_init.kind {
            Kind::Lit(_) => {
                let s = self.size(&c.accu_init);
                self.set_size(e, s);
            }
            Kind::List { .. } | Kind::Map { .. } => {
                self.set_size(e, Some(count));
                let en = self.entry(&c.step);
                self.set_entry(e, en);
            }
            _ => {}
        }
        sum
    }

    fn cost_bind(&mut self, e: &'a Expr, c: &'a Comprehension) -> CostEstimate {
        // The empty range is still built: its cost counts.
        let mut sum = self.cost(&c.range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local(&c.accu_var, &c.accu_init);
        sum = sum.add(self.cost(&c.result));
        self.pop_var(&c.accu_var);
        let s = self.size(&c.result);
        self.set_size(e, s);
        let en = self.entry(&c.result);
        self.set_entry(e, en);
        sum
    }
}

#[derive(Debug, Clone, Copy)]
enum IterRole {
    Single,
    Key,
    Value,
}

/// `cel.bind`: a comprehension over an empty list literal that never loops, whose accumulator is
/// the bound variable.
fn is_bind(c: &Comprehension) -> bool {
    matches!(&c.range.kind, Kind::List { elems, .. } if elems.is_empty())
        && matches!(c.cond.kind, Kind::Lit(Lit::Bool(false)))
        && c.accu_var != "__result__"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{CelError, Program};

    fn max_cost(src: &str) -> u64 {
        match Program::compile(src) {
            Ok(p) => match p.estimated_cost() {
                Some(c) => c.max,
                None => panic!("{src}: compile gave no estimate"),
            },
            Err(CelError::TooComplex { estimated, .. }) => estimated,
            Err(e) => panic!("{src}: {e}"),
        }
    }

    #[test]
    fn hand_computed_estimates() {
        // ident 1 + select on the object 1 + equality of a ≤63-char string with a 7-char one:
        // ceil(min(63, 7) × 0.1) = 1.
        assert_eq!(max_cost(r#"device.driver == "dra.net""#), 3);
        // device 1, .attributes 1, ["dra.net"] 1, .mtu on a map 1, > 1.
        assert_eq!(max_cost(r#"device.attributes["dra.net"].mtu > 1000"#), 5);
        // has() costs its operand only (3) and the select adds nothing.
        assert_eq!(max_cost(r#"has(device.attributes["dra.net"].mtu)"#), 3);
        // A list literal is 10; `in` costs the list's size, 3: "a" 0 + [..] 10 + in 3 = 13.
        assert_eq!(max_cost(r#""a" in ["a", "b", "c"]"#), 13);
        // all() over 32 domains: range 2, init 0, result 1, per domain: cond 2 + step
        // (1 + body: k.startsWith("a") = 1 + 1 = 2) = 5 → 2 + 1 + 32 × 5 = 163.
        assert_eq!(
            max_cost(r#"device.attributes.all(k, k.startsWith("a"))"#),
            163
        );
        // cel.bind builds its empty range (10), then the bound value and the result.
        assert_eq!(max_cost("cel.bind(x, 1, x == 1)"), 12);
        // String concatenation: size 64 + 1, traversed at 0.1: ceil(6.5) = 7; then the
        // equality of a ≤65-char string with a 1-char one is 1. 4 + 7 + 1 = 12.
        assert_eq!(
            max_cost(r#"device.attributes["dra.net"].ifName + "x" == "y""#),
            12
        );
    }

    #[test]
    fn the_error_says_what_the_api_server_does_and_the_numbers() {
        let bounded = "[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, \
                       [0,1,2,3,4,5,6,7,8,9].all(c, [0,1,2,3,4,5,6,7,8,9].all(d, \
                       [0,1,2,3,4,5,6,7,8,9].all(e, a + b + c + d + e > 0)))))";
        let Err(e @ CelError::TooComplex { estimated, .. }) = Program::compile(bounded) else {
            panic!("{bounded} compiled");
        };
        let msg = e.to_string();
        assert!(
            msg.contains("API server") && msg.contains("1000000"),
            "{msg}"
        );
        assert!(msg.contains(&format!("is {estimated}")), "{msg}");
        let unbounded = r#"device.driver.split(".").join("-") == "dra-net""#;
        let Err(e) = Program::compile(unbounded) else {
            panic!("{unbounded} compiled");
        };
        assert!(e.to_string().contains("has no bound"), "{e}");
    }

    #[test]
    fn quantity_inequality_is_unbounded_but_equality_is_not() {
        // The Kubernetes estimator prices `==` of quantities at 1, but `!=` falls back to
        // cel-go's size-based equality, and a quantity has no known size.
        assert_eq!(max_cost(r#"quantity("1") == quantity("2")"#), 3);
        assert!(max_cost(r#"quantity("1") != quantity("2")"#) > MAX_SELECTOR_COST);
    }

    #[test]
    fn compile_refuses_over_the_limit_and_the_scheduler_does_not() {
        let src = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, \
                   [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, \
                   [1,2,3,4,5,6,7,8,9,10].all(e, a + b + c + d + e > 0)))))";
        match Program::compile(src) {
            Err(CelError::TooComplex { estimated, limit }) => {
                assert!(estimated > limit);
                assert_eq!(limit, MAX_SELECTOR_COST);
            }
            other => panic!("expected TooComplex, got {other:?}"),
        }
        assert!(Program::compile_for_scheduler(src).is_ok());
    }
}
