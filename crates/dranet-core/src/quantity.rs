//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`) as apimachinery's
//! `resource.Quantity` reads and stores them: the value of a device's capacity, of a shared
//! counter, and of CEL's `quantity()`.

use std::borrow::Cow;
use std::fmt;

/// A Kubernetes resource quantity (`100m`, `1.5Gi`, `2e3`, `1e30`), exact to the nano unit.
///
/// Equality, order and hashing are by value. The quantity also remembers how Kubernetes would
/// hold it, a scaled 64-bit integer or an arbitrary-precision decimal, because `asInteger()`,
/// `isInteger()` and `asApproximateFloat()` answer from that representation, not from the value:
/// `quantity("1.5Gi").asInteger()` is an error in the scheduler although 1.5Gi is a whole number,
/// and `quantity("0.3").asApproximateFloat()` is `3 × 0.1`, `0.30000000000000004`.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    /// The value is `coef × 10^exp` nano units. `exp` is 0 whenever the value fits an i128 of
    /// nano units (about ±1.7 × 10^29 units); past that `coef` is not a multiple of ten, so equal
    /// values have equal fields.
    coef: i128,
    exp: u32,
    repr: Repr,
}

/// How apimachinery holds a quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repr {
    /// `int64Amount`: an int64 times 10^`scale`.
    Int64 { scale: i32 },
    /// `inf.Dec`: an arbitrary-precision integer divided by 10^`scale`.
    Dec { scale: i32 },
}

impl Repr {
    /// The scale an `inf.Dec` of this value has (`Quantity.ToDec` of an `int64Amount`).
    fn dec_scale(self) -> i32 {
        match self {
            Repr::Int64 { scale } => scale.saturating_neg(),
            Repr::Dec { scale } => scale,
        }
    }
}

/// Why a string is not a quantity. The messages are apimachinery's, but for [`TooLarge`], which
/// it has no need of.
///
/// [`TooLarge`]: QuantityError::TooLarge
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a number followed by a suffix.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// A suffix that is not one of the SI, binary or exponent suffixes (an exponent past the
    /// int64 range is not one either).
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// A value with more significant digits than 128 bits hold, counted to the nano unit
    /// (about 38), or a power of ten past 2^32 nano units.
    #[error("quantity is too large")]
    TooLarge,
}

impl PartialEq for Quantity {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        (self.coef, self.exp) == (o.coef, o.exp)
    }
}
impl Eq for Quantity {}
impl PartialOrd for Quantity {
    #[inline]
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Quantity {
    #[inline]
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        if self.exp == 0 && o.exp == 0 {
            return self.coef.cmp(&o.coef);
        }
        let sign = self.coef.signum().cmp(&o.coef.signum());
        if sign.is_ne() || self.coef == 0 {
            return sign;
        }
        let m = magnitude_cmp(
            (self.coef.unsigned_abs(), self.exp),
            (o.coef.unsigned_abs(), o.exp),
        );
        if self.coef < 0 { m.reverse() } else { m }
    }
}
impl std::hash::Hash for Quantity {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.coef, self.exp).hash(h)
    }
}

/// Orders `a.0 × 10^a.1` and `b.0 × 10^b.1`, both non-zero.
fn magnitude_cmp(a: (u128, u32), b: (u128, u32)) -> std::cmp::Ordering {
    let digits = |m: u128| m.checked_ilog10().map_or(0, |d| d + 1);
    let (la, lb) = (
        u64::from(digits(a.0)) + u64::from(a.1),
        u64::from(digits(b.0)) + u64::from(b.1),
    );
    if la != lb {
        return la.cmp(&lb);
    }
    // As many digits: bring the one with the larger exponent down to the other's; past u128 it
    // is the larger.
    let (hi, lo, flip) = if a.1 >= b.1 {
        (a, b, false)
    } else {
        (b, a, true)
    };
    let o = match 10u128
        .checked_pow(hi.1 - lo.1)
        .and_then(|p| hi.0.checked_mul(p))
    {
        Some(h) => h.cmp(&lo.0),
        None => std::cmp::Ordering::Greater,
    };
    if flip { o.reverse() } else { o }
}

/// `coef × 10^exp` nano units in normal form (see [`Quantity`]); `None` past `u32` exponents.
fn normal(mut coef: i128, mut exp: u64) -> Option<(i128, u32)> {
    if coef == 0 {
        return Some((0, 0));
    }
    if let Some(v) = u32::try_from(exp)
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
        .and_then(|p| coef.checked_mul(p))
    {
        return Some((v, 0));
    }
    while coef % 10 == 0 {
        coef /= 10;
        exp += 1;
    }
    Some((coef, u32::try_from(exp).ok()?))
}

/// `coef × 10^exp` divided by `10^shift`, if that is a whole number that fits.
fn shifted(coef: i128, exp: u32, shift: i64) -> Option<i128> {
    let e = i64::from(exp) - shift;
    if e >= 0 {
        return coef.checked_mul(10i128.checked_pow(u32::try_from(e).ok()?)?);
    }
    match u32::try_from(-e).ok().and_then(|e| 10i128.checked_pow(e)) {
        Some(d) => (coef % d == 0).then(|| coef / d),
        None => (coef == 0).then_some(0),
    }
}

/// `m × 10^scale` nano units, `m` ≥ 0, in normal form; a fraction of a nano unit rounds up, as
/// `ParseQuantity` rounds it.
fn round_up(m: i128, scale: i64) -> Option<(i128, u32)> {
    if scale >= 0 {
        return normal(m, scale as u64);
    }
    let v = match u32::try_from(-scale)
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
    {
        Some(d) => m / d + i128::from(m % d != 0),
        None => i128::from(m != 0),
    };
    Some((v, 0))
}

/// Go's `math.Pow10`, whose products `asApproximateFloat()` reproduces to the last bit.
fn go_pow10(n: i64) -> f64 {
    const TAB: [f64; 32] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    ];
    const POS32: [f64; 10] = [
        1e0, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288,
    ];
    const NEG32: [f64; 11] = [
        1e-0, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320,
    ];
    match n {
        0..=308 => POS32[n as usize / 32] * TAB[n as usize % 32],
        -323..=-1 => NEG32[(-n) as usize / 32] / TAB[(-n) as usize % 32],
        n if n > 0 => f64::INFINITY,
        _ => 0.0,
    }
}

const NANO: i128 = 1_000_000_000;

/// The suffix family of a quantity as written, which the API server keeps when it stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `Ki` … `Ei`.
    BinarySi,
    /// `n` … `E`, or none.
    DecimalSi,
    /// `e<n>` / `E<n>`.
    DecimalExponent,
}

/// What [`Quantity::parse`] reads of a string, beyond the value: what the API server needs to
/// store it.
struct Parsed<'s> {
    quantity: Quantity,
    format: Format,
    /// The digits before and after the point, leading zeros of the integer part dropped
    /// (apimachinery's numerator and denominator).
    num: &'s str,
    frac: &'s str,
}

impl Parsed<'_> {
    /// Whether the API server keeps the string as written: its fast parser took the int64 path
    /// and the string already looks canonical (apimachinery's `ParseQuantity`).
    fn verbatim(&self) -> bool {
        let Repr::Int64 { scale } = self.quantity.repr else {
            return false;
        };
        // apimachinery's numerator is "0" when the integer part was all zeros.
        let num = if self.num.is_empty() { "0" } else { self.num };
        match self.format {
            // Only whole numbers take the int64 path with a binary suffix.
            Format::BinarySi => num.parse::<i64>().is_ok_and(|v| v & 7 != 0),
            Format::DecimalSi | Format::DecimalExponent => {
                let (first, last3) = (num.as_bytes()[0], ends_with_000(num, self.frac));
                scale % 3 == 0 && !last3 && first != b'0'
            }
        }
    }
}

/// Whether `num` followed by `frac` ends with `000`.
fn ends_with_000(num: &str, frac: &str) -> bool {
    let digits = num.bytes().chain(frac.bytes());
    let n = num.len() + frac.len();
    n >= 3 && digits.skip(n - 3).all(|d| d == b'0')
}

impl Quantity {
    /// Whether [`Quantity::parse`] accepts `s`, its error if not. The form devices publish
    /// (up to 9 digits and a suffix up to `T` or `Ti`, as `200G` or `288Gi`) is accepted
    /// without the general parse, which cannot fail on it.
    pub fn check(s: &str) -> Result<(), QuantityError> {
        let b = s.as_bytes();
        let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        if (1..=9).contains(&digits)
            && matches!(
                &b[digits..],
                b"" | b"k" | b"M" | b"G" | b"T" | b"Ki" | b"Mi" | b"Gi" | b"Ti"
            )
        {
            return Ok(());
        }
        Quantity::parse(s).map(|_| ())
    }

    /// Parses the Kubernetes quantity syntax as `resource.ParseQuantity` does: fractions below
    /// a nano unit round up, binary-suffixed values are capped at the int64 maximum.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse_parts(s).map(|p| p.quantity)
    }

    fn parse_parts(s: &str) -> Result<Parsed<'_>, QuantityError> {
        let b = s.as_bytes();
        if b.is_empty() {
            return Err(QuantityError::Format);
        }
        let mut pos = 0;
        let mut neg = false;
        match b[0] {
            b'-' => {
                neg = true;
                pos = 1;
            }
            b'+' => pos = 1,
            _ => {}
        }
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let n = digits(pos);
        let num = &s[pos..pos + n];
        pos += n;
        let mut frac = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let d = digits(pos);
            frac = &s[pos..pos + d];
            pos += d;
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && matches!(b[pos], b'-' | b'+') {
            pos += 1;
        }
        pos += digits(pos);
        if pos != b.len() {
            return Err(QuantityError::Format);
        }
        let suffix = &s[suffix_start..];
        // (multiplier, power of ten, format)
        let (mult, exp10, format): (i128, i32, Format) = match suffix {
            "" => (1, 0, Format::DecimalSi),
            "n" => (1, -9, Format::DecimalSi),
            "u" => (1, -6, Format::DecimalSi),
            "m" => (1, -3, Format::DecimalSi),
            "k" => (1, 3, Format::DecimalSi),
            "M" => (1, 6, Format::DecimalSi),
            "G" => (1, 9, Format::DecimalSi),
            "T" => (1, 12, Format::DecimalSi),
            "P" => (1, 15, Format::DecimalSi),
            "E" => (1, 18, Format::DecimalSi),
            "Ki" => (1 << 10, 0, Format::BinarySi),
            "Mi" => (1 << 20, 0, Format::BinarySi),
            "Gi" => (1 << 30, 0, Format::BinarySi),
            "Ti" => (1 << 40, 0, Format::BinarySi),
            "Pi" => (1 << 50, 0, Format::BinarySi),
            "Ei" => (1 << 60, 0, Format::BinarySi),
            // Read as an int64, then cut to int32 as apimachinery does: `1e4294967297` is 10.
            e if e.len() > 1 && e.starts_with(['e', 'E']) => {
                let x: i64 = e[1..].parse().map_err(|_| QuantityError::Suffix)?;
                (1, x as i32, Format::DecimalExponent)
            }
            _ => return Err(QuantityError::Suffix),
        };
        let binary = format == Format::BinarySi;
        // The digits without their trailing zeros, which go to the exponent: `1` and forty
        // zeros fits.
        let mut mantissa: i128 = 0;
        let mut zeros: u32 = 0;
        for d in num.bytes().chain(frac.bytes()) {
            if d == b'0' {
                zeros = zeros.saturating_add(1);
                continue;
            }
            mantissa = 10i128
                .checked_pow(zeros + 1)
                .and_then(|p| mantissa.checked_mul(p))
                .and_then(|m| m.checked_add(i128::from(d - b'0')))
                .ok_or(QuantityError::TooLarge)?;
            zeros = 0;
        }
        if mantissa == 0 {
            zeros = 0;
        }
        // value = mantissa * mult * 10^(exp10 - frac_len + zeros); in nanos add 9.
        let scale = i64::from(exp10) - frac.len() as i64 + i64::from(zeros) + 9;
        let (coef, exp) = if binary {
            // ParseQuantity caps binary values at the int64 maximum.
            let cap = i128::from(i64::MAX) * NANO;
            match mantissa.checked_mul(mult).and_then(|m| round_up(m, scale)) {
                Some((v, 0)) if v <= cap => (v, 0),
                _ => (cap, 0),
            }
        } else {
            round_up(mantissa, scale).ok_or(QuantityError::TooLarge)?
        };
        // resource.ParseQuantity's fast path: an int64 with a decimal scale when the digits
        // surely fit (18 for decimal forms; for binary suffixes only whole numbers, with the
        // suffix's digits counted as exponent*3/10), else a decimal. An empty integer part
        // counts as its "0".
        let num_len = num.len().max(1) as i64;
        let fast = if binary {
            let exp2 = i64::from(mult.trailing_zeros());
            let precision = 15 - num_len - exp2 * 3 / 10 - 1;
            let whole = shifted(mantissa, zeros, 0).and_then(|m| m.checked_mul(mult));
            (frac.is_empty() && precision >= 0 && whole.is_some_and(|w| i64::try_from(w).is_ok()))
                .then_some(0)
        } else {
            let scale = i64::from(exp10) - frac.len() as i64;
            (num_len + frac.len() as i64 <= 18 && scale >= -9)
                .then(|| i32::try_from(scale).ok())
                .flatten()
        };
        let repr = match fast {
            Some(scale) => Repr::Int64 { scale },
            // inf.Dec rounds a non-zero value to nano units, scale 9; the binary cap is the
            // int64 maximum, scale 0; zero keeps the scale its text gives.
            None if coef == 0 && binary => Repr::Dec {
                scale: frac.len() as i32,
            },
            None if coef == 0 => Repr::Dec {
                scale: (frac.len() as i32).saturating_sub(exp10),
            },
            None if binary && coef == i128::from(i64::MAX) * NANO => Repr::Dec { scale: 0 },
            None => Repr::Dec { scale: 9 },
        };
        Ok(Parsed {
            quantity: Quantity {
                coef: if neg { -coef } else { coef },
                exp,
                repr,
            },
            format,
            num,
            frac,
        })
    }

    /// The text the API server stores for the quantity `s` (it parses every quantity and writes
    /// it back canonically): `1024Mi` is stored as `1Gi`, `2000m` as `2`, `0.5` as `500m`,
    /// `1.5Gi` as `1536Mi`.
    ///
    /// apimachinery's rules: the suffix family of the input is kept (binary `Ki`…`Ei`, decimal SI
    /// `n`…`E`, or a decimal exponent `e<n>`); a binary quantity that is not a whole number of
    /// units or lies strictly between -1024 and 1024 is written as decimal SI; precision below
    /// `1n` is rounded up. A quantity the server's fast parser already finds canonical is stored
    /// exactly as written, sign and exponent letter included (`+4`, `1E3`, `1500e0`, `100Mi`).
    pub fn canonical(s: &str) -> Result<Cow<'_, str>, QuantityError> {
        Quantity::canonical_of(s, &Quantity::parse_parts(s)?)
    }

    /// The quantity `s` and its [`canonical`](Quantity::canonical) text, from one parse (an
    /// allocator reading a slice's capacities wants both, for every device it builds).
    pub fn parse_canonical(s: &str) -> Result<(Quantity, Cow<'_, str>), QuantityError> {
        let p = Quantity::parse_parts(s)?;
        Ok((p.quantity, Quantity::canonical_of(s, &p)?))
    }

    fn canonical_of<'a>(s: &'a str, p: &Parsed<'a>) -> Result<Cow<'a, str>, QuantityError> {
        if s == "0" || p.verbatim() {
            return Ok(Cow::Borrowed(s));
        }
        let magnitude = p.quantity.coef.unsigned_abs();
        let sign = if p.quantity.coef < 0 { "-" } else { "" };
        if magnitude == 0 {
            return Ok(Cow::Borrowed("0"));
        }
        let mut format = p.format;
        // Binary values are capped below 2^63 units, so they are never past the first form.
        if format == Format::BinarySi && p.quantity.exp == 0 {
            const UNIT: u128 = NANO as u128;
            if magnitude < 1024 * UNIT || !magnitude.is_multiple_of(UNIT) {
                format = Format::DecimalSi;
            } else {
                let mut units = magnitude / UNIT;
                let mut exp = 0;
                while units.is_multiple_of(1024) && exp < 60 {
                    units /= 1024;
                    exp += 10;
                }
                let suffix = match exp {
                    0 => "",
                    10 => "Ki",
                    20 => "Mi",
                    30 => "Gi",
                    40 => "Ti",
                    50 => "Pi",
                    _ => "Ei",
                };
                return Ok(Cow::Owned(format!("{sign}{units}{suffix}")));
            }
        }
        // Strip factors of ten, then bring the exponent down to a multiple of three.
        let mut mantissa = magnitude;
        let mut exp = i64::from(p.quantity.exp) - 9;
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exp += 1;
        }
        let adjust = exp.rem_euclid(3);
        mantissa = mantissa
            .checked_mul(10u128.pow(adjust as u32))
            .ok_or(QuantityError::TooLarge)?;
        exp -= adjust;
        let suffix: Cow<'_, str> = match (format, exp) {
            (Format::DecimalExponent, 0) => "".into(),
            (Format::DecimalExponent, e) => format!("e{e}").into(),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 0) => "".into(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            // No SI suffix for the exponent: apimachinery writes none at all, so the API server
            // stores `1000E` as `1` (sic).
            _ => "".into(),
        };
        Ok(Cow::Owned(format!("{sign}{mantissa}{suffix}")))
    }

    /// Whether `a` and `b` are the same quantity as the API server stores it (`1024Mi` is
    /// `1Gi`); strings that are not quantities are the same only when equal.
    pub fn same_canonical(a: &str, b: &str) -> bool {
        a == b
            || matches!((Quantity::canonical(a), Quantity::canonical(b)), (Ok(x), Ok(y)) if x == y)
    }

    /// The int64 Kubernetes would hold at `scale`, if the value is exactly that.
    fn unscaled(self, scale: i32) -> Option<i64> {
        shifted(self.coef, self.exp, i64::from(scale) + 9).and_then(|v| i64::try_from(v).ok())
    }

    /// How Kubernetes holds `self + o` (`Quantity.Add`): the int64 at the smaller scale when
    /// both values and `sum` fit there, else a decimal at the larger decimal scale.
    fn sum_repr(self, o: Quantity, sum: Quantity) -> Repr {
        if let (Repr::Int64 { scale: a }, Repr::Int64 { scale: b }) = (self.repr, o.repr) {
            if o.coef == 0 {
                return self.repr;
            }
            if self.coef == 0 {
                return o.repr;
            }
            let s = a.min(b);
            if self.unscaled(s).is_some() && o.unscaled(s).is_some() && sum.unscaled(s).is_some() {
                return Repr::Int64 { scale: s };
            }
        }
        Repr::Dec {
            scale: self.repr.dec_scale().max(o.repr.dec_scale()),
        }
    }

    /// A whole number of units.
    #[inline]
    pub fn from_int(v: i64) -> Quantity {
        Quantity {
            coef: i128::from(v) * NANO,
            exp: 0,
            repr: Repr::Int64 { scale: 0 },
        }
    }

    /// Sum, `None` when the exact sum has more significant digits than the quantity holds.
    pub fn checked_add(self, o: Quantity) -> Option<Quantity> {
        let (coef, exp) = match self.coef.checked_add(o.coef) {
            Some(v) if self.exp == 0 && o.exp == 0 => (v, 0),
            _ => {
                // Trailing zeros out of both, then the two at the smaller exponent.
                let strip = |mut c: i128, mut e: u64| {
                    while c != 0 && c % 10 == 0 {
                        c /= 10;
                        e += 1;
                    }
                    (c, e)
                };
                let (a, ea) = strip(self.coef, u64::from(self.exp));
                let (b, eb) = strip(o.coef, u64::from(o.exp));
                let m = ea.min(eb);
                let align = |c: i128, e: u64| {
                    10i128
                        .checked_pow(u32::try_from(e - m).ok()?)?
                        .checked_mul(c)
                };
                normal(align(a, ea)?.checked_add(align(b, eb)?)?, m)?
            }
        };
        let mut sum = Quantity {
            coef,
            exp,
            repr: Repr::Int64 { scale: 0 },
        };
        sum.repr = self.sum_repr(o, sum);
        Some(sum)
    }

    /// Difference, `None` as for [`Quantity::checked_add`].
    pub fn checked_sub(self, o: Quantity) -> Option<Quantity> {
        self.checked_add(Quantity {
            coef: o.coef.checked_neg()?,
            ..o
        })
    }

    /// The value as an i64, as Kubernetes' `Quantity.AsInt64` gives it: only for a quantity held
    /// as an int64 with a scale of zero or more whose value fits (`1k`, `100Gi`, `1e3`); `None`
    /// for fractions and for quantities held as decimals (`1.0`, `1.5Gi`, `1Ei`,
    /// `9223372036854775807`), whatever their value.
    pub fn as_integer(self) -> Option<i64> {
        match self.repr {
            Repr::Int64 { scale } if scale >= 0 => self.unscaled(0),
            _ => None,
        }
    }

    /// The value as a float, as `Quantity.AsApproximateFloat64` computes it: the held integer
    /// (rounded to a float) times Go's `math.Pow10` of its scale, so `0.3` (3 × 10^-1) is
    /// `0.30000000000000004` and `300m` (300 × 10^-3) is `0.3`.
    pub fn as_f64(self) -> f64 {
        let exp10 = match self.repr {
            Repr::Int64 { scale } => i64::from(scale),
            Repr::Dec { scale } => -i64::from(scale),
        };
        let base = match shifted(self.coef, self.exp, exp10 + 9) {
            Some(v) => v as f64,
            // Past i128: the decimal reading rounds as Go's big.Float does.
            None => format!("{}e{}", self.coef, i64::from(self.exp) - exp10 - 9)
                .parse()
                .unwrap_or(f64::NAN),
        };
        if exp10 == 0 {
            base
        } else {
            base * go_pow10(exp10)
        }
    }

    /// -1, 0 or 1.
    #[inline]
    pub fn sign(self) -> i64 {
        self.coef.signum() as i64
    }

    /// The value rounded up to a whole number, as Kubernetes' `Quantity.Value()` gives it
    /// (`1.5` is 2, `-1.5` is -1); `None` beyond the int64 range.
    pub fn ceil_int(self) -> Option<i64> {
        if self.exp != 0 {
            return None;
        }
        let whole = self.coef.div_euclid(NANO) + i128::from(self.coef.rem_euclid(NANO) != 0);
        i64::try_from(whole).ok()
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exp != 0 {
            write!(f, "{}e{}", self.coef, i64::from(self.exp) - 9)
        } else if self.coef % NANO == 0 {
            write!(f, "{}", self.coef / NANO)
        } else {
            write!(f, "{}n", self.coef)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn parse_canonical_is_parse_and_canonical_in_one() {
        for s in [
            "0",
            "288Gi",
            "1024Mi",
            "1.5Gi",
            "2000m",
            "0.5",
            "+4",
            "1E3",
            "1500e0",
            "100Mi",
            "-1.5",
            "16Ei",
            "10E",
            "1000E",
            "0.0000000001",
            "12e-3",
            "",
            "1.2.3",
            "Gi",
            "1Q",
        ] {
            let one = Quantity::parse_canonical(s);
            let two = Quantity::parse(s).and_then(|q| Ok((q, Quantity::canonical(s)?)));
            assert_eq!(one, two, "{s:?}");
        }
    }

    #[test]
    fn ceil_int_rounds_up_as_value_does() {
        for (s, want) in [
            ("1.5", Some(2)),
            ("-1.5", Some(-1)),
            ("100m", Some(1)),
            ("2", Some(2)),
            ("0", Some(0)),
            ("1Gi", Some(1 << 30)),
            ("1Ei", Some(1 << 60)),
            // Binary forms past int64 are clamped when parsed, as ParseQuantity does;
            // decimal ones are not, and have no int64 value.
            ("16Ei", Some(i64::MAX)),
            ("10E", None),
        ] {
            assert_eq!(Quantity::parse(s).unwrap().ceil_int(), want, "{s}");
        }
    }

    /// 20,000 strings of up to `max_len` characters of `alphabet`, from a seeded xorshift so
    /// the cases are the same every run.
    pub(crate) fn short_strings(alphabet: &[char], seed: u64, max_len: u64) -> Vec<String> {
        let mut x = seed;
        (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut y = x;
                (0..x % (max_len + 1))
                    .map(|_| {
                        let c = alphabet[(y % alphabet.len() as u64) as usize];
                        y /= alphabet.len() as u64;
                        c
                    })
                    .collect()
            })
            .collect()
    }

    /// `Quantity::check` gives `Quantity::parse`'s verdict and error, in and out of its
    /// shortcut: every suffix after numbers of 0 to 12 digits (zeros and nines at the limits),
    /// and short strings over the characters of the syntax.
    #[test]
    fn quantity_check_agrees_with_parse() {
        let suffixes = [
            "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "n", "u",
            "K", "g", "e3", "E2", "i", "GiB", "Gi ",
        ];
        let mut cases: Vec<String> = Vec::new();
        for digits in 0..=12 {
            for d in ['0', '1', '9'] {
                let num: String = std::iter::repeat_n(d, digits).collect();
                for s in suffixes {
                    cases.push(format!("{num}{s}"));
                    cases.push(format!("-{num}{s}"));
                    cases.push(format!("{num}.5{s}"));
                }
            }
        }
        cases.extend(short_strings(
            &[
                '0', '1', '9', '.', '-', '+', 'e', 'E', 'i', 'k', 'K', 'M', 'G', 'T',
            ],
            0x2545_f491_4f6c_dd1d,
            7,
        ));
        for c in &cases {
            assert_eq!(Quantity::check(c), Quantity::parse(c).map(|_| ()), "{c:?}");
        }
    }

    #[test]
    fn quantities() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1Gi"), Quantity::from_int(1 << 30));
        assert_eq!(q("1.5Gi"), Quantity::from_int(3 << 29));
        assert_eq!(q("100m").checked_add(q("900m")), Some(q("1")));
        assert_eq!(q("2e3"), q("2k"));
        assert_eq!(q("-5"), Quantity::from_int(-5));
        assert!(q("1k") > q("999"));
        assert_eq!(q("1n").as_integer(), None);
        assert_eq!(q("8Gi").as_integer(), Some(8 << 30));
        // As Go's ParseQuantity: no digits before the suffix reads as zero.
        assert_eq!(q("Gi"), Quantity::from_int(0));
        for bad in ["", "aoeu", "1.2.3", "1Xi", "1e99999999999999999999"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    /// Past the int64 and the i128 of nano units, as ParseQuantity holds them in a decimal;
    /// each line agrees with the 1.34.9 and 1.36.3 schedulers' CEL (`kit.sh allocbench`).
    #[test]
    fn quantities_past_int64() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1e30"), q("1e30"));
        assert!(q("1e30") < q("2e30"));
        assert!(q("1e999") > q("1e998"));
        assert!(q("-1e999") < q("-1e998"));
        assert!(q("1e999") > q("99999999999999999999999E"));
        assert_eq!(q("1e30").checked_sub(q("1e30")), Some(q("0")));
        assert!(q("1e30").checked_add(q("1")).unwrap() > q("1e30"));
        assert_eq!(q("1e30").as_integer(), None);
        assert_eq!(q("1e18").as_integer(), Some(1_000_000_000_000_000_000));
        assert_eq!(q("1e19").as_integer(), None);
        assert_eq!(q("1e30").ceil_int(), None);
        assert_eq!(q("1e30").sign(), 1);
        assert_eq!(q("1e30").to_string(), "1e30");
        assert_eq!(q("1e30").as_f64(), 1e30);
        assert_eq!(q("3e400").as_f64(), f64::INFINITY);
        assert_eq!(
            q("100000000000000000000000000000000000000000000"),
            q("1e44")
        );
        // Below a nano unit rounds up; the exponent is cut to int32 as Go's int32() does.
        assert_eq!(q("1e-100"), q("1n"));
        assert_eq!(q("1e4294967297"), q("10"));
        assert_eq!(q("1e4294967296"), q("1"));
        // 47 significant digits: the API server stores it, we cannot hold it.
        assert_eq!(
            Quantity::parse("12345678901234567890123456789012345678901234567"),
            Err(QuantityError::TooLarge)
        );
    }

    /// `asApproximateFloat()`: the held integer times Go's `math.Pow10` of the scale; each
    /// value is the 1.34.9 and 1.36.3 schedulers' (`kit.sh allocbench`).
    #[test]
    fn as_f64_is_go_approximate_float() {
        let q = |s| Quantity::parse(s).unwrap();
        for (s, want) in [
            ("0.3", 0.30000000000000004),
            ("300m", 0.3),
            ("-0.3", -0.30000000000000004),
            ("2.3", 2.3000000000000003),
            ("1.1", 1.1),
            ("3e-5", 3.0000000000000004e-5),
            ("1e-5", 0.00001),
            ("7e-7", 0.0000007),
            ("0.00000000013", 1e-9),
            ("1e-100", 1e-9),
            ("1.5Gi", 1610612736.0),
            ("16Ei", 9223372036854775807.0),
            ("123456789.123456789", 123456789.12345679),
            ("0.12345678901234567e10", 1234567890.1234567),
            ("3e300", 3e300),
        ] {
            assert_eq!(q(s).as_f64(), want, "{s}");
        }
        let sum = |a, b| q(a).checked_add(q(b)).unwrap().as_f64();
        assert_eq!(sum("0.1", "0.2"), 0.30000000000000004);
        assert_eq!(sum("1.3", "2"), 3.3000000000000003);
        assert_eq!(sum("0.5", "0.25"), 0.75);
        // A zero decimal of scale 10 makes the sum a decimal of scale 10: 3e9 × 10^-10.
        assert_eq!(sum("0.0000000000", "0.3"), 0.3);
        assert_eq!(
            q("1.5Gi").checked_sub(q("0.1")).unwrap().as_f64(),
            1610612735.9
        );
        assert_eq!(
            q("9223372036854775807")
                .checked_add(Quantity::from_int(1))
                .unwrap()
                .as_f64(),
            9223372036854775808.0
        );
    }

    #[test]
    fn canonical_is_what_the_api_server_stores() {
        // Each pair was read back from a v1.34.9 kube-apiserver.
        for (written, stored) in [
            ("1024Mi", "1Gi"),
            ("2000m", "2"),
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("1e3", "1e3"),
            ("1Gi", "1Gi"),
            ("100Mi", "100Mi"),
            ("512", "512"),
            ("0.5Ki", "512"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1.5k", "1500"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-2000m", "-2"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("1500e0", "1500e0"),
            ("1E3", "1E3"),
            ("1e21", "1e21"),
            ("0.0000000001", "1n"),
            ("3.5Ki", "3584"),
            ("5e-1", "500e-3"),
            ("80Gi", "80Gi"),
            ("1Ki", "1Ki"),
            ("1023", "1023"),
            ("+4", "+4"),
            // Past the int64 and the SI suffixes (a live v1.34.9 API server's answers).
            ("1e999", "1e999"),
            ("99999999999999999999999E", "99999999999999999999999E"),
            ("1e30", "1e30"),
            ("100000000000000000000000000000000000000000000", "100"),
            ("1000E", "1"),
            ("1e-100", "1e-9"),
            ("1e4294967297", "10"),
            ("0.123456789012345678e10", "1234567890123456780e-9"),
        ] {
            assert_eq!(
                Quantity::canonical(written).as_deref(),
                Ok(stored),
                "{written}"
            );
        }
        // apimachinery's rules where they differ from re-rendering the value: leading zeros of
        // a canonical-looking number are kept, binary values are capped at the int64 maximum,
        // and a sign or point without digits is zero.
        for (written, stored) in [
            ("007", "007"),
            ("16Ei", "9223372036854775807"),
            ("2048Ki", "2Mi"),
            ("-2048Ki", "-2Mi"),
            ("9Ki", "9Ki"),
            ("16Ki", "16Ki"),
            ("17Ki", "17Ki"),
            (".", "0"),
            ("-", "0"),
        ] {
            assert_eq!(
                Quantity::canonical(written).as_deref(),
                Ok(stored),
                "{written}"
            );
        }
        assert!(Quantity::same_canonical("1024Mi", "1Gi"));
        assert!(Quantity::same_canonical("abc", "abc"));
        assert!(!Quantity::same_canonical("1Gi", "1G"));
    }

    #[test]
    fn canonical_refuses_what_is_not_a_quantity() {
        for bad in [
            "",
            "abc",
            "1.2.3",
            "1Qi",
            "1e",
            "1e99999999999999999999",
            "12 Gi",
        ] {
            assert!(Quantity::canonical(bad).is_err(), "{bad}");
        }
    }
}
