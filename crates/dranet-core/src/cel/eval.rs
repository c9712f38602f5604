//! The tree-walking evaluator. The device's maps are views over [`DeviceAttributes`], never
//! materialised, so a selector costs a few binary searches per device.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::rc::Rc;

use super::parse::{BinOp, Expr, Func, Lit, Macro};
use super::{AttributeValue, DeviceAttributes, DeviceView, Quantity, Semver};

type R<T> = Result<T, String>;

#[derive(Debug, Clone)]
enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Cow<'a, str>),
    List(Rc<Vec<Value<'a>>>),
    Map(Rc<Vec<(Value<'a>, Value<'a>)>>),
    Version(&'a Semver),
    OwnedVersion(Rc<Semver>),
    Quantity(Quantity),
    Device,
    /// `device.attributes`: domain → attributes.
    Attributes,
    /// `device.capacity`: domain → capacities.
    Capacity,
    /// `device.attributes[domain]`.
    Domain(Cow<'a, str>),
    /// `device.capacity[domain]`.
    CapDomain(Cow<'a, str>),
}

impl Value<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) | Value::Attributes | Value::Capacity => "map",
            Value::Domain(_) | Value::CapDomain(_) => "map",
            Value::Version(_) | Value::OwnedVersion(_) => "semver",
            Value::Quantity(_) => "quantity",
            Value::Device => "device",
        }
    }
}

/// A literal result type that can never be a bool, for the compile-time check.
pub(super) fn static_non_bool(e: &Expr) -> Option<&'static str> {
    match e {
        Expr::Lit(Lit::Bool(_)) => None,
        Expr::Lit(Lit::Null) => Some("null"),
        Expr::Lit(Lit::Int(_)) => Some("int"),
        Expr::Lit(Lit::Uint(_)) => Some("uint"),
        Expr::Lit(Lit::Double(_)) => Some("double"),
        Expr::Lit(Lit::Str(_)) => Some("string"),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        Expr::Device => Some("device"),
        Expr::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem, _, _) => {
            Some("an arithmetic result")
        }
        Expr::Comprehension {
            kind: Macro::Map | Macro::Filter,
            ..
        } => Some("list"),
        _ => None,
    }
}

struct Ctx<'a> {
    dev: &'a DeviceView<'a>,
    attrs: &'a DeviceAttributes,
    vars: Vec<Value<'a>>,
    /// Evaluation steps so far, against [`MAX_EVAL_STEPS`].
    steps: u64,
}

/// Most evaluation steps for one selector on one device. Nested comprehensions grow as
/// len^depth; the scheduler likewise stops an evaluation over its runtime cost limit
/// (1,000,000), so a selector can cost a pod its scheduling but never hang the process.
pub const MAX_EVAL_STEPS: u64 = 1_000_000;

/// The common selector shapes (`device.driver == "x"`, `attr == literal`, a bool attribute,
/// and `&&`/`||`/`!` of those), evaluated without building values. `None` means "not decided
/// here" (an error, a type the shortcut does not handle): the full evaluator then runs, so the
/// result and any error message are the same as without the shortcut.
fn fast(e: &Expr, dev: &DeviceView<'_>) -> Option<bool> {
    match e {
        Expr::Binary(op @ (BinOp::Eq | BinOp::Ne), l, r) => {
            let lit = match &**r {
                Expr::Lit(l) => l,
                _ => return None,
            };
            let eq = match (&**l, lit) {
                (Expr::Driver, Lit::Str(s)) => dev.driver == s,
                (Expr::Attr(k), lit) => match (dev.attributes.get_key(k)?, lit) {
                    (AttributeValue::String(a), Lit::Str(b)) => a == b,
                    (AttributeValue::Int(a), Lit::Int(b)) => a == b,
                    (AttributeValue::Bool(a), Lit::Bool(b)) => a == b,
                    _ => return None,
                },
                _ => return None,
            };
            Some(eq == (*op == BinOp::Eq))
        }
        Expr::Attr(k) => match dev.attributes.get_key(k)? {
            AttributeValue::Bool(b) => Some(*b),
            _ => None,
        },
        Expr::Not(x) => fast(x, dev).map(|b| !b),
        // Only a fully decided pair is returned, so error absorption needs no care here.
        Expr::And(a, b) => match fast(a, dev)? {
            false => Some(false),
            true => fast(b, dev),
        },
        Expr::Or(a, b) => match fast(a, dev)? {
            true => Some(true),
            false => fast(b, dev),
        },
        _ => None,
    }
}

pub(super) fn eval_bool(e: &Expr, dev: &DeviceView<'_>) -> R<bool> {
    if let Some(b) = fast(e, dev) {
        return Ok(b);
    }
    let mut ctx = Ctx {
        dev,
        attrs: dev.attributes,
        vars: Vec::new(),
        steps: 0,
    };
    match eval(e, &mut ctx)? {
        Value::Bool(b) => Ok(b),
        v => Err(format!("expression returned {}, not bool", v.kind())),
    }
}

fn attr_value(v: &AttributeValue) -> Value<'_> {
    match v {
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Int(i) => Value::Int(*i),
        AttributeValue::String(s) => Value::Str(Cow::Borrowed(s)),
        AttributeValue::Version(v) => Value::Version(v),
        AttributeValue::Ints(v) => Value::List(Rc::new(v.iter().map(|i| Value::Int(*i)).collect())),
        AttributeValue::Strings(v) => Value::List(Rc::new(
            v.iter()
                .map(|s| Value::Str(Cow::Borrowed(s.as_str())))
                .collect(),
        )),
    }
}

fn no_such_key(k: &str) -> String {
    format!("no such key: {k}")
}

/// `target.name` or `target["name"]`.
fn select<'a>(ctx: &Ctx<'a>, target: Value<'a>, name: Cow<'a, str>) -> R<Value<'a>> {
    match target {
        Value::Device => match &*name {
            "driver" => Ok(Value::Str(Cow::Borrowed(ctx.dev.driver))),
            "attributes" => Ok(Value::Attributes),
            "capacity" => Ok(Value::Capacity),
            "allowMultipleAllocations" => Ok(Value::Bool(ctx.dev.allow_multiple_allocations)),
            _ => Err(no_such_key(&name)),
        },
        // Unknown domains are empty maps, so only the attribute lookup can fail.
        Value::Attributes => Ok(Value::Domain(name)),
        Value::Capacity => Ok(Value::CapDomain(name)),
        Value::Domain(d) => match ctx.attrs.get(&d, &name) {
            Some(v) => Ok(attr_value(v)),
            None => Err(format!(
                "no such key: {name} (device has no attribute {d}/{name})"
            )),
        },
        Value::CapDomain(d) => match ctx.attrs.capacity(&d, &name) {
            Some(q) => Ok(Value::Quantity(q)),
            None => Err(format!(
                "no such key: {name} (device has no capacity {d}/{name})"
            )),
        },
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(s) if *s == name))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| no_such_key(&name)),
        v => Err(format!("cannot select field {name:?} of {}", v.kind())),
    }
}

fn has<'a>(ctx: &Ctx<'a>, target: Value<'a>, name: &str) -> R<bool> {
    Ok(match target {
        Value::Device => matches!(
            name,
            "driver" | "attributes" | "capacity" | "allowMultipleAllocations"
        ),
        Value::Attributes => !ctx.attrs.domain_names(name).is_empty(),
        Value::Capacity => !ctx.attrs.domain_caps(name).is_empty(),
        Value::Domain(d) => ctx.attrs.get(&d, name).is_some(),
        Value::CapDomain(d) => ctx.attrs.capacity(&d, name).is_some(),
        Value::Map(m) => m
            .iter()
            .any(|(k, _)| matches!(k, Value::Str(s) if s == name)),
        v => return Err(format!("has() is not defined on {}", v.kind())),
    })
}

fn num_cmp(a: &Value<'_>, b: &Value<'_>) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Uint(x), Value::Uint(y)) => Some(x.cmp(y)),
        (Value::Int(x), Value::Uint(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::Uint(x), Value::Int(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::Double(x), _) => x.partial_cmp(&as_f64(b)?),
        (_, Value::Double(y)) => as_f64(a)?.partial_cmp(y),
        _ => None,
    }
}

fn as_f64(v: &Value<'_>) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Uint(u) => Some(*u as f64),
        Value::Double(d) => Some(*d),
        _ => None,
    }
}

fn keys<'a>(ctx: &Ctx<'a>, v: &Value<'a>) -> Option<Vec<Value<'a>>> {
    Some(match v {
        Value::Map(m) => m.iter().map(|(k, _)| k.clone()).collect(),
        Value::Domain(d) => ctx
            .attrs
            .domain_names(d)
            .into_iter()
            .map(|n| Value::Str(Cow::Borrowed(n)))
            .collect(),
        Value::CapDomain(d) => ctx
            .attrs
            .domain_caps(d)
            .iter()
            .map(|(_, n, _)| Value::Str(Cow::Borrowed(n.as_str())))
            .collect(),
        _ => return None,
    })
}

fn equal<'a>(a: &Value<'a>, b: &Value<'a>) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (
            Value::Version(_) | Value::OwnedVersion(_),
            Value::Version(_) | Value::OwnedVersion(_),
        ) => ver(a) == ver(b),
        (Value::Quantity(x), Value::Quantity(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| equal(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| equal(k, k2) && equal(v, v2)))
        }
        _ => num_cmp(a, b) == Some(Ordering::Equal),
    }
}

fn binary<'a>(ctx: &Ctx<'a>, op: BinOp, a: Value<'a>, b: Value<'a>) -> R<Value<'a>> {
    let overload = |a: &Value<'_>, b: &Value<'_>| {
        format!("no such overload: {} {op:?} {}", a.kind(), b.kind())
    };
    let overflow = || "integer overflow".to_string();
    Ok(match op {
        BinOp::Eq => Value::Bool(equal(&a, &b)),
        BinOp::Ne => Value::Bool(!equal(&a, &b)),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let ord = match (&a, &b) {
                (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
                (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
                _ => num_cmp(&a, &b),
            }
            .ok_or_else(|| overload(&a, &b))?;
            Value::Bool(match op {
                BinOp::Lt => ord == Ordering::Less,
                BinOp::Le => ord != Ordering::Greater,
                BinOp::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            })
        }
        BinOp::In => match &b {
            Value::List(l) => Value::Bool(l.iter().any(|x| equal(&a, x))),
            Value::Attributes
            | Value::Capacity
            | Value::Domain(_)
            | Value::CapDomain(_)
            | Value::Map(_) => {
                let Value::Str(k) = &a else {
                    return Ok(Value::Bool(
                        matches!(&b, Value::Map(m) if m.iter().any(|(k, _)| equal(&a, k))),
                    ));
                };
                Value::Bool(has(ctx, b.clone(), k)?)
            }
            _ => return Err(overload(&a, &b)),
        },
        BinOp::Add => match (a, b) {
            (Value::Int(x), Value::Int(y)) => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
            (Value::Uint(x), Value::Uint(y)) => Value::Uint(x.checked_add(y).ok_or_else(overflow)?),
            (Value::Double(x), Value::Double(y)) => Value::Double(x + y),
            (Value::Str(x), Value::Str(y)) => Value::Str(Cow::Owned(format!("{x}{y}"))),
            (Value::List(x), Value::List(y)) => {
                Value::List(Rc::new(x.iter().chain(y.iter()).cloned().collect()))
            }
            (a, b) => return Err(overload(&a, &b)),
        },
        _ => {
            let arith = |x: i64, y: i64| -> R<i64> {
                match op {
                    BinOp::Sub => x.checked_sub(y).ok_or_else(overflow),
                    BinOp::Mul => x.checked_mul(y).ok_or_else(overflow),
                    BinOp::Div if y == 0 => Err("division by zero".into()),
                    BinOp::Div => x.checked_div(y).ok_or_else(overflow),
                    _ if y == 0 => Err("modulus by zero".into()),
                    _ => x.checked_rem(y).ok_or_else(overflow),
                }
            };
            match (a, b) {
                (Value::Int(x), Value::Int(y)) => Value::Int(arith(x, y)?),
                (Value::Uint(x), Value::Uint(y)) => Value::Uint(match op {
                    BinOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
                    BinOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
                    BinOp::Div => x.checked_div(y).ok_or("division by zero")?,
                    _ => x.checked_rem(y).ok_or("modulus by zero")?,
                }),
                (Value::Double(x), Value::Double(y)) => Value::Double(match op {
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    BinOp::Div => x / y,
                    _ => return Err("no such overload: double % double".into()),
                }),
                (a, b) => return Err(overload(&a, &b)),
            }
        }
    })
}

fn eval<'a>(e: &'a Expr, ctx: &mut Ctx<'a>) -> R<Value<'a>> {
    ctx.steps += 1;
    if ctx.steps > MAX_EVAL_STEPS {
        return Err(format!(
            "evaluation stopped after {MAX_EVAL_STEPS} steps (the scheduler also stops \
             selectors over its runtime cost limit)"
        ));
    }
    Ok(match e {
        Expr::Lit(l) => match l {
            Lit::Null => Value::Null,
            Lit::Bool(b) => Value::Bool(*b),
            Lit::Int(i) => Value::Int(*i),
            Lit::Uint(u) => Value::Uint(*u),
            Lit::Double(d) => Value::Double(*d),
            Lit::Str(s) => Value::Str(Cow::Borrowed(s)),
        },
        Expr::Device => Value::Device,
        Expr::Driver => Value::Str(Cow::Borrowed(ctx.dev.driver)),
        Expr::Attr(k) => match ctx.attrs.get_key(k) {
            Some(v) => attr_value(v),
            None => {
                return Err(format!(
                    "no such key: {} (device has no attribute {}/{})",
                    k.name, k.domain, k.name
                ));
            }
        },
        Expr::Cap(d, n) => match ctx.attrs.capacity(d, n) {
            Some(q) => Value::Quantity(q),
            None => return Err(format!("no such key: {n} (device has no capacity {d}/{n})")),
        },
        Expr::Var(i) => ctx
            .vars
            .get(*i)
            .cloned()
            .ok_or("internal: unbound variable")?,
        Expr::Member(t, f) => {
            let t = eval(t, ctx)?;
            select(ctx, t, Cow::Borrowed(f))?
        }
        Expr::Index(t, k) => {
            let t = eval(t, ctx)?;
            let k = eval(k, ctx)?;
            match (t, k) {
                (Value::List(l), k) => {
                    let i = match k {
                        Value::Int(i) => usize::try_from(i).ok(),
                        Value::Uint(u) => usize::try_from(u).ok(),
                        k => return Err(format!("list index must be int, not {}", k.kind())),
                    };
                    i.and_then(|i| l.get(i).cloned())
                        .ok_or_else(|| "index out of range".to_string())?
                }
                (Value::Map(m), k) if !matches!(k, Value::Str(_)) => m
                    .iter()
                    .find(|(mk, _)| equal(mk, &k))
                    .map(|(_, v)| v.clone())
                    .ok_or("no such key")?,
                (t, Value::Str(k)) => select(ctx, t, k)?,
                (t, k) => return Err(format!("cannot index {} with {}", t.kind(), k.kind())),
            }
        }
        Expr::Has(t, f) => {
            let t = eval(t, ctx)?;
            Value::Bool(has(ctx, t, f)?)
        }
        Expr::Not(x) => match eval(x, ctx)? {
            Value::Bool(b) => Value::Bool(!b),
            v => return Err(format!("no such overload: !{}", v.kind())),
        },
        Expr::Neg(x) => match eval(x, ctx)? {
            Value::Int(i) => Value::Int(i.checked_neg().ok_or("integer overflow")?),
            Value::Double(d) => Value::Double(-d),
            v => return Err(format!("no such overload: -{}", v.kind())),
        },
        // CEL's commutative logic: an error on one side is absorbed when the other decides.
        Expr::And(a, b) => match eval(a, ctx) {
            Ok(Value::Bool(false)) => Value::Bool(false),
            Ok(Value::Bool(true)) => bool_of(eval(b, ctx)?)?,
            left => match eval(b, ctx) {
                Ok(Value::Bool(false)) => Value::Bool(false),
                _ => {
                    return Err(left
                        .and_then(|v| bool_of(v).map(|_| ()))
                        .err()
                        .unwrap_or_default());
                }
            },
        },
        Expr::Or(a, b) => match eval(a, ctx) {
            Ok(Value::Bool(true)) => Value::Bool(true),
            Ok(Value::Bool(false)) => bool_of(eval(b, ctx)?)?,
            left => match eval(b, ctx) {
                Ok(Value::Bool(true)) => Value::Bool(true),
                _ => {
                    return Err(left
                        .and_then(|v| bool_of(v).map(|_| ()))
                        .err()
                        .unwrap_or_default());
                }
            },
        },
        Expr::Cond(c, a, b) => match eval(c, ctx)? {
            Value::Bool(true) => eval(a, ctx)?,
            Value::Bool(false) => eval(b, ctx)?,
            v => return Err(format!("condition is {}, not bool", v.kind())),
        },
        Expr::Binary(op, a, b) => {
            let a = eval(a, ctx)?;
            let b = eval(b, ctx)?;
            binary(ctx, *op, a, b)?
        }
        Expr::List(items) => {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                out.push(eval(i, ctx)?);
            }
            Value::List(Rc::new(out))
        }
        Expr::Map(entries) => {
            let mut out: Vec<(Value<'a>, Value<'a>)> = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                let k = eval(k, ctx)?;
                if out.iter().any(|(x, _)| equal(x, &k)) {
                    return Err("duplicate map key".into());
                }
                let v = eval(v, ctx)?;
                out.push((k, v));
            }
            Value::Map(Rc::new(out))
        }
        Expr::Comprehension { kind, range, body } => {
            let range = eval(range, ctx)?;
            let items: Vec<Value<'a>> = match &range {
                Value::List(l) => l.as_ref().clone(),
                other => keys(ctx, other)
                    .ok_or_else(|| format!("cannot iterate over {}", other.kind()))?,
            };
            comprehension(*kind, items, body, ctx)?
        }
        Expr::Call { target, func, args } => {
            let t = match target {
                Some(t) => Some(eval(t, ctx)?),
                None => None,
            };
            let mut a = Vec::with_capacity(args.len());
            for x in args {
                a.push(eval(x, ctx)?);
            }
            call(ctx, *func, t, a)?
        }
    })
}

fn ver<'b>(v: &'b Value<'_>) -> Option<&'b Semver> {
    match v {
        Value::Version(v) => Some(v),
        Value::OwnedVersion(v) => Some(v),
        _ => None,
    }
}

fn bool_of(v: Value<'_>) -> R<Value<'_>> {
    match v {
        Value::Bool(_) => Ok(v),
        v => Err(format!("logical operator on {}, not bool", v.kind())),
    }
}

fn comprehension<'a>(
    kind: Macro,
    items: Vec<Value<'a>>,
    body: &'a Expr,
    ctx: &mut Ctx<'a>,
) -> R<Value<'a>> {
    let mut count = 0usize;
    let mut out = Vec::new();
    let mut first_err: Option<String> = None;
    for item in items {
        ctx.vars.push(item.clone());
        let r = eval(body, ctx);
        ctx.vars.pop();
        match kind {
            Macro::Map => out.push(r?),
            _ => {
                let b = match r.and_then(|v| match v {
                    Value::Bool(b) => Ok(b),
                    v => Err(format!("macro predicate returned {}, not bool", v.kind())),
                }) {
                    Ok(b) => b,
                    Err(e) if matches!(kind, Macro::All | Macro::Exists) => {
                        // Like && and ||: a later decisive element absorbs the error.
                        first_err.get_or_insert(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                match kind {
                    Macro::All if !b => return Ok(Value::Bool(false)),
                    Macro::Exists if b => return Ok(Value::Bool(true)),
                    Macro::ExistsOne if b => count += 1,
                    Macro::Filter if b => out.push(item),
                    _ => {}
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(match kind {
        Macro::All => Value::Bool(true),
        Macro::Exists => Value::Bool(false),
        Macro::ExistsOne => Value::Bool(count == 1),
        _ => Value::List(Rc::new(out)),
    })
}

fn call<'a>(
    ctx: &Ctx<'a>,
    f: Func,
    target: Option<Value<'a>>,
    args: Vec<Value<'a>>,
) -> R<Value<'a>> {
    let sig = || {
        let t = target
            .as_ref()
            .map(|t| format!("{}.", t.kind()))
            .unwrap_or_default();
        let a: Vec<&str> = args.iter().map(Value::kind).collect();
        format!("no such overload: {t}{f:?}({})", a.join(", "))
    };
    let bad = Err(sig());
    Ok(match (f, &target, args.as_slice()) {
        (Func::Size, Some(v), []) | (Func::Size, None, [v]) => Value::Int(match v {
            Value::Str(s) => s.chars().count() as i64,
            Value::List(l) => l.len() as i64,
            other => keys(ctx, other).ok_or_else(sig)?.len() as i64,
        }),
        (Func::StartsWith, Some(Value::Str(s)), [Value::Str(p)]) => {
            Value::Bool(s.starts_with(&**p))
        }
        (Func::EndsWith, Some(Value::Str(s)), [Value::Str(p)]) => Value::Bool(s.ends_with(&**p)),
        (Func::Contains, Some(Value::Str(s)), [Value::Str(p)]) => Value::Bool(s.contains(&**p)),
        (Func::LowerAscii, Some(Value::Str(s)), []) => {
            Value::Str(Cow::Owned(s.to_ascii_lowercase()))
        }
        (Func::UpperAscii, Some(Value::Str(s)), []) => {
            Value::Str(Cow::Owned(s.to_ascii_uppercase()))
        }
        (Func::Trim, Some(Value::Str(s)), []) => Value::Str(Cow::Owned(s.trim().to_string())),
        (Func::Int, None, [v]) => Value::Int(match v {
            Value::Int(i) => *i,
            Value::Uint(u) => i64::try_from(*u).map_err(|_| "int overflow")?,
            Value::Double(d) if d.is_finite() && d.abs() < 9.2e18 => *d as i64,
            Value::Str(s) => s
                .parse()
                .map_err(|_| format!("cannot convert {s:?} to int"))?,
            _ => return bad,
        }),
        (Func::Uint, None, [v]) => Value::Uint(match v {
            Value::Uint(u) => *u,
            Value::Int(i) => u64::try_from(*i).map_err(|_| "uint overflow")?,
            Value::Double(d) if d.is_finite() && *d >= 0.0 && *d < 1.8e19 => *d as u64,
            Value::Str(s) => s
                .parse()
                .map_err(|_| format!("cannot convert {s:?} to uint"))?,
            _ => return bad,
        }),
        (Func::Double, None, [v]) => Value::Double(match v {
            Value::Str(s) => s
                .parse()
                .map_err(|_| format!("cannot convert {s:?} to double"))?,
            v => as_f64(v).ok_or_else(sig)?,
        }),
        (Func::String, None, [v]) => Value::Str(Cow::Owned(match v {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Uint(u) => u.to_string(),
            Value::Double(d) => d.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Version(_) | Value::OwnedVersion(_) => {
                ver(v).map(|v| v.to_string()).unwrap_or_default()
            }
            Value::Quantity(q) => q.to_string(),
            _ => return bad,
        })),
        (Func::Semver, None, [Value::Str(s)]) => Value::OwnedVersion(Rc::new(Semver::parse(s)?)),
        (Func::IsSemver, None, [Value::Str(s)]) => Value::Bool(Semver::parse(s).is_ok()),
        (Func::Major | Func::Minor | Func::Patch, Some(t), []) => {
            let v = ver(t).ok_or_else(sig)?;
            Value::Int(match f {
                Func::Major => v.major,
                Func::Minor => v.minor,
                _ => v.patch,
            } as i64)
        }
        (Func::Quantity, None, [Value::Str(s)]) => Value::Quantity(Quantity::parse(s)?),
        (Func::IsQuantity, None, [Value::Str(s)]) => Value::Bool(Quantity::parse(s).is_ok()),
        (Func::CompareTo | Func::IsGreaterThan | Func::IsLessThan, Some(t), [o]) => {
            let ord = match (t, o) {
                (Value::Quantity(a), Value::Quantity(b)) => a.cmp(b),
                (a, b) => match (ver(a), ver(b)) {
                    (Some(a), Some(b)) => a.cmp(b),
                    _ => return bad,
                },
            };
            match f {
                Func::CompareTo => Value::Int(ord as i64),
                Func::IsGreaterThan => Value::Bool(ord == Ordering::Greater),
                _ => Value::Bool(ord == Ordering::Less),
            }
        }
        (Func::Add | Func::Sub, Some(Value::Quantity(q)), [o]) => {
            let o = match o {
                Value::Quantity(o) => *o,
                Value::Int(i) => Quantity::from_int(*i),
                _ => return bad,
            };
            let r = if f == Func::Add {
                q.checked_add(o)
            } else {
                q.checked_sub(o)
            };
            Value::Quantity(r.ok_or("quantity overflow")?)
        }
        (Func::AsInteger, Some(Value::Quantity(q)), []) => Value::Int(
            q.as_integer()
                .ok_or("quantity is not an integer that fits in int")?,
        ),
        (Func::IsInteger, Some(Value::Quantity(q)), []) => Value::Bool(q.as_integer().is_some()),
        (Func::AsApproximateFloat, Some(Value::Quantity(q)), []) => Value::Double(q.as_f64()),
        (Func::Sign, Some(Value::Quantity(q)), []) => Value::Int(q.sign()),
        _ => return bad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::parse::parse;

    /// The shortcut must agree with the full evaluator wherever it decides.
    #[test]
    fn shortcut_agrees_with_the_evaluator() {
        let attrs = DeviceAttributes::new(
            "dra.net",
            [
                ("rdma", AttributeValue::Bool(true)),
                ("ibOnly", AttributeValue::Bool(false)),
                ("numaNode", AttributeValue::Int(1)),
                ("rdmaDevice", AttributeValue::String("mlx5_2".into())),
            ],
            [] as [(&str, Quantity); 0],
        )
        .unwrap();
        let dev = DeviceView {
            driver: "dra.net",
            attributes: &attrs,
            allow_multiple_allocations: false,
        };
        let exprs = [
            r#"device.driver == "dra.net""#,
            r#"device.driver != "dra.net""#,
            r#"device.attributes["dra.net"].rdma"#,
            r#"!device.attributes["dra.net"].ibOnly"#,
            r#"device.attributes["dra.net"].numaNode == 1 && device.attributes["dra.net"].rdma"#,
            r#"device.attributes["dra.net"].numaNode == 0 || device.attributes["dra.net"]["rdmaDevice"] == "mlx5_2""#,
            r#"device.attributes["dra.net"].numaNode != 1"#,
            r#"device.attributes["dra.net"].rdmaDevice == 2"#,
            r#"device.attributes["dra.net"].missing == 1 || true"#,
        ];
        let mut decided = 0;
        for src in exprs {
            let e = parse(src).unwrap();
            let mut ctx = Ctx {
                dev: &dev,
                attrs: &attrs,
                vars: Vec::new(),
                steps: 0,
            };
            let slow = match eval(&e, &mut ctx) {
                Ok(Value::Bool(b)) => Some(b),
                _ => None,
            };
            if let Some(f) = fast(&e, &dev) {
                decided += 1;
                assert_eq!(Some(f), slow, "{src}");
            }
            assert_eq!(eval_bool(&e, &dev).ok(), slow, "{src}");
        }
        assert!(decided >= 7, "the shortcut decided only {decided}");
    }
}
