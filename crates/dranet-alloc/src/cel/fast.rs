//! The common selector shapes, decided without the evaluator: `device.driver == "x"`,
//! `<attribute> == <literal>` (and `!=`), a bool attribute, and `&&`, `||`, `!` of those. The
//! attribute key is hashed once at compile time. `None` means "not decided here" (a missing
//! attribute, a type the shortcut does not compare): the evaluator then runs, so results and
//! error messages are exactly the evaluator's.
//!
//! The same shapes are also recognised straight from the source ([`recognize`]), without the
//! parser, checker, validators and cost estimate: these shapes always type-check, pass the
//! validators and cost a few units, so the general compile could only confirm them. Anything
//! the recognizer is not sure of (escapes, other literals, comments, deep nesting) goes to the
//! general compile.

use std::sync::Arc;

use super::ast::{Expr, Kind, Lit};
use super::attrs::AttrKey;
use super::check::Ref;
use super::device::{FastDevice, Scalar};
use super::explain::attribute_of;
use super::parse::{RESERVED, balanced, is_space};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fast {
    /// `device.driver == s` (`eq`) or `!=`.
    Driver(String, bool),
    /// `attribute == literal` (`eq`) or `!=`.
    Cmp(AttrKey, Lit, bool),
    /// A bool attribute.
    Bool(AttrKey),
    Not(Box<Fast>),
    And(Box<Fast>, Box<Fast>),
    Or(Box<Fast>, Box<Fast>),
}

fn is_driver(e: &Expr, refs: &[Ref]) -> bool {
    matches!(&e.kind, Kind::Select { operand, field, test_only: false }
        if field == "driver"
            && matches!(refs.get(operand.id as usize), Some(Ref::Device)))
}

/// The shortcut for a checked expression, when it has one of the shapes.
pub(crate) fn plan(e: &Expr, refs: &[Ref]) -> Option<Fast> {
    if let Some((domain, name)) = attribute_of(e, refs) {
        return Some(Fast::Bool(AttrKey::new(domain, name)));
    }
    let Kind::Call {
        target: None,
        func,
        args,
    } = &e.kind
    else {
        return None;
    };
    match (func.as_str(), args.as_slice()) {
        (
            "_==_" | "_!=_",
            [
                l,
                Expr {
                    kind: Kind::Lit(lit),
                    ..
                },
            ],
        ) => {
            let eq = func == "_==_";
            if is_driver(l, refs) {
                return match lit {
                    Lit::String(s) => Some(Fast::Driver(s.to_string(), eq)),
                    _ => None,
                };
            }
            let (domain, name) = attribute_of(l, refs)?;
            matches!(lit, Lit::String(_) | Lit::Int(_) | Lit::Bool(_))
                .then(|| Fast::Cmp(AttrKey::new(domain, name), lit.clone(), eq))
        }
        ("!_", [x]) => Some(Fast::Not(Box::new(plan(x, refs)?))),
        ("_&&_", [a, b]) => Some(Fast::And(
            Box::new(plan(a, refs)?),
            Box::new(plan(b, refs)?),
        )),
        ("_||_", [a, b]) => Some(Fast::Or(Box::new(plan(a, refs)?), Box::new(plan(b, refs)?))),
        _ => None,
    }
}

/// At most this many comparisons and this deep a nesting of parentheses are recognised from the
/// source; longer expressions take the general compile (and its limits).
const MAX_TERMS: usize = 16;
const MAX_DEPTH: usize = 8;

/// The shortcut for `source` when it is one of the common shapes, read from the source alone:
/// the same [`Fast`] that [`plan`] makes of the checked tree, `&&` and `||` chains balanced as
/// the parser balances them. `None` when it is not, or the recognizer is not sure.
pub(crate) fn recognize(source: &str) -> Option<Fast> {
    let mut r = Reader {
        src: source,
        pos: 0,
        terms: 0,
    };
    let f = r.chain(true, 0)?;
    r.ws();
    (r.pos == source.len()).then_some(f)
}

struct Reader<'a> {
    src: &'a str,
    pos: usize,
    terms: usize,
}

/// What may stand before `==` or on its own.
enum Operand {
    Driver,
    Attr(AttrKey),
    Group(Fast),
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn ws(&mut self) {
        // CEL's whitespace; anything else (comments, Unicode spaces) is left to the parser.
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        let hit = self.src.as_bytes()[self.pos..].starts_with(tok.as_bytes());
        if hit {
            self.pos += tok.len();
        }
        hit
    }

    fn ident(&mut self) -> Option<&'a str> {
        self.ws();
        let b = self.src.as_bytes();
        let start = self.pos;
        if !matches!(b.get(start), Some(c) if c.is_ascii_alphabetic() || *c == b'_') {
            return None;
        }
        let mut end = start + 1;
        while matches!(b.get(end), Some(c) if c.is_ascii_alphanumeric() || *c == b'_') {
            end += 1;
        }
        self.pos = end;
        self.src.get(start..end)
    }

    /// A quoted string without escapes or line breaks (no raw, bytes or triple-quoted form).
    fn string(&mut self) -> Option<&'a str> {
        self.ws();
        let q = self.peek().filter(|q| matches!(q, b'"' | b'\''))?;
        let b = self.src.as_bytes();
        let start = self.pos + 1;
        if b.get(start) == Some(&q) && b.get(start + 1) == Some(&q) {
            return None;
        }
        let mut end = start;
        loop {
            match b.get(end) {
                None | Some(b'\\' | b'\n' | b'\r') => return None,
                Some(c) if *c == q => break,
                Some(_) => end += 1,
            }
        }
        self.pos = end + 1;
        self.src.get(start..end)
    }

    /// A string, a decimal int or a bool literal, as the parser makes it.
    fn literal(&mut self) -> Option<Lit> {
        self.ws();
        match self.peek()? {
            b'"' | b'\'' => Some(Lit::String(Arc::from(self.string()?))),
            c if c.is_ascii_digit() => {
                let b = self.src.as_bytes();
                let start = self.pos;
                let mut end = start;
                while b.get(end).is_some_and(u8::is_ascii_digit) {
                    end += 1;
                }
                // Hex, uint, double and octal-looking forms are the parser's.
                if b.get(end)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'_')
                    || (end - start > 1 && c == b'0')
                {
                    return None;
                }
                let v = self.src.get(start..end)?.parse::<i64>().ok()?;
                self.pos = end;
                Some(Lit::Int(v))
            }
            _ => match self.ident()? {
                "true" => Some(Lit::Bool(true)),
                "false" => Some(Lit::Bool(false)),
                _ => None,
            },
        }
    }

    /// `||` chains (`&&` chains when `or` is false), balanced as the parser balances them.
    fn chain(&mut self, or: bool, depth: usize) -> Option<Fast> {
        let term = |r: &mut Self| {
            if or {
                r.chain(false, depth)
            } else {
                r.relation(depth)
            }
        };
        let mut terms = vec![term(self)?];
        while self.eat(if or { "||" } else { "&&" }) {
            terms.push(term(self)?);
        }
        balanced(terms, &mut |_, l, r| {
            let (l, r) = (Box::new(l), Box::new(r));
            if or { Fast::Or(l, r) } else { Fast::And(l, r) }
        })
    }

    fn relation(&mut self, depth: usize) -> Option<Fast> {
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return None;
        }
        let not = self.eat("!");
        // `!!x` cancels in the parser and `!=` cannot follow: both are the general compile's.
        if not && matches!(self.peek_after_ws(), Some(b'!' | b'=')) {
            return None;
        }
        let operand = self.operand(depth)?;
        let eq = if self.eat("==") {
            Some(true)
        } else if self.eat("!=") {
            Some(false)
        } else {
            None
        };
        let f = match (operand, eq) {
            (Operand::Driver, Some(eq)) if !not => match self.literal()? {
                Lit::String(s) => Fast::Driver(s.to_string(), eq),
                _ => return None,
            },
            (Operand::Attr(k), Some(eq)) if !not => Fast::Cmp(k, self.literal()?, eq),
            (Operand::Attr(k), None) => Fast::Bool(k),
            (Operand::Group(f), None) => f,
            _ => return None,
        };
        // A literal or operand followed by anything but an operator of these shapes (`<`,
        // `in`, `+`, `.`, `[`, `?`) is the general compile's.
        if !matches!(self.peek_after_ws(), None | Some(b'&' | b'|' | b')')) {
            return None;
        }
        Some(if not { Fast::Not(Box::new(f)) } else { f })
    }

    fn peek_after_ws(&mut self) -> Option<u8> {
        self.ws();
        self.peek()
    }

    /// `device.driver`, `device.attributes["domain"].name` or `…["name"]`, or a parenthesised
    /// chain.
    fn operand(&mut self, depth: usize) -> Option<Operand> {
        if self.eat("(") {
            if depth >= MAX_DEPTH {
                return None;
            }
            let f = self.chain(true, depth + 1)?;
            return self.eat(")").then_some(Operand::Group(f));
        }
        if self.ident()? != "device" || !self.eat(".") {
            return None;
        }
        match self.ident()? {
            "driver" => Some(Operand::Driver),
            "attributes" => {
                if !self.eat("[") {
                    return None;
                }
                let domain = self.string()?;
                if !self.eat("]") {
                    return None;
                }
                let name = if self.eat(".") {
                    let name = self.ident()?;
                    // Keywords and reserved words are the parser's to refuse or accept.
                    if matches!(name, "true" | "false" | "null" | "in") || RESERVED.contains(&name)
                    {
                        return None;
                    }
                    name
                } else if self.eat("[") {
                    let name = self.string()?;
                    if !self.eat("]") {
                        return None;
                    }
                    name
                } else {
                    return None;
                };
                Some(Operand::Attr(AttrKey::new(domain, name)))
            }
            _ => None,
        }
    }
}

impl Fast {
    /// Whether only `device.driver` is read: the answer is then the same for every device
    /// of a pool, and never undecided.
    pub(crate) fn driver_only(&self) -> bool {
        match self {
            Fast::Driver(..) => true,
            Fast::Cmp(..) | Fast::Bool(_) => false,
            Fast::Not(x) => x.driver_only(),
            Fast::And(a, b) | Fast::Or(a, b) => a.driver_only() && b.driver_only(),
        }
    }

    /// The selector's result on `dev`, or `None` when the evaluator must decide.
    pub(crate) fn eval<D: FastDevice + ?Sized>(&self, dev: &D) -> Option<bool> {
        match self {
            Fast::Driver(s, eq) => Some((dev.driver() == s) == *eq),
            Fast::Cmp(k, lit, eq) => {
                let same = match (dev.scalar(k)?, lit) {
                    (Scalar::Str(a), Lit::String(b)) => a == &**b,
                    (Scalar::Int(a), Lit::Int(b)) => a == *b,
                    (Scalar::Bool(a), Lit::Bool(b)) => a == *b,
                    _ => return None,
                };
                Some(same == *eq)
            }
            Fast::Bool(k) => match dev.scalar(k)? {
                Scalar::Bool(b) => Some(b),
                _ => None,
            },
            Fast::Not(x) => x.eval(dev).map(|b| !b),
            // Only a fully decided pair is returned, so error absorption needs no care here.
            Fast::And(a, b) => match a.eval(dev)? {
                false => Some(false),
                true => b.eval(dev),
            },
            Fast::Or(a, b) => match a.eval(dev)? {
                true => Some(true),
                false => b.eval(dev),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use dranet_core::AttributeValue;

    use super::super::decls::EnvType;
    use super::super::{DeviceAttributes, DeviceView, Program, Quantity, Semver};
    use super::*;
    use crate::version::KubernetesVersion;

    /// Wherever the shortcut decides, it decides as the evaluator does; where the evaluator
    /// fails, the shortcut leaves it to the evaluator.
    #[test]
    fn the_shortcut_agrees_with_the_evaluator() {
        let values = [
            None,
            Some(AttributeValue::Bool(true)),
            Some(AttributeValue::Bool(false)),
            Some(AttributeValue::Int(0)),
            Some(AttributeValue::Int(1)),
            Some(AttributeValue::String("mlx5_0".into())),
            Some(AttributeValue::Version(Semver::parse("1.2.3").unwrap())),
            Some(AttributeValue::Ints(vec![0])),
        ];
        let selectors = [
            r#"device.driver == "dra.net""#,
            r#"device.driver != "dra.net""#,
            r#"device.attributes["dra.net"].a"#,
            r#"device.attributes["dra.net"]["a"] == 0"#,
            r#"device.attributes["dra.net"].a == 1"#,
            r#"device.attributes["dra.net"].a != true"#,
            r#"device.attributes["dra.net"].a == "mlx5_0""#,
            r#"device.attributes["dra.net"].a == "1.2.3""#,
            r#"!device.attributes["dra.net"].a"#,
            r#"device.attributes["dra.net"].a && device.driver == "dra.net""#,
            r#"device.attributes["dra.net"].a == 0 || device.driver == "x""#,
            r#"device.driver == "x" && device.attributes["dra.net"].a == 0"#,
            r#"device.driver == "dra.net" || device.attributes["dra.net"].a == 0"#,
        ];
        let none: [(&str, Quantity); 0] = [];
        let mut decided = 0;
        for sel in selectors {
            let p = Program::compile(sel).unwrap();
            let f = p
                .fast
                .as_ref()
                .unwrap_or_else(|| panic!("no shortcut for {sel}"));
            for v in &values {
                let attrs = match v {
                    Some(v) => DeviceAttributes::new("dra.net", [("a", v.clone())], none),
                    None => DeviceAttributes::new("dra.net", [("b", AttributeValue::Int(0))], none),
                }
                .unwrap();
                let view = DeviceView {
                    driver: "dra.net",
                    attributes: &attrs,
                    allow_multiple_allocations: false,
                };
                let c = p.checked().unwrap();
                let full = super::super::eval::Eval::new(view, &c.refs, KubernetesVersion::V1_34)
                    .eval(&c.expr);
                if let Some(b) = f.eval(&view) {
                    decided += 1;
                    assert!(
                        matches!(full, Ok(super::super::value::Value::Bool(x)) if x == b),
                        "{sel} on {v:?}: shortcut {b}, evaluator {full:?}"
                    );
                }
            }
        }
        assert!(decided > 40, "the shortcut decided only {decided} cases");
    }

    /// A program said to read only the driver decides every device, the same way for every
    /// device of one driver whatever its attributes; one reading an attribute is not said to.
    #[test]
    fn driver_only_programs_answer_per_driver() {
        let none: [(&str, Quantity); 0] = [];
        let devices = |driver: &'static str| {
            [
                DeviceAttributes::new(driver, [("a", AttributeValue::Int(0))], none).unwrap(),
                DeviceAttributes::new(driver, [("a", AttributeValue::Bool(true))], none).unwrap(),
                DeviceAttributes::new(driver, [("b", AttributeValue::Ints(vec![1]))], none)
                    .unwrap(),
            ]
        };
        for (sel, only) in [
            (r#"device.driver == "dra.net""#, true),
            (r#"device.driver != "dra.net""#, true),
            (r#"!(device.driver == "x")"#, true),
            (
                r#"device.driver == "x" || device.driver == "dra.net""#,
                true,
            ),
            (
                r#"device.driver == "dra.net" && device.driver != "x""#,
                true,
            ),
            (
                r#"device.driver == "dra.net" && device.attributes["dra.net"].a"#,
                false,
            ),
            (r#"device.attributes["dra.net"].a == 0"#, false),
            (r#"device.attributes["dra.net"].a"#, false),
        ] {
            let p = Program::compile(sel).unwrap();
            assert_eq!(p.driver_only(), only, "{sel}");
            if !only {
                continue;
            }
            for driver in ["dra.net", "x", "gpu.example.com"] {
                let answers: Vec<Option<bool>> = devices(driver)
                    .iter()
                    .map(|attrs| {
                        p.fast.as_ref().unwrap().eval(&DeviceView {
                            driver,
                            attributes: attrs,
                            allow_multiple_allocations: false,
                        })
                    })
                    .collect();
                assert!(
                    answers.iter().all(|a| a.is_some() && *a == answers[0]),
                    "{sel} on {driver}: {answers:?}"
                );
            }
        }
    }
    /// A small deterministic generator (xorshift), so the cases are reproducible.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    /// Mostly the shapes, with near misses of every kind the recognizer must leave alone: each
    /// part is a near miss one time in ten.
    fn selector(g: &mut Gen, depth: u32) -> String {
        fn part<'a>(g: &mut Gen, good: &[&'a str], bad: &[&'a str]) -> &'a str {
            if g.next().is_multiple_of(10) {
                g.pick(bad)
            } else {
                g.pick(good)
            }
        }
        let w = |g: &mut Gen| {
            let good = ["", "", "", " ", "  ", "\t", "\n", "\r\n", "\x0c"];
            part(g, &good, &["\u{a0}", "/* */", "// c\n"]).to_string()
        };
        let lit = |g: &mut Gen| {
            let good = [
                "true",
                "false",
                "0",
                "1",
                "42",
                "9223372036854775807",
                r#""mlx5_0""#,
                "'mlx5_0'",
                r#""""#,
                "''",
                r#""ü""#,
                r#""1.2.3""#,
                "\"a'b\"",
                "'a\"b'",
            ];
            let bad = [
                "007",
                "0x1",
                "1u",
                "1.5",
                "-1",
                "1e3",
                "9223372036854775808",
                r#""a\"b""#,
                r#"r"raw""#,
                r#"b"x""#,
                r#""""t""""#,
                "'''t'''",
                "null",
                "true_",
                "[1]",
                r#""a" + "b""#,
                r#""x".size()"#,
                "\"a\nb\"",
                "\"open",
            ];
            part(g, &good, &bad)
        };
        let attr = |g: &mut Gen| {
            let d = part(
                g,
                &[
                    r#""dra.net""#,
                    "'dra.net'",
                    r#""gpu.nvidia.com""#,
                    r#""""#,
                    r#""dra.net/rdma""#,
                ],
                &[r#""a\\b""#, r#"dyn("dra.net")"#, "dranet"],
            );
            let n = part(
                g,
                &[
                    "rdma", "numaNode", "model", "has", "_x", "a1", "ns", "driver", "size",
                ],
                &[
                    "if",
                    "in",
                    "true",
                    "null",
                    "1a",
                    "while",
                    "namespace",
                    "x-y",
                ],
            );
            match g.next() % 6 {
                0 => format!("device.attributes[{d}][\"{n}\"]"),
                1 => format!("device.attributes[{d}]{}.{}{n}", w(g), w(g)),
                2 if g.next().is_multiple_of(4) => format!("device.attributes[{d}].{n}.size()"),
                3 => format!("device . attributes [ {d} ] . {n}"),
                _ => format!("device.attributes[{d}].{n}"),
            }
        };
        let r = g.next() % 16;
        if depth > 0 && r < 6 {
            let a = selector(g, depth - 1);
            let b = selector(g, depth - 1);
            let op = part(g, &["&&", "||"], &["&", "?", "==", "&&&", "|"]);
            return match g.next() % 5 {
                0 => format!("({a}){}{op}{}({b})", w(g), w(g)),
                1 => format!("!({a}) {op} {b}"),
                2 if g.next().is_multiple_of(4) => format!("(({a}) {op} {b})"),
                _ => format!("{a}{}{op}{}{b}", w(g), w(g)),
            };
        }
        let cmp = part(g, &["==", "!="], &["<", ">=", "in", "=", "==="]);
        match r % 8 {
            0 | 1 => format!("device.driver{}{cmp}{}{}", w(g), w(g), lit(g)),
            2 | 3 => format!("{}{cmp}{}", attr(g), lit(g)),
            4 => attr(g),
            5 => format!("!{}{}", w(g), attr(g)),
            6 => match g.next() % 4 {
                0 => format!("!!{}", attr(g)),
                1 => format!("{} {cmp} {}", lit(g), attr(g)),
                2 => format!("!{}{cmp}{}", attr(g), lit(g)),
                _ => format!("({}){cmp}{}", attr(g), lit(g)),
            },
            _ => format!(
                "{}device.{}{cmp}\"x\"",
                part(g, &[""], &[".", "!", "(", "devices."]),
                part(g, &["driver"], &["drivers", "attributes", "capacity"])
            ),
        }
    }

    /// Every expression the recognizer takes, the general compile takes too, in both
    /// environments, with the same shortcut, the same cost estimate and the same result on
    /// every device; and the generator's near misses are left to the general compile.
    #[test]
    fn recognised_shapes_compile_as_the_general_compile_does() {
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        let values = [
            Some(AttributeValue::Bool(true)),
            Some(AttributeValue::Int(42)),
            Some(AttributeValue::String("mlx5_0".into())),
            Some(AttributeValue::Version(Semver::parse("1.2.3").unwrap())),
            None,
        ];
        let none: [(&str, Quantity); 0] = [];
        let devices: Vec<DeviceAttributes> = values
            .iter()
            .map(|v| {
                let attrs = ["rdma", "numaNode", "model", "has", "_x", "a1", "ns"]
                    .into_iter()
                    .filter_map(|n| v.clone().map(|v| (n, v)));
                DeviceAttributes::new("dra.net", attrs, none).unwrap()
            })
            .collect();
        let (mut recognised, mut total) = (0, 0);
        for _ in 0..6000 {
            let src = selector(&mut g, 3);
            total += 1;
            let rec = recognize(&src);
            for env in KubernetesVersion::ALL
                .into_iter()
                .flat_map(|v| [EnvType::New(v), EnvType::Stored(v)])
            {
                let general = Program::check(&src, env);
                let Some(f) = &rec else { continue };
                let (_, plan) = general
                    .unwrap_or_else(|e| panic!("{src:?}: recognised, but the compiler says {e}"));
                assert_eq!(plan.as_ref(), Some(f), "{src:?}: shortcut differs");
            }
            if rec.is_none() {
                continue;
            }
            recognised += 1;
            let fast = Program::compile(&src).unwrap();
            let slow = Program::check(&src, EnvType::New(KubernetesVersion::V1_34))
                .unwrap()
                .0;
            assert_eq!(fast.estimated_cost(), slow.cost, "{src:?}");
            for (attrs, driver) in devices.iter().flat_map(|a| [(a, "dra.net"), (a, "x")]) {
                let view = DeviceView {
                    driver,
                    attributes: attrs,
                    allow_multiple_allocations: false,
                };
                let full =
                    match super::super::eval::Eval::new(view, &slow.refs, KubernetesVersion::V1_34)
                        .eval(&slow.expr)
                    {
                        Ok(super::super::value::Value::Bool(b)) => Ok(b),
                        _ => Err(()),
                    };
                assert_eq!(
                    fast.matches(&view).map_err(|_| ()),
                    full,
                    "{src:?} on {driver} {attrs:?}"
                );
            }
        }
        // Neither side may be vacuous.
        assert!(recognised > 1000, "recognised only {recognised} of {total}");
        assert!(
            total - recognised > 1000,
            "left only {} of {total}",
            total - recognised
        );
    }

    /// The selectors of the examples and the seeds' claim templates take the recognised path.
    #[test]
    fn the_common_selectors_are_recognised() {
        for sel in [
            r#"device.driver == "dra.net""#,
            r#"device.attributes["dra.net"].rdma"#,
            r#"device.attributes["dra.net"].rdma == true"#,
            r#"device.attributes["dra.net"]["rdmaDevice"] == "mlx5_2""#,
            r#"device.attributes["resource.kubernetes.io"].pciBusID == "0008:06:00.0""#,
            r#"device.attributes["dra.net"].rdma && device.attributes["dra.net"].numaNode == 0"#,
            r#"device.attributes["dra.net"]["rdma"] == true && device.attributes["dra.net"]["numaNode"] == 0"#,
            r#"device.driver == "dra.net" && (device.attributes["dra.net"].ifName == "eth1" || !device.attributes["dra.net"].virtual)"#,
        ] {
            assert!(recognize(sel).is_some(), "{sel}");
        }
    }
}
