//! The protobuf well-known message types that cel-go's default type registry declares, and so
//! the scheduler's CEL environment: what a message construction (`google.protobuf.Duration{
//! seconds: 1}`) may name, the fields of each with the type the checker gives them, and the CEL
//! type a constructed message has (cel-go's `checkedWellKnowns`: a wrapper is its primitive
//! that also takes `null`, `Struct` a `map(string, dyn)`, `Value` a `dyn`).

mod any;
mod construct;
mod json;
mod read;

pub(crate) use construct::construct;

use super::types::{EMPTY, Type};

/// A well-known message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// `google.protobuf.{Bool,Bytes,Double,Float,Int32,Int64,String,UInt32,UInt64}Value`.
    Wrapper(Scalar),
    Duration,
    Timestamp,
    Struct,
    Value,
    ListValue,
    Any,
    /// `google.protobuf.Empty`: a message of its own, not unwrapped to a CEL value.
    Empty,
}

/// How a field is stored in the protobuf message: what a CEL value must convert to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    Bool,
    Bytes,
    Double,
    Float,
    Int32,
    Int64,
    String,
    Uint32,
    Uint64,
    /// `google.protobuf.NullValue` (an enum: stored as an `int32`).
    NullEnum,
    /// A `google.protobuf.Struct` message (`Value.struct_value`).
    StructMsg,
    /// A `google.protobuf.ListValue` message (`Value.list_value`).
    ListMsg,
    /// `map<string, google.protobuf.Value>` (`Struct.fields`).
    ValueMap,
    /// `repeated google.protobuf.Value` (`ListValue.values`).
    ValueList,
}

/// A field of a well-known message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub name: &'static str,
    pub scalar: Scalar,
}

const WRAPPERS: [(&str, Scalar); 9] = [
    ("google.protobuf.BoolValue", Scalar::Bool),
    ("google.protobuf.BytesValue", Scalar::Bytes),
    ("google.protobuf.DoubleValue", Scalar::Double),
    ("google.protobuf.FloatValue", Scalar::Float),
    ("google.protobuf.Int32Value", Scalar::Int32),
    ("google.protobuf.Int64Value", Scalar::Int64),
    ("google.protobuf.StringValue", Scalar::String),
    ("google.protobuf.UInt32Value", Scalar::Uint32),
    ("google.protobuf.UInt64Value", Scalar::Uint64),
];

const fn f(name: &'static str, scalar: Scalar) -> Field {
    Field { name, scalar }
}

const DURATION_FIELDS: [Field; 2] = [f("seconds", Scalar::Int64), f("nanos", Scalar::Int32)];
const STRUCT_FIELDS: [Field; 1] = [f("fields", Scalar::ValueMap)];
const VALUE_FIELDS: [Field; 6] = [
    f("null_value", Scalar::NullEnum),
    f("number_value", Scalar::Double),
    f("string_value", Scalar::String),
    f("bool_value", Scalar::Bool),
    f("struct_value", Scalar::StructMsg),
    f("list_value", Scalar::ListMsg),
];
const LIST_FIELDS: [Field; 1] = [f("values", Scalar::ValueList)];
const ANY_FIELDS: [Field; 2] = [f("type_url", Scalar::String), f("value", Scalar::Bytes)];

/// The value of a well-known enum constant: `google.protobuf.NullValue.NULL_VALUE`, the only one.
pub(crate) fn enum_value(name: &str) -> Option<i64> {
    (name == "google.protobuf.NullValue.NULL_VALUE").then_some(0)
}

/// The checker's type of a well-known message name used as a value (`google.protobuf.Struct`);
/// `None` for the ones the declarations give (`google.protobuf.Duration`) and other names.
pub(crate) fn type_ident(name: &str) -> Option<Type> {
    match Message::find(name)? {
        Message::Duration | Message::Timestamp => None,
        m => Some(Type::type_of(m.checked_type())),
    }
}

/// Whether the planner refuses the type name `name` as a value: cel-go's checker resolves every
/// message name to its type, its planner has a type value only for the ones that stay messages
/// (`google.protobuf.Empty`) and those CEL itself names (`google.protobuf.Duration`).
pub(crate) fn undefined_type_value(name: &str) -> bool {
    Message::find(name) != Some(Message::Empty) && type_ident(name).is_some()
}

impl Message {
    /// The message named `name` (fully qualified, without a leading dot).
    pub(crate) fn find(name: &str) -> Option<Message> {
        let rest = name.strip_prefix("google.protobuf.")?;
        Some(match rest {
            "Duration" => Message::Duration,
            "Timestamp" => Message::Timestamp,
            "Struct" => Message::Struct,
            "Value" => Message::Value,
            "ListValue" => Message::ListValue,
            "Any" => Message::Any,
            "Empty" => Message::Empty,
            _ => Message::Wrapper(WRAPPERS.iter().find(|(n, _)| *n == name)?.1),
        })
    }

    /// The message's full name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Message::Wrapper(s) => WRAPPERS
                .iter()
                .find(|(_, w)| *w == s)
                .map_or("google.protobuf.Value", |(n, _)| n),
            Message::Duration => "google.protobuf.Duration",
            Message::Timestamp => "google.protobuf.Timestamp",
            Message::Struct => "google.protobuf.Struct",
            Message::Value => "google.protobuf.Value",
            Message::ListValue => "google.protobuf.ListValue",
            Message::Any => "google.protobuf.Any",
            Message::Empty => EMPTY,
        }
    }

    /// The fields, in field-number order.
    pub(crate) fn fields(self) -> &'static [Field] {
        const WRAPPER_FIELDS: [[Field; 1]; 9] = [
            [f("value", Scalar::Bool)],
            [f("value", Scalar::Bytes)],
            [f("value", Scalar::Double)],
            [f("value", Scalar::Float)],
            [f("value", Scalar::Int32)],
            [f("value", Scalar::Int64)],
            [f("value", Scalar::String)],
            [f("value", Scalar::Uint32)],
            [f("value", Scalar::Uint64)],
        ];
        match self {
            Message::Wrapper(s) => WRAPPER_FIELDS
                .iter()
                .find(|w| w[0].scalar == s)
                .map_or(&[], |w| &w[..]),
            Message::Duration | Message::Timestamp => &DURATION_FIELDS,
            Message::Struct => &STRUCT_FIELDS,
            Message::Value => &VALUE_FIELDS,
            Message::ListValue => &LIST_FIELDS,
            Message::Any => &ANY_FIELDS,
            Message::Empty => &[],
        }
    }

    /// The field `name`, if the message has it.
    pub(crate) fn field(self, name: &str) -> Option<Field> {
        self.fields().iter().find(|f| f.name == name).copied()
    }

    /// The checker's type of a constructed message.
    pub(crate) fn checked_type(self) -> Type {
        match self {
            Message::Wrapper(s) => Type::Wrapper(std::rc::Rc::new(s.checked_type())),
            Message::Duration => Type::Duration,
            Message::Timestamp => Type::Timestamp,
            Message::Struct => Type::map(Type::String, Type::Dyn),
            Message::Value => Type::Dyn,
            Message::ListValue => Type::list(Type::Dyn),
            Message::Any => Type::Any,
            Message::Empty => Type::Object(EMPTY),
        }
    }
}

impl Scalar {
    /// The checker's type of a field stored as `self`: 32-bit numbers and enums widen to CEL's
    /// 64-bit ones, `Value` messages are `dyn`.
    pub(crate) fn checked_type(self) -> Type {
        match self {
            Scalar::Bool => Type::Bool,
            Scalar::Bytes => Type::Bytes,
            Scalar::Double | Scalar::Float => Type::Double,
            Scalar::Int32 | Scalar::Int64 | Scalar::NullEnum => Type::Int,
            Scalar::String => Type::String,
            Scalar::Uint32 | Scalar::Uint64 => Type::Uint,
            Scalar::StructMsg | Scalar::ValueMap => Type::map(Type::String, Type::Dyn),
            Scalar::ListMsg | Scalar::ValueList => Type::list(Type::Dyn),
        }
    }

    /// The Go type cel-go converts a value to for this field, as its conversion errors name it.
    fn go_type(self) -> &'static str {
        match self {
            Scalar::Bool => "bool",
            Scalar::Bytes => "[]uint8",
            Scalar::Double => "float64",
            Scalar::Float => "float32",
            Scalar::Int32 => "int32",
            Scalar::Int64 => "int64",
            Scalar::String => "string",
            Scalar::Uint32 => "uint32",
            Scalar::Uint64 => "uint64",
            Scalar::NullEnum => "protoreflect.EnumNumber",
            Scalar::StructMsg => "*structpb.Struct",
            Scalar::ListMsg => "*structpb.ListValue",
            Scalar::ValueMap | Scalar::ValueList => "*structpb.Value",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, _) in WRAPPERS {
            assert_eq!(Message::find(name).map(Message::name), Some(name));
        }
        for m in [
            Message::Duration,
            Message::Timestamp,
            Message::Struct,
            Message::Value,
            Message::ListValue,
            Message::Any,
            Message::Empty,
        ] {
            assert_eq!(Message::find(m.name()), Some(m));
        }
        assert_eq!(Message::find("google.protobuf.NullValue"), None);
        assert_eq!(Message::find("google.protobuf.FieldMask"), None);
    }

    #[test]
    fn fields_and_types() {
        let i32v = Message::find("google.protobuf.Int32Value").unwrap();
        assert_eq!(
            i32v.field("value").unwrap().scalar.checked_type(),
            Type::Int
        );
        assert_eq!(i32v.checked_type().to_string(), "wrapper(int)");
        assert!(i32v.field("foo").is_none());
        let v = Message::Value;
        assert_eq!(
            v.field("struct_value")
                .unwrap()
                .scalar
                .checked_type()
                .to_string(),
            "map(string, dyn)"
        );
        assert_eq!(Message::ListValue.checked_type().to_string(), "list(dyn)");
    }
}
