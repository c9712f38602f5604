//! cel-go's sets extension: `sets.contains`, `sets.equivalent`, `sets.intersects`.

use super::{list_arg, tracked};
use crate::cel::activation::Activation;
use crate::cel::value::{R, Value, equal};

fn set_contains<'a>(env: &Activation<'a>, l: &[Value<'a>], v: &Value<'a>) -> bool {
    l.iter().any(|x| matches!(equal(x, v, env), Ok(true)))
}

pub(crate) fn sets_contains<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    tracked::sets(env, x.len(), y.len(), 1.0)?;
    Ok(Value::Bool(y.iter().all(|v| set_contains(env, x, v))))
}
pub(crate) fn sets_equivalent<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    tracked::sets(env, x.len(), y.len(), 2.0)?;
    Ok(Value::Bool(
        y.iter().all(|v| set_contains(env, x, v)) && x.iter().all(|v| set_contains(env, y, v)),
    ))
}
pub(crate) fn sets_intersects<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    tracked::sets(env, x.len(), y.len(), 1.0)?;
    Ok(Value::Bool(y.iter().any(|v| set_contains(env, x, v))))
}
