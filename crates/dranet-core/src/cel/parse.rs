//! Lexer and Pratt parser for the CEL subset DRA selectors use, resolving names at compile time.

use super::CelError;

/// A literal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
}

/// Functions and methods, resolved while parsing so evaluation never looks names up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Size,
    StartsWith,
    EndsWith,
    Contains,
    LowerAscii,
    UpperAscii,
    Trim,
    Int,
    Uint,
    Double,
    String,
    Semver,
    IsSemver,
    Major,
    Minor,
    Patch,
    CompareTo,
    IsGreaterThan,
    IsLessThan,
    Quantity,
    IsQuantity,
    Add,
    Sub,
    AsInteger,
    AsApproximateFloat,
    IsInteger,
    Sign,
}

impl Func {
    fn by_name(name: &str) -> Option<Func> {
        Some(match name {
            "size" => Func::Size,
            "startsWith" => Func::StartsWith,
            "endsWith" => Func::EndsWith,
            "contains" => Func::Contains,
            "lowerAscii" => Func::LowerAscii,
            "upperAscii" => Func::UpperAscii,
            "trim" => Func::Trim,
            "int" => Func::Int,
            "uint" => Func::Uint,
            "double" => Func::Double,
            "string" => Func::String,
            "semver" => Func::Semver,
            "isSemver" => Func::IsSemver,
            "major" => Func::Major,
            "minor" => Func::Minor,
            "patch" => Func::Patch,
            "compareTo" => Func::CompareTo,
            "isGreaterThan" => Func::IsGreaterThan,
            "isLessThan" => Func::IsLessThan,
            "quantity" => Func::Quantity,
            "isQuantity" => Func::IsQuantity,
            "add" => Func::Add,
            "sub" => Func::Sub,
            "asInteger" => Func::AsInteger,
            "asApproximateFloat" => Func::AsApproximateFloat,
            "isInteger" => Func::IsInteger,
            "sign" => Func::Sign,
            _ => return None,
        })
    }
}

/// Binary operators other than the short-circuiting ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// Comprehension macros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Macro {
    All,
    Exists,
    ExistsOne,
    Map,
    Filter,
}

/// The syntax tree after name resolution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Lit(Lit),
    /// The `device` variable.
    Device,
    /// `device.driver`, fused at compile time.
    Driver,
    /// `device.attributes["domain"].name` (or `["name"]`), fused at compile time.
    Attr(super::AttrKey),
    /// `device.capacity["domain"].name`, fused at compile time.
    Cap(String, String),
    /// A comprehension variable, by its depth (0 = outermost).
    Var(usize),
    Member(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Call {
        target: Option<Box<Expr>>,
        func: Func,
        args: Vec<Expr>,
    },
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    List(Vec<Expr>),
    Map(Vec<(Expr, Expr)>),
    /// `has(x.f)` or `has(x["f"])` on a map.
    Has(Box<Expr>, String),
    Comprehension {
        kind: Macro,
        range: Box<Expr>,
        body: Box<Expr>,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(Lit),
    Ident(String),
    Op(&'static str),
}

/// Longest first, so `<=` wins over `<`.
const OPS: [&str; 24] = [
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", ".", ",",
    "(", ")", "[", "]", "{", "}",
];

fn err(at: usize, msg: impl Into<String>) -> CelError {
    CelError::Syntax {
        position: at,
        message: msg.into(),
    }
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, CelError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, len) = lex_number(&src[i..]).map_err(|m| err(start, m))?;
            out.push((start, Tok::Lit(tok)));
            i += len;
            continue;
        }
        let raw = (c == b'r' || c == b'R') && matches!(b.get(i + 1), Some(b'"' | b'\''));
        if c == b'"' || c == b'\'' || raw {
            if raw {
                i += 1;
            }
            let (s, len) = lex_string(&src[i..], raw).map_err(|m| err(start, m))?;
            out.push((start, Tok::Lit(Lit::Str(s))));
            i += len;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            out.push((
                start,
                match word {
                    "true" => Tok::Lit(Lit::Bool(true)),
                    "false" => Tok::Lit(Lit::Bool(false)),
                    "null" => Tok::Lit(Lit::Null),
                    "in" => Tok::Op("in"),
                    _ => Tok::Ident(word.to_string()),
                },
            ));
            continue;
        }
        match OPS.iter().find(|op| src[i..].starts_with(**op)) {
            Some(op) => {
                out.push((start, Tok::Op(op)));
                i += op.len();
            }
            None => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(err(start, format!("unexpected character {ch:?}")));
            }
        }
    }
    Ok(out)
}

fn lex_number(s: &str) -> Result<(Lit, usize), String> {
    let b = s.as_bytes();
    if s.starts_with("0x") || s.starts_with("0X") {
        let mut i = 2;
        while i < b.len() && b[i].is_ascii_hexdigit() {
            i += 1;
        }
        let digits = &s[2..i];
        if b.get(i).is_some_and(|c| *c == b'u' || *c == b'U') {
            let v = u64::from_str_radix(digits, 16).map_err(|e| format!("bad uint: {e}"))?;
            return Ok((Lit::Uint(v), i + 1));
        }
        let v = i64::from_str_radix(digits, 16).map_err(|e| format!("bad int: {e}"))?;
        return Ok((Lit::Int(v), i));
    }
    let mut i = 0;
    let mut float = false;
    while i < b.len() {
        match b[i] {
            b'0'..=b'9' => i += 1,
            b'.' if !float && b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                float = true;
                i += 1;
            }
            b'e' | b'E' => {
                float = true;
                i += 1;
                if matches!(b.get(i), Some(b'+' | b'-')) {
                    i += 1;
                }
            }
            _ => break,
        }
    }
    let text = &s[..i];
    if float {
        let v: f64 = text.parse().map_err(|_| format!("bad number {text:?}"))?;
        return Ok((Lit::Double(v), i));
    }
    if b.get(i).is_some_and(|c| *c == b'u' || *c == b'U') {
        let v: u64 = text
            .parse()
            .map_err(|_| format!("uint {text:?} out of range"))?;
        return Ok((Lit::Uint(v), i + 1));
    }
    // i64::MIN's digits only fit once negated: parse as u64 and let the parser negate.
    let v: u64 = text
        .parse()
        .map_err(|_| format!("int {text:?} out of range"))?;
    if v > i64::MAX as u64 + 1 {
        return Err(format!("int {text:?} out of range"));
    }
    if v <= i64::MAX as u64 {
        Ok((Lit::Int(v as i64), i))
    } else {
        // Only `-9223372036854775808` is valid: the parser negates it into i64::MIN.
        Ok((Lit::Uint(v), i))
    }
}

fn lex_string(s: &str, raw: bool) -> Result<(String, usize), String> {
    let mut chars = s.char_indices();
    let quote = chars.next().map(|(_, c)| c).unwrap_or('"');
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            return Ok((out, i + 1));
        }
        if c == '\n' {
            return Err("newline in string literal".into());
        }
        if c == '\\' && !raw {
            let (_, e) = chars.next().ok_or("unterminated escape")?;
            out.push(match e {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                '0' => '\0',
                '\\' => '\\',
                '"' => '"',
                '\'' => '\'',
                'u' => {
                    let hex: String = (0..4).filter_map(|_| chars.next().map(|x| x.1)).collect();
                    u32::from_str_radix(&hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("bad \\u escape {hex:?}"))?
                }
                other => return Err(format!("unknown escape \\{other}")),
            });
        } else {
            out.push(c);
        }
    }
    Err("unterminated string literal".into())
}

/// Parses an expression, resolving `device`, comprehension variables and function names.
pub(crate) fn parse(src: &str) -> Result<Expr, CelError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        vars: Vec::new(),
        end: src.len(),
        depth: 0,
        links: 0,
        operators: 0,
    };
    let e = p.expr()?;
    if let Some((at, t)) = p.toks.get(p.pos) {
        return Err(err(*at, format!("unexpected {}", describe(t))));
    }
    Ok(fuse(e))
}

/// The field or literal string key of a selection.
fn key(e: &Expr) -> Option<&str> {
    match e {
        Expr::Lit(Lit::Str(s)) => Some(s),
        _ => None,
    }
}

/// Replaces the DRA access paths with single nodes, so evaluating them is one lookup.
fn fuse(e: Expr) -> Expr {
    let b = |e: Box<Expr>| Box::new(fuse(*e));
    match e {
        Expr::Member(t, f) => select_path(*t, f),
        Expr::Index(t, k) => match key(&k) {
            Some(name) => select_path(*t, name.to_string()),
            None => Expr::Index(b(t), b(k)),
        },
        Expr::Call { target, func, args } => Expr::Call {
            target: target.map(b),
            func,
            args: args.into_iter().map(fuse).collect(),
        },
        Expr::Not(x) => Expr::Not(b(x)),
        Expr::Neg(x) => Expr::Neg(b(x)),
        Expr::Binary(op, x, y) => Expr::Binary(op, b(x), b(y)),
        Expr::And(x, y) => Expr::And(b(x), b(y)),
        Expr::Or(x, y) => Expr::Or(b(x), b(y)),
        Expr::Cond(c, x, y) => Expr::Cond(b(c), b(x), b(y)),
        Expr::List(v) => Expr::List(v.into_iter().map(fuse).collect()),
        Expr::Map(v) => Expr::Map(v.into_iter().map(|(k, x)| (fuse(k), fuse(x))).collect()),
        Expr::Has(t, f) => Expr::Has(b(t), f),
        Expr::Comprehension { kind, range, body } => Expr::Comprehension {
            kind,
            range: b(range),
            body: b(body),
        },
        other => other,
    }
}

fn select_path(target: Expr, field: String) -> Expr {
    if target == Expr::Device && field == "driver" {
        return Expr::Driver;
    }
    // `device.attributes["domain"]` and `device.attributes.domain` then `.name`.
    let domain_of = |t: &Expr, which: &str| -> Option<String> {
        match t {
            Expr::Index(inner, dom) if matches!(&**inner, Expr::Member(d, f) if **d == Expr::Device && f == which) => {
                key(dom).map(str::to_string)
            }
            Expr::Member(inner, dom) if matches!(&**inner, Expr::Member(d, f) if **d == Expr::Device && f == which) => {
                Some(dom.clone())
            }
            _ => None,
        }
    };
    if let Some(d) = domain_of(&target, "attributes") {
        return Expr::Attr(super::AttrKey::new(&d, &field));
    }
    if let Some(d) = domain_of(&target, "capacity") {
        return Expr::Cap(d, field);
    }
    Expr::Member(Box::new(fuse(target)), field)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Lit(l) => format!("literal {l:?}"),
        Tok::Ident(s) => format!("identifier {s:?}"),
        Tok::Op(o) => format!("{o:?}"),
    }
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    vars: Vec<String>,
    end: usize,
    depth: usize,
    operators: usize,
    /// Member, index and method links so far (each is one level of recursion when evaluated).
    links: usize,
}

/// Deep nesting is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 32;
/// Most binary operators in one expression.
const MAX_OPERATORS: usize = 100;
/// Most member/index/method links in one chain (`a.b[c].d()`), and in one expression: a 2,000-link
/// chain once overflowed the stack in evaluation and aborted the process.
const MAX_CHAIN: usize = 32;
const MAX_LINKS: usize = 1024;

impl Parser {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some((_, Tok::Op(o))) => Some(o),
            _ => None,
        }
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map(|t| t.0).unwrap_or(self.end)
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek_op() == Some(op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), CelError> {
        if self.eat(op) {
            Ok(())
        } else {
            let found = self
                .toks
                .get(self.pos)
                .map(|t| describe(&t.1))
                .unwrap_or_else(|| "end of expression".into());
            Err(err(self.at(), format!("expected {op:?}, found {found}")))
        }
    }

    fn expr(&mut self) -> Result<Expr, CelError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(self.at(), "expression nested too deeply"));
        }
        let cond = self.binary(0)?;
        let e = if self.eat("?") {
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            Expr::Cond(Box::new(cond), Box::new(a), Box::new(b))
        } else {
            cond
        };
        self.depth -= 1;
        Ok(e)
    }

    fn binary(&mut self, min_prec: u8) -> Result<Expr, CelError> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.peek_op() {
            let prec = match op {
                "||" => 1,
                "&&" => 2,
                "==" | "!=" | "<" | "<=" | ">" | ">=" | "in" => 3,
                "+" | "-" => 4,
                "*" | "/" | "%" => 5,
                _ => break,
            };
            if prec <= min_prec {
                break;
            }
            // Each operator can deepen the tree that evaluation walks recursively.
            self.operators += 1;
            if self.operators > MAX_OPERATORS {
                return Err(err(self.at(), "too many operators"));
            }
            self.pos += 1;
            let rhs = self.binary(prec)?;
            let (l, r) = (Box::new(lhs), Box::new(rhs));
            lhs = match op {
                "||" => Expr::Or(l, r),
                "&&" => Expr::And(l, r),
                _ => Expr::Binary(
                    match op {
                        "==" => BinOp::Eq,
                        "!=" => BinOp::Ne,
                        "<" => BinOp::Lt,
                        "<=" => BinOp::Le,
                        ">" => BinOp::Gt,
                        ">=" => BinOp::Ge,
                        "in" => BinOp::In,
                        "+" => BinOp::Add,
                        "-" => BinOp::Sub,
                        "*" => BinOp::Mul,
                        "/" => BinOp::Div,
                        _ => BinOp::Rem,
                    },
                    l,
                    r,
                ),
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, CelError> {
        if matches!(self.peek_op(), Some("!" | "-")) {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(err(self.at(), "expression nested too deeply"));
            }
            let e = self.unary_op();
            self.depth -= 1;
            return e;
        }
        self.postfix()
    }

    fn unary_op(&mut self) -> Result<Expr, CelError> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(match self.unary()? {
                Expr::Lit(Lit::Int(v)) => Expr::Lit(Lit::Int(-v)),
                Expr::Lit(Lit::Uint(v)) if v == i64::MAX as u64 + 1 => {
                    Expr::Lit(Lit::Int(i64::MIN))
                }
                Expr::Lit(Lit::Double(v)) => Expr::Lit(Lit::Double(-v)),
                e => Expr::Neg(Box::new(e)),
            });
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, CelError> {
        let mut e = self.primary()?;
        let mut chain = 0;
        loop {
            if matches!(self.peek_op(), Some("." | "[")) {
                chain += 1;
                self.links += 1;
                if chain > MAX_CHAIN {
                    return Err(err(
                        self.at(),
                        format!("more than {MAX_CHAIN} member, index or method links in one chain"),
                    ));
                }
                if self.links > MAX_LINKS {
                    return Err(err(
                        self.at(),
                        format!(
                            "more than {MAX_LINKS} member, index or method links in the expression"
                        ),
                    ));
                }
            }
            if self.eat(".") {
                let at = self.at();
                let name = match self.toks.get(self.pos) {
                    Some((_, Tok::Ident(n))) => n.clone(),
                    _ => return Err(err(at, "expected a field or method name after '.'")),
                };
                self.pos += 1;
                if self.eat("(") {
                    e = self.method(e, &name, at)?;
                } else {
                    e = Expr::Member(Box::new(e), name);
                }
            } else if self.eat("[") {
                let idx = self.expr()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(idx));
            } else {
                return Ok(e);
            }
        }
    }

    fn args(&mut self) -> Result<Vec<Expr>, CelError> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn method(&mut self, target: Expr, name: &str, at: usize) -> Result<Expr, CelError> {
        let kind = match name {
            "all" => Some(Macro::All),
            "exists" => Some(Macro::Exists),
            "exists_one" => Some(Macro::ExistsOne),
            "map" => Some(Macro::Map),
            "filter" => Some(Macro::Filter),
            _ => None,
        };
        if let Some(kind) = kind {
            let var = match self.toks.get(self.pos) {
                Some((_, Tok::Ident(v))) => v.clone(),
                _ => return Err(err(self.at(), format!("{name}() needs a variable name"))),
            };
            self.pos += 1;
            self.expect(",")?;
            self.vars.push(var);
            let body = self.expr();
            self.vars.pop();
            let body = body?;
            self.expect(")")?;
            return Ok(Expr::Comprehension {
                kind,
                range: Box::new(target),
                body: Box::new(body),
            });
        }
        let func =
            Func::by_name(name).ok_or_else(|| err(at, format!("undeclared method {name}()")))?;
        let args = self.args()?;
        Ok(Expr::Call {
            target: Some(Box::new(target)),
            func,
            args,
        })
    }

    fn primary(&mut self) -> Result<Expr, CelError> {
        let at = self.at();
        let Some((_, tok)) = self.toks.get(self.pos).cloned() else {
            return Err(err(at, "unexpected end of expression"));
        };
        self.pos += 1;
        match tok {
            Tok::Lit(l) => Ok(Expr::Lit(l)),
            Tok::Op("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Op("[") => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expr()?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",")?;
                        if self.eat("]") {
                            break;
                        }
                    }
                }
                Ok(Expr::List(items))
            }
            Tok::Op("{") => {
                let mut entries = Vec::new();
                if !self.eat("}") {
                    loop {
                        let k = self.expr()?;
                        self.expect(":")?;
                        let v = self.expr()?;
                        entries.push((k, v));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                        if self.eat("}") {
                            break;
                        }
                    }
                }
                Ok(Expr::Map(entries))
            }
            Tok::Ident(name) => {
                if self.eat("(") {
                    if name == "has" {
                        let arg = self.expr()?;
                        self.expect(")")?;
                        return match arg {
                            Expr::Member(t, f) => Ok(Expr::Has(t, f)),
                            Expr::Index(t, k) => match *k {
                                Expr::Lit(Lit::Str(f)) => Ok(Expr::Has(t, f)),
                                _ => Err(err(at, "has() needs a field selection such as has(x.f)")),
                            },
                            _ => Err(err(at, "has() needs a field selection such as has(x.f)")),
                        };
                    }
                    let func = Func::by_name(&name)
                        .ok_or_else(|| err(at, format!("undeclared function {name}()")))?;
                    let args = self.args()?;
                    return Ok(Expr::Call {
                        target: None,
                        func,
                        args,
                    });
                }
                if let Some(depth) = self.vars.iter().rposition(|v| *v == name) {
                    return Ok(Expr::Var(depth));
                }
                if name == "device" {
                    return Ok(Expr::Device);
                }
                Err(err(at, format!("undeclared reference to {name:?}")))
            }
            Tok::Op(o) => Err(err(at, format!("unexpected {o:?}"))),
        }
    }
}
