//! Go's regular expression syntax (`regexp/syntax` with Perl flags, which `matches`, `find` and
//! `findAll` compile with) rewritten into the regex crate's: what Go refuses is refused with
//! Go's message, and what the two read differently is spelled out (`\d` is ASCII, `[` is a
//! literal inside a class, `{,5}` is literal text, `\pL` names only Unicode 15's categories
//! and scripts, octal escapes, `\Q…\E`).

use crate::version::KubernetesVersion;

/// The Go release whose `regexp/syntax` reads the patterns: Kubernetes 1.34 is built with Go
/// 1.24; 1.35 and later with Go 1.25, which reads `\p{…}` names as Unicode TR18 says (in any
/// case, with long category names) and added `Cn`, `LC`, `ASCII` and `Assigned`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GoRegexp {
    /// Go 1.24.
    Go1_24,
    /// Go 1.25 and later.
    Go1_25,
}

impl GoRegexp {
    /// The Go release the components of Kubernetes `version` are built with.
    pub(crate) fn of(version: KubernetesVersion) -> GoRegexp {
        if version.minor() >= 35 {
            GoRegexp::Go1_25
        } else {
            GoRegexp::Go1_24
        }
    }
}

/// Go's limit on the copies one repetition, nested ones multiplied, makes of its operand.
const MAX_REPEAT: u32 = 1000;
/// Go's limit on the height of its tree of the expression.
const MAX_HEIGHT: u32 = 1000;
/// Our limit on repetitions nested in repetitions, below Go's: the regex crate compiles them
/// recursively, and a thread's stack holds about this many.
const MAX_NESTED_REPEATS: u32 = 200;

/// The regex crate's spelling of `pattern`, or Go's error for it.
pub(crate) fn translate(pattern: &str, go: GoRegexp) -> Result<String, String> {
    let mut t = Translator {
        go,
        s: pattern.chars().collect(),
        i: 0,
        out: String::with_capacity(pattern.len() + 8),
        groups: vec![Group {
            inside: Operand::default(),
            capturing: false,
        }],
        atom: None,
        last_repeat: None,
    };
    t.run()
        .map_err(|(code, expr)| format!("error parsing regexp: {code}: `{expr}`"))?;
    Ok(t.out)
}

/// Go's error: its code's text and the part of the pattern it is about.
type Fail = (&'static str, String);

/// What the limits need to know of an operand, or of the contents of a group so far.
#[derive(Clone, Copy, Default)]
struct Operand {
    /// The copies repetitions inside it make (Go's limit: 1000).
    need: u32,
    /// The height of Go's tree of it.
    height: u32,
    /// Repetitions nested in it.
    repeats: u32,
}

/// A literal, a class or an assertion.
const LEAF: Operand = Operand {
    need: 0,
    height: 1,
    repeats: 0,
};

struct Group {
    inside: Operand,
    capturing: bool,
}

struct Translator {
    go: GoRegexp,
    s: Vec<char>,
    i: usize,
    out: String,
    groups: Vec<Group>,
    /// What a repetition here would apply to: the copies its operand already makes; `None`
    /// where there is no operand (the start, after `(` or `|`).
    atom: Option<Operand>,
    /// The text of the repetition just before, if the previous token was one (Go refuses a
    /// repetition of a repetition).
    last_repeat: Option<String>,
}

impl Translator {
    fn peek(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    fn text(&self, from: usize) -> String {
        self.s[from..self.i.min(self.s.len())].iter().collect()
    }

    fn rest(&self) -> String {
        self.s[self.i..].iter().collect()
    }

    /// An operand was written: it makes `need` copies of what repetitions inside it repeat.
    fn atom(&mut self, op: Operand) {
        self.atom = Some(op);
        self.last_repeat = None;
        let g = &mut self
            .groups
            .last_mut()
            .expect("the outermost group is never popped")
            .inside;
        g.need = g.need.max(op.need);
        g.height = g.height.max(op.height);
        g.repeats = g.repeats.max(op.repeats);
    }

    fn run(&mut self) -> Result<(), Fail> {
        while let Some(c) = self.peek(0) {
            let start = self.i;
            match c {
                '(' => self.open()?,
                ')' => {
                    if self.groups.len() == 1 {
                        return Err(("unexpected )", self.s.iter().collect()));
                    }
                    let g = self.groups.pop().expect("checked above");
                    self.i += 1;
                    self.out.push(')');
                    // In Go's tree a capturing group is a node, a non-capturing one is not.
                    let height = g.inside.height + u32::from(g.capturing);
                    if height > MAX_HEIGHT {
                        return Err(("expression nests too deeply", self.s.iter().collect()));
                    }
                    self.atom(Operand { height, ..g.inside });
                }
                '|' => {
                    self.i += 1;
                    self.out.push('|');
                    self.atom = None;
                    self.last_repeat = None;
                }
                '*' | '+' | '?' => {
                    self.i += 1;
                    self.out.push(c);
                    let (min, max) = match c {
                        '*' => (0, -1),
                        '+' => (1, -1),
                        _ => (0, 1),
                    };
                    self.repeat(start, min, max, false)?;
                }
                '{' => match self.repeat_counts() {
                    Some((min, max)) => {
                        let text = self.text(start);
                        if !(0..=1000).contains(&min) || max > 1000 || (max >= 0 && min > max) {
                            return Err(("invalid repeat count", text));
                        }
                        self.out.push_str(&text);
                        self.repeat(start, min, max, true)?;
                    }
                    None => {
                        self.i += 1;
                        self.out.push_str("\\{");
                        self.atom(LEAF);
                    }
                },
                '[' => {
                    let class = self.class()?;
                    self.out.push_str(&class);
                    self.atom(LEAF);
                }
                '\\' => self.escape()?,
                '^' | '$' | '.' => {
                    self.i += 1;
                    self.out.push(c);
                    self.atom(LEAF);
                }
                _ => {
                    self.i += 1;
                    self.out
                        .push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
                    self.atom(LEAF);
                }
            }
        }
        if self.groups.len() > 1 {
            return Err(("missing closing )", self.s.iter().collect()));
        }
        Ok(())
    }

    /// A repetition of the operand before, written out up to `self.i` (with `braces`, checked
    /// against Go's limit on copies).
    fn repeat(&mut self, start: usize, min: i32, max: i32, braces: bool) -> Result<(), Fail> {
        // A `?` right after makes it lazy.
        if self.peek(0) == Some('?') {
            self.i += 1;
            self.out.push('?');
        }
        if let Some(last) = &self.last_repeat {
            let mut text = last.clone();
            text.push_str(&self.text(start));
            return Err(("invalid nested repetition operator", text));
        }
        let Some(inner) = self.atom else {
            return Err(("missing argument to repetition operator", self.text(start)));
        };
        let copies = if max < 0 { min } else { max } as u32;
        let need = match (max, copies) {
            (0, _) => 0,
            (_, 0) => inner.need,
            (_, m) => m.max(inner.need.saturating_mul(m)),
        };
        if braces && (min >= 2 || max >= 2) && need > MAX_REPEAT {
            return Err(("invalid repeat count", self.text(start)));
        }
        let op = Operand {
            need,
            height: inner.height + 1,
            repeats: inner.repeats + 1,
        };
        if op.height > MAX_HEIGHT || op.repeats > MAX_NESTED_REPEATS {
            return Err(("expression nests too deeply", self.s.iter().collect()));
        }
        self.atom(op);
        self.last_repeat = Some(self.text(start));
        Ok(())
    }

    /// `{n}`, `{n,}`, `{n,m}` at `self.i` as Go reads them (no leading zeros; -1 for a number
    /// past 10^8): (min, max with -1 for none), consumed; `None` (nothing consumed) where
    /// the `{` is a literal.
    fn repeat_counts(&mut self) -> Option<(i32, i32)> {
        let save = self.i;
        self.i += 1;
        let counts = (|| {
            let min = self.int()?;
            let max = match self.peek(0)? {
                ',' => {
                    self.i += 1;
                    if self.peek(0)? == '}' {
                        -1
                    } else {
                        self.int()?
                    }
                }
                _ => min,
            };
            (self.peek(0)? == '}').then(|| {
                self.i += 1;
                (if max < -1 { -1 } else { min }, max.max(-1))
            })
        })();
        if counts.is_none() {
            self.i = save;
        }
        counts
    }

    /// Go's `parseInt`: digits without a leading zero; past 10^8 is -2 (too big).
    fn int(&mut self) -> Option<i32> {
        let start = self.i;
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let digits = self.text(start);
        if digits.is_empty() || (digits.len() >= 2 && digits.starts_with('0')) {
            return None;
        }
        Some(
            digits
                .parse::<i32>()
                .ok()
                .filter(|n| *n < 100_000_000)
                .unwrap_or(-2),
        )
    }

    /// `(`: a group, a named group, or flags.
    fn open(&mut self) -> Result<(), Fail> {
        let start = self.i;
        self.i += 1;
        if self.peek(0) != Some('?') {
            return self.push_group("(");
        }
        self.i += 1;
        let named = match (self.peek(0), self.peek(1)) {
            (Some('P'), Some('<')) => Some(2),
            (Some('<'), _) => Some(1),
            (Some('P'), _) => {
                return Err(("invalid or unsupported Perl syntax", self.text(start) + "P"));
            }
            _ => None,
        };
        if let Some(skip) = named {
            self.i += skip;
            let name_start = self.i;
            while self.peek(0).is_some_and(|c| c != '>') {
                self.i += 1;
            }
            let name = self.text(name_start);
            if self.peek(0).is_none() {
                return Err(("invalid named capture", self.text(start)));
            }
            self.i += 1;
            if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
                return Err(("invalid named capture", self.text(start)));
            }
            // The name plays no part in a match; Go allows the same name twice, the regex
            // crate does not.
            return self.push_group("(");
        }
        let (mut negated, mut saw_flag) = (false, false);
        let flags_start = self.i;
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                'i' | 'm' | 's' | 'U' => saw_flag = true,
                '-' if !negated => {
                    negated = true;
                    saw_flag = false;
                }
                ':' | ')' if !negated || saw_flag => {
                    let flags: String = self.s[flags_start..self.i - 1].iter().collect();
                    if c == ':' {
                        self.push_group(&format!("(?{flags}:"))?;
                    } else if !flags.is_empty() {
                        self.out.push_str(&format!("(?{flags})"));
                    }
                    return Ok(());
                }
                _ => break,
            }
        }
        Err(("invalid or unsupported Perl syntax", self.text(start)))
    }

    fn push_group(&mut self, open: &str) -> Result<(), Fail> {
        let capturing = open == "(";
        // Nothing here uses what a group captures; a non-capturing group is no node of the
        // regex crate's tree, so deep nesting costs its recursive compiler nothing.
        self.out.push_str(if capturing { "(?:" } else { open });
        self.groups.push(Group {
            inside: Operand::default(),
            capturing,
        });
        self.atom = None;
        self.last_repeat = None;
        Ok(())
    }

    /// `\` outside a class.
    fn escape(&mut self) -> Result<(), Fail> {
        let start = self.i;
        let Some(c) = self.peek(1) else {
            return Err(("trailing backslash at end of expression", String::new()));
        };
        let simple = match c {
            'A' => Some("\\A"),
            'z' => Some("\\z"),
            'b' => Some("(?-u:\\b)"),
            'B' => Some("(?-u:\\B)"),
            'd' => Some("[0-9]"),
            'D' => Some("[^0-9]"),
            'w' => Some("[0-9A-Za-z_]"),
            'W' => Some("[^0-9A-Za-z_]"),
            's' => Some("[\\t\\n\\f\\r ]"),
            'S' => Some("[^\\t\\n\\f\\r ]"),
            _ => None,
        };
        if let Some(r) = simple {
            self.i += 2;
            self.out.push_str(r);
            self.atom(LEAF);
            return Ok(());
        }
        match c {
            'Q' => {
                self.i += 2;
                let lit_start = self.i;
                while self.i < self.s.len()
                    && !(self.peek(0) == Some('\\') && self.peek(1) == Some('E'))
                {
                    self.i += 1;
                }
                let lit = self.text(lit_start);
                self.i = (self.i + 2).min(self.s.len());
                for ch in lit.chars() {
                    self.out
                        .push_str(&regex::escape(ch.encode_utf8(&mut [0; 4])));
                    self.atom(LEAF);
                }
            }
            'p' | 'P' => {
                let class = self.unicode_class()?;
                self.out.push_str(&class);
                self.atom(LEAF);
            }
            _ => {
                let ch = self
                    .escaped_char()
                    .map_err(|_| ("invalid escape sequence", self.text(start)))?;
                self.out.push_str(&format!("\\x{{{:x}}}", ch as u32));
                self.atom(LEAF);
            }
        }
        Ok(())
    }

    /// Go's `parseEscape` at `self.i` (the `\`): the character a literal escape stands for.
    fn escaped_char(&mut self) -> Result<char, ()> {
        self.i += 1;
        let c = self.peek(0).ok_or(())?;
        self.i += 1;
        if c.is_ascii() && !c.is_ascii_alphanumeric() {
            return Ok(c);
        }
        let octal = |c: Option<char>| c.and_then(|c| c.to_digit(8));
        Ok(match c {
            // `\1`…`\7` alone would be a backreference, which Go does not have.
            '1'..='7' if octal(self.peek(0)).is_none() => return Err(()),
            '0'..='7' => {
                let mut v = c.to_digit(8).ok_or(())?;
                for _ in 0..2 {
                    let Some(d) = octal(self.peek(0)) else { break };
                    v = v * 8 + d;
                    self.i += 1;
                }
                char::from_u32(v).ok_or(())?
            }
            'x' => {
                let digits = if self.peek(0) == Some('{') {
                    self.i += 1;
                    let from = self.i;
                    while self.peek(0).is_some_and(|c| c != '}') {
                        self.i += 1;
                    }
                    let d = self.text(from);
                    if self.peek(0) != Some('}') || d.is_empty() {
                        return Err(());
                    }
                    self.i += 1;
                    d
                } else {
                    let d: String = self.s[self.i..].iter().take(2).collect();
                    if d.chars().count() < 2 {
                        return Err(());
                    }
                    self.i += 2;
                    d
                };
                if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(());
                }
                let v = u32::from_str_radix(&digits, 16).map_err(|_| ())?;
                char::from_u32(v).ok_or(())?
            }
            'a' => '\u{7}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            _ => return Err(()),
        })
    }

    /// `\pX`, `\p{Name}`, `\p{^Name}` (and `\P`) at `self.i`: Go's Unicode 15 tables, by Go's
    /// names (case matters, no long or binary property names).
    fn unicode_class(&mut self) -> Result<String, Fail> {
        let start = self.i;
        let mut negated = self.peek(1) == Some('P');
        self.i += 2;
        let name = match self.peek(0) {
            Some('{') => {
                self.i += 1;
                let from = self.i;
                while self.peek(0).is_some_and(|c| c != '}') {
                    self.i += 1;
                }
                if self.peek(0).is_none() {
                    return Err(("invalid character class range", self.text(start)));
                }
                let n = self.text(from);
                self.i += 1;
                n
            }
            Some(c) => {
                self.i += 1;
                c.to_string()
            }
            None => return Err(("invalid character class range", self.text(start))),
        };
        let name = match name.strip_prefix('^') {
            Some(n) => {
                negated = !negated;
                n.to_string()
            }
            None => name,
        };
        let Some(set) = go_unicode_class(&name, self.go) else {
            return Err(("invalid character class range", self.text(start)));
        };
        Ok(if negated {
            format!("[^{set}]")
        } else {
            format!("[{set}]")
        })
    }

    /// A bracketed class at `self.i` in Go's reading, as a regex crate class.
    fn class(&mut self) -> Result<String, Fail> {
        let start = self.i;
        self.i += 1;
        let mut out = String::from("[");
        if self.peek(0) == Some('^') {
            self.i += 1;
            out.push('^');
        }
        let missing = |t: &Self| ("missing closing ]", t.s[start..].iter().collect::<String>());
        let mut first = true;
        loop {
            let c = self.peek(0).ok_or_else(|| missing(self))?;
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            if c == '[' && self.peek(1) == Some(':') {
                let rest = self.rest();
                if let Some(end) = rest[2..].find(":]") {
                    let name = &rest[..end + 4];
                    let bare = name[2..name.len() - 2].trim_start_matches('^');
                    if !POSIX.contains(&bare) || name[2..].matches('^').count() > 1 {
                        return Err(("invalid character class range", name.to_string()));
                    }
                    out.push_str(name);
                    self.i += name.chars().count();
                    continue;
                }
            }
            if c == '\\' {
                let perl = match self.peek(1) {
                    Some('d') => Some("0-9"),
                    Some('D') => Some("[^0-9]"),
                    Some('w') => Some("0-9A-Za-z_"),
                    Some('W') => Some("[^0-9A-Za-z_]"),
                    Some('s') => Some("\\t\\n\\f\\r "),
                    Some('S') => Some("[^\\t\\n\\f\\r ]"),
                    _ => None,
                };
                if let Some(p) = perl {
                    self.i += 2;
                    out.push_str(p);
                    continue;
                }
                if matches!(self.peek(1), Some('p' | 'P')) {
                    let u = self.unicode_class()?;
                    out.push_str(&u);
                    continue;
                }
            }
            let lo_start = self.i;
            let lo = self.class_char(start)?;
            let mut hi = lo;
            if self.peek(0) == Some('-') && self.peek(1).is_some_and(|c| c != ']') {
                self.i += 1;
                hi = self.class_char(start)?;
                if hi < lo {
                    return Err(("invalid character class range", self.text(lo_start)));
                }
            }
            out.push_str(&format!("\\x{{{:x}}}-\\x{{{:x}}}", lo as u32, hi as u32));
        }
        out.push(']');
        Ok(out)
    }

    /// One character of a class: literal or escaped.
    fn class_char(&mut self, class_start: usize) -> Result<char, Fail> {
        match self.peek(0) {
            None => Err(("missing closing ]", self.s[class_start..].iter().collect())),
            Some('\\') => {
                let start = self.i;
                self.escaped_char()
                    .map_err(|_| ("invalid escape sequence", self.text(start)))
            }
            Some(c) => {
                self.i += 1;
                Ok(c)
            }
        }
    }
}

/// The POSIX class names Go knows (`[[:alpha:]]`), all of which the regex crate knows too.
const POSIX: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// Go's general categories before Go 1.25 (its `C` has no unassigned code points there, the
/// regex crate's has; `Cn` and `LC` came with 1.25).
const CATEGORIES: &[&str] = &[
    "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd",
    "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z",
    "Zl", "Zp", "Zs",
];

/// Go 1.25's long names of the categories (Unicode's aliases), canonical as Go looks them up.
const CATEGORY_ALIASES: &[(&str, &str)] = &[
    ("Other", "C"),
    ("Control", "Cc"),
    ("Cntrl", "Cc"),
    ("Format", "Cf"),
    ("Unassigned", "Cn"),
    ("Privateuse", "Co"),
    ("Surrogate", "Cs"),
    ("Letter", "L"),
    ("Casedletter", "LC"),
    ("Lowercaseletter", "Ll"),
    ("Modifierletter", "Lm"),
    ("Otherletter", "Lo"),
    ("Titlecaseletter", "Lt"),
    ("Uppercaseletter", "Lu"),
    ("Mark", "M"),
    ("Combiningmark", "M"),
    ("Spacingmark", "Mc"),
    ("Enclosingmark", "Me"),
    ("Nonspacingmark", "Mn"),
    ("Number", "N"),
    ("Decimalnumber", "Nd"),
    ("Digit", "Nd"),
    ("Letternumber", "Nl"),
    ("Othernumber", "No"),
    ("Punctuation", "P"),
    ("Punct", "P"),
    ("Connectorpunctuation", "Pc"),
    ("Dashpunctuation", "Pd"),
    ("Closepunctuation", "Pe"),
    ("Finalpunctuation", "Pf"),
    ("Initialpunctuation", "Pi"),
    ("Otherpunctuation", "Po"),
    ("Openpunctuation", "Ps"),
    ("Symbol", "S"),
    ("Currencysymbol", "Sc"),
    ("Modifiersymbol", "Sk"),
    ("Mathsymbol", "Sm"),
    ("Othersymbol", "So"),
    ("Separator", "Z"),
    ("Lineseparator", "Zl"),
    ("Paragraphseparator", "Zp"),
    ("Spaceseparator", "Zs"),
];

/// Go's scripts (Unicode 15.0), by their names in Go's table.
const SCRIPTS: &[&str] = &[
    "Adlam",
    "Ahom",
    "Anatolian_Hieroglyphs",
    "Arabic",
    "Armenian",
    "Avestan",
    "Balinese",
    "Bamum",
    "Bassa_Vah",
    "Batak",
    "Bengali",
    "Bhaiksuki",
    "Bopomofo",
    "Brahmi",
    "Braille",
    "Buginese",
    "Buhid",
    "Canadian_Aboriginal",
    "Carian",
    "Caucasian_Albanian",
    "Chakma",
    "Cham",
    "Cherokee",
    "Chorasmian",
    "Common",
    "Coptic",
    "Cuneiform",
    "Cypriot",
    "Cypro_Minoan",
    "Cyrillic",
    "Deseret",
    "Devanagari",
    "Dives_Akuru",
    "Dogra",
    "Duployan",
    "Egyptian_Hieroglyphs",
    "Elbasan",
    "Elymaic",
    "Ethiopic",
    "Georgian",
    "Glagolitic",
    "Gothic",
    "Grantha",
    "Greek",
    "Gujarati",
    "Gunjala_Gondi",
    "Gurmukhi",
    "Han",
    "Hangul",
    "Hanifi_Rohingya",
    "Hanunoo",
    "Hatran",
    "Hebrew",
    "Hiragana",
    "Imperial_Aramaic",
    "Inherited",
    "Inscriptional_Pahlavi",
    "Inscriptional_Parthian",
    "Javanese",
    "Kaithi",
    "Kannada",
    "Katakana",
    "Kawi",
    "Kayah_Li",
    "Kharoshthi",
    "Khitan_Small_Script",
    "Khmer",
    "Khojki",
    "Khudawadi",
    "Lao",
    "Latin",
    "Lepcha",
    "Limbu",
    "Linear_A",
    "Linear_B",
    "Lisu",
    "Lycian",
    "Lydian",
    "Mahajani",
    "Makasar",
    "Malayalam",
    "Mandaic",
    "Manichaean",
    "Marchen",
    "Masaram_Gondi",
    "Medefaidrin",
    "Meetei_Mayek",
    "Mende_Kikakui",
    "Meroitic_Cursive",
    "Meroitic_Hieroglyphs",
    "Miao",
    "Modi",
    "Mongolian",
    "Mro",
    "Multani",
    "Myanmar",
    "Nabataean",
    "Nag_Mundari",
    "Nandinagari",
    "New_Tai_Lue",
    "Newa",
    "Nko",
    "Nushu",
    "Nyiakeng_Puachue_Hmong",
    "Ogham",
    "Ol_Chiki",
    "Old_Hungarian",
    "Old_Italic",
    "Old_North_Arabian",
    "Old_Permic",
    "Old_Persian",
    "Old_Sogdian",
    "Old_South_Arabian",
    "Old_Turkic",
    "Old_Uyghur",
    "Oriya",
    "Osage",
    "Osmanya",
    "Pahawh_Hmong",
    "Palmyrene",
    "Pau_Cin_Hau",
    "Phags_Pa",
    "Phoenician",
    "Psalter_Pahlavi",
    "Rejang",
    "Runic",
    "Samaritan",
    "Saurashtra",
    "Sharada",
    "Shavian",
    "Siddham",
    "SignWriting",
    "Sinhala",
    "Sogdian",
    "Sora_Sompeng",
    "Soyombo",
    "Sundanese",
    "Syloti_Nagri",
    "Syriac",
    "Tagalog",
    "Tagbanwa",
    "Tai_Le",
    "Tai_Tham",
    "Tai_Viet",
    "Takri",
    "Tamil",
    "Tangsa",
    "Tangut",
    "Telugu",
    "Thaana",
    "Thai",
    "Tibetan",
    "Tifinagh",
    "Tirhuta",
    "Toto",
    "Ugaritic",
    "Vai",
    "Vithkuqi",
    "Wancho",
    "Warang_Citi",
    "Yezidi",
    "Yi",
    "Zanabazar_Square",
];

/// Go 1.25's lookup key of a name: first letter upper case, the rest lower case, without
/// `_`, `-` and spaces.
fn canonical(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars().filter(|c| !matches!(c, '_' | '-' | ' ')) {
        if out.is_empty() {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The inside of a regex crate class for Go's Unicode class `name`, if Go has one.
fn go_unicode_class(name: &str, go: GoRegexp) -> Option<String> {
    let category = |c: &str| match c {
        // Surrogates: never in a string here; the regex crate refuses to name them.
        "Cs" => "[^\\x{0}-\\x{10ffff}]".to_string(),
        // Before Go 1.25, `C` left out the unassigned code points.
        "C" if go == GoRegexp::Go1_24 => "\\p{gc=Cc}\\p{gc=Cf}\\p{gc=Co}".to_string(),
        c => format!("\\p{{gc={c}}}"),
    };
    let script = |s: &str| format!("\\p{{Script={s}}}");
    match go {
        GoRegexp::Go1_24 => {
            if name == "Any" {
                Some("\\x{0}-\\x{10ffff}".into())
            } else if name == "C" || CATEGORIES.contains(&name) {
                Some(category(name))
            } else {
                SCRIPTS.contains(&name).then(|| script(name))
            }
        }
        GoRegexp::Go1_25 => {
            let n = canonical(name);
            match n.as_str() {
                "Any" => return Some("\\x{0}-\\x{10ffff}".into()),
                "Assigned" => return Some("[^\\p{gc=Cn}]".into()),
                "Ascii" => return Some("\\x{0}-\\x{7f}".into()),
                "Lc" => return Some(category("LC")),
                _ => {}
            }
            if n == "C" || n == "Cn" || CATEGORIES.contains(&n.as_str()) {
                return Some(category(&n));
            }
            // Go 1.25 looks scripts up by the canonical name, so those written with `_` or a
            // capital inside (`Old_Italic`, `SignWriting`) are no longer found.
            if SCRIPTS.contains(&n.as_str()) {
                return Some(script(&n));
            }
            CATEGORY_ALIASES
                .iter()
                .find(|(alias, _)| *alias == n)
                .map(|(_, c)| category(c))
        }
    }
}
