//! The evaluator over the checked tree: operators and functions dispatch to the overloads the
//! checker resolved; `&&`, `||`, `?:` and comprehensions are evaluated here, with CEL's error
//! absorption and a step budget so no selector can run unbounded.

mod message;

use std::rc::Rc;

use super::activation::Activation;
use super::ast::{Expr, Kind, Lit};
use super::check::Ref;
use super::decls::D;
use super::device::DeviceView;
use super::value::{Error, Map, R, Str, Value};
use crate::version::KubernetesVersion;

/// Whether a runtime value fits a declared parameter type (overload dispatch at run time).
fn fits(d: &D, v: &Value<'_>) -> bool {
    match (d, v) {
        (D::Dyn | D::P(_), _) => true,
        (D::Bool, Value::Bool(_))
        | (D::Int, Value::Int(_))
        | (D::Uint, Value::Uint(_))
        | (D::Double, Value::Double(_))
        | (D::Str, Value::Str(_))
        | (D::Bytes, Value::Bytes(_))
        | (D::Dur, Value::Duration(_))
        | (D::Ts, Value::Timestamp(..))
        | (D::Ty(_), Value::Type(_))
        | (D::Opt(_), Value::Optional(_)) => true,
        (D::L(e), Value::List(l)) => l.iter().all(|x| fits(e, x)),
        (D::M(..), m) => m.is_map(),
        (D::Obj(n), v) => v.type_name() == *n,
        _ => false,
    }
}

/// Evaluates a checked expression for one device.
pub(crate) struct Eval<'e, 'a> {
    env: Activation<'a>,
    refs: &'e [Ref],
    /// Variables in scope: comprehension variables and accumulators, `cel.bind` names. A value
    /// may be an error: cel-go keeps an erring accumulator (`exists` goes on and a later `true`
    /// absorbs the error) and binds lazily (an erring binding that is never read is no error).
    scopes: Vec<(&'e str, R<Value<'a>>)>,
    /// How deep `eval` is; the stack check runs every few levels, not on every node.
    depth: u32,
    /// Arguments of the calls being evaluated, innermost last: one buffer for the whole
    /// evaluation instead of a list allocated per call.
    args: Vec<Value<'a>>,
    /// The scope of the macro accumulator whose comprehension step is being evaluated: that
    /// step reads it once, so the read moves it out and `map()`'s `@result + [x]` appends in
    /// place instead of copying the list on every iteration (quadratic in its size).
    movable: Option<usize>,
}

/// Levels of `eval` between two stack checks. Well inside `STACK_RED_ZONE` even in debug builds,
/// where one level takes a few KiB.
const STACK_CHECK_EVERY: u32 = 8;

fn lit<'a>(l: &'a Lit) -> Value<'a> {
    match l {
        Lit::Null => Value::Null,
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Int(i) => Value::Int(*i),
        Lit::Uint(u) => Value::Uint(*u),
        Lit::Double(d) => Value::Double(*d),
        Lit::String(s) => Value::Str(Str::B(s)),
        Lit::Bytes(b) => Value::Bytes(Rc::from(&**b)),
    }
}

fn as_bool(v: &R<Value<'_>>) -> Option<bool> {
    match v {
        Ok(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

// `'e: 'a`: values may borrow from the program (string literals, field names) as well as from
// the device, so evaluation allocates no copies of them.
impl<'e: 'a, 'a> Eval<'e, 'a> {
    /// An evaluation as the components of Kubernetes `version` make it.
    pub(crate) fn new(dev: DeviceView<'a>, refs: &'e [Ref], version: KubernetesVersion) -> Self {
        Eval {
            env: Activation::new(dev, version),
            refs,
            scopes: Vec::new(),
            depth: 0,
            args: Vec::new(),
            movable: None,
        }
    }

    /// Named time zones come from `zones` (the program's), read once for all devices; without
    /// it each evaluation reads the files it needs.
    #[cfg(feature = "tzdb")]
    pub(crate) fn set_zones(&mut self, zones: &'e super::tz::ZoneCache) {
        self.env.zones = Some(zones);
    }

    /// Patterns come from `regexes` (the program's), compiled once for all devices.
    pub(crate) fn set_regexes(&mut self, regexes: &'e super::regex_cache::RegexCache) {
        self.env.regexes = Some(regexes);
    }

    fn reference(&self, e: &Expr) -> &'e Ref {
        self.refs.get(e.id as usize).unwrap_or(&Ref::None)
    }

    /// Evaluates `e`; the step budget bounds the work of any expression.
    pub(crate) fn eval(&mut self, e: &'e Expr) -> R<Value<'a>> {
        // A literal costs nothing, as a constant in cel-go's cost tracking (a list literal of
        // constants is built once there, so its elements must not add up here either).
        if let Kind::Lit(l) = &e.kind {
            return Ok(lit(l));
        }
        self.env.step()?;
        self.depth += 1;
        let r = if self.depth.is_multiple_of(STACK_CHECK_EVERY) {
            super::stack::with_stack(|| self.eval_node(e))
        } else {
            self.eval_node(e)
        };
        self.depth -= 1;
        r
    }

    fn eval_node(&mut self, e: &'e Expr) -> R<Value<'a>> {
        match &e.kind {
            Kind::Lit(l) => Ok(lit(l)),
            Kind::Ident(name) => match self.reference(e) {
                Ref::Device => Ok(Value::Device),
                Ref::TypeIdent(t) => Ok(Value::typ(t)),
                Ref::EnumValue(v) => Ok(Value::Int(*v)),
                _ => match self.scopes.iter().rposition(|(n, _)| *n == name.as_str()) {
                    Some(i) if self.movable == Some(i) => {
                        self.movable = None;
                        // A macro's step never reads its accumulator twice; if one did, it
                        // would get this error, not a wrong value.
                        let moved = Err(Error::msg(format!("{name} read twice in one step")));
                        std::mem::replace(&mut self.scopes[i].1, moved)
                    }
                    Some(i) => self.scopes[i].1.clone(),
                    None => Err(Error::msg(format!("no such attribute: {name}"))),
                },
            },
            Kind::Select {
                operand,
                field,
                test_only,
            } => {
                let v = self.eval(operand)?;
                if *test_only {
                    self.has(&v, field).map(Value::Bool)
                } else {
                    self.select(v, field)
                }
            }
            Kind::Call { target, func, args } => self.call(e, target.as_deref(), func, args),
            Kind::List { elems, optional } => {
                let mut out = Vec::with_capacity(elems.len());
                for (i, x) in elems.iter().enumerate() {
                    let v = self.eval(x)?;
                    if optional.get(i).copied().unwrap_or(false) {
                        match v {
                            Value::Optional(Some(v)) => out.push((*v).clone()),
                            Value::Optional(None) => {}
                            other => out.push(other),
                        }
                    } else {
                        out.push(v);
                    }
                }
                Ok(Value::list(out))
            }
            Kind::Map { entries } => {
                let mut m = Map::default();
                for en in entries {
                    let k = self.eval(&en.key)?;
                    let v = self.eval(&en.value)?;
                    let v = if en.optional {
                        match v {
                            Value::Optional(Some(v)) => (*v).clone(),
                            Value::Optional(None) => continue,
                            other => other,
                        }
                    } else {
                        v
                    };
                    // As the scheduler's planner builds a map literal: any key type, and a
                    // repeated key (of the same type) keeps its last value.
                    m.insert(k, v);
                }
                Ok(Value::Map(Rc::new(m)))
            }
            Kind::Struct { type_name, fields } => self.construct(type_name, fields),
            Kind::Comprehension(c) => {
                let range = self.eval(&c.range)?;
                let items: Vec<(Value<'a>, Value<'a>)> = match &range {
                    Value::List(l) => l
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (Value::Int(i as i64), v.clone()))
                        .collect(),
                    m if m.is_map() => self
                        .env
                        .keys(m)
                        .into_iter()
                        .map(|k| {
                            let v = self.env.get(m, &k).unwrap_or(Value::Null);
                            (k, v)
                        })
                        .collect(),
                    other => {
                        return Err(Error::msg(format!(
                            "cannot iterate over {}",
                            other.type_name()
                        )));
                    }
                };
                let accu = self.eval(&c.accu_init);
                if let Err(Error::Cancel(_)) = accu {
                    return accu;
                }
                let base = self.scopes.len();
                self.scopes.push((c.accu_var.as_str(), accu));
                let list = matches!(range, Value::List(_));
                let r = self.loop_(c, items, list, base);
                self.scopes.truncate(base);
                r
            }
        }
    }

    fn loop_(
        &mut self,
        c: &'e super::ast::Comprehension,
        items: Vec<(Value<'a>, Value<'a>)>,
        list: bool,
        base: usize,
    ) -> R<Value<'a>> {
        for (k, v) in items {
            self.env.step()?;
            self.scopes.truncate(base + 1);
            match &c.iter_var2 {
                Some(v2) => {
                    self.scopes.push((c.iter_var.as_str(), Ok(k)));
                    self.scopes.push((v2.as_str(), Ok(v)));
                }
                None => {
                    let x = if list { v } else { k };
                    self.scopes.push((c.iter_var.as_str(), Ok(x)));
                }
            }
            let cond = self.eval(&c.cond);
            if let Err(Error::Cancel(_)) = cond {
                return cond;
            }
            if as_bool(&cond) == Some(false) {
                break;
            }
            let saved = self.movable;
            // Only the accumulators of macros: `cel.bind` and user comprehensions aside.
            if c.accu_var == super::ast::ACCU {
                self.movable = Some(base);
            }
            let next = self.eval(&c.step);
            self.movable = saved;
            if let Err(Error::Cancel(_)) = next {
                return next;
            }
            self.scopes[base].1 = next;
        }
        self.scopes.truncate(base + 1);
        self.eval(&c.result)
    }

    fn has(&self, v: &Value<'a>, field: &'a str) -> R<bool> {
        match v {
            Value::Device => Ok(matches!(
                field,
                "driver" | "attributes" | "capacity" | "allowMultipleAllocations"
            )),
            m if m.is_map() => Ok(self.env.get(m, &Value::string(field.to_string())).is_some()),
            // cel-go tests presence through an optional: an empty one has no field, a full
            // one has the fields of what it holds.
            Value::Optional(None) => Ok(false),
            Value::Optional(Some(inner)) => self.has(inner, field),
            other => Err(Error::msg(format!(
                "invalid type for field selection: {}",
                other.type_name()
            ))),
        }
    }

    fn select(&self, v: Value<'a>, field: &'a str) -> R<Value<'a>> {
        match v {
            Value::Device => match field {
                "driver" => Ok(Value::str(self.env.dev.driver)),
                "attributes" => Ok(Value::Attributes),
                "capacity" => Ok(Value::Capacity),
                "allowMultipleAllocations" => {
                    Ok(Value::Bool(self.env.dev.allow_multiple_allocations))
                }
                _ => Err(Error::msg(format!("no such key: {field}"))),
            },
            Value::Optional(None) => Ok(Value::Optional(None)),
            Value::Optional(Some(inner)) => {
                let inner = (*inner).clone();
                Ok(match self.select(inner, field) {
                    Ok(x) => Value::Optional(Some(Rc::new(x))),
                    Err(_) => Value::Optional(None),
                })
            }
            m if m.is_map() => self
                .env
                .get(&m, &Value::str(field))
                .ok_or_else(|| super::funcs::no_such_key(&m, &Value::str(field))),
            other => Err(Error::msg(format!(
                "type '{}' does not support field selection",
                other.type_name()
            ))),
        }
    }

    fn call(
        &mut self,
        e: &'e Expr,
        target: Option<&'e Expr>,
        func: &str,
        args: &'e [Expr],
    ) -> R<Value<'a>> {
        match func {
            "_&&_" | "_||_" => {
                let stop = func == "_||_";
                let mut err: Option<Error> = None;
                for a in args {
                    match self.eval(a) {
                        Ok(Value::Bool(b)) if b == stop => return Ok(Value::Bool(stop)),
                        Ok(Value::Bool(_)) => {}
                        Err(x @ Error::Cancel(_)) => return Err(x),
                        Err(x) => err = err.or(Some(x)),
                        Ok(_) => err = err.or(Some(Error::no_such_overload())),
                    }
                }
                return match err {
                    Some(x) => Err(x),
                    None => Ok(Value::Bool(!stop)),
                };
            }
            "@in" if args.len() == 2 && super::ast::is_constant_list(&args[1]) => {
                let v = self.eval(&args[0])?;
                let list = self.eval(&args[1])?;
                if let Value::List(elems) = &list
                    && let Some(found) = super::funcs::set_membership(&v, elems)
                {
                    return Ok(Value::Bool(found));
                }
                let mut a = [v, list];
                return super::funcs::in_(&self.env, &mut a);
            }
            "_?_:_" if args.len() == 3 => {
                return match self.eval(&args[0])? {
                    Value::Bool(true) => self.eval(&args[1]),
                    Value::Bool(false) => self.eval(&args[2]),
                    _ => Err(Error::no_such_overload()),
                };
            }
            "@not_strictly_false" if args.len() == 1 => {
                return match self.eval(&args[0]) {
                    Ok(Value::Bool(b)) => Ok(Value::Bool(b)),
                    Err(x @ Error::Cancel(_)) => Err(x),
                    _ => Ok(Value::Bool(true)),
                };
            }
            "_?._" if args.len() == 2 => {
                let v = self.eval(&args[0])?;
                let Kind::Lit(Lit::String(field)) = &args[1].kind else {
                    return Err(Error::no_such_overload());
                };
                return Ok(match v {
                    Value::Optional(None) => Value::Optional(None),
                    Value::Optional(Some(inner)) => match self.has(&inner, field) {
                        Ok(true) => {
                            Value::Optional(Some(Rc::new(self.select((*inner).clone(), field)?)))
                        }
                        _ => Value::Optional(None),
                    },
                    other => match self.has(&other, field)? {
                        true => Value::Optional(Some(Rc::new(self.select(other, field)?))),
                        false => Value::Optional(None),
                    },
                });
            }
            _ => {}
        }
        let base = self.args.len();
        for a in target.into_iter().chain(args) {
            match self.eval(a) {
                Ok(v) => self.args.push(v),
                Err(err) => {
                    self.args.truncate(base);
                    return Err(err);
                }
            }
        }
        let r = dispatch(&self.env, self.reference(e), func, &mut self.args[base..]);
        self.args.truncate(base);
        r
    }
}

/// Runs the overload of `func` the checker resolved (`reference`) for these argument values.
fn dispatch<'a>(
    env: &Activation<'a>,
    reference: &Ref,
    func: &str,
    vals: &mut [Value<'a>],
) -> R<Value<'a>> {
    // Indexing takes any numeric key at run time (`[1, 2][dyn(1u)]`), as cel-go's attribute
    // qualifiers do, whatever overload the checker picked.
    if func == "_[_]" && vals.len() == 2 && !matches!(vals[0], Value::Optional(_)) {
        return super::funcs::index(env, vals);
    }
    let Ref::Func(f, matched) = reference else {
        return Err(Error::msg(format!("no such function: {func}")));
    };
    if let Some(imp) = f.single {
        return imp(env, vals);
    }
    for &i in matched {
        let Some(ov) = f.ovs.get(usize::from(i)) else {
            continue;
        };
        if ov.args.len() == vals.len()
            && ov.args.iter().zip(vals.iter()).all(|(d, v)| fits(d, v))
            && let Some(imp) = ov.imp
        {
            return imp(env, vals);
        }
    }
    let shown: Vec<&str> = vals.iter().map(|v| v.type_name()).collect();
    let ids: Vec<&str> = matched
        .iter()
        .filter_map(|&i| f.ovs.get(usize::from(i)).map(|o| o.id))
        .collect();
    Err(Error::msg(format!(
        "no such overload: {}({}) (checked overloads: {})",
        f.name,
        shown.join(", "),
        ids.join(", ")
    )))
}
