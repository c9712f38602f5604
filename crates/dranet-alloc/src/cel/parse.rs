//! Lexer and parser of CEL as cel-go (the scheduler's CEL) reads it: the same tokens, the same
//! tree (operators as calls, `&&`/`||` chains balanced, `!!x` and `--x` cancelled, macros
//! expanded into comprehensions) and the same nesting limits, so an expression parses here
//! exactly when it parses there.
//!
//! Nesting is bounded the way cel-go bounds it, which also keeps every later recursive pass
//! within a few hundred frames:
//! - the grammar's `expr` rule may nest 250 deep (parentheses, list and map literals, call
//!   arguments, the right branch of `?:`): "expression recursion limit exceeded: 250";
//! - along any path of the tree at most 250 nodes may be member selections, indexes, method
//!   calls, `?:`, or relation / arithmetic operators: "max recursion depth exceeded".

use super::ast::{ACCU, Comprehension, Entry, Expr, Id, Kind, Lit};
use super::decls::Env;

/// cel-go's default parser recursion limit, which Kubernetes keeps.
pub(crate) const MAX_RECURSION_DEPTH: u32 = 250;
/// cel-go's limit on the expression size, in code points.
const MAX_CODE_POINTS: usize = 100_000;

/// One compile error: where (a code point offset, or none) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    pub offset: Option<u32>,
    pub message: String,
}

/// The parsed expression with the source position of every node.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub expr: Expr,
    /// Code point offset of each node, by id (index 0 unused).
    pub positions: Vec<u32>,
}

/// A token; its text borrows from the source, so tokens copy without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'a> {
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
struct Token<'a> {
    tok: Tok<'a>,
    /// Code point offset.
    at: u32,
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

fn describe(t: &Tok) -> String {
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

struct Lexer<'a> {
    src: &'a str,
    b: &'a [u8],
    i: usize,
    /// Code point offset of `i`.
    cp: u32,
}

impl<'a> Lexer<'a> {
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

    fn tokens(mut self) -> Result<Vec<Token<'a>>, Issue> {
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
fn unescape(text: &str, bytes: bool) -> Result<Vec<u8>, String> {
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

/// Parses an expression with the macros of `env`; the error list holds every issue found
/// (syntax errors stop at the first one, as the first is what a user needs).
pub(crate) fn parse(src: &str, env: Env) -> Result<Parsed, Vec<Issue>> {
    let n = src.chars().count();
    if n > MAX_CODE_POINTS {
        return Err(vec![Issue {
            offset: None,
            message: format!(
                "expression code point size exceeds limit: size: {n}, limit {MAX_CODE_POINTS}"
            ),
        }]);
    }
    let toks = Lexer {
        src,
        b: src.as_bytes(),
        i: 0,
        cp: 0,
    }
    .tokens()
    .map_err(|e| vec![e])?;
    // Macros add nodes beyond the tokens; most selectors have none.
    let mut positions = Vec::with_capacity(toks.len() + 1);
    positions.push(0);
    let mut p = Parser {
        env,
        toks,
        pos: 0,
        positions,
        expr_depth: 0,
        errors: Vec::new(),
    };
    let r = p.expr();
    let out = match r {
        Ok((e, depth)) => {
            if p.peek() != Tok::Eof {
                let t = p.toks[p.pos];
                p.errors.push(Issue {
                    offset: Some(t.at),
                    message: format!(
                        "Syntax error: extraneous input '{}' expecting <EOF>",
                        describe(&t.tok)
                    ),
                });
            } else if depth > MAX_RECURSION_DEPTH {
                p.errors.push(Issue {
                    offset: None,
                    message: "max recursion depth exceeded".into(),
                });
            }
            Some(e)
        }
        Err(()) => None,
    };
    match out {
        Some(expr) if p.errors.is_empty() => Ok(Parsed {
            expr,
            positions: p.positions,
        }),
        _ => Err(p.errors),
    }
}

struct Parser<'a> {
    /// Whose macros apply: `sortBy` comes with the lists extension, which a new selector's
    /// environment lacks.
    env: Env,
    toks: Vec<Token<'a>>,
    pos: usize,
    positions: Vec<u32>,
    /// Nesting of the grammar's `expr` rule.
    expr_depth: u32,
    errors: Vec<Issue>,
}

/// A parsed subtree with its depth as cel-go's visitor counts it.
type P = Result<(Expr, u32), ()>;

/// Binary operators by precedence level (relations, additive, multiplicative).
fn relation_op(t: Tok) -> Option<&'static str> {
    Some(match t {
        Tok::Op("==") => "_==_",
        Tok::Op("!=") => "_!=_",
        Tok::Op("<") => "_<_",
        Tok::Op("<=") => "_<=_",
        Tok::Op(">") => "_>_",
        Tok::Op(">=") => "_>=_",
        Tok::In => "@in",
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Tok<'a> {
        self.toks[self.pos].tok
    }

    fn peek_at(&self, k: usize) -> Tok<'a> {
        self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn at(&self) -> u32 {
        self.toks[self.pos].at
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Tok::Op(o) if o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn syntax_error<T>(&mut self, expecting: &str) -> Result<T, ()> {
        let t = self.toks[self.pos];
        let found = describe(&t.tok);
        self.errors.push(Issue {
            offset: Some(t.at),
            message: if expecting.is_empty() {
                format!("Syntax error: mismatched input '{found}'")
            } else {
                format!("Syntax error: mismatched input '{found}' expecting {expecting}")
            },
        });
        Err(())
    }

    fn expect(&mut self, op: &str) -> Result<(), ()> {
        if self.eat(op) {
            Ok(())
        } else {
            self.syntax_error(&format!("'{op}'"))
        }
    }

    fn error_at(&mut self, at: Option<u32>, message: impl Into<String>) {
        self.errors.push(Issue {
            offset: at,
            message: message.into(),
        });
    }

    fn new_id(&mut self, at: u32) -> Id {
        self.positions.push(at);
        (self.positions.len() - 1) as Id
    }

    fn node(&mut self, at: u32, kind: Kind) -> Expr {
        Expr {
            id: self.new_id(at),
            kind,
        }
    }

    fn call(&mut self, at: u32, func: &str, target: Option<Expr>, args: Vec<Expr>) -> Expr {
        self.node(
            at,
            Kind::Call {
                target: target.map(Box::new),
                func: func.to_string(),
                args,
            },
        )
    }

    /// `expr: conditionalOr ('?' conditionalOr ':' expr)?`
    fn expr(&mut self) -> P {
        self.expr_depth += 1;
        if self.expr_depth > MAX_RECURSION_DEPTH {
            self.error_at(
                None,
                format!("expression recursion limit exceeded: {MAX_RECURSION_DEPTH}"),
            );
            return Err(());
        }
        let r = super::with_stack(|| self.ternary());
        self.expr_depth -= 1;
        r
    }

    fn ternary(&mut self) -> P {
        let (cond, d0) = self.logical(true)?;
        if !matches!(self.peek(), Tok::Op("?")) {
            return Ok((cond, d0));
        }
        let at = self.at();
        self.pos += 1;
        let (a, d1) = self.logical(true)?;
        self.expect(":")?;
        let (b, d2) = self.expr()?;
        let e = self.call(at, "_?_:_", None, vec![cond, a, b]);
        Ok((e, 1 + d0.max(d1).max(d2)))
    }

    /// `||` chains (or `&&` chains when `or` is false), built balanced as cel-go does.
    fn logical(&mut self, or: bool) -> P {
        let (op, func) = if or { ("||", "_||_") } else { ("&&", "_&&_") };
        let next = |p: &mut Parser| if or { p.logical(false) } else { p.relation() };
        let (first, mut depth) = next(self)?;
        if !matches!(self.peek(), Tok::Op(o) if o == op) {
            return Ok((first, depth));
        }
        let mut terms = vec![first];
        let mut ops = Vec::new();
        while matches!(self.peek(), Tok::Op(o) if o == op) {
            ops.push(self.at());
            self.pos += 1;
            let (t, d) = next(self)?;
            depth = depth.max(d);
            terms.push(t);
        }
        let mut join = |op: usize, l: Expr, r: Expr| self.call(ops[op], func, None, vec![l, r]);
        let e = balanced(terms, &mut join).ok_or(())?;
        Ok((e, depth))
    }

    fn relation(&mut self) -> P {
        let (mut lhs, mut depth) = self.calc(0)?;
        while let Some(func) = relation_op(self.peek()) {
            let at = self.at();
            self.pos += 1;
            let (rhs, d) = self.calc(0)?;
            lhs = self.call(at, func, None, vec![lhs, rhs]);
            depth = 1 + depth.max(d);
        }
        Ok((lhs, depth))
    }

    /// Additive (level 0) and multiplicative (level 1) operators, left associative.
    fn calc(&mut self, level: u8) -> P {
        let (mut lhs, mut depth) = if level == 0 {
            self.calc(1)?
        } else {
            self.unary()?
        };
        loop {
            let func = match (level, self.peek()) {
                (0, Tok::Op("+")) => "_+_",
                (0, Tok::Op("-")) => "_-_",
                (1, Tok::Op("*")) => "_*_",
                (1, Tok::Op("/")) => "_/_",
                (1, Tok::Op("%")) => "_%_",
                _ => return Ok((lhs, depth)),
            };
            let at = self.at();
            self.pos += 1;
            let (rhs, d) = if level == 0 {
                self.calc(1)?
            } else {
                self.unary()?
            };
            lhs = self.call(at, func, None, vec![lhs, rhs]);
            depth = 1 + depth.max(d);
        }
    }

    /// A token a leading `-` belongs to as the sign (cel-go's grammar signs ints and doubles,
    /// not uints).
    fn is_signed_number(t: Tok) -> bool {
        matches!(t, Tok::Int(_) | Tok::Float(_))
    }

    fn unary(&mut self) -> P {
        let first = self.at();
        if matches!(self.peek(), Tok::Op("!")) {
            let mut n = 0;
            while self.eat("!") {
                n += 1;
            }
            let (m, d) = self.member()?;
            return Ok(if n % 2 == 0 {
                (m, d)
            } else {
                (self.call(first, "!_", None, vec![m]), d)
            });
        }
        if matches!(self.peek(), Tok::Op("-")) {
            let mut n = 0;
            while matches!(self.peek_at(n), Tok::Op("-")) {
                n += 1;
            }
            // A single minus before an int or double is the number's sign
            // (`-9223372036854775808`); `-1u` is negation, which uint does not have.
            if n == 1 && Self::is_signed_number(self.peek_at(1)) {
                return self.member();
            }
            self.pos += n;
            let (m, d) = self.member()?;
            return Ok(if n % 2 == 0 {
                (m, d)
            } else {
                (self.call(first, "-_", None, vec![m]), d)
            });
        }
        self.member()
    }

    fn ident_after_dot(&mut self) -> Result<String, ()> {
        match self.peek() {
            Tok::Ident(n) => {
                self.pos += 1;
                Ok(n.to_string())
            }
            Tok::EscIdent(_) => {
                let at = self.at();
                self.pos += 1;
                self.error_at(Some(at), "unsupported syntax: '`'");
                Err(())
            }
            _ => self.syntax_error("IDENTIFIER"),
        }
    }

    /// A primary followed by `.field`, `.?field`, `.method(...)`, `[index]`, `[?index]`.
    fn member(&mut self) -> P {
        let (mut e, mut depth) = self.primary()?;
        loop {
            match self.peek() {
                Tok::Op(".") => {
                    let dot = self.at();
                    self.pos += 1;
                    let optional = self.eat("?");
                    let name = self.ident_after_dot()?;
                    if !optional && matches!(self.peek(), Tok::Op("(")) {
                        let open = self.at();
                        self.pos += 1;
                        let (args, d) = self.expr_list(")")?;
                        depth = 1 + depth.max(d);
                        e = self.receiver_call(open, &name, e, args)?;
                    } else if optional {
                        let lit = self.node(dot, Kind::Lit(Lit::String(name.into())));
                        e = self.call(dot, "_?._", None, vec![e, lit]);
                        depth += 1;
                    } else {
                        e = self.node(
                            dot,
                            Kind::Select {
                                operand: Box::new(e),
                                field: name,
                                test_only: false,
                            },
                        );
                        depth += 1;
                    }
                }
                Tok::Op("[") => {
                    let open = self.at();
                    self.pos += 1;
                    let optional = self.eat("?");
                    let (index, d) = self.expr()?;
                    self.expect("]")?;
                    let func = if optional { "_[?_]" } else { "_[_]" };
                    e = self.call(open, func, None, vec![e, index]);
                    depth = 1 + depth.max(d);
                }
                _ => return Ok((e, depth)),
            }
        }
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn expr_list(&mut self, close: &str) -> Result<(Vec<Expr>, u32), ()> {
        let mut out = Vec::new();
        let mut depth = 0;
        if self.eat(close) {
            return Ok((out, depth));
        }
        loop {
            let (e, d) = self.expr()?;
            depth = depth.max(d);
            out.push(e);
            if self.eat(close) {
                return Ok((out, depth));
            }
            if !self.eat(",") {
                return self.syntax_error(&format!("{{',', '{close}'}}"));
            }
        }
    }

    fn literal(&mut self, sign: Option<u32>) -> P {
        let t = self.toks[self.pos];
        let at = sign.unwrap_or(t.at);
        self.pos += 1;
        let neg = sign.is_some();
        let lit = match &t.tok {
            Tok::Int(s) => {
                let (digits, radix) = match s.strip_prefix("0x") {
                    Some(h) => (h, 16),
                    None => (*s, 10),
                };
                let text = if neg {
                    format!("-{digits}")
                } else {
                    digits.to_string()
                };
                match i64::from_str_radix(&text, radix) {
                    Ok(v) => Lit::Int(v),
                    Err(_) => {
                        self.error_at(Some(at), "invalid int literal");
                        return Err(());
                    }
                }
            }
            Tok::Uint(s) => {
                let s = &s[..s.len() - 1];
                let r = match s.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => s.parse(),
                };
                match r {
                    Ok(v) => Lit::Uint(v),
                    Err(_) => {
                        self.error_at(Some(at), "invalid uint literal");
                        return Err(());
                    }
                }
            }
            Tok::Float(s) => match parse_double(s) {
                Some(v) => Lit::Double(if neg { -v } else { v }),
                None => {
                    self.error_at(Some(at), "invalid double literal");
                    return Err(());
                }
            },
            Tok::Str(s) => match unescape(s, false) {
                Ok(b) => match String::from_utf8(b) {
                    Ok(s) => Lit::String(s.into()),
                    Err(_) => {
                        self.error_at(Some(at), "invalid unicode code point");
                        return Err(());
                    }
                },
                Err(m) => {
                    self.error_at(Some(at), m);
                    return Err(());
                }
            },
            Tok::Bytes(s) => match unescape(s, true) {
                Ok(b) => Lit::Bytes(b.into()),
                Err(m) => {
                    self.error_at(Some(at), m);
                    return Err(());
                }
            },
            Tok::True => Lit::Bool(true),
            Tok::False => Lit::Bool(false),
            Tok::Null => Lit::Null,
            _ => {
                self.pos -= 1;
                return self.syntax_error("");
            }
        };
        Ok((self.node(at, Kind::Lit(lit)), 0))
    }

    fn primary(&mut self) -> P {
        let at = self.at();
        match self.peek() {
            Tok::Op("-") if Self::is_signed_number(self.peek_at(1)) => {
                self.pos += 1;
                self.literal(Some(at))
            }
            Tok::Int(_)
            | Tok::Uint(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Bytes(_)
            | Tok::True
            | Tok::False
            | Tok::Null => self.literal(None),
            Tok::Op("(") => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Op("[") => {
                self.pos += 1;
                let mut elems = Vec::new();
                let mut optional = Vec::new();
                let mut depth = 0;
                while !self.eat("]") {
                    let opt = self.eat("?");
                    let (e, d) = self.expr()?;
                    depth = depth.max(d);
                    elems.push(e);
                    optional.push(opt);
                    if self.eat("]") {
                        break;
                    }
                    if !self.eat(",") {
                        return self.syntax_error("{',', ']'}");
                    }
                }
                Ok((self.node(at, Kind::List { elems, optional }), depth))
            }
            Tok::Op("{") => {
                self.pos += 1;
                let mut entries = Vec::new();
                let mut depth = 0;
                while !self.eat("}") {
                    let opt = self.eat("?");
                    let (key, d1) = self.expr()?;
                    let col = self.at();
                    self.expect(":")?;
                    let (value, d2) = self.expr()?;
                    depth = depth.max(d1).max(d2);
                    let id = self.new_id(col);
                    entries.push(Entry {
                        id,
                        key,
                        value,
                        optional: opt,
                    });
                    if self.eat("}") {
                        break;
                    }
                    if !self.eat(",") {
                        return self.syntax_error("{',', '}'}");
                    }
                }
                Ok((self.node(at, Kind::Map { entries }), depth))
            }
            Tok::Op(".") | Tok::Ident(_) => {
                let leading = self.eat(".");
                let name = match self.peek() {
                    Tok::Ident(n) => n,
                    _ => return self.syntax_error("IDENTIFIER"),
                };
                let name_at = self.at();
                // `a.b.C{...}`: a message literal.
                let mut k = 1;
                while matches!(self.peek_at(k), Tok::Op("."))
                    && matches!(self.peek_at(k + 1), Tok::Ident(_))
                {
                    k += 2;
                }
                if matches!(self.peek_at(k), Tok::Op("{")) {
                    return self.message(leading);
                }
                self.pos += 1;
                if RESERVED.contains(&name) {
                    self.error_at(Some(name_at), format!("reserved identifier: {name}"));
                    return Err(());
                }
                let full = if leading {
                    format!(".{name}")
                } else {
                    name.to_string()
                };
                if matches!(self.peek(), Tok::Op("(")) {
                    let open = self.at();
                    self.pos += 1;
                    let (args, d) = self.expr_list(")")?;
                    let e = self.global_call(open, &full, args)?;
                    return Ok((e, d));
                }
                Ok((self.node(name_at, Kind::Ident(full)), 0))
            }
            _ => self.syntax_error(
                "{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, \
                 NUM_UINT, STRING, BYTES, IDENTIFIER}",
            ),
        }
    }

    fn message(&mut self, leading: bool) -> P {
        let mut name = if leading {
            ".".to_string()
        } else {
            String::new()
        };
        loop {
            if let Tok::Ident(n) = self.peek() {
                name.push_str(n);
                self.pos += 1;
            }
            if self.eat(".") {
                name.push('.');
                continue;
            }
            break;
        }
        let at = self.at();
        self.expect("{")?;
        let mut fields = Vec::new();
        let mut depth = 0;
        while !self.eat("}") {
            let opt = self.eat("?");
            let field = self.ident_after_dot()?;
            let col = self.at();
            self.expect(":")?;
            let (v, d) = self.expr()?;
            depth = depth.max(d);
            let id = self.new_id(col);
            fields.push((id, field, v, opt));
            if self.eat("}") {
                break;
            }
            if !self.eat(",") {
                return self.syntax_error("{',', '}'}");
            }
        }
        Ok((
            self.node(
                at,
                Kind::Struct {
                    type_name: name,
                    fields,
                },
            ),
            depth,
        ))
    }

    fn ident_name(e: &Expr) -> Option<&str> {
        match &e.kind {
            Kind::Ident(n) => Some(n),
            _ => None,
        }
    }

    fn macro_error(&mut self, e: &Expr, message: impl Into<String>) -> Result<Expr, ()> {
        let at = self.positions[e.id as usize];
        self.error_at(Some(at), message);
        Err(())
    }

    fn lit(&mut self, at: u32, l: Lit) -> Expr {
        self.node(at, Kind::Lit(l))
    }

    fn accu(&mut self, at: u32) -> Expr {
        self.node(at, Kind::Ident(ACCU.into()))
    }

    fn comprehension(&mut self, at: u32, c: Comprehension) -> Expr {
        self.node(at, Kind::Comprehension(Box::new(c)))
    }

    fn global_call(&mut self, at: u32, func: &str, mut args: Vec<Expr>) -> Result<Expr, ()> {
        if func == "has" && args.len() == 1 {
            let arg = args.pop().ok_or(())?;
            return match arg.kind {
                Kind::Select { operand, field, .. } => Ok(self.node(
                    at,
                    Kind::Select {
                        operand,
                        field,
                        test_only: true,
                    },
                )),
                _ => {
                    let e = Expr {
                        id: arg.id,
                        kind: Kind::Lit(Lit::Null),
                    };
                    self.macro_error(&e, "invalid argument to has() macro")
                }
            };
        }
        Ok(self.call(at, func, None, args))
    }

    /// A macro's iteration variable; `not_a_name` is the macro's message when it is not one
    /// (cel-go words it differently for `all`/`exists` and for `map`/`filter`/`sortBy`).
    fn iter_var(&mut self, e: &Expr, not_a_name: &str) -> Result<String, ()> {
        match Self::ident_name(e) {
            Some(v) if v == ACCU || v == "__result__" => {
                self.macro_error(e, "iteration variable overwrites accumulator variable")?;
                Err(())
            }
            Some(v) => Ok(v.to_string()),
            None => {
                self.macro_error(e, not_a_name)?;
                Err(())
            }
        }
    }

    fn iter_vars(&mut self, a: &Expr, b: &Expr) -> Result<(String, String), ()> {
        let v1 = match Self::ident_name(a) {
            Some(v) => v.to_string(),
            None => {
                self.macro_error(a, "argument must be a simple name")?;
                return Err(());
            }
        };
        let v2 = match Self::ident_name(b) {
            Some(v) => v.to_string(),
            None => {
                self.macro_error(b, "argument must be a simple name")?;
                return Err(());
            }
        };
        if v1 == v2 {
            self.macro_error(b, format!("duplicate variable name: {v1}"))?;
        }
        if v1 == ACCU || v1 == "__result__" {
            self.macro_error(a, "iteration variable overwrites accumulator variable")?;
        }
        if v2 == ACCU || v2 == "__result__" {
            self.macro_error(b, "iteration variable overwrites accumulator variable")?;
        }
        Ok((v1, v2))
    }

    /// `target.name(args)`: a macro when one matches name, receiver and argument count.
    fn receiver_call(
        &mut self,
        at: u32,
        name: &str,
        target: Expr,
        mut args: Vec<Expr>,
    ) -> Result<Expr, ()> {
        let n = args.len();
        match (name, n) {
            ("all" | "exists" | "exists_one", 2) => {
                let v = self.iter_var(&args[0], "argument must be a simple name")?;
                let body = args.pop().ok_or(())?;
                let kind = if name == "all" {
                    0
                } else if name == "exists" {
                    1
                } else {
                    2
                };
                Ok(self.quantifier(at, kind, target, v, None, body))
            }
            ("all" | "exists" | "exists_one" | "existsOne", 3) => {
                let (v1, v2) = self.iter_vars(&args[0], &args[1])?;
                let body = args.pop().ok_or(())?;
                let kind = if name == "all" {
                    0
                } else if name == "exists" {
                    1
                } else {
                    2
                };
                Ok(self.quantifier(at, kind, target, v1, Some(v2), body))
            }
            ("map", 2 | 3) | ("filter", 2) => {
                let v = self.iter_var(&args[0], "argument is not an identifier")?;
                let (filter, transform) = if name == "filter" {
                    let f = args.pop().ok_or(())?;
                    let var = args.pop().ok_or(())?;
                    (Some(f), var)
                } else if n == 3 {
                    let t = args.pop().ok_or(())?;
                    let f = args.pop().ok_or(())?;
                    (Some(f), t)
                } else {
                    (None, args.pop().ok_or(())?)
                };
                Ok(self.transform_list(at, target, v, None, filter, transform))
            }
            ("transformList", 3 | 4) | ("transformMap", 3 | 4) | ("transformMapEntry", 3 | 4) => {
                let (v1, v2) = self.iter_vars(&args[0], &args[1])?;
                let transform = args.pop().ok_or(())?;
                let filter = if n == 4 { args.pop() } else { None };
                if name == "transformList" {
                    return Ok(self.transform_list(at, target, v1, Some(v2), filter, transform));
                }
                let accu = self.accu(at);
                let mut ins = vec![accu];
                if name == "transformMap" {
                    let k = self.node(at, Kind::Ident(v1.clone()));
                    ins.push(k);
                }
                ins.push(transform);
                let mut step = self.call(at, "cel.@mapInsert", None, ins);
                if let Some(f) = filter {
                    let a = self.accu(at);
                    step = self.call(at, "_?_:_", None, vec![f, step, a]);
                }
                let init = self.node(at, Kind::Map { entries: vec![] });
                let cond = self.lit(at, Lit::Bool(true));
                let result = self.accu(at);
                Ok(self.comprehension(
                    at,
                    Comprehension {
                        iter_var: v1,
                        iter_var2: Some(v2),
                        range: target,
                        accu_var: ACCU.into(),
                        accu_init: init,
                        cond,
                        step,
                        result,
                    },
                ))
            }
            ("bind", 3) if Self::ident_name(&target) == Some("cel") => {
                let var = match Self::ident_name(&args[0]) {
                    Some(v) => v.to_string(),
                    None => {
                        return self.macro_error(
                            &args[0],
                            "cel.bind() variable names must be simple identifiers",
                        );
                    }
                };
                let result = args.pop().ok_or(())?;
                let init = args.pop().ok_or(())?;
                Ok(self.bind(at, var, init, result))
            }
            ("optMap" | "optFlatMap", 2) => {
                let var = match Self::ident_name(&args[0]) {
                    Some(v) => v.to_string(),
                    None => {
                        return self.macro_error(
                            &args[0],
                            format!("{name}() variable name must be a simple identifier"),
                        );
                    }
                };
                let body = args.pop().ok_or(())?;
                let copy = target.clone();
                let copy = self.renumber(copy);
                let has = self.call(at, "hasValue", Some(target), vec![]);
                let value = self.call(at, "value", Some(copy), vec![]);
                let mut mapped = self.bind(at, var, value, body);
                if name == "optMap" {
                    mapped = self.call(at, "optional.of", None, vec![mapped]);
                }
                let none = self.call(at, "optional.none", None, vec![]);
                Ok(self.call(at, "_?_:_", None, vec![has, mapped, none]))
            }
            // The macro and the function it expands to come in one library.
            ("sortBy", 2) if self.env.lookup("@sortByAssociatedKeys").is_some() => {
                let ok = matches!(
                    target.kind,
                    Kind::List { .. }
                        | Kind::Select { .. }
                        | Kind::Ident(_)
                        | Kind::Comprehension(_)
                        | Kind::Call { .. }
                );
                if !ok {
                    return self.macro_error(
                        &target,
                        "sortBy can only be applied to a list, identifier, comprehension, call or select expression",
                    );
                }
                let v = self.iter_var(&args[0], "argument is not an identifier")?;
                let key = args.pop().ok_or(())?;
                let input = "@__sortBy_input__";
                let range = self.node(at, Kind::Ident(input.into()));
                let keys = self.transform_list(at, range, v, None, None, key);
                let recv = self.node(at, Kind::Ident(input.into()));
                let sorted = self.call(at, "@sortByAssociatedKeys", Some(recv), vec![keys]);
                Ok(self.bind(at, input.into(), target, sorted))
            }
            _ => Ok(self.call(at, name, Some(target), args)),
        }
    }

    /// A copy of a subtree with fresh ids (a macro that uses its target twice).
    fn renumber(&mut self, e: Expr) -> Expr {
        let at = self.positions[e.id as usize];
        let kind = match e.kind {
            Kind::Select {
                operand,
                field,
                test_only,
            } => Kind::Select {
                operand: Box::new(self.renumber(*operand)),
                field,
                test_only,
            },
            Kind::Call { target, func, args } => Kind::Call {
                target: target.map(|t| Box::new(self.renumber(*t))),
                func,
                args: args.into_iter().map(|a| self.renumber(a)).collect(),
            },
            Kind::List { elems, optional } => Kind::List {
                elems: elems.into_iter().map(|a| self.renumber(a)).collect(),
                optional,
            },
            Kind::Map { entries } => Kind::Map {
                entries: entries
                    .into_iter()
                    .map(|en| {
                        let at = self.positions[en.id as usize];
                        Entry {
                            id: self.new_id(at),
                            key: self.renumber(en.key),
                            value: self.renumber(en.value),
                            optional: en.optional,
                        }
                    })
                    .collect(),
            },
            Kind::Struct { type_name, fields } => Kind::Struct {
                type_name,
                fields: fields
                    .into_iter()
                    .map(|(id, f, v, o)| {
                        let at = self.positions[id as usize];
                        (self.new_id(at), f, self.renumber(v), o)
                    })
                    .collect(),
            },
            Kind::Comprehension(c) => {
                let c = *c;
                Kind::Comprehension(Box::new(Comprehension {
                    range: self.renumber(c.range),
                    accu_init: self.renumber(c.accu_init),
                    cond: self.renumber(c.cond),
                    step: self.renumber(c.step),
                    result: self.renumber(c.result),
                    ..c
                }))
            }
            k => k,
        };
        self.node(at, kind)
    }

    /// `cel.bind(var, init, result)`: a comprehension over nothing whose accumulator is `var`.
    fn bind(&mut self, at: u32, var: String, init: Expr, result: Expr) -> Expr {
        let range = self.node(
            at,
            Kind::List {
                elems: vec![],
                optional: vec![],
            },
        );
        let cond = self.lit(at, Lit::Bool(false));
        let step = self.node(at, Kind::Ident(var.clone()));
        self.comprehension(
            at,
            Comprehension {
                iter_var: "#unused".into(),
                iter_var2: None,
                range,
                accu_var: var,
                accu_init: init,
                cond,
                step,
                result,
            },
        )
    }

    /// all (0), exists (1), exists_one (2).
    fn quantifier(
        &mut self,
        at: u32,
        kind: u8,
        range: Expr,
        v1: String,
        v2: Option<String>,
        body: Expr,
    ) -> Expr {
        let (init, cond, step, result) = match kind {
            0 => {
                let init = self.lit(at, Lit::Bool(true));
                let a = self.accu(at);
                let cond = self.call(at, "@not_strictly_false", None, vec![a]);
                let a = self.accu(at);
                let step = self.call(at, "_&&_", None, vec![a, body]);
                (init, cond, step, self.accu(at))
            }
            1 => {
                let init = self.lit(at, Lit::Bool(false));
                let a = self.accu(at);
                let not = self.call(at, "!_", None, vec![a]);
                let cond = self.call(at, "@not_strictly_false", None, vec![not]);
                let a = self.accu(at);
                let step = self.call(at, "_||_", None, vec![a, body]);
                (init, cond, step, self.accu(at))
            }
            _ => {
                let init = self.lit(at, Lit::Int(0));
                let cond = self.lit(at, Lit::Bool(true));
                let a = self.accu(at);
                let one = self.lit(at, Lit::Int(1));
                let inc = self.call(at, "_+_", None, vec![a, one]);
                let a = self.accu(at);
                let step = self.call(at, "_?_:_", None, vec![body, inc, a]);
                let a = self.accu(at);
                let one = self.lit(at, Lit::Int(1));
                let result = self.call(at, "_==_", None, vec![a, one]);
                (init, cond, step, result)
            }
        };
        self.macro_fold(at, range, (v1, v2), [init, cond, step, result])
    }

    /// A macro's comprehension over `range` with the macro accumulator: `parts` are its init,
    /// loop condition, step and result.
    fn macro_fold(
        &mut self,
        at: u32,
        range: Expr,
        (v1, v2): (String, Option<String>),
        [init, cond, step, result]: [Expr; 4],
    ) -> Expr {
        self.comprehension(
            at,
            Comprehension {
                iter_var: v1,
                iter_var2: v2,
                range,
                accu_var: ACCU.into(),
                accu_init: init,
                cond,
                step,
                result,
            },
        )
    }

    /// `map`, `filter` and `transformList`: `accu + [transform]`, under the filter if any.
    fn transform_list(
        &mut self,
        at: u32,
        range: Expr,
        v1: String,
        v2: Option<String>,
        filter: Option<Expr>,
        transform: Expr,
    ) -> Expr {
        let init = self.node(
            at,
            Kind::List {
                elems: vec![],
                optional: vec![],
            },
        );
        let cond = self.lit(at, Lit::Bool(true));
        let a = self.accu(at);
        let one = self.node(
            at,
            Kind::List {
                elems: vec![transform],
                optional: vec![false],
            },
        );
        let mut step = self.call(at, "_+_", None, vec![a, one]);
        if let Some(f) = filter {
            let a = self.accu(at);
            step = self.call(at, "_?_:_", None, vec![f, step, a]);
        }
        let result = self.accu(at);
        self.macro_fold(at, range, (v1, v2), [init, cond, step, result])
    }
}

/// CEL's whitespace (comments aside).
pub(crate) fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b' ' | b'\r' | b'\n' | 0x0C)
}

/// A chain of one operator (`&&` or `||`) as cel-go builds it: balanced, the middle operator at
/// the root. `join(i, left, right)` makes operator `i` (between terms `i` and `i + 1`) after
/// both its operands, so nodes are made in the parser's order. `None` only for no terms.
pub(crate) fn balanced<T>(terms: Vec<T>, join: &mut impl FnMut(usize, T, T) -> T) -> Option<T> {
    fn go<T>(
        terms: &mut [Option<T>],
        lo: usize,
        hi: usize,
        join: &mut impl FnMut(usize, T, T) -> T,
    ) -> Option<T> {
        if lo == hi {
            return terms[lo].take();
        }
        let mid = (lo + hi - 1).div_ceil(2);
        let left = go(terms, lo, mid, join)?;
        let right = go(terms, mid + 1, hi, join)?;
        Some(join(mid, left, right))
    }
    let hi = terms.len().checked_sub(1)?;
    let mut terms: Vec<Option<T>> = terms.into_iter().map(Some).collect();
    go(&mut terms, 0, hi, join)
}

/// Words the grammar lexes as identifiers but CEL reserves.
pub(crate) const RESERVED: [&str; 17] = [
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A double literal as Go's `strconv.ParseFloat` reads it: out of range is an error.
fn parse_double(s: &str) -> Option<f64> {
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() {
        return None;
    }
    Some(v)
}
