//! Timestamps and durations: `timestamp()`, `duration()`, their text forms and accessors, with
//! time zones given as offsets or (feature `tzdb`) as names read from the system zone files.

use super::{conversion_error, nso};
use crate::cel::activation::Activation;
use crate::cel::civil::{civil, days_from_civil};
use crate::cel::value::{Error, R, Value};

const MIN_UNIX: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z
const MAX_UNIX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z

pub(crate) fn ts_add<'a>(s: i64, n: u32, offset: i32, d_nanos: i128) -> R<Value<'a>> {
    let total = i128::from(s) * 1_000_000_000 + i128::from(n) + d_nanos;
    let secs = total.div_euclid(1_000_000_000);
    let nanos = total.rem_euclid(1_000_000_000) as u32;
    let secs = i64::try_from(secs).map_err(|_| Error::msg("timestamp overflow"))?;
    if !(MIN_UNIX..=MAX_UNIX).contains(&secs) {
        return Err(Error::msg("timestamp overflow"));
    }
    Ok(Value::Timestamp(secs, nanos, offset))
}

/// RFC 3339 with nanoseconds as Go prints a time: in the offset it was written with, `Z` for UTC.
pub(crate) fn timestamp_string(s: i64, n: u32, offset: i32) -> String {
    let local = s + i64::from(offset);
    let (y, mo, d) = civil(local.div_euclid(86_400));
    let sod = local.rem_euclid(86_400);
    let mut out = format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
    if n > 0 {
        let frac = format!("{n:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let a = offset.unsigned_abs();
        out.push_str(&format!("{sign}{:02}:{:02}", a / 3600, a % 3600 / 60));
    }
    out
}

/// RFC 3339 as Go's `time.Parse(time.RFC3339, s)` accepts it (its general parser, which takes
/// over where the strict one refuses): an hour of one digit, a fraction of any length after `.`
/// or `,` (cut to nanoseconds), an offset up to `+24:60`; `T` and `Z` upper case only. Seconds
/// and nanoseconds since the epoch, and the offset east of UTC it was written with.
pub(crate) fn parse_timestamp(s: &str) -> Option<(i64, u32, i32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T')) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    // Go reads the hour (`15` in the layout) with one digit or two.
    let hour_len = if digit(12) { 2 } else { 1 };
    let h = num(11..11 + hour_len)?;
    let mut i = 11 + hour_len;
    if !(at(i, b':') && at(i + 3, b':')) {
        return None;
    }
    let (mi, se) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
    i += 6;
    let mut nanos: u32 = 0;
    if (at(i, b'.') || at(i, b',')) && digit(i + 1) {
        let start = i + 1;
        let mut j = start;
        while digit(j) {
            j += 1;
        }
        let frac = &s[start..j.min(start + 9)];
        nanos = format!("{frac:0<9}").parse().ok()?;
        i = j;
    }
    let offset: i64 = match b.get(i) {
        Some(b'Z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 24 || om > 60 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    let dim = [
        31,
        if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
            29
        } else {
            28
        },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > dim[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || se > 59
    {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    Some((
        days * 86_400 + h * 3600 + mi * 60 + se - offset,
        nanos,
        i32::try_from(offset).ok()?,
    ))
}

pub(crate) fn to_timestamp<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, n, o) = match &a[0] {
        Value::Timestamp(s, n, o) => (*s, *n, *o),
        Value::Int(i) => (*i, 0, 0),
        Value::Str(t) => match parse_timestamp(t) {
            Some(v) => v,
            None => return conversion_error("string", "google.protobuf.Timestamp"),
        },
        _ => return nso(),
    };
    if !(MIN_UNIX..=MAX_UNIX).contains(&s) {
        return Err(Error::msg("timestamp overflow"));
    }
    Ok(Value::Timestamp(s, n, o))
}

/// Go's `time.ParseDuration`.
pub(crate) fn parse_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let fl = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &r[..fl];
            rest = &r[fl..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let v: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut part = v.checked_mul(scale)?;
        if !frac_part.is_empty() {
            let mut f: u128 = 0;
            let mut div: u128 = 1;
            for c in frac_part.bytes().take(30) {
                f = f * 10 + u128::from(c - b'0');
                div *= 10;
            }
            part += f * scale / div;
        }
        total = total.checked_add(part)?;
        if total > 1 << 63 {
            return None;
        }
    }
    if neg {
        i64::try_from(-(total as i128)).ok()
    } else {
        i64::try_from(total).ok()
    }
}

pub(crate) fn duration_string(d: i64) -> String {
    let secs = d as f64 / 1e9;
    // strconv.FormatFloat(secs, 'f', -1, 64): shortest digits, no exponent.
    let s = format!("{secs}");
    format!("{s}s")
}

pub(crate) fn to_duration<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Duration(match &a[0] {
        Value::Duration(d) => *d,
        // Declared, but cel-go's int has no conversion to a duration: always this error.
        Value::Int(_) => return conversion_error("int", "google.protobuf.Duration"),
        Value::Str(s) => match parse_duration(s) {
            Some(d) => d,
            None => return conversion_error("string", "google.protobuf.Duration"),
        },
        _ => return nso(),
    }))
}

/// A time zone argument at the Unix instant `t`: `UTC`, a fixed offset `+HH:MM` / `-HH:MM`,
/// or (with the `tzdb` feature) a named zone from the system's zone files. cel-go takes an
/// argument with a `:` for an offset, any other for a name.
fn zone_offset(env: &Activation<'_>, tz: &str, t: i64) -> R<i64> {
    if tz.is_empty() || tz == "UTC" {
        return Ok(0);
    }
    // Go's `Local`: the scheduler's container has no local zone, so it is UTC.
    if tz == "Local" {
        return Ok(0);
    }
    // cel-go reads hours and minutes around the first `:` with `strconv.Atoi` and checks no
    // range: `1:00`, `+1:00` and `+01:75` are offsets too.
    if let Some(colon) = tz.find(':') {
        let (h, m) = (go_atoi(&tz[..colon])?, go_atoi(&tz[colon + 1..])?);
        let minutes = if tz.starts_with('-') {
            h.wrapping_mul(60).wrapping_sub(m)
        } else {
            h.wrapping_mul(60).wrapping_add(m)
        };
        return Ok(minutes.wrapping_mul(60));
    }
    #[cfg(feature = "tzdb")]
    return env.zone_offset(tz, t);
    #[cfg(not(feature = "tzdb"))]
    {
        let _ = (env, t);
        Err(Error::msg(format!("unknown time zone {tz}")))
    }
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits, in the int64 range.
fn go_atoi(s: &str) -> R<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(Error::msg(format!(
            "strconv.Atoi: parsing {s:?}: invalid syntax"
        )));
    }
    s.parse()
        .map_err(|_| Error::msg(format!("strconv.Atoi: parsing {s:?}: value out of range")))
}

fn time_part<'a>(env: &Activation<'a>, a: &[Value<'a>], which: u8) -> R<Value<'a>> {
    let (s, n) = match &a[0] {
        Value::Timestamp(s, n, _) => (*s, *n),
        Value::Duration(d) => {
            return Ok(Value::Int(match which {
                4 => d / 3_600_000_000_000,
                5 => d / 60_000_000_000,
                6 => d / 1_000_000_000,
                7 => d / 1_000_000,
                _ => return nso(),
            }));
        }
        _ => return nso(),
    };
    let off = match a.get(1) {
        Some(Value::Str(tz)) => zone_offset(env, tz, s)?,
        Some(_) => return nso(),
        None => 0,
    };
    let t = s + off;
    let days = t.div_euclid(86_400);
    let sod = t.rem_euclid(86_400);
    let (y, mo, d) = civil(days);
    Ok(Value::Int(match which {
        0 => y,
        1 => i64::from(mo) - 1,
        2 => days - days_from_civil(y, 1, 1),
        3 => i64::from(d) - 1,
        8 => i64::from(d),
        9 => (days + 4).rem_euclid(7),
        4 => sod / 3600,
        5 => sod % 3600 / 60,
        6 => sod % 60,
        7 => i64::from(n / 1_000_000),
        _ => return nso(),
    }))
}

pub(crate) fn get_full_year<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 0)
}
pub(crate) fn get_month<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 1)
}
pub(crate) fn get_day_of_year<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 2)
}
pub(crate) fn get_day_of_month<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 3)
}
pub(crate) fn get_date<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 8)
}
pub(crate) fn get_day_of_week<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 9)
}
pub(crate) fn get_hours<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 4)
}
pub(crate) fn get_minutes<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 5)
}
pub(crate) fn get_seconds<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 6)
}
pub(crate) fn get_milliseconds<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(env, a, 7)
}
