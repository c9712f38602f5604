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

mod lex;
mod macros;

pub(crate) use lex::is_space;
use lex::{Lexer, Tok, Token, describe, parse_double, unescape};

use super::ast::{Entry, Expr, Id, Kind, Lit};
use super::decls::EnvType;

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

/// Parses an expression with the macros of `env`; the error list holds every issue found
/// (syntax errors stop at the first one, as the first is what a user needs).
pub(crate) fn parse(src: &str, env: EnvType) -> Result<Parsed, Vec<Issue>> {
    let n = src.chars().count();
    if n > MAX_CODE_POINTS {
        return Err(vec![Issue {
            offset: None,
            message: format!(
                "expression code point size exceeds limit: size: {n}, limit {MAX_CODE_POINTS}"
            ),
        }]);
    }
    let toks = Lexer::new(src).tokens().map_err(|e| vec![e])?;
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
    env: EnvType,
    toks: Vec<Token<'a>>,
    pos: usize,
    positions: Vec<u32>,
    /// Nesting of the grammar's `expr` rule.
    expr_depth: u32,
    errors: Vec<Issue>,
}

/// A parsed subtree with its depth as cel-go's visitor counts it.
type P = Result<(Expr, u32), ()>;

/// Whether `t` is a literal token.
fn is_literal(t: Tok<'_>) -> bool {
    matches!(
        t,
        Tok::Int(_)
            | Tok::Uint(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Bytes(_)
            | Tok::True
            | Tok::False
            | Tok::Null
    )
}

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
        let r = super::stack::with_stack(|| self.ternary());
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
            t if is_literal(t) => self.literal(None),
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
                // The grammar allows the trailing comma of an empty list too: `[,]`.
                if self.eat(",") {
                    self.expect("]")?;
                    return Ok((self.node(at, Kind::List { elems, optional }), depth));
                }
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
                // As for lists: `{,}` is an empty map.
                if self.eat(",") {
                    self.expect("}")?;
                    return Ok((self.node(at, Kind::Map { entries }), depth));
                }
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

    /// A second comma in a message construction: ANTLR drops it as extraneous, then wants `}`.
    fn extraneous_comma<T>(&mut self) -> Result<T, ()> {
        let t = self.toks[self.pos];
        let msg = format!(
            "Syntax error: extraneous input '{}' expecting '}}'",
            describe(&t.tok)
        );
        self.error_at(Some(t.at), msg);
        Err(())
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
        // The grammar allows a lone trailing comma: `Name{,}`.
        if self.eat(",") {
            if self.peek() == Tok::Op(",") {
                return self.extraneous_comma();
            }
            if !self.eat("}") {
                return self.syntax_error("'}'");
            }
        } else {
            while !self.eat("}") {
                if self.peek() == Tok::Op(",") {
                    return self.extraneous_comma();
                }
                let opt = self.eat("?");
                let field = self.ident_after_dot()?;
                let col = self.at();
                if matches!(self.peek(), Tok::Ident(_)) || is_literal(self.peek()) {
                    // ANTLR repairs a missing `:` before what can start the value.
                    let t = self.toks[self.pos];
                    let msg = format!("Syntax error: missing ':' at '{}'", describe(&t.tok));
                    self.error_at(Some(t.at), msg);
                    return Err(());
                }
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
