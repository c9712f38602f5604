//! The selector families of the cost corpus. Each family is an expression of a size parameter
//! `n` whose estimated cost grows with `n`; the corpus holds, for each family, the values of `n`
//! around the point where the API server starts refusing it, and (where the expression leaves
//! room) the same expression at the last accepted `n` padded with `&& 1 in [1, 1, ...]`, which
//! costs exactly one unit per element: that sweep pins the family's estimate to the unit.
//!
//! The sweeps are centred on where our estimate puts the boundary, so an estimate that
//! disagrees with the API server shows up as a verdict that differs inside the sweep.

/// One selector of the corpus.
#[derive(Debug, Clone)]
pub struct Case {
    /// The family it belongs to.
    pub family: String,
    /// The family's size parameter.
    pub n: u64,
    /// The number of padding elements, for a padded selector.
    pub pad: Option<u64>,
    /// The expression.
    pub selector: String,
}

/// The API server's cost limit.
const LIMIT: u64 = 1_000_000;

/// How many values of `n` on each side of the boundary are kept.
const HALF_WINDOW: u64 = 3;

/// The API server's limit on an expression's length.
const MAX_LEN: usize = 10 * 1024;

/// `[0,1,...,n-1]`.
fn ints(n: u64) -> String {
    let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// `n` copies of `item` joined by `sep`.
fn repeat(item: &str, sep: &str, n: u64) -> String {
    vec![item; n as usize].join(sep)
}

/// For every attribute name `k` of every domain `d` (32 × 32 iterations at most).
fn each_attr(body: &str) -> String {
    format!("device.attributes.all(d, device.attributes[d].all(k, {body}))")
}

type Make = Box<dyn Fn(u64) -> String>;

/// The families: name, the range of `n` the boundary lies in, and the expression.
fn families() -> Vec<(&'static str, u64, u64, Make)> {
    vec![
        (
            "nested-list-3",
            2,
            100,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.all(a, {l}.all(b, {l}.all(c, a + b + c >= 0)))")
            }),
        ),
        (
            "attrs-x-list-2",
            2,
            300,
            Box::new(|n| {
                let l = ints(n);
                format!("device.attributes.all(d, {l}.all(a, {l}.exists(b, a == b)))")
            }),
        ),
        (
            "name-matches",
            1,
            9000,
            Box::new(|n| each_attr(&format!("k.matches(\"{}\")", "a".repeat(n as usize)))),
        ),
        (
            "name-matches-two-var",
            1,
            9000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, device.attributes[d].all(k, v, k.matches(\"{}\")))",
                    "a".repeat(n as usize)
                )
            }),
        ),
        (
            "value-matches",
            1,
            9000,
            Box::new(|n| {
                each_attr(&format!(
                    "device.attributes[d][k].matches(\"{}\")",
                    "a".repeat(n as usize)
                ))
            }),
        ),
        (
            "global-matches",
            1,
            700,
            Box::new(|n| each_attr(&repeat("matches(k,\"a\")", "&&", n))),
        ),
        (
            "name-concat",
            2,
            200,
            Box::new(|n| each_attr(&format!("({}).contains(\"x\")", repeat("k", "+", n)))),
        ),
        (
            "driver-concat",
            2,
            200,
            Box::new(|n| {
                each_attr(&format!(
                    "({}).endsWith(k)",
                    repeat("device.driver", "+", n)
                ))
            }),
        ),
        (
            "map-filter-chain",
            1,
            9000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, device.attributes[d].map(k, k + \"ab\")\
                     .filter(x, x.startsWith(\"a\")).all(y, y.contains(\"{}\")))",
                    "c".repeat(n as usize)
                )
            }),
        ),
        (
            "exists-one",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.exists_one(a, {l}.exists_one(b, a == b))")
            }),
        ),
        (
            "two-var-list",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.all(i, v, {l}.exists(j, w, i + v == j + w))")
            }),
        ),
        (
            "transform-list",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.transformList(i, v, i + v).all(x, {l}.exists(y, x == y))")
            }),
        ),
        (
            "transform-map",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!(
                    "device.attributes.all(z, device.attributes.transformMap(d, m, m.size())\
                     .all(e, {l}.exists(y, device.attributes[e].size() == y)))"
                )
            }),
        ),
        (
            "bind-quadratic",
            2,
            2000,
            Box::new(|n| format!("cel.bind(xs, {}, xs.all(a, xs.all(b, a <= b)))", ints(n))),
        ),
        (
            "sets-equivalent",
            2,
            1500,
            Box::new(|n| {
                let l = ints(n);
                format!("sets.equivalent({l}, {l})")
            }),
        ),
        (
            "sets-contains-per-domain",
            2,
            1000,
            Box::new(|n| {
                let l = ints(n);
                format!("device.attributes.all(d, sets.contains({l}, {l}))")
            }),
        ),
        (
            "in-string-list",
            1,
            2000,
            Box::new(|n| each_attr(&format!("k in [{}]", repeat("\"a\"", ",", n)))),
        ),
        (
            "case-chain",
            1,
            200,
            Box::new(|n| {
                each_attr(&format!(
                    "device.attributes[d][k]{}.size() > 0",
                    repeat(".lowerAscii()", "", n)
                ))
            }),
        ),
        (
            "replace-growth",
            1,
            40,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, device.driver{}.size() > 0)",
                    repeat(".replace(\"a\", \"bb\")", "", n)
                )
            }),
        ),
        (
            "split-list",
            1,
            700,
            Box::new(|n| {
                each_attr(&format!(
                    "[{}].size() > 0",
                    repeat("k.split(\",\")", ",", n)
                ))
            }),
        ),
        (
            "ip-cidr-parse",
            1,
            800,
            Box::new(|n| each_attr(&repeat("isIP(k)||isCIDR(k)", "||", n))),
        ),
        (
            "cidr-contains",
            1,
            400,
            Box::new(|n| each_attr(&repeat("cidr(\"10.0.0.0/8\").containsIP(k)", "||", n))),
        ),
        (
            "quantity-semver-parse",
            1,
            800,
            Box::new(|n| each_attr(&repeat("isQuantity(k)||isSemver(k)", "||", n))),
        ),
        (
            "url-host",
            1,
            500,
            Box::new(|n| each_attr(&repeat("url(k).getHost()==\"a\"", "||", n))),
        ),
        (
            "format-validate",
            1,
            60,
            Box::new(|n| {
                each_attr(&repeat(
                    "format.dns1123Label().validate(k).hasValue()",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "presence-test",
            2,
            3000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, {}.all(a, {}))",
                    ints(n),
                    repeat("has(device.attributes.x)", "||", 10)
                )
            }),
        ),
        (
            "optional-index",
            1,
            600,
            Box::new(|n| each_attr(&repeat("device.attributes[d][?k].hasValue()", "||", n))),
        ),
        (
            "capacity-equal",
            1,
            600,
            Box::new(|n| {
                format!(
                    "device.capacity.all(d, device.capacity[d].all(k, {}))",
                    repeat("device.capacity[d][k] == quantity(\"1\")", "||", n)
                )
            }),
        ),
        (
            "capacity-not-equal",
            1,
            600,
            Box::new(|n| {
                format!(
                    "device.capacity.all(d, device.capacity[d].all(k, {}))",
                    repeat("device.capacity[d][k] != quantity(\"1\")", "&&", n)
                )
            }),
        ),
        (
            "string-less",
            1,
            900,
            Box::new(|n| each_attr(&repeat("k < \"abcdef\"", "||", n))),
        ),
        (
            "conditional-concat",
            1,
            9000,
            Box::new(|n| {
                each_attr(&format!(
                    "(k.size() > 3 ? k + k : k).contains(\"{}\")",
                    "z".repeat(n as usize)
                ))
            }),
        ),
        (
            "int-list-index-of",
            1,
            2000,
            Box::new(|n| each_attr(&format!("{}.indexOf(1) >= 0", ints(n)))),
        ),
        (
            "quote-nesting",
            1,
            40,
            Box::new(|n| {
                each_attr(&format!(
                    "{}k{}.size() > 0",
                    "strings.quote(".repeat(n as usize),
                    ")".repeat(n as usize)
                ))
            }),
        ),
        (
            "outer-two-var-key",
            1,
            9000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, m, m.all(k, v, k.contains(\"{}\")))",
                    "q".repeat(n as usize)
                )
            }),
        ),
        (
            "outer-two-var-key-single",
            1,
            9000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, m, m.all(k, k.contains(\"{}\")))",
                    "q".repeat(n as usize)
                )
            }),
        ),
        (
            "bytes-conversion",
            1,
            900,
            Box::new(|n| each_attr(&repeat("bytes(k).size()>0", "||", n))),
        ),
        (
            "string-format",
            1,
            900,
            Box::new(|n| each_attr(&repeat("\"%s\".format([k])==\"a\"", "||", n))),
        ),
        (
            "map-literal",
            1,
            1100,
            Box::new(|n| {
                let entries: Vec<String> = (0..n).map(|i| format!("{i}:k")).collect();
                each_attr(&format!("{{{}}}.size() > 0", entries.join(",")))
            }),
        ),
        (
            "dyn-list",
            2,
            900,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, device.attributes[d].all(k, dyn({}).exists(a, a == 1)))",
                    ints(n)
                )
            }),
        ),
        (
            "substring-trim",
            1,
            100,
            Box::new(|n| {
                each_attr(&format!(
                    "device.attributes[d][k]{}.size() > 0",
                    repeat(".trim().substring(1)", "", n)
                ))
            }),
        ),
        (
            "value-index-of",
            1,
            700,
            Box::new(|n| each_attr(&repeat("device.attributes[d][k].indexOf(\"a\")>0", "||", n))),
        ),
        (
            "driver-equal-per-attr",
            1,
            900,
            Box::new(|n| each_attr(&repeat("device.driver==k", "||", n))),
        ),
        (
            "int-list-aggregates",
            1,
            2000,
            Box::new(|n| {
                let l = ints(n);
                each_attr(&format!(
                    "{l}.isSorted() && {l}.sum() > 0 && {l}.min() == 0 && {l}.max() > 0 && \
                     {l}.lastIndexOf(1) > 0"
                ))
            }),
        ),
        (
            "value-plus-value",
            1,
            9000,
            Box::new(|n| {
                each_attr(&format!(
                    "(device.attributes[d][k] + device.attributes[d][k]).contains(\"{}\")",
                    "w".repeat(n as usize)
                ))
            }),
        ),
        (
            "list-concat",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("({l} + {l} + [1]).all(a, ({l} + {l}).exists(b, a == b))")
            }),
        ),
        (
            "find-all",
            1,
            9000,
            Box::new(|n| {
                each_attr(&format!(
                    "k.findAll(\"{}\").size() > 0",
                    "f".repeat(n as usize)
                ))
            }),
        ),
        (
            "ip-canonical-contains-cidr",
            1,
            400,
            Box::new(|n| {
                each_attr(&repeat(
                    "ip.isCanonical(k)||cidr(\"10.0.0.0/8\").containsCIDR(k)",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "parse-attribute-value",
            1,
            400,
            Box::new(|n| {
                each_attr(&repeat(
                    "quantity(device.attributes[d][k]).isInteger()||semver(device.attributes[d][k]).major()>0",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "format-equal",
            1,
            900,
            Box::new(|n| {
                each_attr(&repeat(
                    "format.dns1123Label()==format.dns1035Label()",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "url-equal-per-attr",
            1,
            900,
            Box::new(|n| each_attr(&repeat("url(k)==url(\"https://x\")", "||", n))),
        ),
        (
            "replace-empty-pattern",
            1,
            60,
            Box::new(|n| {
                each_attr(&format!(
                    "k{}.size() > 0",
                    repeat(".replace(\"\", \"-\")", "", n)
                ))
            }),
        ),
        (
            "split-negative-limit",
            1,
            400,
            Box::new(|n| each_attr(&repeat("k.split(\",\", -1).size()>0", "||", n))),
        ),
        (
            "optional-chain",
            1,
            400,
            Box::new(|n| {
                each_attr(&repeat(
                    "device.attributes[?d][?k].or(optional.of(1)).orValue(2)==1",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "opt-map-per-attr",
            1,
            400,
            Box::new(|n| {
                each_attr(&repeat(
                    "device.attributes[d][?k].optMap(v, v == k).orValue(false)",
                    "||",
                    n,
                ))
            }),
        ),
        (
            "inner-filter-map-two-var",
            1,
            9000,
            Box::new(|n| {
                format!(
                    "device.attributes.all(d, device.attributes[d].transformList(k, v, k)\
                     .filter(x, x.size() > 1).map(y, y + y).all(z, z.contains(\"{}\")))",
                    "t".repeat(n as usize)
                )
            }),
        ),
        (
            "transform-map-entry",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.transformMapEntry(i, v, {{v: i}}).all(e, {l}.exists(y, e == y))")
            }),
        ),
        (
            "exists-one-two-var",
            2,
            2000,
            Box::new(|n| {
                let l = ints(n);
                format!("{l}.existsOne(i, v, {l}.exists_one(j, w, i + j == v + w))")
            }),
        ),
        (
            "in-map-and-size",
            1,
            600,
            Box::new(|n| each_attr(&repeat("k in device.attributes[d]&&size(k)>0", "&&", n))),
        ),
        (
            "driver-less-than-name",
            1,
            900,
            Box::new(|n| each_attr(&repeat("device.driver<k&&k<=device.driver", "||", n))),
        ),
        (
            "capacity-compare",
            1,
            600,
            Box::new(|n| {
                format!(
                    "device.capacity.all(d, device.capacity[d].all(k, {}))",
                    repeat("device.capacity[d][k].compareTo(quantity(k)) > 0", "||", n)
                )
            }),
        ),
        (
            "string-to-bytes-to-string",
            1,
            600,
            Box::new(|n| each_attr(&repeat("string(bytes(k)) == k", "||", n))),
        ),
    ]
}

/// Selectors with a fixed verdict worth recording: no sweep, one each.
fn singles() -> Vec<(&'static str, String)> {
    [
        ("quantity-ne-literal", r#"quantity("1") != quantity("2")"#),
        ("quantity-eq-literal", r#"quantity("1") == quantity("2")"#),
        ("string-list-index-of", r#"["a", "b"].indexOf("a") == 0"#),
        ("string-list-join", r#"["a", "b"].join(",") == "a,b""#),
        ("int-list-sum", "[1, 2, 3].sum() == 6"),
        (
            "url-equal",
            r#"url("https://a.example") == url("https://b.example")"#,
        ),
        ("ip-equal", r#"ip("10.0.0.1") == ip("10.0.0.2")"#),
        (
            "split-then-matches",
            r#"device.driver.split(".").all(p, p.matches("a"))"#,
        ),
        (
            "split-limit",
            r#"device.driver.split(".", 2).all(p, p.size() > 0)"#,
        ),
        ("find-all", r#"device.driver.findAll("[a-z]+").size() > 0"#),
        (
            "semver-compare",
            r#"semver("1.2.3").isLessThan(semver("1.3.0"))"#,
        ),
        ("format-named", r#"format.named("dns1123Label").hasValue()"#),
        (
            "bind-attrs",
            r#"cel.bind(a, device.attributes["dra.net"], a.all(k, a[k] == "x"))"#,
        ),
        (
            "opt-map",
            r#"device.attributes["dra.net"][?"x"].optMap(v, v == "y").orValue(false)"#,
        ),
        (
            "optional-field",
            r#"device.attributes["dra.net"].?x.orValue("") == "y""#,
        ),
        (
            "join-split",
            r#"device.driver.split(".").join("-") == "dra-net""#,
        ),
        (
            "format-string-list",
            r#""%s %s".format(["a", "b"]) == "a b""#,
        ),
        ("list-of-device", "[device].size() == 1"),
        (
            "quote-driver",
            r#"strings.quote(device.driver).size() < 200"#,
        ),
        ("bytes-concat", r#"(b"ab" + b"cd").size() == 4"#),
        (
            "deep-has",
            r#"has(device.attributes["dra.net"].x) && has(device.capacity.y)"#,
        ),
    ]
    .into_iter()
    .map(|(f, s)| (f, s.to_string()))
    .collect()
}

/// `e && 1 in [1 × b]`: `e` plus exactly `b + 10` cost units.
fn padded(e: &str, b: u64) -> String {
    format!("({e}) && 1 in [{}]", repeat("1", ",", b))
}

/// The first value in `lo..=hi` that `refused` holds for (assumed monotone), if any.
fn first_refused(lo: u64, hi: u64, refused: &dyn Fn(u64) -> bool) -> Option<u64> {
    if !refused(hi) {
        return None;
    }
    let (mut a, mut b) = (lo, hi);
    while a < b {
        let mid = a + (b - a) / 2;
        if refused(mid) {
            b = mid;
        } else {
            a = mid + 1;
        }
    }
    Some(a)
}

/// The corpus; `refused` is the estimate that centres the sweeps (ours: the API server's
/// verdicts are recorded for whatever selectors come out).
pub fn generate(estimate: &dyn Fn(&str) -> Result<u64, String>) -> Result<Vec<Case>, String> {
    let refused = |s: &str| estimate(s).is_ok_and(|c| c > LIMIT);
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (name, lo, hi, make) in families() {
        // The largest n whose expression is not too long.
        let hi = match first_refused(lo, hi, &|n| make(n).len() > MAX_LEN) {
            Some(n) => n - 1,
            None => hi,
        };
        let Some(boundary) = first_refused(lo, hi, &|n| refused(&make(n))).filter(|b| *b > lo)
        else {
            errors.push(format!(
                "family {name}: no boundary inside [{lo}, {hi}]: estimates {:?} .. {:?}",
                estimate(&make(lo)),
                estimate(&make(hi))
            ));
            continue;
        };
        for n in boundary.saturating_sub(HALF_WINDOW).max(lo)..=(boundary + HALF_WINDOW).min(hi) {
            let selector = make(n);
            if selector.len() <= MAX_LEN {
                out.push(Case {
                    family: name.to_string(),
                    n,
                    pad: None,
                    selector,
                });
            }
        }
        // The last accepted expression, padded up to the limit one unit at a time.
        let e = make(boundary - 1);
        let room = (MAX_LEN.saturating_sub(e.len() + 16) / 2) as u64;
        if room < 2 * HALF_WINDOW + 2 {
            continue;
        }
        let Some(b) = first_refused(1, room, &|b| refused(&padded(&e, b))) else {
            continue;
        };
        for pad in b.saturating_sub(HALF_WINDOW).max(1)..=(b + HALF_WINDOW).min(room) {
            out.push(Case {
                family: name.to_string(),
                n: boundary - 1,
                pad: Some(pad),
                selector: padded(&e, pad),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    for (name, selector) in singles() {
        out.push(Case {
            family: name.to_string(),
            n: 0,
            pad: None,
            selector,
        });
    }
    Ok(out)
}
