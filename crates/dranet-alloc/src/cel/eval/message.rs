//! Evaluating a message construction: the field values in source order (the first error wins;
//! an optional field `?f: v` is set only when `v` has a value), then the message built from them.

use super::Eval;
use crate::cel::ast::Expr;
use crate::cel::message::{self, Message};
use crate::cel::value::{Error, R, Value};

/// cel-go's runtime cost of building a message (`StructCreateBaseCost`), besides its fields.
const STRUCT_CREATE_COST: u64 = 40;

impl<'e: 'a, 'a> Eval<'e, 'a> {
    pub(super) fn construct(
        &mut self,
        type_name: &str,
        fields: &'e [(u32, String, Expr, bool)],
    ) -> R<Value<'a>> {
        let mut vals: Vec<(&str, Value<'a>)> = Vec::with_capacity(fields.len());
        for (_, name, expr, optional) in fields {
            let v = self.eval(expr)?;
            let v = if *optional {
                match v {
                    Value::Optional(Some(v)) => (*v).clone(),
                    Value::Optional(None) => {
                        vals.retain(|(n, _)| *n != name.as_str());
                        continue;
                    }
                    other => {
                        return Err(Error::msg(format!(
                            "cannot initialize optional entry '{name}' from non-optional value {}",
                            go_print(&other)
                        )));
                    }
                }
            } else {
                v
            };
            vals.push((name, v));
        }
        // The step of this node is already charged.
        self.env.charge(STRUCT_CREATE_COST - 1)?;
        let Some(m) = Message::find(type_name) else {
            return Err(Error::msg(format!("unknown type '{type_name}'")));
        };
        message::construct(m, vals, &self.env)
    }
}

/// A value as Go's `%v` prints the primitive ones.
fn go_print(v: &Value<'_>) -> String {
    match v {
        Value::Null => "NULL_VALUE".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => crate::cel::value::format_double(*d),
        Value::Str(s) => s.to_string(),
        other => other.type_name().to_string(),
    }
}
