//! Implementations of the environment's functions, one per overload (or one per function where
//! cel-go dispatches on the values), with cel-go's results and error messages.

use std::rc::Rc;

use super::activation::Activation;
use super::value::{Error, R, Value};

mod arith;
mod containers;
mod convert;
mod dra;
pub(super) mod format;
mod gofloat;
mod lists;
mod net;
mod optionals;
mod quantity;
mod re2;
mod regexp;
mod semver;
mod sets;
mod strings;
mod time;
mod tracked;
mod url;

pub(crate) use arith::*;
pub(crate) use containers::*;
pub(crate) use convert::*;
pub(crate) use dra::*;
pub(crate) use format::*;
pub(crate) use lists::*;
pub(crate) use net::*;
pub(crate) use optionals::*;
pub(crate) use quantity::*;
pub(crate) use re2::GoRegexp;
pub(crate) use regexp::*;
pub(crate) use semver::*;
pub(crate) use sets::*;
pub(crate) use strings::*;
pub(crate) use time::*;
pub(crate) use url::*;

/// An overload's implementation: the evaluated arguments (receiver first) in, the result out.
pub(crate) type Imp = for<'a> fn(&Activation<'a>, &mut [Value<'a>]) -> R<Value<'a>>;

fn nso<T>() -> R<T> {
    Err(Error::no_such_overload())
}

fn take<'a>(a: &mut [Value<'a>], i: usize) -> Value<'a> {
    std::mem::replace(&mut a[i], Value::Null)
}

fn int_overflow<T>() -> R<T> {
    Err(Error::msg("integer overflow"))
}
fn uint_overflow<T>() -> R<T> {
    Err(Error::msg("unsigned integer overflow"))
}

fn string_arg(v: &Value<'_>) -> R<String> {
    match v {
        Value::Str(s) => Ok(s.to_string()),
        _ => nso(),
    }
}

fn int_arg(v: &Value<'_>) -> R<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        _ => nso(),
    }
}

fn strs<'b, 'a>(a: &'b [Value<'a>]) -> R<(&'b str, &'b str)> {
    match (&a[0], &a[1]) {
        (Value::Str(x), Value::Str(y)) => Ok((x, y)),
        _ => nso(),
    }
}

fn list_arg<'b, 'a>(v: &'b Value<'a>) -> R<&'b Rc<Vec<Value<'a>>>> {
    match v {
        Value::List(l) => Ok(l),
        _ => nso(),
    }
}

fn conversion_error<T>(from: &str, to: &str) -> R<T> {
    Err(Error::msg(format!(
        "type conversion error from '{from}' to '{to}'"
    )))
}
