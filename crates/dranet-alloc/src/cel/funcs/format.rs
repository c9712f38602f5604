//! The Kubernetes format library's named formats and cel-go's `string.format()`.

use std::rc::Rc;

use super::time::{duration_string, timestamp_string};
use super::{nso, string_arg};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value, format_double};

/// The named formats `format.named()` knows, by the name CEL uses.
pub(crate) const NAMES: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

fn label_ok(s: &str, first_alpha: bool) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && (if first_alpha {
            b[0].is_ascii_lowercase()
        } else {
            alnum(&b[0])
        })
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

fn dns1123_label(s: &str) -> Vec<String> {
    let mut e = Vec::new();
    if s.len() > 63 {
        e.push("must be no more than 63 characters".into());
    }
    if !label_ok(s, false) {
        e.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
    }
    e
}

fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut e = Vec::new();
    if s.len() > 253 {
        e.push("must be no more than 253 characters".into());
    }
    if !s.split('.').all(|l| label_ok(l, false)) {
        e.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    e
}

fn dns1035_label(s: &str) -> Vec<String> {
    let mut e = Vec::new();
    if s.len() > 63 {
        e.push("must be no more than 63 characters".into());
    }
    if !label_ok(s, true) {
        e.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into());
    }
    e
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn qualified_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

const QUALIFIED_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn qualified_name(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [n] => (None, *n),
        [p, n] => (Some(*p), *n),
        _ => {
            return vec![format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    let mut e = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            e.push("prefix part must be non-empty".into());
        } else {
            e.extend(
                dns1123_subdomain(p)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        e.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        e.push("name part must be no more than 63 characters".into());
    }
    if !name.is_empty() && !qualified_part_ok(name) {
        e.push(QUALIFIED_MSG.into());
    }
    e
}

fn label_value(s: &str) -> Vec<String> {
    let mut e = Vec::new();
    if s.len() > 63 {
        e.push("must be no more than 63 characters".into());
    }
    if !s.is_empty() && !qualified_part_ok(s) {
        e.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    e
}

/// A trailing `-` is allowed in a prefix: validate as if it were a letter.
fn mask_trailing_dash(s: &str) -> String {
    match s.strip_suffix('-') {
        Some(r) if s.len() > 1 => format!("{r}a"),
        _ => s.to_string(),
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|c| **c == b'=').count();
    pad <= 2
        && b[..b.len() - pad]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/'))
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && super::time::parse_timestamp(&format!("{s}T00:00:00Z")).is_some()
}

/// Validation errors of `s` in the named format; empty when it is valid.
pub(crate) fn validate(name: &str, s: &str) -> Vec<String> {
    match name {
        "dns1123Label" => dns1123_label(s),
        "dns1123Subdomain" => dns1123_subdomain(s),
        "dns1035Label" => dns1035_label(s),
        "qualifiedName" => qualified_name(s),
        "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(s)),
        "dns1123SubdomainPrefix" => dns1123_subdomain(&mask_trailing_dash(s)),
        "dns1035LabelPrefix" => dns1035_label(&mask_trailing_dash(s)),
        "labelValue" => label_value(s),
        "uri" => match super::url::parse_request_uri(s) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e],
        },
        "uuid" if !is_uuid(s) => vec!["does not match the UUID format".into()],
        "byte" if !is_base64(s) => vec!["invalid base64".into()],
        "date" if !is_date(s) => vec!["invalid date".into()],
        "datetime" if super::time::parse_timestamp(s).is_none() => {
            vec!["invalid datetime".into()]
        }
        _ => Vec::new(),
    }
}

fn quote_go(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%s` of one value.
fn format_string(env: &Activation<'_>, v: &Value<'_>) -> Result<String, String> {
    Ok(match v {
        Value::List(l) => {
            let mut parts = Vec::new();
            for e in l.iter() {
                let s = clause_for(env, e)?;
                parts.push(quote_for_cel(e, s));
            }
            format!("[{}]", parts.join(", "))
        }
        m if m.is_map() => {
            let mut pairs = Vec::new();
            for k in env.keys(m) {
                let ks = match &k {
                    Value::Str(_) | Value::Bool(_) => format_string(env, &k)?,
                    Value::Int(_) | Value::Uint(_) => format_decimal(&k)?,
                    o => {
                        return Err(format!(
                            "no formatting function for map key of type {}",
                            o.type_name()
                        ));
                    }
                };
                let val = env.get(m, &k).unwrap_or(Value::Null);
                let vs = clause_for(env, &val)?;
                pairs.push((quote_for_cel(&k, ks), quote_for_cel(&val, vs)));
            }
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let inner: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("{{{}}}", inner.join(", "))
        }
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => format_double(*d),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Bytes(b) => String::from_utf8(b.to_vec())
            .map_err(|_| "invalid UTF-8 in bytes, cannot convert to string".to_string())?,
        Value::Timestamp(s, n, o) => timestamp_string(*s, *n, *o),
        Value::Duration(d) => duration_string(*d),
        Value::Type(t) => t.to_string(),
        Value::Null => "null".into(),
        o => {
            return Err(format!(
                "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {}",
                o.type_name()
            ));
        }
    })
}

/// How a list element or map value is formatted inside `%s`.
fn clause_for(env: &Activation<'_>, v: &Value<'_>) -> Result<String, String> {
    match v {
        Value::Int(_) | Value::Uint(_) => format_decimal(v),
        Value::Double(d) => Ok(format!("{d:.6}")),
        Value::Timestamp(s, n, o) => Ok(format!(
            "timestamp({})",
            quote_go(&timestamp_string(*s, *n, *o))
        )),
        Value::Duration(d) => Ok(format!("duration({})", quote_go(&duration_string(*d)))),
        Value::Type(t) => Ok(format!("type({t})")),
        Value::Str(_) | Value::Bytes(_) | Value::Bool(_) | Value::Null => format_string(env, v),
        Value::List(_) => format_string(env, v),
        m if m.is_map() => format_string(env, v),
        o => Err(format!("no formatting function for {}", o.type_name())),
    }
}

fn quote_for_cel(v: &Value<'_>, s: String) -> String {
    match v {
        Value::Str(_) => quote_go(&s),
        Value::Bytes(_) => format!("b{}", quote_go(&s)),
        Value::Double(d) if !d.is_finite() => quote_go(&s),
        _ => s,
    }
}

fn format_decimal(v: &Value<'_>) -> Result<String, String> {
    match v {
        Value::Int(i) => Ok(i.to_string()),
        Value::Uint(u) => Ok(u.to_string()),
        o => Err(format!(
            "error during formatting: decimal clause can only be used on integers, was given {}",
            o.type_name()
        )),
    }
}

fn as_float(v: &Value<'_>, clause: &str) -> Result<f64, String> {
    match v {
        Value::Double(d) => Ok(*d),
        Value::Str(s) if matches!(&**s, "NaN" | "Infinity" | "-Infinity") => Ok(match &**s {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            _ => f64::NEG_INFINITY,
        }),
        o => Err(format!(
            "error during formatting: {clause} clause can only be used on doubles, was given {}",
            o.type_name()
        )),
    }
}

/// `%e` as the scheduler prints it: the strings extension formats through a localised number
/// printer, which writes the exponent as a power of ten in superscript (`1.234500×10⁰³`) and
/// ignores the precision (always six decimals). A NaN or an infinity is the printer's symbol
/// (`NaN`, `∞`, `-∞`) right-aligned in a width of the precision (default 6): `"   NaN"`,
/// `"%.2e"` of infinity `" ∞"`. Measured against the 1.34 and 1.36 schedulers.
/// The localised printer cel-go formats `%f` and `%e` with writes -0 as 0 (a negative value
/// that rounds to zero keeps its sign).
fn unsigned_zero(d: f64) -> f64 {
    if d == 0.0 { 0.0 } else { d }
}

fn scientific(d: f64, precision: Option<usize>) -> String {
    if !d.is_finite() {
        let symbol = if d.is_nan() {
            "NaN"
        } else if d > 0.0 {
            "∞"
        } else {
            "-∞"
        };
        return format!("{symbol:>width$}", width = precision.unwrap_or(6));
    }
    let s = format!("{d:.6e}");
    let Some((mantissa, exp)) = s.split_once('e') else {
        return s;
    };
    let (neg, digits) = match exp.strip_prefix('-') {
        Some(x) => (true, x),
        None => (false, exp),
    };
    const SUP: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let mut out = format!("{mantissa}×10");
    if neg {
        out.push('⁻');
    }
    for c in format!("{digits:0>2}").chars() {
        out.push(c.to_digit(10).map_or(c, |d| SUP[d as usize]));
    }
    out
}

/// A parsed format string: literal text and clauses (verb and precision).
pub(crate) enum Piece {
    Text(String),
    Clause(char, Option<usize>),
}

/// Parses a format string as cel-go's strings extension does, with its error messages.
pub(crate) fn parse_format(f: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let chars: Vec<char> = f.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            text.push(c);
            continue;
        }
        if i >= chars.len() {
            return Err("error during formatting: unexpected end of string".into());
        }
        if chars[i] == '%' {
            text.push('%');
            i += 1;
            continue;
        }
        let mut precision: Option<usize> = None;
        if chars[i] == '.' {
            let start = i + 1;
            let mut j = start;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            if j >= chars.len() {
                return Err(
                    "error during formatting: could not find end of precision specifier".into(),
                );
            }
            let p: String = chars[start..j].iter().collect();
            precision = Some(p.parse().map_err(|e| {
                format!("error during formatting: error while converting precision to integer: {e}")
            })?);
            i = j;
        }
        let verb = chars[i];
        i += 1;
        if !matches!(verb, 's' | 'd' | 'f' | 'e' | 'b' | 'x' | 'X' | 'o') {
            return Err(format!(
                "error during formatting: could not parse formatting clause: unrecognized formatting clause \"{verb}\""
            ));
        }
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(Piece::Clause(verb, precision));
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// `string.format(list)` as cel-go's strings extension (version 2) formats.
fn render(env: &Activation<'_>, f: &str, args: &[Value<'_>]) -> Result<String, String> {
    let mut out = String::new();
    let mut next = 0usize;
    for piece in parse_format(f)? {
        let (verb, precision) = match piece {
            Piece::Text(t) => {
                out.push_str(&t);
                continue;
            }
            Piece::Clause(v, p) => (v, p),
        };
        let Some(arg) = args.get(next) else {
            return Err(format!(
                "error during formatting: index {next} out of range"
            ));
        };
        next += 1;
        let s = match verb {
            's' => format_string(env, arg)?,
            'd' => format_decimal(arg)?,
            'f' => format!(
                "{:.*}",
                precision.unwrap_or(6),
                unsigned_zero(as_float(arg, "fixed-point")?)
            ),
            'e' => scientific(unsigned_zero(as_float(arg, "scientific")?), precision),
            'b' => match arg {
                // Go's strconv: a sign and the magnitude, not Rust's two's complement.
                Value::Int(v) if *v < 0 => format!("-{:b}", v.unsigned_abs()),
                Value::Int(v) => format!("{v:b}"),
                Value::Uint(v) => format!("{v:b}"),
                Value::Bool(b) => if *b { "1" } else { "0" }.into(),
                o => {
                    return Err(format!(
                        "error during formatting: only integers and bools can be formatted as binary, was given {}",
                        o.type_name()
                    ));
                }
            },
            'x' | 'X' => {
                let s = match arg {
                    Value::Int(v) if *v < 0 => format!("-{:x}", v.unsigned_abs()),
                    Value::Int(v) => format!("{v:x}"),
                    Value::Uint(v) => format!("{v:x}"),
                    Value::Str(s) => s.bytes().map(|b| format!("{b:02x}")).collect(),
                    Value::Bytes(b) => b.iter().map(|b| format!("{b:02x}")).collect(),
                    o => {
                        return Err(format!(
                            "error during formatting: only integers, byte buffers, and strings can be formatted as hex, was given {}",
                            o.type_name()
                        ));
                    }
                };
                if verb == 'X' { s.to_uppercase() } else { s }
            }
            'o' => match arg {
                Value::Int(v) if *v < 0 => format!("-{:o}", v.unsigned_abs()),
                Value::Int(v) => format!("{v:o}"),
                Value::Uint(v) => format!("{v:o}"),
                o => {
                    return Err(format!(
                        "error during formatting: octal clause can only be used on integers, was given {}",
                        o.type_name()
                    ));
                }
            },
            c => {
                return Err(format!(
                    "error during formatting: could not parse formatting clause: unrecognized formatting clause \"{c}\""
                ));
            }
        };
        out.push_str(&s);
    }
    Ok(out)
}

pub(crate) fn format_named<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    Ok(Value::Optional(
        NAMES
            .iter()
            .find(|n| **n == s)
            .map(|n| Rc::new(Value::Format(n))),
    ))
}

pub(crate) fn format_validate<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let Value::Format(name) = &a[0] else {
        return nso();
    };
    let s = string_arg(&a[1])?;
    let errs = validate(name, &s);
    Ok(if errs.is_empty() {
        Value::Optional(None)
    } else {
        Value::Optional(Some(Rc::new(Value::list(
            errs.into_iter().map(Value::string).collect(),
        ))))
    })
}

/// `string.format(list)`.
pub(crate) fn string_format<'a>(env: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let f = string_arg(&a[0])?;
    let Value::List(args) = &a[1] else {
        return nso();
    };
    render(env, &f, args).map(Value::string).map_err(Error::msg)
}

macro_rules! named_formats {
    ($($f:ident => $name:literal),* $(,)?) => {
        $(
            /// `format.<name>()`.
            #[allow(non_snake_case)] // named after the Kubernetes format they return
            pub(crate) fn $f<'a>(_: &Activation<'a>, _: &mut [Value<'a>]) -> R<Value<'a>> {
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
