//! The lexer: cel-go's tokens, with its escapes and its error for text that is no token.

use super::Issue;

/// A token; its text borrows from the source, so tokens copy without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Tok<'a> {
    Int(&'a str),
    Uint(&'a str),
    Float(&'a str),
    Str(&'a str),
    Bytes(&'a str),
    Ident(&'a str),
    EscIdent(&'a str),
    True,
    False,
    Null,
    In,
    Op(&'static str),
    Eof,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Token<'a> {
    pub(super) tok: Tok<'a>,
    /// Code point offset.
    pub(super) at: u32,
}

/// Longest first, so `<=` wins over `<`.
const OPS: [&str; 25] = [
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", ".", ",",
    "(", ")", "[", "]", "{", "}", "=",
];

/// The operator at the start of `rest`: the two-byte ones first, then the one-byte ones by
/// their byte (a scan of every operator's text showed in compile profiles).
fn op_at(rest: &[u8]) -> Option<&'static str> {
    if let Some(two) = rest.get(..2)
        && let Some(op) = OPS.iter().find(|op| op.as_bytes() == two)
    {
        return Some(op);
    }
    let c = *rest.first()?;
    OPS.iter()
        .find(|op| op.len() == 1 && op.as_bytes()[0] == c)
        .copied()
}

pub(super) fn describe(t: &Tok) -> String {
    match t {
        Tok::Int(s) | Tok::Uint(s) | Tok::Float(s) | Tok::Str(s) | Tok::Bytes(s) => s.to_string(),
        Tok::Ident(s) => s.to_string(),
        Tok::EscIdent(s) => format!("`{s}`"),
        Tok::True => "true".into(),
        Tok::False => "false".into(),
        Tok::Null => "null".into(),
        Tok::In => "in".into(),
        Tok::Op(o) => (*o).into(),
        Tok::Eof => "<EOF>".into(),
    }
}

pub(super) struct Lexer<'a> {
    src: &'a str,
    b: &'a [u8],
    i: usize,
    /// Code point offset of `i`.
    cp: u32,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(src: &'a str) -> Lexer<'a> {
        Lexer {
            src,
            b: src.as_bytes(),
            i: 0,
            cp: 0,
        }
    }

    fn bump(&mut self, n: usize) {
        for k in 0..n {
            if self.b[self.i + k] & 0xC0 != 0x80 {
                self.cp += 1;
            }
        }
        self.i += n;
    }

    fn peek(&self, k: usize) -> Option<u8> {
        self.b.get(self.i + k).copied()
    }

    fn digits(&self, from: usize) -> usize {
        self.b[from..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    }

    /// Length of an exponent (`e+12`) at `from`, or 0.
    fn exponent(&self, from: usize) -> usize {
        match self.b.get(from) {
            Some(b'e' | b'E') => {
                let sign = usize::from(matches!(self.b.get(from + 1), Some(b'+' | b'-')));
                let d = self.digits(from + 1 + sign);
                if d == 0 { 0 } else { 1 + sign + d }
            }
            _ => 0,
        }
    }

    /// A number token at `i` (which holds a digit, or `.` followed by a digit).
    fn number(&self) -> (Tok<'a>, usize) {
        let i = self.i;
        let b = self.b;
        if b[i] == b'.' {
            let d = self.digits(i + 1);
            let e = self.exponent(i + 1 + d);
            let n = 1 + d + e;
            return (Tok::Float(&self.src[i..i + n]), n);
        }
        if b[i] == b'0' && b.get(i + 1) == Some(&b'x') {
            let h = b[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit())
                .count();
            if h > 0 {
                let n = 2 + h;
                if matches!(b.get(i + n), Some(b'u' | b'U')) {
                    return (Tok::Uint(&self.src[i..i + n + 1]), n + 1);
                }
                return (Tok::Int(&self.src[i..i + n]), n);
            }
        }
        let d = self.digits(i);
        if b.get(i + d) == Some(&b'.') {
            let f = self.digits(i + d + 1);
            if f > 0 {
                let e = self.exponent(i + d + 1 + f);
                let n = d + 1 + f + e;
                return (Tok::Float(&self.src[i..i + n]), n);
            }
        }
        let e = self.exponent(i + d);
        if e > 0 {
            return (Tok::Float(&self.src[i..i + d + e]), d + e);
        }
        if matches!(b.get(i + d), Some(b'u' | b'U')) {
            return (Tok::Uint(&self.src[i..i + d + 1]), d + 1);
        }
        (Tok::Int(&self.src[i..i + d]), d)
    }

    /// Length of the escape sequence at `from` (a backslash) if it is one the grammar knows.
    fn escape(&self, from: usize) -> Option<usize> {
        let b = self.b;
        let c = *b.get(from + 1)?;
        let hex = |n: usize| -> Option<usize> {
            (0..n)
                .all(|k| b.get(from + 2 + k).is_some_and(u8::is_ascii_hexdigit))
                .then_some(2 + n)
        };
        match c {
            b'a' | b'b' | b'f' | b'n' | b'r' | b't' | b'v' | b'"' | b'\'' | b'\\' | b'?' | b'`' => {
                Some(2)
            }
            b'x' | b'X' => hex(2),
            b'u' => hex(4),
            b'U' => hex(8),
            b'0'..=b'3' => (b.get(from + 2).is_some_and(|c| (b'0'..=b'7').contains(c))
                && b.get(from + 3).is_some_and(|c| (b'0'..=b'7').contains(c)))
            .then_some(4),
            _ => None,
        }
    }

    /// A string token at `i` (after any `b`/`r` prefixes `prefix` bytes long). Returns its
    /// total length, or `None` when no string token matches.
    fn string(&self, prefix: usize, raw: bool) -> Option<usize> {
        let b = self.b;
        let start = self.i + prefix;
        let q = *b.get(start)?;
        if q != b'"' && q != b'\'' {
            return None;
        }
        let triple = b.get(start + 1) == Some(&q) && b.get(start + 2) == Some(&q);
        if triple {
            let mut j = start + 3;
            while j < b.len() {
                if b[j] == q && b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q) {
                    return Some(j + 3 - self.i);
                }
                if b[j] == b'\\' && !raw {
                    j += self.escape(j)?;
                } else {
                    j += 1;
                }
            }
            return None;
        }
        let mut j = start + 1;
        while j < b.len() {
            match b[j] {
                c if c == q => return Some(j + 1 - self.i),
                b'\n' | b'\r' => return None,
                b'\\' if !raw => j += self.escape(j)?,
                _ => j += 1,
            }
        }
        None
    }

    pub(super) fn tokens(mut self) -> Result<Vec<Token<'a>>, Issue> {
        // About one token per four bytes in selectors: grown once or not at all.
        let mut out = Vec::with_capacity(self.b.len() / 4 + 2);
        while self.i < self.b.len() {
            let c = self.b[self.i];
            if is_space(c) {
                self.bump(1);
                continue;
            }
            if c == b'/' && self.peek(1) == Some(b'/') {
                while self.i < self.b.len() && self.b[self.i] != b'\n' {
                    self.bump(1);
                }
                continue;
            }
            let at = self.cp;
            let (tok, len) = if c.is_ascii_digit()
                || (c == b'.' && self.peek(1).is_some_and(|d| d.is_ascii_digit()))
            {
                self.number()
            } else if let Some((len, bytes)) = self.quoted() {
                let text = &self.src[self.i..self.i + len];
                (
                    if bytes {
                        Tok::Bytes(text)
                    } else {
                        Tok::Str(text)
                    },
                    len,
                )
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let n = self.b[self.i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                let word = &self.src[self.i..self.i + n];
                let tok = match word {
                    "true" => Tok::True,
                    "false" => Tok::False,
                    "null" => Tok::Null,
                    "in" => Tok::In,
                    _ => Tok::Ident(word),
                };
                (tok, n)
            } else if c == b'`' {
                let n = self.b[self.i + 1..]
                    .iter()
                    .take_while(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'/' | b' ')
                    })
                    .count();
                if n == 0 || self.peek(n + 1) != Some(b'`') {
                    return Err(self.recognition_error());
                }
                (Tok::EscIdent(&self.src[self.i + 1..self.i + 1 + n]), n + 2)
            } else if let Some(op) = op_at(&self.b[self.i..]) {
                if op == "=" {
                    return Err(self.recognition_error());
                }
                (Tok::Op(op), op.len())
            } else {
                return Err(self.recognition_error());
            };
            out.push(Token { tok, at });
            self.bump(len);
        }
        out.push(Token {
            tok: Tok::Eof,
            at: self.cp,
        });
        Ok(out)
    }

    /// A string or bytes literal at `i`: (length, is bytes).
    fn quoted(&self) -> Option<(usize, bool)> {
        let c = self.b[self.i];
        let lower = c.to_ascii_lowercase();
        if c == b'"' || c == b'\'' {
            return self.string(0, false).map(|n| (n, false));
        }
        if lower == b'r' {
            return self.string(1, true).map(|n| (n, false));
        }
        if lower == b'b' {
            if let Some(n) = self.string(1, false) {
                return Some((n, true));
            }
            if self.peek(1).is_some_and(|r| r.eq_ignore_ascii_case(&b'r')) {
                return self.string(2, true).map(|n| (n, true));
            }
        }
        None
    }

    fn recognition_error(&self) -> Issue {
        let ch = self.src[self.i..].chars().next().unwrap_or('?');
        Issue {
            offset: Some(self.cp),
            message: format!("Syntax error: token recognition error at: '{ch}'"),
        }
    }
}

/// Unescapes a string or bytes literal's text (with its prefixes and quotes), as cel-go does.
pub(super) fn unescape(text: &str, bytes: bool) -> Result<Vec<u8>, String> {
    let mut v = text;
    if bytes {
        v = &v[1..];
    }
    let raw = v.starts_with(['r', 'R']);
    if raw {
        v = &v[1..];
    }
    let body = if v.len() >= 6 && (v.starts_with("'''") || v.starts_with("\"\"\"")) {
        &v[3..v.len() - 3]
    } else {
        &v[1..v.len() - 1]
    };
    if raw || !body.contains('\\') {
        return Ok(body.as_bytes().to_vec());
    }
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    let push_char = |out: &mut Vec<u8>, c: char| {
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    };
    while let Some(c) = rest.chars().next() {
        if c != '\\' {
            push_char(&mut out, c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let b = rest.as_bytes();
        let Some(&e) = b.get(1) else {
            return Err("unable to unescape string, found '\\' as last character".into());
        };
        rest = &rest[2..];
        let simple = match e {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'f' => Some(0x0C),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0B),
            b'\\' | b'\'' | b'"' | b'`' | b'?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (n, radix) = match e {
            b'x' | b'X' => (2, 16),
            b'u' | b'U' if bytes => return Err("unable to unescape string".into()),
            b'u' => (4, 16),
            b'U' => (8, 16),
            b'0'..=b'3' => (2, 8),
            _ => return Err("unable to unescape string".into()),
        };
        let digits = if radix == 8 {
            format!("{}{}", e as char, rest.get(..n).unwrap_or(""))
        } else {
            rest.get(..n).unwrap_or("").to_string()
        };
        if rest.len() < n {
            return Err(if radix == 8 {
                "unable to unescape octal sequence in string".into()
            } else {
                "unable to unescape string".into()
            });
        }
        let v = u32::from_str_radix(&digits, radix).map_err(|_| {
            if radix == 8 {
                "unable to unescape octal sequence in string".to_string()
            } else {
                "unable to unescape string".to_string()
            }
        })?;
        rest = &rest[n..];
        let byte_escape = bytes && matches!(e, b'x' | b'X' | b'0'..=b'3');
        if byte_escape {
            out.push(v as u8);
        } else {
            let c = char::from_u32(v).ok_or("invalid unicode code point")?;
            push_char(&mut out, c);
        }
    }
    Ok(out)
}

/// CEL's whitespace (comments aside).
pub(crate) fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b' ' | b'\r' | b'\n' | 0x0C)
}

/// A double literal as Go's `strconv.ParseFloat` reads it: out of range is an error.
pub(super) fn parse_double(s: &str) -> Option<f64> {
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() {
        return None;
    }
    Some(v)
}
