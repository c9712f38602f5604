//! The syntax tree the parser produces and the checker annotates: CEL's own shape (operators
//! are calls such as `_+_`, macros are expanded into comprehensions), so every later stage
//! follows the language definition rather than our parser's choices.

use std::sync::Arc;

/// Node id, an index into the per-node tables (positions, types, references).
pub(crate) type Id = u32;

/// A literal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
}

#[derive(Debug, Clone)]
pub(crate) struct Expr {
    pub id: Id,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Lit(Lit),
    Ident(String),
    /// `operand.field`; `test_only` is the `has()` form.
    Select {
        operand: Box<Expr>,
        field: String,
        test_only: bool,
    },
    /// A function or operator; `target` is the receiver of a member call.
    Call {
        target: Option<Box<Expr>>,
        func: String,
        args: Vec<Expr>,
    },
    /// `[a, ?b]`: `optional[i]` marks `?` elements.
    List {
        elems: Vec<Expr>,
        optional: Vec<bool>,
    },
    /// `{k: v, ?k2: v2}`.
    Map {
        entries: Vec<Entry>,
    },
    /// `Name{field: value}`: a message construction (the checker resolves `type_name`).
    Struct {
        type_name: String,
        fields: Vec<(Id, String, Expr, bool)>,
    },
    Comprehension(Box<Comprehension>),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub id: Id,
    pub key: Expr,
    pub value: Expr,
    pub optional: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Comprehension {
    pub iter_var: String,
    pub iter_var2: Option<String>,
    pub range: Expr,
    pub accu_var: String,
    pub accu_init: Expr,
    pub cond: Expr,
    pub step: Expr,
    pub result: Expr,
}

/// The accumulator of macro-generated comprehensions (a name no user identifier can spell).
pub(crate) const ACCU: &str = "@result";

/// Whether `func` (called without a receiver) is one of CEL's type conversions.
pub(crate) fn is_type_conversion(func: &str) -> bool {
    matches!(
        func,
        "bool"
            | "bytes"
            | "double"
            | "duration"
            | "dyn"
            | "int"
            | "string"
            | "timestamp"
            | "type"
            | "uint"
    )
}

/// Whether `e` is a list literal the planner folds to a constant: its elements literals or
/// type conversions of them (`[1, dyn(2.0)]`).
pub(crate) fn is_constant_list(e: &Expr) -> bool {
    fn constant(e: &Expr) -> bool {
        match &e.kind {
            Kind::Lit(_) => true,
            Kind::Call {
                target: None,
                func,
                args,
            } => is_type_conversion(func) && args.len() == 1 && constant(&args[0]),
            _ => false,
        }
    }
    matches!(&e.kind, Kind::List { elems, optional } if optional.iter().all(|o| !o) && elems.iter().all(constant))
}
