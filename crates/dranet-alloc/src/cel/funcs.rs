//! Implementations of the environment's functions, one per overload (or one per function where
//! cel-go dispatches on the values), with cel-go's results and error messages.

use std::cmp::Ordering;
use std::net::IpAddr;
use std::rc::Rc;

use super::eval::Env;
use super::value::{Error, Map, R, Url, Value, Ver, compare, equal, format_double};
use dranet_core::{Quantity, Semver};

/// An overload's implementation: the evaluated arguments (receiver first) in, the result out.
pub(crate) type Imp = for<'a> fn(&Env<'a>, &mut [Value<'a>]) -> R<Value<'a>>;

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

// ---- arithmetic ----

pub(crate) fn add<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let _ = env;
    Ok(match (take(a, 0), take(a, 1)) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_add(y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_add(y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x + y),
        (Value::Str(x), Value::Str(y)) => {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(&x);
            s.push_str(&y);
            Value::string(s)
        }
        (Value::Bytes(x), Value::Bytes(y)) => Value::Bytes([&x[..], &y[..]].concat().into()),
        (Value::List(x), Value::List(y)) => {
            if x.is_empty() {
                Value::List(y)
            } else if y.is_empty() {
                Value::List(x)
            } else {
                let mut v = Rc::try_unwrap(x).unwrap_or_else(|rc| (*rc).clone());
                v.extend(y.iter().cloned());
                Value::list(v)
            }
        }
        (Value::Duration(x), Value::Duration(y)) => Value::Duration(
            x.checked_add(y)
                .ok_or_else(|| Error::msg("integer overflow"))?,
        ),
        (Value::Timestamp(s, n, o), Value::Duration(d))
        | (Value::Duration(d), Value::Timestamp(s, n, o)) => ts_add(s, n, o, i128::from(d))?,
        _ => return nso(),
    })
}

pub(crate) fn sub<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (take(a, 0), take(a, 1)) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_sub(y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_sub(y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x - y),
        (Value::Duration(x), Value::Duration(y)) => Value::Duration(
            x.checked_sub(y)
                .ok_or_else(|| Error::msg("integer overflow"))?,
        ),
        (Value::Timestamp(s, n, o), Value::Duration(d)) => ts_add(s, n, o, -i128::from(d))?,
        (Value::Timestamp(s1, n1, _), Value::Timestamp(s2, n2, _)) => {
            let d =
                (i128::from(s1) - i128::from(s2)) * 1_000_000_000 + i128::from(n1) - i128::from(n2);
            Value::Duration(i64::try_from(d).map_err(|_| Error::msg("integer overflow"))?)
        }
        _ => return nso(),
    })
}

pub(crate) fn mul<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_mul(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => {
            Value::Uint(x.checked_mul(*y).map_or_else(uint_overflow, Ok)?)
        }
        (Value::Double(x), Value::Double(y)) => Value::Double(x * y),
        _ => return nso(),
    })
}

pub(crate) fn div<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(Error::msg("division by zero"));
        }
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_div(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => Value::Uint(x / y),
        (Value::Double(x), Value::Double(y)) => Value::Double(x / y),
        _ => return nso(),
    })
}

pub(crate) fn rem<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match (&a[0], &a[1]) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(Error::msg("modulus by zero"));
        }
        (Value::Int(x), Value::Int(y)) => {
            Value::Int(x.checked_rem(*y).map_or_else(int_overflow, Ok)?)
        }
        (Value::Uint(x), Value::Uint(y)) => Value::Uint(x % y),
        _ => return nso(),
    })
}

pub(crate) fn neg<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match &a[0] {
        Value::Int(x) => Value::Int(x.checked_neg().map_or_else(int_overflow, Ok)?),
        Value::Double(x) => Value::Double(-x),
        Value::Duration(x) => Value::Duration(x.checked_neg().map_or_else(int_overflow, Ok)?),
        _ => return nso(),
    })
}

pub(crate) fn not<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Bool(b) => Ok(Value::Bool(!b)),
        _ => nso(),
    }
}

fn cmp_with<'a>(a: &[Value<'a>], f: fn(Ordering) -> bool) -> R<Value<'a>> {
    compare(&a[0], &a[1]).map(|o| Value::Bool(f(o)))
}
pub(crate) fn lt<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o == Ordering::Less)
}
pub(crate) fn le<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o != Ordering::Greater)
}
pub(crate) fn gt<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o == Ordering::Greater)
}
pub(crate) fn ge<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    cmp_with(a, |o| o != Ordering::Less)
}

pub(crate) fn eq<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    equal(&a[0], &a[1], env).map(Value::Bool)
}
pub(crate) fn ne<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    // cel-go: `a != b` is true unless `a == b` is exactly true, so a type whose equality errs
    // on a different kind (a version compared with a string) is simply unequal here.
    Ok(Value::Bool(!matches!(equal(&a[0], &a[1], env), Ok(true))))
}

// ---- aggregates ----

pub(crate) fn index<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let key = take(a, 1);
    let target = take(a, 0);
    index_value(env, target, key)
}

pub(crate) fn index_value<'a>(env: &Env<'a>, target: Value<'a>, key: Value<'a>) -> R<Value<'a>> {
    match &target {
        Value::List(l) => {
            let i = match key {
                Value::Int(i) => i,
                Value::Uint(u) => i64::try_from(u).map_err(|_| Error::msg("integer overflow"))?,
                Value::Double(d) => {
                    if d.fract() != 0.0 || !d.is_finite() {
                        return Err(Error::msg(format!(
                            "unsupported index value {}",
                            format_double(d)
                        )));
                    }
                    d as i64
                }
                _ => return nso(),
            };
            usize::try_from(i)
                .ok()
                .and_then(|i| l.get(i).cloned())
                .ok_or_else(|| Error::msg(format!("index out of bounds: {i}")))
        }
        t if t.is_map() => match env.get(t, &key) {
            Some(v) => Ok(v),
            None => Err(no_such_key(t, &key)),
        },
        Value::Optional(_) => nso(),
        _ => nso(),
    }
}

/// cel-go's "no such key" error; on a device's attribute domain it also names the qualified
/// attribute the device lacks, which is what a user has to fix.
pub(crate) fn no_such_key(map: &Value<'_>, key: &Value<'_>) -> Error {
    let k = key_text(key);
    match map {
        Value::Domain(d) => Error::msg(format!(
            "no such key: {k} (device has no attribute {}/{k})",
            &**d
        )),
        Value::CapDomain(d) => Error::msg(format!(
            "no such key: {k} (device has no capacity {}/{k})",
            &**d
        )),
        _ => Error::msg(format!("no such key: {k}")),
    }
}

/// A key as `%v` prints it in cel-go's "no such key" errors.
pub(crate) fn key_text(k: &Value<'_>) -> String {
    match k {
        Value::Str(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => format_double(*d),
        Value::Bool(b) => b.to_string(),
        Value::Null => "<nil>".into(),
        v => v.type_name().to_string(),
    }
}

pub(crate) fn in_<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, c) = (&a[0], &a[1]);
    match c {
        Value::List(l) => {
            for e in l.iter() {
                if let Ok(true) = equal(e, x, env) {
                    return Ok(Value::Bool(true));
                }
            }
            Ok(Value::Bool(false))
        }
        m if m.is_map() => Ok(Value::Bool(env.contains(m, x))),
        _ => nso(),
    }
}

pub(crate) fn size<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(match &a[0] {
        Value::Str(s) => s.chars().count() as i64,
        Value::Bytes(b) => b.len() as i64,
        Value::List(l) => l.len() as i64,
        m if m.is_map() => env.size(m) as i64,
        _ => return Err(Error::msg("no such overload: size")),
    }))
}

pub(crate) fn type_of<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::typ(a[0].type_name()))
}

pub(crate) fn identity<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(take(a, 0))
}

// ---- conversions ----

fn conversion_error<T>(from: &str, to: &str) -> R<T> {
    Err(Error::msg(format!(
        "type conversion error from '{from}' to '{to}'"
    )))
}

pub(crate) fn to_int<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(match &a[0] {
        Value::Int(i) => *i,
        Value::Uint(u) => i64::try_from(*u).map_or_else(|_| int_overflow(), Ok)?,
        Value::Double(d) => {
            if !d.is_finite() || *d <= i64::MIN as f64 || *d >= -(i64::MIN as f64) {
                return int_overflow();
            }
            *d as i64
        }
        Value::Str(s) => match parse_go_int(s) {
            Some(v) => v,
            None => return conversion_error("string", "int"),
        },
        Value::Duration(d) => *d,
        Value::Timestamp(s, ..) => *s,
        _ => return nso(),
    }))
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign and decimal digits only.
fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(crate) fn to_uint<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Uint(match &a[0] {
        Value::Uint(u) => *u,
        Value::Int(i) => u64::try_from(*i).map_or_else(|_| uint_overflow(), Ok)?,
        Value::Double(d) => {
            if !d.is_finite() || *d < 0.0 || *d >= 1.844_674_407_370_955_2e19 {
                return uint_overflow();
            }
            *d as u64
        }
        Value::Str(s) => {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return conversion_error("string", "uint");
            }
            match s.parse() {
                Ok(v) => v,
                Err(_) => return conversion_error("string", "uint"),
            }
        }
        _ => return nso(),
    }))
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms CEL users write (including `inf`, `NaN`).
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let neg = s.starts_with('-');
    let lower = body.to_ascii_lowercase();
    let special = match lower.as_str() {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(v) = special {
        return Some(if neg { -v } else { v });
    }
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() {
        return None;
    }
    Some(v)
}

pub(crate) fn to_double<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Double(match &a[0] {
        Value::Double(d) => *d,
        Value::Int(i) => *i as f64,
        Value::Uint(u) => *u as f64,
        Value::Str(s) => match parse_go_float(s) {
            Some(v) => v,
            None => return conversion_error("string", "double"),
        },
        _ => return nso(),
    }))
}

pub(crate) fn to_bool<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(match &a[0] {
        Value::Bool(b) => *b,
        Value::Str(s) => match &**s {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return conversion_error("string", "bool"),
        },
        _ => return nso(),
    }))
}

pub(crate) fn to_bytes<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match &a[0] {
        Value::Bytes(b) => Value::Bytes(b.clone()),
        Value::Str(s) => Value::Bytes(s.as_bytes().into()),
        _ => return nso(),
    })
}

pub(crate) fn to_string<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(match take(a, 0) {
        v @ Value::Str(_) => v,
        Value::Int(i) => Value::string(i.to_string()),
        Value::Uint(u) => Value::string(u.to_string()),
        Value::Double(d) => Value::string(format_double(d)),
        Value::Bool(b) => Value::string(b.to_string()),
        Value::Bytes(b) => match std::str::from_utf8(&b) {
            Ok(s) => Value::string(s.to_string()),
            Err(_) => {
                return Err(Error::msg(
                    "invalid UTF-8 in bytes, cannot convert to string",
                ));
            }
        },
        Value::Duration(d) => Value::string(duration_string(d)),
        Value::Timestamp(s, n, o) => Value::string(timestamp_string(s, n, o)),
        Value::Ip(ip) => Value::string(ip.to_string()),
        Value::Cidr(ip, p) => Value::string(format!("{ip}/{p}")),
        _ => return nso(),
    })
}

// ---- strings ----

fn strs<'b, 'a>(a: &'b [Value<'a>]) -> R<(&'b str, &'b str)> {
    match (&a[0], &a[1]) {
        (Value::Str(x), Value::Str(y)) => Ok((x, y)),
        _ => nso(),
    }
}

pub(crate) fn contains<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.contains(p)))
}
pub(crate) fn starts_with<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.starts_with(p)))
}
pub(crate) fn ends_with<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.ends_with(p)))
}

/// Compiles a regular expression with Go's RE2 syntax and meaning: `\d`, `\w`, `\s` and
/// `\b` are ASCII-only in Go, Unicode in the regex crate, so they are narrowed.
pub(crate) fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut in_class = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let ascii = match (n, in_class) {
                    ('d', false) => Some("(?-u:\\d)"),
                    ('D', false) => Some("(?-u:\\D)"),
                    ('w', false) => Some("(?-u:\\w)"),
                    ('W', false) => Some("(?-u:\\W)"),
                    ('s', false) => Some("[\\t\\n\\f\\r ]"),
                    ('S', false) => Some("[^\\t\\n\\f\\r ]"),
                    ('b', false) => Some("(?-u:\\b)"),
                    ('B', false) => Some("(?-u:\\B)"),
                    ('d', true) => Some("0-9"),
                    ('w', true) => Some("0-9A-Za-z_"),
                    ('s', true) => Some("\\t\\n\\f\\r "),
                    _ => None,
                };
                match ascii {
                    Some(r) => out.push_str(r),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A `]` right after `[` or `[^` is a literal.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    regex::RegexBuilder::new(&out)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| format!("error parsing regexp: {}", first_line(&e.to_string())))
}

fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

pub(crate) fn matches<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = compile_regex(p).map_err(Error::msg)?;
    Ok(Value::Bool(re.is_match(s)))
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

pub(crate) fn char_at<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let i = int_arg(&a[1])?;
    let n = s.chars().count() as i64;
    if i < 0 || i > n {
        return Err(Error::msg(format!("index out of range: {i}")));
    }
    Ok(Value::string(
        s.chars()
            .nth(i as usize)
            .map(String::from)
            .unwrap_or_default(),
    ))
}

pub(crate) fn index_of<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s: Vec<char> = string_arg(&a[0])?.chars().collect();
    let sub: Vec<char> = string_arg(&a[1])?.chars().collect();
    let off = if a.len() > 2 { int_arg(&a[2])? } else { 0 };
    if sub.is_empty() {
        return Ok(Value::Int(off));
    }
    if off < 0 {
        return Err(Error::msg(format!("index out of range: {off}")));
    }
    let off = off as usize;
    if off >= s.len() {
        return Ok(Value::Int(-1));
    }
    for i in off..s.len() {
        if i + sub.len() <= s.len() && s[i..i + sub.len()] == sub[..] {
            return Ok(Value::Int(i as i64));
        }
    }
    Ok(Value::Int(-1))
}

pub(crate) fn last_index_of<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let text = string_arg(&a[0])?;
    let s: Vec<char> = text.chars().collect();
    let subtext = string_arg(&a[1])?;
    let sub: Vec<char> = subtext.chars().collect();
    let off = if a.len() > 2 {
        int_arg(&a[2])?
    } else {
        if sub.is_empty() {
            return Ok(Value::Int(s.len() as i64));
        }
        if text.len() < subtext.len() {
            return Ok(Value::Int(-1));
        }
        s.len() as i64 - 1
    };
    if sub.is_empty() {
        return Ok(Value::Int(off));
    }
    if off < 0 {
        return Err(Error::msg(format!("index out of range: {off}")));
    }
    let mut off = off as usize;
    if off >= s.len() {
        return Ok(Value::Int(-1));
    }
    if sub.len() > s.len() {
        return Ok(Value::Int(-1));
    }
    off = off.min(s.len() - sub.len());
    for i in (0..=off).rev() {
        if s[i..i + sub.len()] == sub[..] {
            return Ok(Value::Int(i as i64));
        }
    }
    Ok(Value::Int(-1))
}

pub(crate) fn lower_ascii<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.to_ascii_lowercase()))
}
pub(crate) fn upper_ascii<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.to_ascii_uppercase()))
}
pub(crate) fn trim<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.trim().to_string()))
}

pub(crate) fn replace<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let old = string_arg(&a[1])?;
    let new = string_arg(&a[2])?;
    let n = if a.len() > 3 { int_arg(&a[3])? } else { -1 };
    Ok(Value::string(if n < 0 {
        s.replace(&old, &new)
    } else {
        s.replacen(&old, &new, n as usize)
    }))
}

pub(crate) fn split<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let sep = string_arg(&a[1])?;
    let n = if a.len() > 2 { int_arg(&a[2])? } else { -1 };
    if n == 0 {
        return Ok(Value::list(Vec::new()));
    }
    let parts: Vec<String> = if sep.is_empty() {
        let chars: Vec<char> = s.chars().collect();
        let limit = if n < 0 {
            chars.len()
        } else {
            (n as usize).min(chars.len())
        };
        let mut v: Vec<String> = chars
            .iter()
            .take(limit.saturating_sub(1))
            .map(|c| c.to_string())
            .collect();
        if limit > 0 {
            v.push(chars[limit - 1..].iter().collect());
        }
        v
    } else if n < 0 {
        s.split(&sep).map(str::to_string).collect()
    } else {
        s.splitn(n as usize, &sep).map(str::to_string).collect()
    };
    Ok(Value::list(parts.into_iter().map(Value::string).collect()))
}

pub(crate) fn substring<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s: Vec<char> = string_arg(&a[0])?.chars().collect();
    let start = int_arg(&a[1])?;
    let l = s.len() as i64;
    let end = if a.len() > 2 {
        let end = int_arg(&a[2])?;
        if start > end {
            return Err(Error::msg(format!(
                "invalid substring range. start: {start}, end: {end}"
            )));
        }
        if end < 0 || end > l {
            if start < 0 || start > l {
                return Err(Error::msg(format!("index out of range: {start}")));
            }
            return Err(Error::msg(format!("index out of range: {end}")));
        }
        end
    } else {
        l
    };
    if start < 0 || start > l {
        return Err(Error::msg(format!("index out of range: {start}")));
    }
    Ok(Value::string(
        s[start as usize..end as usize].iter().collect(),
    ))
}

pub(crate) fn join<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let sep = if a.len() > 1 {
        string_arg(&a[1])?
    } else {
        String::new()
    };
    let Value::List(l) = &a[0] else {
        return nso();
    };
    let mut out = String::new();
    for (i, e) in l.iter().enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        match e {
            Value::Str(s) => out.push_str(s),
            _ => return Err(Error::msg("join: invalid input")),
        }
    }
    Ok(Value::string(out))
}

pub(crate) fn quote<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(Value::string(out))
}

// ---- time ----

const MIN_UNIX: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z
const MAX_UNIX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z

fn ts_add<'a>(s: i64, n: u32, offset: i32, d_nanos: i128) -> R<Value<'a>> {
    let total = i128::from(s) * 1_000_000_000 + i128::from(n) + d_nanos;
    let secs = total.div_euclid(1_000_000_000);
    let nanos = total.rem_euclid(1_000_000_000) as u32;
    let secs = i64::try_from(secs).map_err(|_| Error::msg("timestamp overflow"))?;
    if !(MIN_UNIX..=MAX_UNIX).contains(&secs) {
        return Err(Error::msg("timestamp overflow"));
    }
    Ok(Value::Timestamp(secs, nanos, offset))
}

/// Days since the epoch to (year, month 1-12, day 1-31).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

/// RFC 3339 as Go's `time.Parse(time.RFC3339, s)` accepts it: seconds and nanoseconds since
/// the epoch, and the offset east of UTC it was written with.
pub(crate) fn parse_timestamp(s: &str) -> Option<(i64, u32, i32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        let mut j = start;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == start || j - start > 9 {
            return None;
        }
        let frac = &s[start..j];
        nanos = format!("{frac:0<9}").parse().ok()?;
        i = j;
    }
    let offset: i64 = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
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

pub(crate) fn to_timestamp<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn to_duration<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

/// A time zone argument: `UTC`, or a fixed offset `+HH:MM` / `-HH:MM`. Named zones need the
/// IANA database, which this pure-logic crate does not read.
fn zone_offset(tz: &str) -> R<i64> {
    if tz.is_empty() || tz == "UTC" {
        return Ok(0);
    }
    let b = tz.as_bytes();
    if b.len() == 6 && matches!(b[0], b'+' | b'-') && b[3] == b':' {
        let h: i64 = tz[1..3]
            .parse()
            .map_err(|_| Error::msg(format!("unknown time zone {tz}")))?;
        let m: i64 = tz[4..6]
            .parse()
            .map_err(|_| Error::msg(format!("unknown time zone {tz}")))?;
        if m > 59 {
            return Err(Error::msg(format!("unknown time zone {tz}")));
        }
        let o = h * 3600 + m * 60;
        return Ok(if b[0] == b'-' { -o } else { o });
    }
    Err(Error::msg(format!("unknown time zone {tz}")))
}

fn time_part<'a>(a: &[Value<'a>], which: u8) -> R<Value<'a>> {
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
        Some(Value::Str(tz)) => zone_offset(tz)?,
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

pub(crate) fn get_full_year<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 0)
}
pub(crate) fn get_month<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 1)
}
pub(crate) fn get_day_of_year<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 2)
}
pub(crate) fn get_day_of_month<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 3)
}
pub(crate) fn get_date<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 8)
}
pub(crate) fn get_day_of_week<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 9)
}
pub(crate) fn get_hours<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 4)
}
pub(crate) fn get_minutes<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 5)
}
pub(crate) fn get_seconds<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 6)
}
pub(crate) fn get_milliseconds<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    time_part(a, 7)
}

// ---- lists (cel-go extension and Kubernetes library) ----

fn list_arg<'b, 'a>(v: &'b Value<'a>) -> R<&'b Rc<Vec<Value<'a>>>> {
    match v {
        Value::List(l) => Ok(l),
        _ => nso(),
    }
}

pub(crate) fn slice<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let (s, e) = (int_arg(&a[1])?, int_arg(&a[2])?);
    if s < 0 || e < 0 {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), negative indexes not supported"
        )));
    }
    if s > e {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), start index must be less than or equal to end index"
        )));
    }
    if (l.len() as i64) < e {
        return Err(Error::msg(format!(
            "cannot slice({s}, {e}), list is length {}",
            l.len()
        )));
    }
    Ok(Value::list(l[s as usize..e as usize].to_vec()))
}

fn flatten_into<'a>(l: &[Value<'a>], depth: i64, out: &mut Vec<Value<'a>>) {
    for v in l {
        match v {
            Value::List(inner) if depth > 0 => flatten_into(inner, depth - 1, out),
            v => out.push(v.clone()),
        }
    }
}

pub(crate) fn flatten<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let depth = if a.len() > 1 { int_arg(&a[1])? } else { 1 };
    if depth < 0 {
        return Err(Error::msg("level must be non-negative"));
    }
    let mut out = Vec::new();
    flatten_into(l, depth, &mut out);
    Ok(Value::list(out))
}

fn sort_by_keys<'a>(list: &[Value<'a>], keys: &[Value<'a>]) -> R<Value<'a>> {
    if list.len() != keys.len() {
        return Err(Error::msg(format!(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, but got {} and {} elements respectively",
            list.len(),
            keys.len()
        )));
    }
    if list.is_empty() {
        return Ok(Value::list(Vec::new()));
    }
    let first = keys[0].type_name();
    if !matches!(
        keys[0],
        Value::Int(_)
            | Value::Uint(_)
            | Value::Double(_)
            | Value::Bool(_)
            | Value::Str(_)
            | Value::Bytes(_)
            | Value::Duration(_)
            | Value::Timestamp(..)
    ) {
        return Err(Error::msg("list elements must be comparable"));
    }
    if keys.iter().any(|k| k.type_name() != first) {
        return Err(Error::msg("list elements must have the same type"));
    }
    let mut idx: Vec<usize> = (0..list.len()).collect();
    idx.sort_by(|&i, &j| compare(&keys[i], &keys[j]).unwrap_or(Ordering::Equal));
    Ok(Value::list(
        idx.into_iter().map(|i| list[i].clone()).collect(),
    ))
}

pub(crate) fn sort<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    sort_by_keys(&l, &l)
}

pub(crate) fn sort_by_associated_keys<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    let k = list_arg(&a[1])?.clone();
    sort_by_keys(&l, &k)
}

pub(crate) fn lists_range<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let n = int_arg(&a[0])?;
    // One unit per element plus the list's creation, as the scheduler's cost tracker counts
    // (measured against it: 999,900 elements fit the budget, 999,990 do not); charged before
    // the list is built, so a huge range costs no memory.
    env.charge(u64::try_from(n.max(0)).unwrap_or(0).saturating_add(10))?;
    Ok(Value::list((0..n.max(0)).map(Value::Int).collect()))
}

pub(crate) fn reverse<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    Ok(Value::list(l.iter().rev().cloned().collect()))
}

pub(crate) fn distinct<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let mut out: Vec<Value<'a>> = Vec::new();
    for v in l.iter() {
        if !out.iter().any(|o| matches!(equal(o, v, env), Ok(true))) {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

pub(crate) fn is_sorted<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    for w in l.windows(2) {
        if compare(&w[0], &w[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

pub(crate) fn sum<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?.clone();
    // The zero of the element type the checker chose; an untyped empty list sums to int 0.
    let mut acc = match l.first() {
        Some(Value::Uint(_)) => Value::Uint(0),
        Some(Value::Double(_)) => Value::Double(0.0),
        Some(Value::Duration(_)) => Value::Duration(0),
        _ => Value::Int(0),
    };
    for v in l.iter() {
        let mut args = [acc, v.clone()];
        acc = add(env, &mut args)?;
    }
    Ok(acc)
}

fn min_max<'a>(a: &[Value<'a>], want: Ordering, name: &str) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let mut best: Option<&Value<'a>> = None;
    for v in l.iter() {
        best = Some(match best {
            None => v,
            Some(b) if compare(b, v)? == want => v,
            Some(b) => b,
        });
    }
    best.cloned()
        .ok_or_else(|| Error::msg(format!("{name} called on empty list")))
}

pub(crate) fn min<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    min_max(a, Ordering::Greater, "min")
}
pub(crate) fn max<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    min_max(a, Ordering::Less, "max")
}

pub(crate) fn list_index_of<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let pos = l
        .iter()
        .position(|v| matches!(equal(v, &a[1], env), Ok(true)));
    Ok(Value::Int(pos.map_or(-1, |p| p as i64)))
}

pub(crate) fn list_last_index_of<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let pos = l
        .iter()
        .rposition(|v| matches!(equal(v, &a[1], env), Ok(true)));
    Ok(Value::Int(pos.map_or(-1, |p| p as i64)))
}

// ---- sets ----

fn set_contains<'a>(env: &Env<'a>, l: &[Value<'a>], v: &Value<'a>) -> bool {
    l.iter().any(|x| matches!(equal(x, v, env), Ok(true)))
}

pub(crate) fn sets_contains<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    Ok(Value::Bool(y.iter().all(|v| set_contains(env, x, v))))
}
pub(crate) fn sets_equivalent<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    Ok(Value::Bool(
        y.iter().all(|v| set_contains(env, x, v)) && x.iter().all(|v| set_contains(env, y, v)),
    ))
}
pub(crate) fn sets_intersects<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (x, y) = (list_arg(&a[0])?, list_arg(&a[1])?);
    Ok(Value::Bool(y.iter().any(|v| set_contains(env, x, v))))
}

// ---- two-variable comprehensions ----

pub(crate) fn map_insert<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let m = take(a, 0);
    let mut map = env.to_map(&m);
    if a.len() == 3 {
        let k = take(a, 1);
        if map.find(&k).is_some() {
            return Err(Error::msg(format!(
                "insert failed: key {} already exists",
                key_text(&k)
            )));
        }
        map.insert(k, take(a, 2));
    } else {
        let other = take(a, 1);
        let om = env.to_map(&other);
        for (k, v) in om.entries {
            if map.find(&k).is_some() {
                return Err(Error::msg(format!(
                    "insert failed: key {} already exists",
                    key_text(&k)
                )));
            }
            map.insert(k, v);
        }
    }
    Ok(Value::Map(Rc::new(map)))
}

// ---- optionals ----

pub(crate) fn optional_of<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Optional(Some(Rc::new(take(a, 0)))))
}

fn is_zero(env: &Env<'_>, v: &Value<'_>) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Double(d) => *d == 0.0,
        Value::Str(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        m if m.is_map() => env.size(m) == 0,
        Value::Duration(d) => *d == 0,
        Value::Timestamp(s, n, _) => *s == 0 && *n == 0,
        Value::Optional(o) => o.is_none(),
        _ => false,
    }
}

pub(crate) fn optional_of_non_zero<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let v = take(a, 0);
    Ok(if is_zero(env, &v) {
        Value::Optional(None)
    } else {
        Value::Optional(Some(Rc::new(v)))
    })
}

pub(crate) fn optional_none<'a>(_: &Env<'a>, _: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Optional(None))
}

pub(crate) fn opt_value<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(Some(v)) => Ok((**v).clone()),
        Value::Optional(None) => Err(Error::msg("optional.none() dereference")),
        _ => nso(),
    }
}

pub(crate) fn opt_has_value<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(o) => Ok(Value::Bool(o.is_some())),
        _ => nso(),
    }
}

pub(crate) fn opt_or<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match (&a[0], &a[1]) {
        (Value::Optional(Some(_)), _) => Ok(take(a, 0)),
        (Value::Optional(None), Value::Optional(_)) => Ok(take(a, 1)),
        _ => nso(),
    }
}

pub(crate) fn opt_or_value<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    match &a[0] {
        Value::Optional(Some(v)) => Ok((**v).clone()),
        Value::Optional(None) => Ok(take(a, 1)),
        _ => nso(),
    }
}

/// `list[?i]`, `map[?k]`, and the same on an optional list or map.
pub(crate) fn opt_index<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let key = take(a, 1);
    let target = match take(a, 0) {
        Value::Optional(None) => return Ok(Value::Optional(None)),
        Value::Optional(Some(v)) => (*v).clone(),
        v => v,
    };
    let found = match &target {
        Value::List(l) => match key {
            Value::Int(i) => usize::try_from(i).ok().and_then(|i| l.get(i).cloned()),
            Value::Uint(u) => usize::try_from(u).ok().and_then(|i| l.get(i).cloned()),
            Value::Double(d) if d.fract() == 0.0 => usize::try_from(d as i64)
                .ok()
                .and_then(|i| l.get(i).cloned()),
            _ => return nso(),
        },
        m if m.is_map() => env.get(m, &key),
        _ => return nso(),
    };
    Ok(Value::Optional(found.map(Rc::new)))
}

/// `optional_list[i]` / `optional_map[k]`: an optional of the element.
pub(crate) fn optional_container_index<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    opt_index(env, a)
}

pub(crate) fn list_first<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    Ok(Value::Optional(l.first().cloned().map(Rc::new)))
}
pub(crate) fn list_last<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    Ok(Value::Optional(l.last().cloned().map(Rc::new)))
}

pub(crate) fn optional_unwrap<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let l = list_arg(&a[0])?;
    let mut out = Vec::new();
    for v in l.iter() {
        match v {
            Value::Optional(Some(x)) => out.push((**x).clone()),
            Value::Optional(None) => {}
            _ => return nso(),
        }
    }
    Ok(Value::list(out))
}

// ---- Kubernetes quantity ----

fn quantity_arg(v: &Value<'_>) -> R<Quantity> {
    match v {
        Value::Quantity(q) => Ok(*q),
        _ => nso(),
    }
}

pub(crate) fn quantity<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Quantity::parse(&s)
        .map(Value::Quantity)
        .map_err(|_| Error::msg("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
}

pub(crate) fn is_quantity<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Ok(Value::Bool(Quantity::parse(&s).is_ok()))
}

pub(crate) fn quantity_sign<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(quantity_arg(&a[0])?.sign()))
}

fn quantity_cmp(a: &[Value<'_>]) -> R<Ordering> {
    Ok(quantity_arg(&a[0])?.cmp(&quantity_arg(&a[1])?))
}

pub(crate) fn quantity_compare_to<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(quantity_cmp(a)? as i64))
}
pub(crate) fn quantity_is_greater_than<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_cmp(a)? == Ordering::Greater))
}
pub(crate) fn quantity_is_less_than<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_cmp(a)? == Ordering::Less))
}

pub(crate) fn quantity_as_integer<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    quantity_arg(&a[0])?
        .as_integer()
        .map(Value::Int)
        .ok_or_else(|| Error::msg("cannot convert value to integer"))
}
pub(crate) fn quantity_is_integer<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(quantity_arg(&a[0])?.as_integer().is_some()))
}
pub(crate) fn quantity_as_float<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Double(quantity_arg(&a[0])?.as_f64()))
}

fn quantity_operand(v: &Value<'_>) -> R<Quantity> {
    match v {
        Value::Quantity(q) => Ok(*q),
        Value::Int(i) => Ok(Quantity::from_int(*i)),
        _ => nso(),
    }
}

pub(crate) fn quantity_add<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let q = quantity_arg(&a[0])?;
    q.checked_add(quantity_operand(&a[1])?)
        .map(Value::Quantity)
        .ok_or_else(|| Error::msg("quantity overflow"))
}
pub(crate) fn quantity_sub<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let q = quantity_arg(&a[0])?;
    q.checked_sub(quantity_operand(&a[1])?)
        .map(Value::Quantity)
        .ok_or_else(|| Error::msg("quantity overflow"))
}

// ---- Kubernetes semver ----

fn semver_arg<'b, 'a>(v: &'b Value<'a>) -> R<&'b Semver> {
    match v {
        Value::Semver(s) => Ok(s),
        _ => nso(),
    }
}

pub(crate) fn semver<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let normalize = matches!(a.get(1), Some(Value::Bool(true)));
    let v = if normalize {
        Semver::parse_tolerant(&s)
    } else {
        Semver::parse(&s)
    };
    v.map(|v| Value::Semver(Ver::O(Rc::new(v))))
        .map_err(|e| Error::msg(e.to_string()))
}

pub(crate) fn is_semver<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let normalize = matches!(a.get(1), Some(Value::Bool(true)));
    Ok(Value::Bool(if normalize {
        Semver::parse_tolerant(&s).is_ok()
    } else {
        Semver::parse(&s).is_ok()
    }))
}

pub(crate) fn semver_major<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.major as i64))
}
pub(crate) fn semver_minor<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.minor as i64))
}
pub(crate) fn semver_patch<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_arg(&a[0])?.patch as i64))
}

fn semver_cmp(a: &[Value<'_>]) -> R<Ordering> {
    Ok(semver_arg(&a[0])?.cmp(semver_arg(&a[1])?))
}
pub(crate) fn semver_compare_to<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(semver_cmp(a)? as i64))
}
pub(crate) fn semver_is_greater_than<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(semver_cmp(a)? == Ordering::Greater))
}
pub(crate) fn semver_is_less_than<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(semver_cmp(a)? == Ordering::Less))
}

// ---- Kubernetes IP and CIDR ----

/// `netip.ParseAddr` plus the library's refusals (zones, IPv4-mapped IPv6).
pub(crate) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    if s.contains('%') {
        return Err(format!("IP address {s:?} with zone value is not allowed"));
    }
    let ip: IpAddr = s.parse().map_err(|_| {
        format!("IP Address {s:?} parse error during conversion from string: ParseAddr({s:?}): unable to parse IP")
    })?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok(ip)
}

pub(crate) fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let err = || {
        format!(
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix({s:?}): invalid prefix"
        )
    };
    let (addr, bits) = s.split_once('/').ok_or_else(err)?;
    if addr.contains('%') {
        return Err(err());
    }
    let ip: IpAddr = addr.parse().map_err(|_| err())?;
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return Err(err());
    }
    let b: u8 = bits.parse().map_err(|_| err())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if b > max {
        return Err(err());
    }
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok((ip, b))
}

fn ip_arg(v: &Value<'_>) -> R<IpAddr> {
    match v {
        Value::Ip(ip) => Ok(*ip),
        _ => nso(),
    }
}

pub(crate) fn ip<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    parse_ip(&string_arg(&a[0])?)
        .map(Value::Ip)
        .map_err(Error::msg)
}
pub(crate) fn is_ip<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(parse_ip(&string_arg(&a[0])?).is_ok()))
}
pub(crate) fn ip_is_canonical<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let ip = parse_ip(&s).map_err(Error::msg)?;
    Ok(Value::Bool(ip.to_string() == s))
}
pub(crate) fn ip_family<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(if ip_arg(&a[0])?.is_ipv4() { 4 } else { 6 }))
}

fn ip_prop<'a>(a: &[Value<'a>], f: fn(IpAddr) -> bool) -> R<Value<'a>> {
    Ok(Value::Bool(f(ip_arg(&a[0])?)))
}
pub(crate) fn ip_is_unspecified<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| ip.is_unspecified())
}
pub(crate) fn ip_is_loopback<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| ip.is_loopback())
}
pub(crate) fn ip_is_link_local_multicast<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v.segments()[0] & 0xff0f == 0xff02,
    })
}
pub(crate) fn ip_is_link_local_unicast<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => v.octets()[..2] == [169, 254],
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
    })
}
pub(crate) fn ip_is_global_unicast<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => {
            !v.is_unspecified()
                && !v.is_broadcast()
                && !v.is_loopback()
                && !v.is_multicast()
                && v.octets()[..2] != [169, 254]
        }
        IpAddr::V6(v) => {
            !v.is_unspecified()
                && !v.is_loopback()
                && !v.is_multicast()
                && v.segments()[0] & 0xffc0 != 0xfe80
        }
    })
}

fn cidr_arg(v: &Value<'_>) -> R<(IpAddr, u8)> {
    match v {
        Value::Cidr(ip, p) => Ok((*ip, *p)),
        _ => nso(),
    }
}

fn masked(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v) => {
            let n = u32::from(v);
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            IpAddr::V4((n & m).into())
        }
        IpAddr::V6(v) => {
            let n = u128::from(v);
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            IpAddr::V6((n & m).into())
        }
    }
}

pub(crate) fn cidr<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    parse_cidr(&string_arg(&a[0])?)
        .map(|(ip, b)| Value::Cidr(ip, b))
        .map_err(Error::msg)
}
pub(crate) fn is_cidr<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(parse_cidr(&string_arg(&a[0])?).is_ok()))
}

pub(crate) fn cidr_contains_ip<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (net, bits) = cidr_arg(&a[0])?;
    let ip = match &a[1] {
        Value::Str(s) => parse_ip(s).map_err(Error::msg)?,
        v => ip_arg(v)?,
    };
    Ok(Value::Bool(
        net.is_ipv4() == ip.is_ipv4() && masked(net, bits) == masked(ip, bits),
    ))
}

pub(crate) fn cidr_contains_cidr<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (net, bits) = cidr_arg(&a[0])?;
    let (other, obits) = match &a[1] {
        Value::Str(s) => parse_cidr(s).map_err(|e| {
            Error::msg(format!(
                "network address parse error during conversion from string: {e}"
            ))
        })?,
        v => cidr_arg(v)?,
    };
    Ok(Value::Bool(
        net.is_ipv4() == other.is_ipv4()
            && masked(net, bits) == masked(other, bits)
            && bits <= obits,
    ))
}

pub(crate) fn cidr_ip<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Ip(cidr_arg(&a[0])?.0))
}
pub(crate) fn cidr_masked<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (ip, b) = cidr_arg(&a[0])?;
    Ok(Value::Cidr(masked(ip, b), b))
}
pub(crate) fn cidr_prefix_length<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(i64::from(cidr_arg(&a[0])?.1)))
}

// ---- Kubernetes URL ----

fn url_arg(v: &Value<'_>) -> R<Rc<Url>> {
    match v {
        Value::Url(u) => Ok(u.clone()),
        _ => nso(),
    }
}

pub(crate) fn url<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    super::url::parse_request_uri(&s)
        .map(|u| Value::Url(Rc::new(u)))
        .map_err(|e| {
            Error::msg(format!(
                "URL parse error during conversion from string: {e}"
            ))
        })
}
pub(crate) fn is_url<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(
        super::url::parse_request_uri(&string_arg(&a[0])?).is_ok(),
    ))
}
pub(crate) fn url_scheme<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.scheme.clone()))
}
pub(crate) fn url_host<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.host.clone()))
}
pub(crate) fn url_hostname<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(super::url::hostname(&url_arg(&a[0])?.host)))
}
pub(crate) fn url_port<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(super::url::port(&url_arg(&a[0])?.host)))
}
pub(crate) fn url_escaped_path<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.escaped_path.clone()))
}
pub(crate) fn url_query<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let u = url_arg(&a[0])?;
    let mut m = Map::default();
    for (k, vs) in &u.query {
        m.insert(
            Value::string(k.clone()),
            Value::list(vs.iter().map(|v| Value::string(v.clone())).collect()),
        );
    }
    Ok(Value::Map(Rc::new(m)))
}

// ---- Kubernetes regex ----

pub(crate) fn find<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = compile_regex(p).map_err(|e| Error::msg(format!("Illegal regex: {e}")))?;
    Ok(Value::string(
        re.find(s)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    ))
}

pub(crate) fn find_all<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let n = if a.len() > 2 { int_arg(&a[2])? } else { -1 };
    let re = compile_regex(p).map_err(|e| Error::msg(format!("Illegal regex: {e}")))?;
    let it = re
        .find_iter(s)
        .map(|m| Value::string(m.as_str().to_string()));
    Ok(Value::list(if n < 0 {
        it.collect()
    } else {
        it.take(n as usize).collect()
    }))
}

// ---- Kubernetes format ----

pub(crate) fn format_named<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Ok(Value::Optional(
        super::format::NAMES
            .iter()
            .find(|n| **n == s)
            .map(|n| Rc::new(Value::Format(n))),
    ))
}

pub(crate) fn format_validate<'a>(_: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let Value::Format(name) = &a[0] else {
        return nso();
    };
    let s = string_arg(&a[1])?;
    let errs = super::format::validate(name, &s);
    Ok(if errs.is_empty() {
        Value::Optional(None)
    } else {
        Value::Optional(Some(Rc::new(Value::list(
            errs.into_iter().map(Value::string).collect(),
        ))))
    })
}

/// `string.format(list)`.
pub(crate) fn string_format<'a>(env: &Env<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let f = string_arg(&a[0])?;
    let Value::List(args) = &a[1] else {
        return nso();
    };
    super::format::string_format(env, &f, args)
        .map(Value::string)
        .map_err(Error::msg)
}

macro_rules! named_formats {
    ($($f:ident => $name:literal),* $(,)?) => {
        $(
            /// `format.<name>()`.
            #[allow(non_snake_case)] // named after the Kubernetes format they return
            pub(crate) fn $f<'a>(_: &Env<'a>, _: &mut [Value<'a>]) -> R<Value<'a>> {
                Ok(Value::Format($name))
            }
        )*
    };
}

named_formats! {
    format_dns1123Label => "dns1123Label",
    format_dns1123Subdomain => "dns1123Subdomain",
    format_dns1035Label => "dns1035Label",
    format_qualifiedName => "qualifiedName",
    format_dns1123LabelPrefix => "dns1123LabelPrefix",
    format_dns1123SubdomainPrefix => "dns1123SubdomainPrefix",
    format_dns1035LabelPrefix => "dns1035LabelPrefix",
    format_labelValue => "labelValue",
    format_uri => "uri",
    format_uuid => "uuid",
    format_byte => "byte",
    format_date => "date",
    format_datetime => "datetime",
}
