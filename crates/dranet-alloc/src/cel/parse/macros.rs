//! The macros, expanded as cel-go expands them: `has`, `all`, `exists`, `exists_one`, `map`,
//! `filter`, `cel.bind`, the two-variable comprehensions and `sortBy`, into comprehensions.

use super::Parser;
use crate::cel::ast::{ACCU, Comprehension, Entry, Expr, Kind, Lit};

impl<'a> Parser<'a> {
    fn ident_name(e: &Expr) -> Option<&str> {
        match &e.kind {
            Kind::Ident(n) => Some(n),
            _ => None,
        }
    }

    fn macro_error(&mut self, e: &Expr, message: impl Into<String>) -> Result<Expr, ()> {
        let at = self.positions[e.id as usize];
        self.error_at(Some(at), message);
        Err(())
    }

    fn lit(&mut self, at: u32, l: Lit) -> Expr {
        self.node(at, Kind::Lit(l))
    }

    fn accu(&mut self, at: u32) -> Expr {
        self.node(at, Kind::Ident(ACCU.into()))
    }

    fn comprehension(&mut self, at: u32, c: Comprehension) -> Expr {
        self.node(at, Kind::Comprehension(Box::new(c)))
    }

    pub(super) fn global_call(
        &mut self,
        at: u32,
        func: &str,
        mut args: Vec<Expr>,
    ) -> Result<Expr, ()> {
        if func == "has" && args.len() == 1 {
            let arg = args.pop().ok_or(())?;
            return match arg.kind {
                Kind::Select { operand, field, .. } => Ok(self.node(
                    at,
                    Kind::Select {
                        operand,
                        field,
                        test_only: true,
                    },
                )),
                _ => {
                    let e = Expr {
                        id: arg.id,
                        kind: Kind::Lit(Lit::Null),
                    };
                    self.macro_error(&e, "invalid argument to has() macro")
                }
            };
        }
        Ok(self.call(at, func, None, args))
    }

    /// A macro's iteration variable; `not_a_name` is the macro's message when it is not one
    /// (cel-go words it differently for `all`/`exists` and for `map`/`filter`/`sortBy`).
    fn iter_var(&mut self, e: &Expr, not_a_name: &str) -> Result<String, ()> {
        match Self::ident_name(e) {
            Some(v) if v == ACCU || v == "__result__" => {
                self.macro_error(e, "iteration variable overwrites accumulator variable")?;
                Err(())
            }
            Some(v) => Ok(v.to_string()),
            None => {
                self.macro_error(e, not_a_name)?;
                Err(())
            }
        }
    }

    fn iter_vars(&mut self, a: &Expr, b: &Expr) -> Result<(String, String), ()> {
        let v1 = match Self::ident_name(a) {
            Some(v) => v.to_string(),
            None => {
                self.macro_error(a, "argument must be a simple name")?;
                return Err(());
            }
        };
        let v2 = match Self::ident_name(b) {
            Some(v) => v.to_string(),
            None => {
                self.macro_error(b, "argument must be a simple name")?;
                return Err(());
            }
        };
        if v1 == v2 {
            self.macro_error(b, format!("duplicate variable name: {v1}"))?;
        }
        if v1 == ACCU || v1 == "__result__" {
            self.macro_error(a, "iteration variable overwrites accumulator variable")?;
        }
        if v2 == ACCU || v2 == "__result__" {
            self.macro_error(b, "iteration variable overwrites accumulator variable")?;
        }
        Ok((v1, v2))
    }

    /// `target.name(args)`: a macro when one matches name, receiver and argument count.
    pub(super) fn receiver_call(
        &mut self,
        at: u32,
        name: &str,
        target: Expr,
        mut args: Vec<Expr>,
    ) -> Result<Expr, ()> {
        let n = args.len();
        match (name, n) {
            ("all" | "exists" | "exists_one", 2) => {
                let v = self.iter_var(&args[0], "argument must be a simple name")?;
                let body = args.pop().ok_or(())?;
                let kind = if name == "all" {
                    0
                } else if name == "exists" {
                    1
                } else {
                    2
                };
                Ok(self.quantifier(at, kind, target, v, None, body))
            }
            ("all" | "exists" | "exists_one" | "existsOne", 3) => {
                let (v1, v2) = self.iter_vars(&args[0], &args[1])?;
                let body = args.pop().ok_or(())?;
                let kind = if name == "all" {
                    0
                } else if name == "exists" {
                    1
                } else {
                    2
                };
                Ok(self.quantifier(at, kind, target, v1, Some(v2), body))
            }
            ("map", 2 | 3) | ("filter", 2) => {
                let v = self.iter_var(&args[0], "argument is not an identifier")?;
                let (filter, transform) = if name == "filter" {
                    let f = args.pop().ok_or(())?;
                    let var = args.pop().ok_or(())?;
                    (Some(f), var)
                } else if n == 3 {
                    let t = args.pop().ok_or(())?;
                    let f = args.pop().ok_or(())?;
                    (Some(f), t)
                } else {
                    (None, args.pop().ok_or(())?)
                };
                Ok(self.transform_list(at, target, v, None, filter, transform))
            }
            ("transformList", 3 | 4) | ("transformMap", 3 | 4) | ("transformMapEntry", 3 | 4) => {
                let (v1, v2) = self.iter_vars(&args[0], &args[1])?;
                let transform = args.pop().ok_or(())?;
                let filter = if n == 4 { args.pop() } else { None };
                if name == "transformList" {
                    return Ok(self.transform_list(at, target, v1, Some(v2), filter, transform));
                }
                let accu = self.accu(at);
                let mut ins = vec![accu];
                if name == "transformMap" {
                    let k = self.node(at, Kind::Ident(v1.clone()));
                    ins.push(k);
                }
                ins.push(transform);
                let mut step = self.call(at, "cel.@mapInsert", None, ins);
                if let Some(f) = filter {
                    let a = self.accu(at);
                    step = self.call(at, "_?_:_", None, vec![f, step, a]);
                }
                let init = self.node(at, Kind::Map { entries: vec![] });
                let cond = self.lit(at, Lit::Bool(true));
                let result = self.accu(at);
                Ok(self.comprehension(
                    at,
                    Comprehension {
                        iter_var: v1,
                        iter_var2: Some(v2),
                        range: target,
                        accu_var: ACCU.into(),
                        accu_init: init,
                        cond,
                        step,
                        result,
                    },
                ))
            }
            ("bind", 3) if Self::ident_name(&target) == Some("cel") => {
                let var = match Self::ident_name(&args[0]) {
                    Some(v) => v.to_string(),
                    None => {
                        return self.macro_error(
                            &args[0],
                            "cel.bind() variable names must be simple identifiers",
                        );
                    }
                };
                let result = args.pop().ok_or(())?;
                let init = args.pop().ok_or(())?;
                Ok(self.bind(at, var, init, result))
            }
            ("optMap" | "optFlatMap", 2) => {
                let var = match Self::ident_name(&args[0]) {
                    Some(v) => v.to_string(),
                    None => {
                        return self.macro_error(
                            &args[0],
                            format!("{name}() variable name must be a simple identifier"),
                        );
                    }
                };
                let body = args.pop().ok_or(())?;
                let copy = target.clone();
                let copy = self.renumber(copy);
                let has = self.call(at, "hasValue", Some(target), vec![]);
                let value = self.call(at, "value", Some(copy), vec![]);
                let mut mapped = self.bind(at, var, value, body);
                if name == "optMap" {
                    mapped = self.call(at, "optional.of", None, vec![mapped]);
                }
                let none = self.call(at, "optional.none", None, vec![]);
                Ok(self.call(at, "_?_:_", None, vec![has, mapped, none]))
            }
            // The macro and the function it expands to come in one library.
            ("sortBy", 2) if self.env.lookup("@sortByAssociatedKeys").is_some() => {
                let ok = matches!(
                    target.kind,
                    Kind::List { .. }
                        | Kind::Select { .. }
                        | Kind::Ident(_)
                        | Kind::Comprehension(_)
                        | Kind::Call { .. }
                );
                if !ok {
                    return self.macro_error(
                        &target,
                        "sortBy can only be applied to a list, identifier, comprehension, call or select expression",
                    );
                }
                let v = self.iter_var(&args[0], "argument is not an identifier")?;
                let key = args.pop().ok_or(())?;
                let input = "@__sortBy_input__";
                let range = self.node(at, Kind::Ident(input.into()));
                let keys = self.transform_list(at, range, v, None, None, key);
                let recv = self.node(at, Kind::Ident(input.into()));
                let sorted = self.call(at, "@sortByAssociatedKeys", Some(recv), vec![keys]);
                Ok(self.bind(at, input.into(), target, sorted))
            }
            _ => Ok(self.call(at, name, Some(target), args)),
        }
    }

    /// A copy of a subtree with fresh ids (a macro that uses its target twice).
    fn renumber(&mut self, e: Expr) -> Expr {
        let at = self.positions[e.id as usize];
        let kind = match e.kind {
            Kind::Select {
                operand,
                field,
                test_only,
            } => Kind::Select {
                operand: Box::new(self.renumber(*operand)),
                field,
                test_only,
            },
            Kind::Call { target, func, args } => Kind::Call {
                target: target.map(|t| Box::new(self.renumber(*t))),
                func,
                args: args.into_iter().map(|a| self.renumber(a)).collect(),
            },
            Kind::List { elems, optional } => Kind::List {
                elems: elems.into_iter().map(|a| self.renumber(a)).collect(),
                optional,
            },
            Kind::Map { entries } => Kind::Map {
                entries: entries
                    .into_iter()
                    .map(|en| {
                        let at = self.positions[en.id as usize];
                        Entry {
                            id: self.new_id(at),
                            key: self.renumber(en.key),
                            value: self.renumber(en.value),
                            optional: en.optional,
                        }
                    })
                    .collect(),
            },
            Kind::Struct { type_name, fields } => Kind::Struct {
                type_name,
                fields: fields
                    .into_iter()
                    .map(|(id, f, v, o)| {
                        let at = self.positions[id as usize];
                        (self.new_id(at), f, self.renumber(v), o)
                    })
                    .collect(),
            },
            Kind::Comprehension(c) => {
                let c = *c;
                Kind::Comprehension(Box::new(Comprehension {
                    range: self.renumber(c.range),
                    accu_init: self.renumber(c.accu_init),
                    cond: self.renumber(c.cond),
                    step: self.renumber(c.step),
                    result: self.renumber(c.result),
                    ..c
                }))
            }
            k => k,
        };
        self.node(at, kind)
    }

    /// `cel.bind(var, init, result)`: a comprehension over nothing whose accumulator is `var`.
    fn bind(&mut self, at: u32, var: String, init: Expr, result: Expr) -> Expr {
        let range = self.node(
            at,
            Kind::List {
                elems: vec![],
                optional: vec![],
            },
        );
        let cond = self.lit(at, Lit::Bool(false));
        let step = self.node(at, Kind::Ident(var.clone()));
        self.comprehension(
            at,
            Comprehension {
                iter_var: "#unused".into(),
                iter_var2: None,
                range,
                accu_var: var,
                accu_init: init,
                cond,
                step,
                result,
            },
        )
    }

    /// all (0), exists (1), exists_one (2).
    fn quantifier(
        &mut self,
        at: u32,
        kind: u8,
        range: Expr,
        v1: String,
        v2: Option<String>,
        body: Expr,
    ) -> Expr {
        let (init, cond, step, result) = match kind {
            0 => {
                let init = self.lit(at, Lit::Bool(true));
                let a = self.accu(at);
                let cond = self.call(at, "@not_strictly_false", None, vec![a]);
                let a = self.accu(at);
                let step = self.call(at, "_&&_", None, vec![a, body]);
                (init, cond, step, self.accu(at))
            }
            1 => {
                let init = self.lit(at, Lit::Bool(false));
                let a = self.accu(at);
                let not = self.call(at, "!_", None, vec![a]);
                let cond = self.call(at, "@not_strictly_false", None, vec![not]);
                let a = self.accu(at);
                let step = self.call(at, "_||_", None, vec![a, body]);
                (init, cond, step, self.accu(at))
            }
            _ => {
                let init = self.lit(at, Lit::Int(0));
                let cond = self.lit(at, Lit::Bool(true));
                let a = self.accu(at);
                let one = self.lit(at, Lit::Int(1));
                let inc = self.call(at, "_+_", None, vec![a, one]);
                let a = self.accu(at);
                let step = self.call(at, "_?_:_", None, vec![body, inc, a]);
                let a = self.accu(at);
                let one = self.lit(at, Lit::Int(1));
                let result = self.call(at, "_==_", None, vec![a, one]);
                (init, cond, step, result)
            }
        };
        self.macro_fold(at, range, (v1, v2), [init, cond, step, result])
    }

    /// A macro's comprehension over `range` with the macro accumulator: `parts` are its init,
    /// loop condition, step and result.
    fn macro_fold(
        &mut self,
        at: u32,
        range: Expr,
        (v1, v2): (String, Option<String>),
        [init, cond, step, result]: [Expr; 4],
    ) -> Expr {
        self.comprehension(
            at,
            Comprehension {
                iter_var: v1,
                iter_var2: v2,
                range,
                accu_var: ACCU.into(),
                accu_init: init,
                cond,
                step,
                result,
            },
        )
    }

    /// `map`, `filter` and `transformList`: `accu + [transform]`, under the filter if any.
    fn transform_list(
        &mut self,
        at: u32,
        range: Expr,
        v1: String,
        v2: Option<String>,
        filter: Option<Expr>,
        transform: Expr,
    ) -> Expr {
        let init = self.node(
            at,
            Kind::List {
                elems: vec![],
                optional: vec![],
            },
        );
        let cond = self.lit(at, Lit::Bool(true));
        let a = self.accu(at);
        let one = self.node(
            at,
            Kind::List {
                elems: vec![transform],
                optional: vec![false],
            },
        );
        let mut step = self.call(at, "_+_", None, vec![a, one]);
        if let Some(f) = filter {
            let a = self.accu(at);
            step = self.call(at, "_?_:_", None, vec![f, step, a]);
        }
        let result = self.accu(at);
        self.macro_fold(at, range, (v1, v2), [init, cond, step, result])
    }
}
