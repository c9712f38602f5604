//! URLs as the Kubernetes URL library reads them: Go's `url.ParseRequestURI` decides validity,
//! `url.Parse` (which also splits off a `#fragment`) gives the parts.

use std::rc::Rc;

use super::{nso, string_arg};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, Map, R, Url, Value};

fn is_scheme_char(c: u8, first: bool) -> bool {
    c.is_ascii_alphabetic() || (!first && (c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.')))
}

/// Go's `getScheme`: (scheme, rest).
fn scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        if c == b':' {
            if i == 0 {
                return Err("missing protocol scheme".into());
            }
            return Ok((&raw[..i], &raw[i + 1..]));
        }
        if !is_scheme_char(c, i == 0) {
            return Ok(("", raw));
        }
    }
    Ok(("", raw))
}

fn unhex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Query,
}

/// RFC 3986's sub-delims.
fn is_sub_delim(c: u8) -> bool {
    matches!(
        c,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

/// Go's `shouldEscape` for the modes used here.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
        return false;
    }
    if mode == Mode::Host
        && (is_sub_delim(c) || matches!(c, b':' | b'[' | b']' | b'<' | b'>' | b'"'))
    {
        return false;
    }
    match c {
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            _ => true,
        },
        _ => true,
    }
}

/// Go's `unescape`: `%XX` sequences (and `+` in queries); errors on a malformed escape or,
/// in a host, a character that may not appear there.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(h), Some(l)) = (
                    b.get(i + 1).and_then(|c| unhex(*c)),
                    b.get(i + 2).and_then(|c| unhex(*c)),
                ) else {
                    let end = (i + 3).min(b.len());
                    return Err(format!("invalid URL escape {:?}", &s[i..end]));
                };
                out.push(h << 4 | l);
                i += 3;
            }
            b'+' if mode == Mode::Query => {
                out.push(b' ');
                i += 1;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!("invalid character {:?} in host name", c as char));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "invalid UTF-8 in URL".into())
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.bytes() {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|c| {
        is_sub_delim(c)
            || matches!(c, b':' | b'@' | b'[' | b']' | b'%')
            || !should_escape(c, Mode::Path)
    })
}

fn valid_optional_port(port: &str) -> bool {
    if port.is_empty() {
        return true;
    }
    let Some(p) = port.strip_prefix(':') else {
        return false;
    };
    p.bytes().all(|c| c.is_ascii_digit())
}

fn parse_host(host: &str) -> Result<String, String> {
    if let Some(rest) = host.strip_prefix('[') {
        let Some(close) = rest.find(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &rest[close + 1..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    } else if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    unescape(host, Mode::Host)
}

fn parse(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".into());
    }
    // Go's parser takes "*" (the request target of `OPTIONS *`) as the path "*", which
    // `EscapedPath` gives back unescaped.
    if raw == "*" {
        return Ok(Url {
            text: raw.to_string(),
            scheme: String::new(),
            host: String::new(),
            escaped_path: "*".into(),
            query: Vec::new(),
        });
    }
    let (scheme, rest) = scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let (rest, query) = if rest.ends_with('?') && rest.matches('?').count() == 1 {
        (&rest[..rest.len() - 1], "")
    } else {
        rest.split_once('?').unwrap_or((rest, ""))
    };
    let mut url = Url {
        text: raw.to_string(),
        scheme: scheme.clone(),
        host: String::new(),
        escaped_path: String::new(),
        query: parse_query(query),
    };
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            // An opaque URL (`mailto:a@b`): no host, no path.
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".into());
        }
    }
    let mut path = rest;
    if (!scheme.is_empty() || (!via_request && !rest.starts_with("///"))) && rest.starts_with("//")
    {
        let authority = &rest[2..];
        let (auth, p) = match authority.find('/') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        };
        let host = match auth.rfind('@') {
            Some(i) => &auth[i + 1..],
            None => auth,
        };
        url.host = parse_host(host)?;
        path = p;
    }
    let unescaped = unescape(path, Mode::Path)?;
    url.escaped_path = if valid_encoded(path) && escape(&unescaped, Mode::Path) != path {
        path.to_string()
    } else {
        escape(&unescaped, Mode::Path)
    };
    Ok(url)
}

fn parse_query(q: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for pair in q.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Ok(k), Ok(v)) = (unescape(k, Mode::Query), unescape(v, Mode::Query)) else {
            continue;
        };
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1.push(v),
            None => out.push((k, vec![v])),
        }
    }
    out
}

/// `url()`: valid as a request URI, parts as `url.Parse` gives them.
pub(crate) fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse(raw, true).map_err(|e| format!("parse {raw:?}: {e}"))?;
    let without_fragment = raw.split_once('#').map_or(raw, |(u, _)| u);
    let mut u = parse(without_fragment, false).map_err(|e| format!("parse {raw:?}: {e}"))?;
    u.text = raw.to_string();
    Ok(u)
}

fn split_host_port(host: &str) -> (&str, &str) {
    let mut h = host;
    let mut port = "";
    if let Some(i) = h.rfind(':')
        && valid_optional_port(&h[i..])
    {
        port = &h[i + 1..];
        h = &h[..i];
    }
    if h.starts_with('[') && h.ends_with(']') {
        h = &h[1..h.len() - 1];
    }
    (h, port)
}

pub(crate) fn hostname(host: &str) -> String {
    split_host_port(host).0.to_string()
}

pub(crate) fn port(host: &str) -> String {
    split_host_port(host).1.to_string()
}

fn url_arg(v: &Value<'_>) -> R<Rc<Url>> {
    match v {
        Value::Url(u) => Ok(u.clone()),
        _ => nso(),
    }
}

pub(crate) fn url<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    super::url::parse_request_uri(&s)
        .map(|u| Value::Url(Rc::new(u)))
        .map_err(|e| {
            Error::msg(format!(
                "URL parse error during conversion from string: {e}"
            ))
        })
}
pub(crate) fn is_url<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(
        super::url::parse_request_uri(&string_arg(&a[0])?).is_ok(),
    ))
}
pub(crate) fn url_scheme<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.scheme.clone()))
}
pub(crate) fn url_host<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.host.clone()))
}
pub(crate) fn url_hostname<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(super::url::hostname(&url_arg(&a[0])?.host)))
}
pub(crate) fn url_port<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(super::url::port(&url_arg(&a[0])?.host)))
}
pub(crate) fn url_escaped_path<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::string(url_arg(&a[0])?.escaped_path.clone()))
}
pub(crate) fn url_query<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
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
