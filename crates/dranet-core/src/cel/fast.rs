//! The common selector shapes, decided without the evaluator: `device.driver == "x"`,
//! `<attribute> == <literal>` (and `!=`), a bool attribute, and `&&`, `||`, `!` of those. The
//! attribute key is hashed once at compile time. `None` means "not decided here" (a missing
//! attribute, a type the shortcut does not compare): the evaluator then runs, so results and
//! error messages are exactly the evaluator's.

use super::ast::{Expr, Kind, Lit};
use super::check::Ref;
use super::explain::attribute_of;
use super::{AttrKey, AttributeValue, DeviceView};

#[derive(Debug, Clone)]
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

impl Fast {
    /// The selector's result on `dev`, or `None` when the evaluator must decide.
    pub(crate) fn eval(&self, dev: &DeviceView<'_>) -> Option<bool> {
        match self {
            Fast::Driver(s, eq) => Some((dev.driver == s) == *eq),
            Fast::Cmp(k, lit, eq) => {
                let same = match (dev.attributes.get_key(k)?, lit) {
                    (AttributeValue::String(a), Lit::String(b)) => **a == **b,
                    (AttributeValue::Int(a), Lit::Int(b)) => a == b,
                    (AttributeValue::Bool(a), Lit::Bool(b)) => a == b,
                    _ => return None,
                };
                Some(same == *eq)
            }
            Fast::Bool(k) => match dev.attributes.get_key(k)? {
                AttributeValue::Bool(b) => Some(*b),
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
    use super::super::{DeviceAttributes, Program, Quantity, Semver};
    use super::*;

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
                let full = super::super::eval::Eval::new(view, &p.refs).eval(&p.expr);
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
}
