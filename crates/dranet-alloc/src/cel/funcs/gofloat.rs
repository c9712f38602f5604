//! Go's `strconv.ParseFloat(s, 64)`, which `double(string)` is in cel-go: decimal and hexadecimal
//! (`0x1.8p1`) forms, `_` between digits, `Inf`/`Infinity` with a sign and `NaN` without one;
//! a value past the double range is an error, not an infinity.

/// The value of `s`, or `None` where Go's parser returns an error.
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    // Go takes `NaN` only unsigned.
    if lower == "nan" {
        return (body.len() == s.len()).then_some(f64::NAN);
    }
    let b = body.as_bytes();
    let hex = b.len() >= 2 && b[0] == b'0' && (b[1] | 0x20) == b'x';
    if !underscores_ok(b, hex) {
        return None;
    }
    let v = if hex {
        hex_float(&body[2..])?
    } else {
        decimal_float(body)?
    };
    if v.is_infinite() {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// Go's rule for `_`: only between digits, or between the base prefix and a digit.
fn underscores_ok(b: &[u8], hex: bool) -> bool {
    // The class of the last byte: '^' start, '0' digit or prefix, '_', '!' anything else.
    let (mut saw, start) = if hex { (b'0', 2) } else { (b'^', 0) };
    for &c in &b[start..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else if saw == b'_' {
            return false;
        } else {
            saw = b'!';
        }
    }
    saw != b'_'
}

/// The mantissa's digits and `.` up to the exponent marker: (digits seen, rest).
fn mantissa(s: &str, is_digit: fn(u8) -> bool) -> Option<(&str, &str)> {
    let mut dot = false;
    let mut digits = false;
    let end = s
        .bytes()
        .position(|c| {
            if is_digit(c) {
                digits = true;
            } else if c == b'.' && !dot {
                dot = true;
            } else if c != b'_' {
                return true;
            }
            false
        })
        .unwrap_or(s.len());
    digits.then_some((&s[..end], &s[end..]))
}

/// A decimal exponent after its marker: an optional sign, then a digit first.
fn exponent_ok(e: &str) -> bool {
    let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
    digits.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && digits.bytes().all(|c| c.is_ascii_digit() || c == b'_')
}

fn decimal_float(s: &str) -> Option<f64> {
    let (_, rest) = mantissa(s, |c| c.is_ascii_digit())?;
    if !rest.is_empty() {
        let e = rest.strip_prefix(['e', 'E'])?;
        if !exponent_ok(e) {
            return None;
        }
    }
    s.replace('_', "").parse().ok()
}

/// `0x` already taken: hex digits with an optional `.`, then the binary exponent Go requires.
fn hex_float(s: &str) -> Option<f64> {
    let (m, rest) = mantissa(s, |c| c.is_ascii_hexdigit())?;
    let e = rest.strip_prefix(['p', 'P'])?;
    if !exponent_ok(e) {
        return None;
    }
    let exp: i64 = e.replace('_', "").parse().unwrap_or(if e.starts_with('-') {
        i64::MIN / 2
    } else {
        i64::MAX / 2
    });
    // 60 bits of mantissa, the rest a sticky bit: enough for the double's rounding.
    let (mut mant, mut scale, mut sticky, mut frac) = (0u64, 0i64, false, false);
    for c in m.bytes() {
        match c {
            b'.' => frac = true,
            b'_' => {}
            _ => {
                let d = u64::from((c as char).to_digit(16)?);
                if mant >> 60 == 0 {
                    mant = mant * 16 + d;
                    if frac {
                        scale -= 4;
                    }
                } else {
                    sticky |= d != 0;
                    if !frac {
                        scale += 4;
                    }
                }
            }
        }
    }
    let v = (mant | u64::from(sticky)) as f64;
    let total = exp.saturating_add(scale).clamp(-4000, 4000) as i32;
    // In two steps: 2^total alone may be outside the double range while the product is not.
    let half = total / 2;
    Some(v * 2f64.powi(half) * 2f64.powi(total - half))
}

#[cfg(test)]
mod tests {
    use super::parse_go_float as p;

    #[test]
    fn takes_what_go_takes() {
        assert_eq!(p("1_000"), Some(1000.0));
        assert_eq!(p("1e1_0"), Some(1e10));
        assert_eq!(p("0x1p4"), Some(16.0));
        assert_eq!(p("0x_1.8p1"), Some(3.0));
        assert_eq!(p("-0X1P-2"), Some(-0.25));
        assert_eq!(p("0x1.fffffffffffff8p1023"), None);
        assert_eq!(p(".5"), Some(0.5));
        assert_eq!(p("5."), Some(5.0));
        assert_eq!(p("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(p("NaN").is_some_and(f64::is_nan));
    }

    #[test]
    fn refuses_what_go_refuses() {
        for s in [
            "", "-nan", "+NaN", "1__0", "_1", "1_", "1_.5", "0x10", "0x1p", "1e", "1e_1", "1e400",
            "infinit", "0x1p1024", ".", "1.2.3", " 1",
        ] {
            assert_eq!(p(s), None, "{s:?}");
        }
    }
}
