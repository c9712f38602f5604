//! DRA's own CEL function (`k8s.io/dynamic-resource-allocation/cel`, 1.36): `includes`.

use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, equal};

/// The most values a list attribute holds (`ResourceSliceMaxAttributeValuesPerDevice`), past
/// which `includes` refuses to look, to bound its cost.
const MAX_ATTRIBUTE_VALUES: usize = 48;

/// `target.includes(arg)`: for a list, whether an element equals `arg` (an error once more
/// than [`MAX_ATTRIBUTE_VALUES`] elements were looked at without a match); for anything else,
/// whether it equals `arg`. Equality is CEL's `==`, so `1.includes(1.0)` is true and values
/// of different types are unequal, never an error.
pub(crate) fn includes<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let eq = |x: &Value<'a>| matches!(equal(x, &a[1], env), Ok(true));
    let found = match &a[0] {
        Value::List(l) => {
            for (i, x) in l.iter().enumerate() {
                if i >= MAX_ATTRIBUTE_VALUES {
                    return Err(Error::msg(format!(
                        "'includes' function cannot be applied to lists longer than \
                         {MAX_ATTRIBUTE_VALUES} values"
                    )));
                }
                if eq(x) {
                    return Ok(Value::Bool(true));
                }
            }
            false
        }
        t => eq(t),
    };
    Ok(Value::Bool(found))
}
