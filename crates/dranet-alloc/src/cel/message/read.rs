//! Reading a well-known message's fields back as the CEL value it stands for, as cel-go
//! unwraps one: an unset wrapper is its primitive's zero, a `Duration` nanoseconds saturated at
//! the limits, a `Timestamp` Go's `time.Unix` of its fields.

use std::rc::Rc;

use super::Scalar;
use crate::cel::value::{Error, R, Value};

/// Seconds between 0001-01-01 and the Unix epoch: Go's `time.Time` counts from the former, so a
/// timestamp whose seconds overflow with it wraps in the scheduler; such seconds are refused
/// here rather than wrapped (see [`timestamp`]).
const UNIX_TO_INTERNAL: i64 = 62_135_596_800;

/// An absent wrapper `value`: the primitive's zero.
pub(super) fn zero<'a>(s: Scalar) -> Value<'a> {
    match s {
        Scalar::Bool => Value::Bool(false),
        Scalar::Bytes => Value::Bytes(Rc::from(&[][..])),
        Scalar::Double | Scalar::Float => Value::Double(0.0),
        Scalar::Int32 | Scalar::Int64 => Value::Int(0),
        Scalar::Uint32 | Scalar::Uint64 => Value::Uint(0),
        _ => Value::str(""),
    }
}

/// Go's `durationpb.AsDuration`: seconds and nanoseconds in nanoseconds, saturated at the
/// limits of an `int64` on overflow.
pub(super) fn duration(secs: i64, nanos: i32) -> i64 {
    let d = secs.wrapping_mul(1_000_000_000);
    let mut overflow = d / 1_000_000_000 != secs;
    let d = d.wrapping_add(i64::from(nanos));
    overflow |= secs < 0 && nanos < 0 && d > 0;
    overflow |= secs > 0 && nanos > 0 && d < 0;
    match overflow {
        true if secs < 0 => i64::MIN,
        true if secs > 0 => i64::MAX,
        _ => d,
    }
}

/// Go's `time.Unix(secs, nanos).UTC()`: nanoseconds outside a second carry into the seconds.
/// No range check, as the scheduler makes none (year 10000 is a timestamp there too); only
/// seconds at which Go's own representation wraps around are refused.
pub(super) fn timestamp<'a>(secs: i64, nanos: i32) -> R<Value<'a>> {
    let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let s = total.div_euclid(1_000_000_000);
    let n = total.rem_euclid(1_000_000_000) as u32;
    match i64::try_from(s) {
        Ok(s) if s.checked_add(UNIX_TO_INTERNAL + 2 * 86_400).is_some() && s > i64::MIN / 2 => {
            Ok(Value::Timestamp(s, n, 0))
        }
        _ => Err(Error::msg("timestamp overflow")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_saturate_as_go() {
        assert_eq!(duration(1, 5), 1_000_000_005);
        assert_eq!(duration(1, -1), 999_999_999);
        assert_eq!(duration(i64::MAX, 0), i64::MAX);
        assert_eq!(duration(-i64::MAX, 0), i64::MIN);
        assert_eq!(duration(9_223_372_036, 854_775_807), i64::MAX);
        assert_eq!(duration(9_223_372_036, 854_775_808), i64::MAX);
    }

    #[test]
    fn timestamps_carry_nanos() {
        assert!(matches!(
            timestamp(0, -1),
            Ok(Value::Timestamp(-1, 999_999_999, 0))
        ));
        assert!(matches!(
            timestamp(1, 2_000_000_001),
            Ok(Value::Timestamp(3, 1, 0))
        ));
        assert!(matches!(
            timestamp(253_402_300_800, 0),
            Ok(Value::Timestamp(253_402_300_800, 0, 0))
        ));
        assert!(timestamp(i64::MAX, 0).is_err());
    }
}
