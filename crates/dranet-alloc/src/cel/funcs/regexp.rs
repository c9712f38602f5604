//! Regular expressions with RE2 semantics: `matches()` and the Kubernetes regex library
//! (`find`, `findAll`).

use super::{int_arg, strs};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

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

pub(crate) fn matches<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = compile_regex(p).map_err(Error::msg)?;
    Ok(Value::Bool(re.is_match(s)))
}

pub(crate) fn find<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = compile_regex(p).map_err(|e| Error::msg(format!("Illegal regex: {e}")))?;
    Ok(Value::string(
        re.find(s)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    ))
}

pub(crate) fn find_all<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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
