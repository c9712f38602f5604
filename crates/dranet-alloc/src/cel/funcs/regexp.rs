//! Regular expressions with RE2 semantics: `matches()` and the Kubernetes regex library
//! (`find`, `findAll`).

use std::sync::Arc;

use super::re2::{self, GoRegexp};
use super::{int_arg, strs};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

/// Compiles a regular expression with Go's RE2 syntax and meaning ([`re2::translate`]).
pub(crate) fn compile_regex(pattern: &str, go: GoRegexp) -> Result<regex::Regex, String> {
    let translated = re2::translate(pattern, go)?;
    // Go limits a program by its instructions, not by the regex crate's bytes: `\pL{1000}`
    // is within Go's limit and past the regex crate's default.
    regex::RegexBuilder::new(&translated)
        .size_limit(1 << 26)
        // Go allows nesting up to a height of 1000 (checked in the translation).
        .nest_limit(2100)
        .build()
        .map_err(|e| format!("error parsing regexp: {}", first_line(&e.to_string())))
}

/// `pattern` compiled with the Go syntax of the evaluation's version, once per program when the
/// program gave its cache.
fn regex(env: &Activation<'_>, pattern: &str) -> Result<Arc<regex::Regex>, String> {
    let go = GoRegexp::of(env.version);
    match env.regexes {
        Some(cache) => cache.get_or(pattern, |p| compile_regex(p, go)),
        None => compile_regex(pattern, go).map(Arc::new),
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

pub(crate) fn matches<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = regex(env, p).map_err(Error::msg)?;
    Ok(Value::Bool(re.is_match(s)))
}

pub(crate) fn find<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let re = regex(env, p).map_err(|e| Error::msg(format!("Illegal regex: {e}")))?;
    Ok(Value::string(
        re.find(s)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    ))
}

pub(crate) fn find_all<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (s, p) = strs(a)?;
    let n = if a.len() > 2 { int_arg(&a[2])? } else { -1 };
    let re = regex(env, p).map_err(|e| Error::msg(format!("Illegal regex: {e}")))?;
    let it = re
        .find_iter(s)
        .map(|m| Value::string(m.as_str().to_string()));
    Ok(Value::list(if n < 0 {
        it.collect()
    } else {
        it.take(n as usize).collect()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::regex_cache::{MAX_CACHED, RegexCache};

    #[test]
    fn the_cache_compiles_a_pattern_once_and_stays_bounded() {
        let cache = RegexCache::default();
        let go = GoRegexp::of(crate::version::KubernetesVersion::V1_34);
        let get = |p: &str| cache.get_or(p, |p| compile_regex(p, go));
        let a = get("^eth[0-9]+$").unwrap();
        let b = get("^eth[0-9]+$").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "compiled twice");
        // An invalid pattern's error is kept as well, with the message Go's would give.
        let e = get("(").unwrap_err();
        assert_eq!(get("(").unwrap_err(), e);
        assert!(e.starts_with("error parsing regexp"), "{e}");
        // Past the bound, patterns still compile; the cache does not grow.
        for i in 0..MAX_CACHED * 2 {
            let re = get(&format!("^x{i}$")).unwrap();
            assert!(re.is_match(&format!("x{i}")));
        }
        assert_eq!(cache.len(), MAX_CACHED);
    }
}
