//! Checking a message construction `Name{field: value}` as cel-go's checker does: the name must
//! be a message type (the environment's only ones are protobuf's well-known types), each field
//! one of its fields, each value assignable to the field's type; the construction has the CEL
//! type the message stands for (`google.protobuf.Int64Value{}` is a `wrapper(int)`).

use super::Checker;
use crate::cel::ast::{Expr, Kind};
use crate::cel::message::Message;
use crate::cel::types::Type;
use crate::cel::types::type_name;

impl Checker<'_> {
    pub(super) fn check_struct(&mut self, e: &mut Expr) {
        let id = e.id;
        let Kind::Struct {
            type_name: name,
            fields,
        } = &mut e.kind
        else {
            return;
        };
        let resolved = name.strip_prefix('.').unwrap_or(name).to_string();
        let (result, message) = match Message::find(&resolved) {
            Some(m) => (m.checked_type(), Some(m)),
            None => match self.lookup_ident(&resolved) {
                None => {
                    let msg = format!("undeclared reference to '{name}' (in container '')");
                    self.error(id, msg);
                    self.set_type(id, Type::Error);
                    return;
                }
                // `null_type` is the well-known `google.protobuf.NullValue`, an enum: it checks as
                // a message without fields (and fails to build at run time, as in cel-go).
                Some((Type::Type(Some(inner)), _)) if *inner == Type::Null => (Type::Null, None),
                Some((Type::Type(Some(inner)), _)) => {
                    let msg = format!("'{}' is not a message type", type_name(&inner));
                    self.error(id, msg);
                    (Type::Error, None)
                }
                Some((t, _)) => {
                    self.error(id, format!("'{t}' is not a type"));
                    (Type::Error, None)
                }
            },
        };
        *name = resolved;
        self.set_type(id, result);
        for (fid, field, value, optional) in fields.iter_mut() {
            self.check(value);
            let field_type = match message.and_then(|m| m.field(field)) {
                Some(f) => f.scalar.checked_type(),
                None => {
                    self.error(*fid, format!("undefined field '{field}'"));
                    Type::Error
                }
            };
            let mut value_type = self.get_type(value.id);
            if *optional {
                let (inner, is_opt) = value_type.unwrap_optional();
                if !is_opt && !inner.is_dyn() {
                    let msg = format!(
                        "expected type '{}' but found '{inner}'",
                        Type::optional(inner.clone())
                    );
                    self.error(value.id, msg);
                }
                value_type = inner;
            }
            if !self.assignable(&field_type, &value_type) {
                let msg = format!(
                    "expected type of field '{field}' is '{field_type}' but provided type is \
                     '{value_type}'"
                );
                self.error(*fid, msg);
            }
        }
    }
}
