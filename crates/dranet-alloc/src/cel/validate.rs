//! What the scheduler's compiler checks after the type checker, and what its program planner
//! evaluates ahead of time. Both make a selector a compile error before any device is seen:
//!
//! - the AST validators the Kubernetes base environment installs (cel-go's "extended
//!   validations"): list and map literals of one element type (`[1, "a"]` is refused), literal
//!   arguments of `duration()`, `timestamp()` and `matches()` that must parse, and the strings
//!   extension's static check of `"<literal>".format([<list literal>])`;
//! - the planner's constant folding: a type conversion of a constant (`int("abc")`,
//!   `uint(dyn(-1))`) is evaluated when the program is built, and a constant regular
//!   expression is compiled then; an error there is "program instantiation failed".

use super::ast::{Expr, Kind, Lit, is_type_conversion};
use super::attrs::DeviceAttributes;
use super::check::Ref;
use super::device::DeviceView;
use super::eval::Eval;
use super::funcs::GoRegexp;
use super::parse::Issue;
use super::types::{OPTIONAL, Type, type_name};
use crate::version::KubernetesVersion;

/// Runs the validators over a checked tree; `types` and `positions` are indexed by node id.
pub(crate) fn validate(
    version: KubernetesVersion,
    root: &Expr,
    types: &[Type],
    refs: &[Ref],
    positions: &[u32],
) -> Vec<Issue> {
    let mut v = Validator {
        version,
        types,
        refs,
        positions,
        issues: Vec::new(),
    };
    v.walk(root, false);
    v.issues
}

/// Builds the program as cel-go's planner does, only to find the errors it raises: the first
/// constant conversion or constant regular expression that fails.
pub(crate) fn instantiate(
    version: KubernetesVersion,
    root: &Expr,
    refs: &[Ref],
    positions: &[u32],
) -> Result<(), Issue> {
    let mut f = Folder {
        version,
        refs,
        positions,
        attrs: DeviceAttributes::default(),
    };
    f.fold(root).map(|_| ())
}

struct Validator<'a> {
    version: KubernetesVersion,
    types: &'a [Type],
    refs: &'a [Ref],
    positions: &'a [u32],
    issues: Vec<Issue>,
}

impl Validator<'_> {
    fn ty(&self, e: &Expr) -> Type {
        self.types.get(e.id as usize).cloned().unwrap_or(Type::Dyn)
    }

    fn issue(&mut self, e: &Expr, message: String) {
        self.issues.push(Issue {
            offset: self.positions.get(e.id as usize).copied(),
            message,
        });
    }

    /// Visits every node; `in_format` is set below a `format` call, whose list literals are
    /// exempt from the one-element-type rule.
    fn walk(&mut self, e: &Expr, in_format: bool) {
        super::stack::with_stack(|| self.walk_node(e, in_format));
    }

    fn walk_node(&mut self, e: &Expr, in_format: bool) {
        match &e.kind {
            Kind::Lit(_) | Kind::Ident(_) => {}
            Kind::Select { operand, .. } => self.walk(operand, in_format),
            Kind::Call { target, func, args } => {
                self.check_call(e, target.as_deref(), func, args);
                let inner = in_format || func == "format";
                if let Some(t) = target {
                    self.walk(t, inner);
                }
                for a in args {
                    self.walk(a, inner);
                }
            }
            Kind::List { elems, optional } => {
                if !in_format {
                    self.homogeneous_list(elems, optional);
                }
                for x in elems {
                    self.walk(x, in_format);
                }
            }
            Kind::Map { entries } => {
                if !in_format {
                    self.homogeneous_map(entries);
                }
                for en in entries {
                    self.walk(&en.key, in_format);
                    self.walk(&en.value, in_format);
                }
            }
            Kind::Struct { fields, .. } => {
                for (_, _, v, _) in fields {
                    self.walk(v, in_format);
                }
            }
            Kind::Comprehension(c) => {
                for x in [&c.range, &c.accu_init, &c.cond, &c.step, &c.result] {
                    self.walk(x, in_format);
                }
            }
        }
    }

    /// The type an element contributes: an optional element `?x` contributes its value type.
    fn elem_type(&self, e: &Expr, optional: bool) -> Type {
        let t = self.ty(e);
        match (&t, optional) {
            (Type::Opaque(OPTIONAL, p), true) if !p.is_empty() => p[0].clone(),
            _ => t,
        }
    }

    fn mismatch(&mut self, e: &Expr, want: &Type, found: &Type) {
        self.issue(e, format!("expected type '{want}' but found '{found}'"));
    }

    fn homogeneous_list(&mut self, elems: &[Expr], optional: &[bool]) {
        let mut first: Option<Type> = None;
        for (i, x) in elems.iter().enumerate() {
            let t = self.elem_type(x, optional.get(i).copied().unwrap_or(false));
            match &first {
                None => first = Some(t),
                Some(f) if !f.exact(&t) => {
                    let f = f.clone();
                    self.mismatch(x, &f, &t);
                    break;
                }
                Some(_) => {}
            }
        }
    }

    fn homogeneous_map(&mut self, entries: &[super::ast::Entry]) {
        let mut first: Option<(Type, Type)> = None;
        for en in entries {
            let kt = self.ty(&en.key);
            let vt = self.elem_type(&en.value, en.optional);
            match &first {
                None => first = Some((kt, vt)),
                Some((k0, v0)) => {
                    let (k0, v0) = (k0.clone(), v0.clone());
                    if !k0.exact(&kt) {
                        self.mismatch(&en.key, &k0, &kt);
                    }
                    if !v0.exact(&vt) {
                        self.mismatch(&en.value, &v0, &vt);
                    }
                }
            }
        }
    }

    fn check_call(&mut self, call: &Expr, target: Option<&Expr>, func: &str, args: &[Expr]) {
        match func {
            "duration" | "timestamp" if target.is_none() => {
                let Some(
                    arg @ Expr {
                        kind: Kind::Lit(_), ..
                    },
                ) = args.first()
                else {
                    return;
                };
                let attrs = DeviceAttributes::default();
                let view = view(&attrs);
                if Eval::new(view, self.refs, self.version).eval(call).is_err() {
                    self.issue(arg, format!("invalid {func} argument"));
                }
            }
            "matches" => {
                let Some(
                    arg @ Expr {
                        kind: Kind::Lit(Lit::String(p)),
                        ..
                    },
                ) = args.first()
                else {
                    return;
                };
                if super::funcs::compile_regex(p, GoRegexp::of(self.version)).is_err() {
                    self.issue(arg, "invalid matches argument".into());
                }
            }
            "format" => {
                if let (
                    Some(Expr {
                        kind: Kind::Lit(Lit::String(f)),
                        ..
                    }),
                    [
                        Expr {
                            kind: Kind::List { elems, .. },
                            ..
                        },
                    ],
                ) = (target, args)
                    && let Err((at, m)) = self.check_format(f, elems)
                {
                    // The element at fault, or the call when the format string itself is.
                    self.issue(at.unwrap_or(call), m);
                }
            }
            _ => {}
        }
    }

    /// The strings extension's static check of a literal format string against the static types
    /// of a list literal's elements. Returns the element to blame and the message.
    fn check_format<'e>(
        &self,
        f: &str,
        elems: &'e [Expr],
    ) -> Result<(), (Option<&'e Expr>, String)> {
        let clauses = super::funcs::format::parse_format(f).map_err(|m| (None, m))?;
        let mut seen = 0usize;
        for piece in clauses {
            let super::funcs::format::Piece::Clause(verb, _) = piece else {
                continue;
            };
            let Some(arg) = elems.get(seen) else {
                return Err((
                    None,
                    format!("error during formatting: index {seen} out of range"),
                ));
            };
            seen += 1;
            let t = self.ty(arg);
            let kind_ok = |allowed: &[fn(&Type) -> bool]| {
                matches!(t, Type::Dyn) || allowed.iter().any(|ok| ok(&t))
            };
            let int = |t: &Type| matches!(t, Type::Int);
            let uint = |t: &Type| matches!(t, Type::Uint);
            let dbl = |t: &Type| matches!(t, Type::Double);
            let st = |t: &Type| matches!(t, Type::String);
            let bytes = |t: &Type| matches!(t, Type::Bytes);
            let boolean = |t: &Type| matches!(t, Type::Bool);
            let (ok, what) = match verb {
                's' => match self.string_clause_ok(arg) {
                    Ok(()) => (true, ""),
                    Err(bad) => {
                        return Err((
                            Some(bad),
                            format!(
                                "error during formatting: string clause can only be used on \
                                 strings, bools, bytes, ints, doubles, maps, lists, types, \
                                 durations, and timestamps, was given {}",
                                type_name(&self.ty(bad))
                            ),
                        ));
                    }
                },
                'd' => (
                    kind_ok(&[int, uint]),
                    "decimal clause can only be used on integers",
                ),
                'o' => (
                    kind_ok(&[int, uint]),
                    "octal clause can only be used on integers",
                ),
                'f' => (
                    kind_ok(&[dbl, st]),
                    "fixed-point clause can only be used on doubles",
                ),
                'e' => (
                    kind_ok(&[dbl, st]),
                    "scientific clause can only be used on doubles",
                ),
                'b' => (
                    kind_ok(&[int, uint, boolean]),
                    "only integers and bools can be formatted as binary",
                ),
                _ => (
                    kind_ok(&[int, uint, st, bytes]),
                    "only integers, byte buffers, and strings can be formatted as hex",
                ),
            };
            if !ok {
                return Err((
                    Some(arg),
                    format!(
                        "error during formatting: {what}, was given {}",
                        type_name(&t)
                    ),
                ));
            }
        }
        if elems.len() > seen {
            return Err((
                None,
                format!(
                    "too many arguments supplied to string.format (expected {seen}, got {})",
                    elems.len()
                ),
            ));
        }
        Ok(())
    }

    /// `%s` takes scalars, lists and maps, looking into list and map literals element by element.
    fn string_clause_ok<'e>(&self, e: &'e Expr) -> Result<(), &'e Expr> {
        let ok = matches!(
            self.ty(e),
            Type::Dyn
                | Type::List(_)
                | Type::Map(..)
                | Type::Int
                | Type::Uint
                | Type::Double
                | Type::Bool
                | Type::String
                | Type::Timestamp
                | Type::Bytes
                | Type::Duration
                | Type::Type(_)
                | Type::Null
        );
        if !ok {
            return Err(e);
        }
        match &e.kind {
            Kind::List { elems, .. } => elems.iter().try_for_each(|x| self.string_clause_ok(x)),
            Kind::Map { entries } => entries.iter().try_for_each(|en| {
                self.string_clause_ok(&en.key)?;
                self.string_clause_ok(&en.value)
            }),
            _ => Ok(()),
        }
    }
}

fn view(attrs: &DeviceAttributes) -> DeviceView<'_> {
    DeviceView {
        driver: "",
        attributes: attrs,
        allow_multiple_allocations: false,
    }
}

struct Folder<'a> {
    version: KubernetesVersion,
    refs: &'a [Ref],
    positions: &'a [u32],
    attrs: DeviceAttributes,
}

impl Folder<'_> {
    fn fail(&self, e: &Expr, message: &str) -> Issue {
        Issue {
            offset: self.positions.get(e.id as usize).copied(),
            message: format!("program instantiation failed: {message}"),
        }
    }

    /// Whether `e` is a constant once planned; the first planning error aborts.
    fn fold(&mut self, e: &Expr) -> Result<bool, Issue> {
        super::stack::with_stack(|| self.fold_node(e))
    }

    fn fold_node(&mut self, e: &Expr) -> Result<bool, Issue> {
        Ok(match &e.kind {
            Kind::Lit(_) => true,
            Kind::Ident(_) => match self.refs.get(e.id as usize) {
                // The checker knows the well-known message names as types, the planner only
                // the ones CEL has values for (`google.protobuf.Duration`, `Timestamp`).
                Some(Ref::TypeIdent(name)) if super::message::undefined_type_value(name) => {
                    return Err(self.fail(e, &format!("reference to undefined type: {name}")));
                }
                Some(Ref::TypeIdent(_) | Ref::EnumValue(_)) => true,
                _ => false,
            },
            Kind::Select { operand, .. } => {
                self.fold(operand)?;
                false
            }
            Kind::List { elems, .. } => {
                let mut all = true;
                for x in elems {
                    all &= self.fold(x)?;
                }
                all
            }
            Kind::Map { entries } => {
                let mut all = true;
                for en in entries {
                    all &= self.fold(&en.key)?;
                    all &= self.fold(&en.value)?;
                }
                all
            }
            Kind::Struct { fields, .. } => {
                for (_, _, v, _) in fields {
                    self.fold(v)?;
                }
                false
            }
            Kind::Comprehension(c) => {
                for x in [&c.range, &c.accu_init, &c.cond, &c.step, &c.result] {
                    self.fold(x)?;
                }
                false
            }
            Kind::Call { target, func, args } => {
                let mut consts = Vec::with_capacity(args.len() + 1);
                if let Some(t) = target {
                    consts.push(self.fold(t)?);
                }
                for a in args {
                    consts.push(self.fold(a)?);
                }
                // The pattern of `matches`, `find` and `findAll` (receiver first) is compiled
                // when constant.
                if matches!(func.as_str(), "matches" | "find" | "findAll") && consts.len() == 2 {
                    let pattern = match target {
                        Some(_) => args.first(),
                        None => args.get(1),
                    };
                    if consts[1]
                        && let Some(p) = pattern.and_then(|p| self.const_string(p))
                        && let Err(m) = super::funcs::compile_regex(&p, GoRegexp::of(self.version))
                    {
                        return Err(self.fail(e, &m));
                    }
                }
                // A constant index becomes one of the planner's qualifiers, which exist only
                // for strings, integers, booleans and doubles.
                if matches!(func.as_str(), "_[_]" | "_[?_]")
                    && consts.get(1) == Some(&true)
                    && let Some(t) = args.get(1).and_then(|i| self.invalid_qualifier(i))
                {
                    return Err(self.fail(e, &format!("invalid qualifier type: {t}")));
                }
                if target.is_none() && is_type_conversion(func) && consts == [true] {
                    return match self.const_error(e) {
                        None => Ok(true),
                        Some(m) => Err(self.fail(e, &m)),
                    };
                }
                false
            }
        })
    }

    /// The string a constant subtree evaluates to, if it is one.
    fn const_string(&self, e: &Expr) -> Option<String> {
        match Eval::new(view(&self.attrs), self.refs, self.version).eval(e) {
            Ok(super::value::Value::Str(s)) => Some(s.to_string()),
            _ => None,
        }
    }

    /// The Go type of a constant index that cannot be a qualifier, as cel-go names it.
    fn invalid_qualifier(&self, e: &Expr) -> Option<&'static str> {
        use super::value::Value as V;
        match Eval::new(view(&self.attrs), self.refs, self.version).eval(e) {
            Ok(V::Bytes(_)) => Some("types.Bytes"),
            Ok(V::Null) => Some("types.Null"),
            Ok(V::Duration(_)) => Some("types.Duration"),
            Ok(V::Timestamp(..)) => Some("types.Timestamp"),
            _ => None,
        }
    }

    /// The error evaluating a constant subtree raises, if any.
    fn const_error(&self, e: &Expr) -> Option<String> {
        Eval::new(view(&self.attrs), self.refs, self.version)
            .eval(e)
            .err()
            .map(|err| err.message().to_string())
    }
}
