//! String functions: CEL's standard ones and cel-go's strings extension (version 2).

use super::{int_arg, nso, string_arg, strs};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

pub(crate) fn contains<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.contains(p)))
}

pub(crate) fn starts_with<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.starts_with(p)))
}

pub(crate) fn ends_with<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    strs(a).map(|(s, p)| Value::Bool(s.ends_with(p)))
}

pub(crate) fn char_at<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn index_of<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn last_index_of<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn lower_ascii<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.to_ascii_lowercase()))
}

pub(crate) fn upper_ascii<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.to_ascii_uppercase()))
}

pub(crate) fn trim<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(string_arg(&a[0])?.trim().to_string()))
}

pub(crate) fn replace<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn split<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn substring<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn join<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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

pub(crate) fn quote<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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
