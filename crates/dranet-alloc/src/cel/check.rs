//! The type checker, following cel-go's: identifiers and functions resolved against the
//! scheduler's declarations (`device` is a `kubernetes.DRADevice`; attribute values are
//! `google.protobuf.Any`, checked like `dyn`; capacities are `kubernetes.Quantity`), overloads
//! chosen by assignability with type parameters, and the same error messages.

mod message;

use super::ast::{Comprehension, Expr, Id, Kind, Lit};
use super::decls::{self, EnvType, Func};
use super::parse::Issue;
use super::types::{
    self as t, Mapping, Type, is_assignable, is_assignable_list, most_general, substitute,
};

/// What an identifier or call resolved to.
#[derive(Debug, Clone)]
pub(crate) enum Ref {
    None,
    /// The `device` variable.
    Device,
    /// A comprehension or `cel.bind` variable.
    Var,
    /// A type name used as a value.
    TypeIdent(String),
    /// A protobuf enum value (`google.protobuf.NullValue.NULL_VALUE`): an `int` constant.
    EnumValue(i64),
    /// A function and the overloads that matched, by index.
    Func(&'static Func, Vec<u16>),
}

pub(crate) struct Checked {
    pub types: Vec<Type>,
    pub refs: Vec<Ref>,
}

struct Checker<'p> {
    env: EnvType,
    positions: &'p [u32],
    types: Vec<Option<Type>>,
    refs: Vec<Ref>,
    mapping: Mapping,
    /// The types of the `device` fields named so far, built on first use: most selectors name
    /// `device.attributes` more than once.
    device_fields: Vec<(&'static str, Type)>,
    /// Scratch for the parameter types of the overload being tried.
    cand: Vec<Type>,
    next_var: u32,
    scopes: Vec<(String, Type)>,
    errors: Vec<Issue>,
}

/// The fields of `device`: `driver`, `attributes`, `capacity`, and `allowMultipleAllocations`
/// where `env` declares it.
fn device_field(name: &str, env: EnvType) -> Option<(&'static str, Type)> {
    Some(match name {
        "driver" => ("driver", Type::String),
        "attributes" => (
            "attributes",
            Type::map(Type::String, Type::map(Type::String, Type::Any)),
        ),
        "capacity" => (
            "capacity",
            Type::map(
                Type::String,
                Type::map(Type::String, Type::Object(t::QUANTITY)),
            ),
        ),
        "allowMultipleAllocations" if env.has_allow_multiple_allocations() => {
            ("allowMultipleAllocations", Type::Bool)
        }
        _ => return None,
    })
}

/// `a.b.c` as one dotted name, when `e` is a chain of field selections on an identifier, and the
/// name could be a namespaced type or function. Chains on `device` never are (no declaration's
/// name starts with `device.`), and they are most of a selector: they skip building the string.
fn qualified_name(e: &Expr) -> Option<String> {
    let mut root = e;
    while let Kind::Select {
        operand,
        test_only: false,
        ..
    } = &root.kind
    {
        root = operand;
    }
    match &root.kind {
        Kind::Ident(n) if n != "device" => dotted(e),
        _ => None,
    }
}

fn dotted(e: &Expr) -> Option<String> {
    match &e.kind {
        Kind::Ident(n) => Some(n.clone()),
        Kind::Select {
            operand,
            field,
            test_only: false,
        } => dotted(operand).map(|q| format!("{q}.{field}")),
        _ => None,
    }
}

/// Type-checks a parsed expression in `env`, rewriting namespaced calls (`sets.contains(...)`)
/// and qualified identifiers into their resolved form.
pub(crate) fn check(e: &mut Expr, positions: &[u32], env: EnvType) -> Result<Checked, Vec<Issue>> {
    let n = positions.len();
    let mut c = Checker {
        env,
        positions,
        types: vec![None; n],
        refs: vec![Ref::None; n],
        mapping: Mapping::default(),
        cand: Vec::new(),
        device_fields: Vec::new(),
        next_var: 0,
        scopes: Vec::new(),
        errors: Vec::new(),
    };
    c.check(e);
    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    let types = c
        .types
        .iter()
        .map(|t| match t {
            Some(t) => substitute(&c.mapping, t, true),
            None => Type::Dyn,
        })
        .collect();
    Ok(Checked {
        types,
        refs: c.refs,
    })
}

impl Checker<'_> {
    fn at(&self, id: Id) -> Option<u32> {
        self.positions.get(id as usize).copied()
    }

    fn error(&mut self, id: Id, message: String) {
        let offset = self.at(id);
        self.errors.push(Issue { offset, message });
    }

    fn set_type(&mut self, id: Id, t: Type) {
        self.types[id as usize] = Some(t);
    }

    fn get_type(&self, id: Id) -> Type {
        self.types[id as usize].clone().unwrap_or(Type::Error)
    }

    fn new_var(&mut self) -> Type {
        let v = self.next_var;
        self.next_var += 1;
        Type::Param(v)
    }

    fn assignable(&mut self, t1: &Type, t2: &Type) -> bool {
        is_assignable(&mut self.mapping, t1, t2)
    }

    /// The type of `device.<name>`, if `env` declares the field.
    fn device_field(&mut self, name: &str) -> Option<Type> {
        if let Some((_, t)) = self.device_fields.iter().find(|(n, _)| *n == name) {
            return Some(t.clone());
        }
        let (n, t) = device_field(name, self.env)?;
        self.device_fields.push((n, t.clone()));
        Some(t)
    }

    fn lookup_ident(&self, name: &str) -> Option<(Type, Ref)> {
        let name = name.strip_prefix('.').unwrap_or(name);
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return Some((t.clone(), Ref::Var));
        }
        if name == "device" {
            return Some((Type::Object(t::DEVICE), Ref::Device));
        }
        if let Some(v) = crate::cel::message::enum_value(name) {
            return Some((Type::Int, Ref::EnumValue(v)));
        }
        decls::type_ident(name)
            .or_else(|| crate::cel::message::type_ident(name))
            .map(|t| (t, Ref::TypeIdent(name.to_string())))
    }

    /// Checks `e`; deep trees continue on a fresh stack segment (see `with_stack`).
    fn check(&mut self, e: &mut Expr) {
        super::stack::with_stack(|| self.check_node(e))
    }

    fn check_node(&mut self, e: &mut Expr) {
        match &mut e.kind {
            Kind::Lit(l) => {
                let t = match l {
                    Lit::Null => Type::Null,
                    Lit::Bool(_) => Type::Bool,
                    Lit::Int(_) => Type::Int,
                    Lit::Uint(_) => Type::Uint,
                    Lit::Double(_) => Type::Double,
                    Lit::String(_) => Type::String,
                    Lit::Bytes(_) => Type::Bytes,
                };
                self.set_type(e.id, t);
            }
            Kind::Ident(name) => {
                let name = name.clone();
                match self.lookup_ident(&name) {
                    Some((t, r)) => {
                        self.set_type(e.id, t);
                        self.refs[e.id as usize] = r;
                        if let Kind::Ident(n) = &mut e.kind {
                            *n = name.trim_start_matches('.').to_string();
                        }
                    }
                    None => {
                        self.set_type(e.id, Type::Error);
                        self.error(
                            e.id,
                            format!("undeclared reference to '{name}' (in container '')"),
                        );
                    }
                }
            }
            Kind::Select { .. } => self.check_select(e),
            Kind::Call { .. } => self.check_call(e),
            Kind::List { elems, optional } => {
                let mut elem: Option<Type> = None;
                for (i, x) in elems.iter_mut().enumerate() {
                    self.check(x);
                    let mut et = self.get_type(x.id);
                    if optional.get(i).copied().unwrap_or(false) {
                        let (inner, is_opt) = et.unwrap_optional();
                        if !is_opt && !inner.is_dyn() {
                            let msg = format!(
                                "expected type '{}' but found '{}'",
                                Type::optional(inner.clone()),
                                inner
                            );
                            self.error(x.id, msg);
                        }
                        et = inner;
                    }
                    elem = Some(self.join(elem, et));
                }
                let elem = match elem {
                    Some(t) => t,
                    None => self.new_var(),
                };
                self.set_type(e.id, Type::list(elem));
            }
            Kind::Map { entries } => {
                let (mut kt, mut vt): (Option<Type>, Option<Type>) = (None, None);
                for en in entries.iter_mut() {
                    self.check(&mut en.key);
                    let k = self.get_type(en.key.id);
                    kt = Some(self.join(kt, k));
                    self.check(&mut en.value);
                    let mut v = self.get_type(en.value.id);
                    if en.optional {
                        let (inner, is_opt) = v.unwrap_optional();
                        if !is_opt && !inner.is_dyn() {
                            let msg = format!(
                                "expected type '{}' but found '{}'",
                                Type::optional(inner.clone()),
                                inner
                            );
                            self.error(en.value.id, msg);
                        }
                        v = inner;
                    }
                    vt = Some(self.join(vt, v));
                }
                let (k, v) = match (kt, vt) {
                    (Some(k), Some(v)) => (k, v),
                    _ => (self.new_var(), self.new_var()),
                };
                self.set_type(e.id, Type::map(k, v));
            }
            Kind::Struct { .. } => self.check_struct(e),
            Kind::Comprehension(c) => {
                let id = e.id;
                self.check_comprehension(id, c);
            }
        }
    }

    /// The join of aggregate literal element types: the more general when they unify,
    /// otherwise `dyn` (homogeneity is a separate validation).
    fn join(&mut self, prev: Option<Type>, cur: Type) -> Type {
        match prev {
            None => cur,
            Some(p) => {
                if self.assignable(&p, &cur) {
                    most_general(&p, &cur)
                } else {
                    Type::Dyn
                }
            }
        }
    }

    fn check_select(&mut self, e: &mut Expr) {
        if let Some(q) = qualified_name(e)
            && let Some((t, r)) = self.lookup_ident(&q)
        {
            self.set_type(e.id, t);
            self.refs[e.id as usize] = r;
            e.kind = Kind::Ident(q.trim_start_matches('.').to_string());
            return;
        }
        let Kind::Select {
            operand,
            field,
            test_only,
        } = &mut e.kind
        else {
            return;
        };
        let test_only = *test_only;
        let field = field.clone();
        let id = e.id;
        let rt = self.check_select_field(id, operand, &field, false);
        let rt = if test_only { Type::Bool } else { rt };
        let rt = substitute(&self.mapping, &rt, false);
        self.set_type(id, rt);
    }

    fn check_select_field(
        &mut self,
        id: Id,
        operand: &mut Expr,
        field: &str,
        optional: bool,
    ) -> Type {
        self.check(operand);
        let ot = substitute(&self.mapping, &self.get_type(operand.id), false);
        let (target, is_opt) = ot.unwrap_optional();
        let result = match &target {
            Type::Map(_, v) => (**v).clone(),
            Type::Object(t::DEVICE) => match self.device_field(field) {
                Some(t) => t,
                None => {
                    self.error(id, format!("undefined field '{field}'"));
                    Type::Error
                }
            },
            Type::Object(_) => {
                self.error(id, format!("undefined field '{field}'"));
                Type::Error
            }
            Type::Param(_) => {
                self.assignable(&Type::Dyn, &target);
                Type::Dyn
            }
            t if t.is_dyn() || matches!(t, Type::Error) => Type::Dyn,
            t => {
                self.error(id, format!("type '{t}' does not support field selection"));
                Type::Dyn
            }
        };
        if is_opt || optional {
            Type::optional(result)
        } else {
            result
        }
    }

    fn check_call(&mut self, e: &mut Expr) {
        let id = e.id;
        let Kind::Call { target, func, args } = &mut e.kind else {
            return;
        };
        if func == "_?._" {
            if target.is_some() || args.len() != 2 {
                self.error(
                    id,
                    "unsupported optional field selection: incorrect signature".into(),
                );
                self.set_type(id, Type::Error);
                return;
            }
            let field = match &args[1].kind {
                Kind::Lit(Lit::String(s)) => s.to_string(),
                _ => {
                    let fid = args[1].id;
                    self.error(fid, "unsupported optional field selection".into());
                    self.set_type(id, Type::Error);
                    return;
                }
            };
            let (first, _) = args.split_at_mut(1);
            let rt = self.check_select_field(id, &mut first[0], &field, true);
            let rt = substitute(&self.mapping, &rt, false);
            self.set_type(id, rt);
            self.refs[id as usize] = Ref::Func(decls::lookup("_?._").expect("declared"), vec![0]);
            return;
        }
        for a in args.iter_mut() {
            self.check(a);
        }
        let Some(tgt) = target.as_deref_mut() else {
            let name = func.trim_start_matches('.').to_string();
            match self.env.lookup(&name) {
                None => {
                    self.error(
                        id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                    self.set_type(id, Type::Error);
                }
                Some(f) => {
                    *func = name;
                    let arg_ids: Vec<Id> = args.iter().map(|a| a.id).collect();
                    self.resolve(id, f, None, &arg_ids);
                }
            }
            return;
        };
        // `a.b.f()`: a namespaced function `a.b.f`, or `f` with receiver `a.b`.
        if let Some(q) = qualified_name(tgt) {
            let name = format!("{}.{}", q.trim_start_matches('.'), func);
            if let Some(f) = self.env.lookup(&name) {
                *func = name;
                *target = None;
                let arg_ids: Vec<Id> = args.iter().map(|a| a.id).collect();
                self.resolve(id, f, None, &arg_ids);
                return;
            }
        }
        self.check(tgt);
        let tid = tgt.id;
        match self.env.lookup(func) {
            Some(f) => {
                let arg_ids: Vec<Id> = args.iter().map(|a| a.id).collect();
                self.resolve(id, f, Some(tid), &arg_ids);
            }
            None => {
                self.set_type(id, Type::Error);
                let name = func.clone();
                self.error(
                    id,
                    format!("undeclared reference to '{name}' (in container '')"),
                );
            }
        }
    }

    fn resolve(&mut self, id: Id, f: &'static Func, target: Option<Id>, args: &[Id]) {
        let mut arg_types: Vec<Type> = Vec::with_capacity(args.len() + 1);
        if let Some(t) = target {
            arg_types.push(self.get_type(t));
        }
        for a in args {
            arg_types.push(self.get_type(*a));
        }
        if f.name == "_&&_" || f.name == "_||_" {
            let mut ok = true;
            for (i, at) in arg_types.iter().enumerate() {
                if !self.assignable(at, &Type::Bool) {
                    let msg = format!("expected type 'bool' but found '{at}'");
                    self.error(args[i], msg);
                    ok = false;
                }
            }
            if ok {
                self.set_type(id, Type::Bool);
                self.refs[id as usize] = Ref::Func(f, vec![0]);
            } else {
                self.set_type(id, Type::Error);
            }
            return;
        }
        let mut result: Option<Type> = None;
        let mut matched: Vec<u16> = Vec::new();
        // One candidate list for every overload tried (and every call checked).
        let mut cand = std::mem::take(&mut self.cand);
        for (i, ov) in f.ovs.iter().enumerate() {
            if ov.member != target.is_some() || ov.args.len() != arg_types.len() {
                continue;
            }
            let np = ov
                .args
                .iter()
                .map(|d| d.params())
                .max()
                .unwrap_or(0)
                .max(ov.ret.params());
            if !ov.args.iter().zip(&arg_types).all(|(d, t)| d.may_accept(t)) {
                // Numbered as if tried, so type variables keep cel-go's names.
                self.next_var += u32::from(np);
                continue;
            }
            let params: Vec<Type> = (0..np).map(|_| self.new_var()).collect();
            cand.clear();
            cand.extend(ov.args.iter().map(|d| d.to_type(&params)));
            if is_assignable_list(&mut self.mapping, &arg_types, &cand) {
                matched.push(i as u16);
                let rt = substitute(&self.mapping, &ov.ret.to_type(&params), false);
                result = Some(match result {
                    None => rt,
                    Some(r) if !r.is_dyn() && r != rt => Type::Dyn,
                    Some(r) => r,
                });
            }
        }
        cand.clear();
        self.cand = cand;
        match result {
            Some(rt) => {
                self.set_type(id, rt);
                self.refs[id as usize] = Ref::Func(f, matched);
            }
            None => {
                let shown: Vec<String> = arg_types
                    .iter()
                    .map(|t| substitute(&self.mapping, t, true).to_string())
                    .collect();
                let sig = if target.is_some() {
                    format!("{}.({})", shown[0], shown[1..].join(", "))
                } else {
                    format!("({})", shown.join(", "))
                };
                self.error(
                    id,
                    format!(
                        "found no matching overload for '{}' applied to '{sig}'",
                        f.name
                    ),
                );
                self.set_type(id, Type::Error);
            }
        }
    }

    fn check_comprehension(&mut self, id: Id, c: &mut Comprehension) {
        self.check(&mut c.range);
        self.check(&mut c.accu_init);
        let range_t = substitute(&self.mapping, &self.get_type(c.range.id), false);
        let accu_t = self.get_type(c.accu_init.id);
        self.scopes.push((c.accu_var.clone(), accu_t.clone()));
        let two = c.iter_var2.is_some();
        let (v1, v2) = match &range_t {
            Type::List(e) => {
                if two {
                    (Type::Int, (**e).clone())
                } else {
                    ((**e).clone(), Type::Dyn)
                }
            }
            Type::Map(k, v) => ((**k).clone(), (**v).clone()),
            // Not `any` (what attribute values are declared as): cel-go ranges only over
            // lists, maps, `dyn` and type parameters, so iterating an attribute is a compile
            // error in the scheduler, not a runtime one.
            Type::Dyn | Type::Error | Type::Param(_) => {
                self.assignable(&Type::Dyn, &range_t);
                (Type::Dyn, Type::Dyn)
            }
            other => {
                let rid = c.range.id;
                self.error(
                    rid,
                    format!(
                        "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                    ),
                );
                (Type::Error, Type::Error)
            }
        };
        let scope_len = self.scopes.len();
        self.scopes.push((c.iter_var.clone(), v1));
        if let Some(v) = &c.iter_var2 {
            self.scopes.push((v.clone(), v2));
        }
        self.check(&mut c.cond);
        let ct = self.get_type(c.cond.id);
        if !self.assignable(&Type::Bool, &ct) {
            let cid = c.cond.id;
            self.error(cid, format!("expected type 'bool' but found '{ct}'"));
        }
        self.check(&mut c.step);
        let st = self.get_type(c.step.id);
        if !self.assignable(&accu_t, &st) {
            let sid = c.step.id;
            self.error(sid, format!("expected type '{accu_t}' but found '{st}'"));
        }
        self.scopes.truncate(scope_len);
        self.check(&mut c.result);
        self.scopes.pop();
        let rt = substitute(&self.mapping, &self.get_type(c.result.id), false);
        self.set_type(id, rt);
    }
}
