//! Why a selector matches no device, when the selector itself says so: an attribute compared with
//! a literal of a type it never has on the devices (`numaNode == "0"`), or a qualified attribute
//! name written as a domain (`device.attributes["dra.net/numaNode"]`). Both are valid CEL the
//! scheduler accepts and evaluates to "no match" without a word.

use std::collections::BTreeSet;

use dranet_core::AttributeValue;

use super::ast::{Expr, Kind, Lit};
use super::attrs::DeviceAttributes;
use super::check::Ref;

/// The kind of an attribute value, as a user writes it in a claim.
fn kind(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::Bool(_) => "bool",
        AttributeValue::Int(_) => "int",
        AttributeValue::String(_) => "string",
        AttributeValue::Version(_) => "version",
        AttributeValue::Ints(_) => "list of ints",
        AttributeValue::Strings(_) => "list of strings",
    }
}

/// The kind of a literal compared with an attribute, and how to write it as the other kinds.
fn lit_kind(l: &Lit) -> Option<&'static str> {
    Some(match l {
        Lit::Bool(_) => "bool",
        Lit::Int(_) | Lit::Uint(_) | Lit::Double(_) => "int",
        Lit::String(_) => "string",
        _ => return None,
    })
}

fn lit_text(l: &Lit) -> String {
    match l {
        Lit::Bool(b) => b.to_string(),
        Lit::Int(i) => i.to_string(),
        Lit::Uint(u) => format!("{u}u"),
        Lit::Double(d) => d.to_string(),
        Lit::String(s) => format!("{s:?}"),
        _ => String::new(),
    }
}

/// The literal rewritten for an attribute of kind `want`, when there is an obvious one.
fn rewrite(l: &Lit, want: &str) -> Option<String> {
    match (l, want) {
        (Lit::String(s), "int") => s.trim().parse::<i64>().ok().map(|i| i.to_string()),
        (Lit::String(s), "bool") => match &**s {
            "true" | "false" => Some(s.to_string()),
            _ => None,
        },
        (Lit::Int(i), "string") => Some(format!("\"{i}\"")),
        (Lit::Bool(b), "string") => Some(format!("\"{b}\"")),
        (Lit::String(s), "version") => Some(format!("semver({s:?})")),
        _ => None,
    }
}

struct Walker<'p> {
    refs: &'p [Ref],
    devices: &'p [&'p DeviceAttributes],
    hints: BTreeSet<String>,
}

/// `device.attributes` (an unresolved `device` counts, for explaining compile errors).
fn is_device_attributes(e: &Expr, refs: &[Ref]) -> bool {
    matches!(&e.kind, Kind::Select { operand, field, test_only: false }
        if field == "attributes"
            && matches!(&operand.kind, Kind::Ident(n) if n == "device")
            && matches!(refs.get(operand.id as usize), Some(Ref::Device) | None))
}

/// `device.attributes["<domain>"]`: the domain.
pub(crate) fn domain_of<'e>(e: &'e Expr, refs: &[Ref]) -> Option<&'e str> {
    match &e.kind {
        Kind::Call {
            func,
            args,
            target: None,
        } if func == "_[_]" && args.len() == 2 => match (&args[0], &args[1].kind) {
            (m, Kind::Lit(Lit::String(d))) if is_device_attributes(m, refs) => Some(d),
            _ => None,
        },
        _ => None,
    }
}

/// `device.attributes["<domain>"].<name>` or `…["<name>"]`: domain and name.
pub(crate) fn attribute_of<'e>(e: &'e Expr, refs: &[Ref]) -> Option<(&'e str, &'e str)> {
    match &e.kind {
        Kind::Select {
            operand,
            field,
            test_only: false,
        } => Some((domain_of(operand, refs)?, field)),
        Kind::Call {
            func,
            args,
            target: None,
        } if func == "_[_]" && args.len() == 2 => match &args[1].kind {
            Kind::Lit(Lit::String(n)) => Some((domain_of(&args[0], refs)?, n)),
            _ => None,
        },
        _ => None,
    }
}

impl Walker<'_> {
    fn walk(&mut self, e: &Expr) {
        super::stack::with_stack(|| self.walk_node(e));
    }

    fn walk_node(&mut self, e: &Expr) {
        if let Some(d) = domain_of(e, self.refs)
            && let Some((domain, name)) = d.rsplit_once('/')
            && !self.devices.iter().any(|a| a.names().any(|(x, _)| x == d))
        {
            self.hints.insert(format!(
                "device.attributes[{d:?}] is the attribute domain {d:?}, which no device has; \
                 the attribute {name} of domain {domain} is device.attributes[{domain:?}].{name}"
            ));
        }
        match &e.kind {
            Kind::Call { target, func, args } => {
                if matches!(
                    func.as_str(),
                    "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_"
                ) && args.len() == 2
                {
                    self.comparison(&args[0], &args[1]);
                    self.comparison(&args[1], &args[0]);
                }
                if let Some(t) = target {
                    self.walk(t);
                }
                for a in args {
                    self.walk(a);
                }
            }
            Kind::Select { operand, .. } => self.walk(operand),
            Kind::List { elems, .. } => elems.iter().for_each(|x| self.walk(x)),
            Kind::Map { entries } => entries.iter().for_each(|en| {
                self.walk(&en.key);
                self.walk(&en.value);
            }),
            Kind::Comprehension(c) => {
                for x in [&c.range, &c.accu_init, &c.cond, &c.step, &c.result] {
                    self.walk(x);
                }
            }
            Kind::Struct { fields, .. } => fields.iter().for_each(|(_, _, v, _)| self.walk(v)),
            Kind::Lit(_) | Kind::Ident(_) => {}
        }
    }

    /// `attr <op> literal` where no device has `attr` of the literal's kind.
    fn comparison(&mut self, attr: &Expr, other: &Expr) {
        let (Some((domain, name)), Kind::Lit(l)) = (attribute_of(attr, self.refs), &other.kind)
        else {
            return;
        };
        let Some(lk) = lit_kind(l) else {
            return;
        };
        let kinds: BTreeSet<&str> = self
            .devices
            .iter()
            .filter_map(|a| a.get(domain, name))
            .map(kind)
            .collect();
        if kinds.is_empty() || kinds.contains(lk) {
            return;
        }
        let have: Vec<&str> = kinds.iter().copied().collect();
        let fix = match have.as_slice() {
            [one] => rewrite(l, one)
                .map(|r| format!(": compare with {r}"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        self.hints.insert(format!(
            "{domain}/{name} is {} on the devices, compared here with the {lk} {}, so no device \
             can match{fix}",
            have.join(" or "),
            lit_text(l)
        ));
    }
}

/// For a compile error: the qualified-name-as-domain mistake, which the checker reports only as
/// a type error (`found no matching overload for '_==_' applied to '(map(string, any), int)'`).
pub(crate) fn compile_hint(expr: &Expr) -> Option<String> {
    let mut w = Walker {
        refs: &[],
        devices: &[],
        hints: BTreeSet::new(),
    };
    w.walk(expr);
    w.hints.into_iter().next()
}

/// Why a selector (its checked tree) matches none of `devices`, when the selector shows it: an
/// attribute compared with a literal of a type the attribute never has on them, or a qualified
/// attribute name used as a domain. Empty when there is nothing to say.
pub(crate) fn no_match_hints(
    expr: &Expr,
    refs: &[Ref],
    devices: &[&DeviceAttributes],
) -> Vec<String> {
    let mut w = Walker {
        refs,
        devices,
        hints: BTreeSet::new(),
    };
    w.walk(expr);
    w.hints.into_iter().collect()
}
