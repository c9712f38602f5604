//! The cost of a call: cel-go's standard overloads, its lists and sets extensions, and the
//! Kubernetes libraries' estimators.

use super::{
    CallEstimate, CostEstimate, Coster, FORMAT_NAME_MAX, FORMAT_REGEX_MAX, LIST_CREATE_COST, Node,
    REGEX_LENGTH, STRING_TRAVERSAL, Size, UNKNOWN, int_literal, union_entries,
};
use crate::cel::ast::{Expr, Kind, Lit};
use crate::cel::types::{self as t, Type};

impl Coster<'_> {
    /// A node's size for the library estimators: computed, else declared, else unknown.
    #[inline]
    fn library_size(n: &Node<'_>) -> Size {
        n.size.or(n.declared).unwrap_or(UNKNOWN)
    }

    pub(super) fn function_cost(
        &mut self,
        e: &Expr,
        func: &str,
        overload: &str,
        target: Option<&Node<'_>>,
        args: &[Node<'_>],
        arg_costs: &[CostEstimate],
    ) -> CallEstimate {
        let arg_sum = arg_costs
            .iter()
            .fold(CostEstimate::fixed(0), |s, c| s.add(*c));
        let with_args = |est: CallEstimate| CallEstimate {
            cost: est.cost.add(arg_sum),
            result: est.result,
        };
        if let Some(est) = extension_cost(overload, target, args) {
            return with_args(est);
        }
        if let Some(est) = kubernetes_cost(func, overload, target, args) {
            return with_args(est);
        }
        let size = |n: &Node<'_>| n.size.unwrap_or(UNKNOWN);
        match overload {
            "string_format" => {
                if let Some(t) = target {
                    return with_args(CallEstimate {
                        cost: size(t).factor(STRING_TRAVERSAL),
                        result: None,
                    });
                }
            }
            "string_to_bytes" | "bytes_to_string" | "strings_quote" => {
                if let [a] = args {
                    let sz = size(a);
                    // Go's unsigned arithmetic wraps.
                    let result = match overload {
                        "string_to_bytes" => Size {
                            min: sz.min,
                            max: sz.max.wrapping_mul(4),
                        },
                        "bytes_to_string" => Size {
                            min: sz.min / 4,
                            max: sz.max,
                        },
                        _ => Size {
                            min: sz.min.wrapping_add(2),
                            max: sz.max.wrapping_mul(2).wrapping_add(2),
                        },
                    };
                    return with_args(CallEstimate {
                        cost: sz.factor(STRING_TRAVERSAL),
                        result: Some(result),
                    });
                }
            }
            "starts_with_string" | "ends_with_string" => {
                if let [a] = args {
                    return with_args(CallEstimate {
                        cost: size(a).factor(STRING_TRAVERSAL),
                        result: None,
                    });
                }
            }
            "in_list" => {
                if let [_, list] = args {
                    return with_args(CallEstimate {
                        cost: size(list).factor(1.0),
                        result: None,
                    });
                }
            }
            "matches_string" => {
                if let (Some(t), [re]) = (target, args) {
                    let s = size(t).add(Size::fixed(1)).factor(STRING_TRAVERSAL);
                    let r = size(re).factor(REGEX_LENGTH);
                    return with_args(CallEstimate {
                        cost: s.mul(r),
                        result: None,
                    });
                }
            }
            "contains_string" => {
                if let (Some(t), [sub]) = (target, args) {
                    let s = size(t).factor(STRING_TRAVERSAL);
                    let r = size(sub).factor(STRING_TRAVERSAL);
                    return with_args(CallEstimate {
                        cost: s.mul(r),
                        result: None,
                    });
                }
            }
            "logical_or" | "logical_and" => {
                if let [l, r] = arg_costs {
                    // Short-circuit: the right side may not run.
                    return CallEstimate {
                        cost: CostEstimate {
                            min: l.min,
                            max: l.add(*r).max,
                        },
                        result: None,
                    };
                }
            }
            "conditional" => {
                if let ([_, a, b], [c0, c1, c2]) = (args, arg_costs) {
                    let result = size(a).union(size(b));
                    let en = union_entries(self.entry(a.expr), self.entry(b.expr));
                    self.set_entry(e, en);
                    return CallEstimate {
                        cost: c0.add(c1.union(*c2)),
                        result: Some(result),
                    };
                }
            }
            "add_string" | "add_bytes" | "add_list" => {
                if let [l, r] = args {
                    let result = size(l).add(size(r));
                    let en = union_entries(self.entry(l.expr), self.entry(r.expr));
                    self.set_entry(e, en);
                    let cost = if overload == "add_list" {
                        // Concatenation itself is O(1); the size is what matters.
                        CostEstimate::fixed(1)
                    } else {
                        result.factor(STRING_TRAVERSAL)
                    };
                    return with_args(CallEstimate {
                        cost,
                        result: Some(result),
                    });
                }
            }
            "less_string"
            | "greater_string"
            | "less_equals_string"
            | "greater_equals_string"
            | "less_bytes"
            | "greater_bytes"
            | "less_equals_bytes"
            | "greater_equals_bytes"
            | "equals"
            | "not_equals" => {
                if let [l, r] = args {
                    let smallest = size(l).max.min(size(r).max);
                    let c = CostEstimate {
                        min: u64::from(smallest > 0),
                        max: smallest,
                    };
                    return with_args(CallEstimate {
                        cost: c.factor(STRING_TRAVERSAL),
                        result: None,
                    });
                }
            }
            _ => {}
        }
        with_args(CallEstimate {
            cost: CostEstimate::fixed(1),
            result: None,
        })
    }
}

/// A list call's cost: `factor` per element of `size`, the call, and the new list.
#[inline]
fn allocating_list_call(factor: f64, size: Size) -> Option<CallEstimate> {
    let cost = size
        .factor(factor)
        .add(CostEstimate::fixed(1))
        .add(CostEstimate::fixed(LIST_CREATE_COST));
    CallEstimate::sized(cost, size)
}

/// The comparable element type of a `sort` overload id (`list_string_sort`), when it is a
/// string or bytes: comparing those costs a traversal too.
fn sorts_strings(overload: &str) -> bool {
    overload.starts_with("list_string_") || overload.starts_with("list_bytes_")
}

/// The estimates cel-go's lists (version 3) and sets extensions register per overload.
fn extension_cost(
    overload: &str,
    target: Option<&Node<'_>>,
    args: &[Node<'_>],
) -> Option<CallEstimate> {
    let size = Coster::library_size;
    match overload {
        "list_slice" => {
            let (t, [start, end]) = (target?, args) else {
                return None;
            };
            let sz = size(t);
            let from = int_literal(start, 0);
            let to = int_literal(end, sz.max);
            allocating_list_call(1.0, Size::fixed(to.wrapping_sub(from)))
        }
        "lists_range" => {
            let (None, [n]) = (target, args) else {
                return None;
            };
            allocating_list_call(1.0, Size::fixed(int_literal(n, u64::MAX)))
        }
        "list_reverse" => {
            let (t, []) = (target?, args) else {
                return None;
            };
            allocating_list_call(1.0, size(t))
        }
        "list_flatten" | "list_flatten_int" => {
            let t = target?;
            let depth = match args {
                [] => 1,
                [d] => int_literal(d, u64::MAX),
                _ => return None,
            };
            allocating_list_call(depth as f64, size(t))
        }
        "list_distinct" => {
            let (t, []) = (target?, args) else {
                return None;
            };
            let sz = size(t);
            allocating_list_call(2.0, sz.mul(sz))
        }
        "list_sets_contains_list" | "list_sets_intersects_list" | "list_sets_equivalent_list" => {
            let [a, b] = args else {
                return None;
            };
            // Equivalence may compare every pair twice (each list contained in the other).
            let factor = if overload == "list_sets_equivalent_list" {
                2.0
            } else {
                1.0
            };
            let cost = size(a)
                .mul(size(b))
                .factor(factor)
                .add(CostEstimate::fixed(1));
            CallEstimate::cost(cost)
        }
        o if o.starts_with("list_") && o.ends_with("_sort") => {
            let (t, []) = (target?, args) else {
                return None;
            };
            sort_cost(size(t), sorts_strings(o))
        }
        o if o.starts_with("list_") && o.ends_with("_sortByAssociatedKeys") => {
            let (Some(_), [keys]) = (target, args) else {
                return None;
            };
            sort_cost(size(keys), sorts_strings(o))
        }
        _ => None,
    }
}

/// A sort: every pair compared, twice, plus a traversal per comparison for strings and bytes.
fn sort_cost(size: Size, strings: bool) -> Option<CallEstimate> {
    let factor = if strings { 2.0 + STRING_TRAVERSAL } else { 2.0 };
    allocating_list_call(factor, size.mul(size))
}

/// The element type of a list receiver, for the list functions (the first type parameter, as
/// the library takes it).
fn list_element(list: &Node<'_>) -> Option<Type> {
    Some(match list.ty? {
        Type::List(e) => (**e).clone(),
        Type::Map(k, _) => (**k).clone(),
        Type::Type(Some(e)) => (**e).clone(),
        Type::Opaque(_, p) => p.first()?.clone(),
        _ => return None,
    })
}

/// The Kubernetes library estimator, by function name.
fn kubernetes_cost(
    func: &str,
    overload: &str,
    target: Option<&Node<'_>>,
    args: &[Node<'_>],
) -> Option<CallEstimate> {
    let size = Coster::library_size;
    let one = CostEstimate::fixed(1);
    match func {
        "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
            let t = target?;
            match list_element(t) {
                Some(elem) => {
                    let mut per = one;
                    if matches!(elem, Type::String | Type::Bytes) {
                        let es = t.items_declared.unwrap_or(UNKNOWN);
                        per = per.add(es.factor(STRING_TRAVERSAL));
                    }
                    CallEstimate::cost(size(t).times(per))
                }
                // A string receiver (`indexOf`, `lastIndexOf`).
                None => CallEstimate::cost(size(t).factor(STRING_TRAVERSAL)),
            }
        }
        "url" => {
            let [a] = args else { return None };
            let sz = size(a);
            CallEstimate::sized(sz.factor(STRING_TRAVERSAL), sz)
        }
        "lowerAscii" | "upperAscii" | "substring" | "trim" => {
            let sz = size(target?);
            CallEstimate::sized(sz.factor(STRING_TRAVERSAL), sz)
        }
        "replace" => {
            let t = target?;
            let [from, to, ..] = args else { return None };
            let sz = size(t);
            let (from, to) = (size(from), size(to));
            CallEstimate::sized(
                sz.factor(2.0 * STRING_TRAVERSAL),
                replace_size(sz, from, to),
            )
        }
        "split" => {
            let sz = size(target?);
            let mut max = sz.max;
            if let Some(Kind::Lit(Lit::Int(n))) = args.get(1).map(|a| &a.expr.kind) {
                // Go converts a negative limit to a huge unsigned one.
                max = *n as u64;
            }
            CallEstimate::sized(sz.factor(2.0 * STRING_TRAVERSAL), Size::up_to(max))
        }
        "join" => {
            let t = target?;
            let list = size(t);
            let mut sz = match list_element(t) {
                Some(_) => list.mul(t.items_declared.unwrap_or(UNKNOWN)),
                None => Size::fixed(0),
            };
            if let Some(sep) = args.first() {
                let seps = Size {
                    min: list.min.saturating_sub(1),
                    max: list.max.saturating_sub(1),
                };
                sz = sz.add(size(sep).mul(seps));
            }
            CallEstimate::sized(sz.factor(STRING_TRAVERSAL), sz)
        }
        "find" | "findAll" => {
            let t = target?;
            let re = args.first()?;
            let sz = size(t);
            let s = sz.add(Size::fixed(1)).factor(STRING_TRAVERSAL);
            let r = size(re).factor(REGEX_LENGTH);
            CallEstimate::sized(s.mul(r), Size::up_to(sz.max))
        }
        "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "semver" | "isSemver" => {
            let a = args.first()?;
            CallEstimate::cost(size(a).factor(STRING_TRAVERSAL))
        }
        "ip" => {
            // The address of a CIDR is a field read.
            if overload == "cidr_ip" {
                return CallEstimate::cost(one);
            }
            let a = args.first()?;
            CallEstimate::cost(size(a).factor(STRING_TRAVERSAL))
        }
        "ip.isCanonical" => {
            let a = args.first()?;
            CallEstimate::cost(size(a).factor(2.0 * STRING_TRAVERSAL))
        }
        "masked"
        | "prefixLength"
        | "family"
        | "isUnspecified"
        | "isLoopback"
        | "isLinkLocalMulticast"
        | "isLinkLocalUnicast"
        | "isGlobalUnicast"
        | "format.named"
        | "sign"
        | "asInteger"
        | "isInteger"
        | "asApproximateFloat"
        | "isGreaterThan"
        | "isLessThan"
        | "compareTo"
        | "add"
        | "sub"
        | "major"
        | "minor"
        | "patch"
        | "getScheme"
        | "getHostname"
        | "getHost"
        | "getPort"
        | "getEscapedPath"
        | "getQuery" => CallEstimate::cost(one),
        "containsIP" | "containsCIDR" => {
            let a = args.first()?;
            // Two IPv4 or IPv6 addresses compared byte by byte.
            let ip = Size { min: 4, max: 16 };
            let mut c = ip.add(ip).factor(STRING_TRAVERSAL);
            if func == "containsCIDR" {
                c = c.add(ip.factor(STRING_TRAVERSAL)).add(one);
            }
            if overload == "cidr_contains_ip_string" || overload == "cidr_contains_cidr_string" {
                c = c.add(size(a).as_cost().factor(STRING_TRAVERSAL));
            }
            CallEstimate::cost(c)
        }
        "validate" => {
            let a = args.first()?;
            let c = size(a)
                .factor(STRING_TRAVERSAL)
                .factor(FORMAT_REGEX_MAX * REGEX_LENGTH);
            CallEstimate::cost(c)
        }
        "_==_" => {
            let [l, r] = args else { return None };
            if l.ty != r.ty {
                return None;
            }
            match l.ty? {
                Type::Object(t::IP | t::CIDR | t::QUANTITY | t::SEMVER) => CallEstimate::cost(one),
                Type::Object(t::FORMAT) => CallEstimate::cost(
                    CostEstimate {
                        min: 1,
                        max: FORMAT_NAME_MAX,
                    }
                    .factor(STRING_TRAVERSAL),
                ),
                Type::Object(t::URL) => {
                    // Upstream takes the right side's size for both sides.
                    let max = r.size.map_or(1, |s| s.max);
                    CallEstimate::cost(CostEstimate { min: 1, max }.factor(STRING_TRAVERSAL))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The size of `s.replace(from, to)`: the most and the fewest replacements.
fn replace_size(sz: Size, from: Size, to: Size) -> Size {
    let (mut count, mut kept) = (Size::fixed(0), Size::fixed(0));
    if from.min == 0 {
        // An empty pattern matches around every character.
        count.max = sz.max.saturating_add(1);
        kept.max = sz.max;
    } else if to.max <= from.min {
        kept.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = sz.min.saturating_add(1);
        kept.min = sz.min;
    } else if from.max <= to.min {
        kept.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.mul(to).add(kept)
}
