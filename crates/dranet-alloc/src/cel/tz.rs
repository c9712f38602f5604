//! Named time zones as Go's `time.LoadLocation` reads them: the system's TZif files
//! (RFC 8536, versions 1 to 4), with the POSIX TZ rule of the footer for instants after the
//! last transition (Debian's files end their tables early and rely on it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::civil::{civil, days_from_civil};

/// Where Go looks for zone files on Linux, after `$ZONEINFO`.
const ZONE_DIRS: [&str; 4] = [
    "/usr/share/zoneinfo/",
    "/usr/share/lib/zoneinfo/",
    "/usr/lib/locale/TZ/",
    "/etc/zoneinfo/",
];

/// Larger files are not zone files (the largest in tzdata has a few kilobytes).
const MAX_FILE: u64 = 1 << 20;

/// A zone: its transitions, the offsets they switch to, and the rule after the last one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Zone {
    /// Transition instants (Unix seconds), ascending, with the index of the offset from then on.
    transitions: Vec<(i64, usize)>,
    /// UTC offsets (seconds east) of the local time types, with their DST flag.
    types: Vec<(i32, bool)>,
    /// The footer's rule, for instants after the last transition.
    rule: Option<Rule>,
}

/// A POSIX TZ rule: a standard offset and, optionally, a daylight one with its start and end.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    std: i64,
    dst: Option<(i64, When, When)>,
}

/// A rule's change date, with the local time of day (seconds) the change happens.
#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    /// `Jn`: day 1-365, February 29 never counted.
    Julian(i64, i64),
    /// `n`: zero-based day of the year, 0-365.
    Day(i64, i64),
    /// `Mm.w.d`: weekday `d` (0 = Sunday) of week `w` (5 = the last) of month `m`.
    Month(u32, i64, i64, i64),
}

/// Why a zone cannot be had; the texts are Go's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ZoneError {
    /// A name that could leave the zone directory.
    InvalidName,
    /// No such zone.
    Unknown(String),
    /// The zone's file could not be read (Go's text of the system error).
    Read(&'static str),
    /// The zone's file is not TZif.
    Malformed,
}

impl std::fmt::Display for ZoneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZoneError::InvalidName => f.write_str("time: invalid location name"),
            ZoneError::Unknown(n) => write!(f, "unknown time zone {n}"),
            ZoneError::Read(e) => f.write_str(e),
            ZoneError::Malformed => f.write_str("malformed time zone information"),
        }
    }
}

/// Zones read so far, by name, failures included: a program reads each zone file once, however
/// many devices it evaluates (programs are shared between threads, hence the lock).
#[derive(Debug, Default)]
pub(crate) struct ZoneCache {
    zones: Mutex<HashMap<String, Result<Arc<Zone>, ZoneError>>>,
}

impl ZoneCache {
    /// The zone `name`, read from the system's zone files on first use.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<Zone>, ZoneError> {
        // A panic elsewhere while the lock was held leaves a map that is still whole.
        let mut zones = self.zones.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(z) = zones.get(name) {
            return z.clone();
        }
        let z = load(name).map(Arc::new);
        zones.insert(name.to_string(), z.clone());
        z
    }
}

/// Go's check, before any file is opened: no `..` anywhere (not only as a path element) and
/// no absolute path; a NUL would cut the name short in the kernel.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.starts_with('\\')
        && !name.contains("..")
        && !name.contains('\0')
}

/// Reads the zone `name` as Go's `time.LoadLocation` finds it: `$ZONEINFO`, then the system's
/// directories.
pub(crate) fn load(name: &str) -> Result<Zone, ZoneError> {
    if !valid_name(name) {
        return Err(ZoneError::InvalidName);
    }
    // `$ZONEINFO` first; Go ignores any failure there.
    if let Some(dir) = std::env::var_os("ZONEINFO").filter(|z| !z.is_empty())
        && let Ok(zone) = read(&PathBuf::from(dir).join(name))
    {
        return Ok(zone);
    }
    // Then every system directory in turn; a file that is there but cannot be read or parsed
    // does not stop the search, but its error is the answer if no directory has the zone.
    let mut first = None;
    for dir in ZONE_DIRS {
        match read(&PathBuf::from(dir).join(name)) {
            Ok(zone) => return Ok(zone),
            Err(None) => {}
            Err(Some(e)) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or_else(|| ZoneError::Unknown(name.to_string())))
}

/// One zone file; `Err(None)` when it does not exist.
fn read(path: &std::path::Path) -> Result<Zone, Option<ZoneError>> {
    use std::io::{ErrorKind, Read};
    let io = |e: std::io::Error| match e.kind() {
        ErrorKind::NotFound => None,
        // Go's texts for the errors of open and read.
        ErrorKind::IsADirectory => Some(ZoneError::Read("is a directory")),
        ErrorKind::NotADirectory => Some(ZoneError::Read("not a directory")),
        ErrorKind::PermissionDenied => Some(ZoneError::Read("permission denied")),
        _ => Some(ZoneError::Read("input/output error")),
    };
    let mut data = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_FILE + 1)
        .read_to_end(&mut data)
        .map_err(io)?;
    if data.len() as u64 > MAX_FILE {
        return Err(Some(ZoneError::Malformed));
    }
    parse(&data).ok_or(Some(ZoneError::Malformed))
}

/// A reader over the file's bytes; `None` past the end.
struct Bytes<'d>(&'d [u8]);

impl<'d> Bytes<'d> {
    fn take(&mut self, n: usize) -> Option<&'d [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn be32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn be64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
}

/// The six counts of a header: isut, isstd, leap, time, type, char.
fn header(b: &mut Bytes<'_>) -> Option<(u8, [usize; 6])> {
    if b.take(4)? != b"TZif" {
        return None;
    }
    let version = b.byte()?;
    b.take(15)?;
    let mut n = [0usize; 6];
    for c in &mut n {
        *c = usize::try_from(b.be32()?).ok()?;
    }
    Some((version, n))
}

/// Parses a TZif file; `None` when it is not one.
pub(crate) fn parse(data: &[u8]) -> Option<Zone> {
    let mut b = Bytes(data);
    let (version, n) = header(&mut b)?;
    if !matches!(version, 0 | b'2' | b'3' | b'4') {
        return None;
    }
    let [isut, isstd, leap, time, typ, chars] = n;
    let v1_len = time * 5 + typ * 6 + chars + leap * 8 + isstd + isut;
    let (wide, n) = if version == 0 {
        (false, n)
    } else {
        // Version 2 and later repeat the data with 64-bit times; only that copy is read.
        b.take(v1_len)?;
        (true, header(&mut b)?.1)
    };
    let [isut, isstd, leap, time, typ, chars] = n;
    if typ == 0 {
        return None;
    }
    let mut times = Vec::with_capacity(time);
    for _ in 0..time {
        times.push(if wide {
            b.be64()?
        } else {
            i64::from(b.be32()? as i32)
        });
    }
    let mut transitions = Vec::with_capacity(time);
    for t in times {
        let i = usize::from(b.byte()?);
        if i >= typ {
            return None;
        }
        transitions.push((t, i));
    }
    let mut types = Vec::with_capacity(typ);
    for _ in 0..typ {
        let off = b.be32()? as i32;
        let dst = b.byte()? != 0;
        b.byte()?; // the abbreviation's index: the accessors never show it
        types.push((off, dst));
    }
    b.take(chars + leap * if wide { 12 } else { 8 } + isstd + isut)?;
    let rule = if wide {
        // The footer: "\n" TZ "\n"; an empty TZ means no rule.
        // Go ignores a footer it cannot read and keeps the table.
        b.0.strip_prefix(b"\n")
            .and_then(|r| r.split(|&c| c == b'\n').next())
            .and_then(|tz| std::str::from_utf8(tz).ok())
            .filter(|tz| !tz.is_empty())
            .and_then(parse_rule)
    } else {
        None
    };
    Some(Zone {
        transitions,
        types,
        rule,
    })
}

impl Zone {
    /// The UTC offset (seconds east) at the Unix instant `t`.
    pub(crate) fn offset_at(&self, t: i64) -> i64 {
        let last = self.transitions.last();
        if let (Some(rule), true) = (&self.rule, last.is_none_or(|&(lt, _)| t >= lt)) {
            return rule.offset_at(t);
        }
        match self.transitions.partition_point(|&(tt, _)| tt <= t) {
            0 => i64::from(self.types[self.first_type()].0),
            i => i64::from(self.types[self.transitions[i - 1].1].0),
        }
    }

    /// The type before the first transition, as Go picks it: type 0 when no transition uses
    /// it; else, when the first transition is to daylight time, the last standard type
    /// before it; else the first standard type.
    fn first_type(&self) -> usize {
        if !self.transitions.iter().any(|&(_, i)| i == 0) {
            return 0;
        }
        if let Some(&(_, first)) = self.transitions.first()
            && self.types[first].1
            && let Some(i) = (0..first).rev().find(|&i| !self.types[i].1)
        {
            return i;
        }
        self.types.iter().position(|t| !t.1).unwrap_or(0)
    }
}

impl Rule {
    fn offset_at(&self, t: i64) -> i64 {
        let Some((dst, start, end)) = self.dst else {
            return self.std;
        };
        // Go decides in the UTC year of the instant, with the change times made UTC.
        let days = t.div_euclid(86_400);
        let year = civil(days).0;
        let year_start = days_from_civil(year, 1, 1) * 86_400;
        let ysec = t - year_start;
        let mut s = start.seconds(year) - self.std;
        let mut e = end.seconds(year) - dst;
        let (mut in_between, mut outside) = (dst, self.std);
        if e < s {
            // The southern hemisphere: daylight time spans the new year.
            std::mem::swap(&mut s, &mut e);
            std::mem::swap(&mut in_between, &mut outside);
        }
        if ysec < s || ysec >= e {
            outside
        } else {
            in_between
        }
    }
}

fn leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

impl When {
    /// Local seconds since the start of `year` at which the change happens.
    fn seconds(self, year: i64) -> i64 {
        let (day, time) = match self {
            When::Julian(n, time) => (if leap(year) && n >= 60 { n } else { n - 1 }, time),
            When::Day(n, time) => (n, time),
            When::Month(m, w, d, time) => {
                let first = days_from_civil(year, m, 1);
                let weekday = (first + 4).rem_euclid(7);
                let mut day = (d - weekday).rem_euclid(7) + 7 * (w - 1);
                let next = if m == 12 {
                    days_from_civil(year + 1, 1, 1)
                } else {
                    days_from_civil(year, m + 1, 1)
                };
                while first + day >= next {
                    day -= 7;
                }
                (first + day - days_from_civil(year, 1, 1), time)
            }
        };
        day * 86_400 + time
    }
}

/// A cursor over a POSIX TZ string.
struct Tz<'s>(&'s str);

impl Tz<'_> {
    fn eat(&mut self, c: char) -> bool {
        match self.0.strip_prefix(c) {
            Some(r) => {
                self.0 = r;
                true
            }
            None => false,
        }
    }
    /// A zone abbreviation: `<...>` or three or more letters.
    fn name(&mut self) -> Option<()> {
        if self.eat('<') {
            let end = self.0.find('>')?;
            self.0 = &self.0[end + 1..];
            return Some(());
        }
        let n = self
            .0
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(self.0.len());
        if n < 3 {
            return None;
        }
        self.0 = &self.0[n..];
        Some(())
    }
    fn num(&mut self, max: i64) -> Option<i64> {
        let n = self
            .0
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.0.len());
        if n == 0 {
            return None;
        }
        let v: i64 = self.0[..n].parse().ok()?;
        self.0 = &self.0[n..];
        (v <= max).then_some(v)
    }
    /// `[+-]hh[:mm[:ss]]`, hours up to 168 (the time of a rule may pass a day).
    fn hms(&mut self) -> Option<i64> {
        let neg = self.eat('-');
        if !neg {
            self.eat('+');
        }
        let mut s = self.num(168)? * 3600;
        if self.eat(':') {
            s += self.num(59)? * 60;
            if self.eat(':') {
                s += self.num(59)?;
            }
        }
        Some(if neg { -s } else { s })
    }
    fn when(&mut self) -> Option<When> {
        let w = if self.eat('J') {
            let n = self.num(365)?;
            (n >= 1).then_some(When::Julian(n, 0))?
        } else if self.eat('M') {
            let m = self.num(12)?;
            self.eat('.').then_some(())?;
            let w = self.num(5)?;
            self.eat('.').then_some(())?;
            let d = self.num(6)?;
            if m == 0 || w == 0 {
                return None;
            }
            When::Month(u32::try_from(m).ok()?, w, d, 0)
        } else {
            When::Day(self.num(365)?, 0)
        };
        let time = if self.eat('/') { self.hms()? } else { 7200 };
        Some(match w {
            When::Julian(n, _) => When::Julian(n, time),
            When::Day(n, _) => When::Day(n, time),
            When::Month(m, w, d, _) => When::Month(m, w, d, time),
        })
    }
}

/// Parses a POSIX TZ rule as a TZif footer holds it; `None` when it is malformed.
fn parse_rule(s: &str) -> Option<Rule> {
    let mut p = Tz(s);
    p.name()?;
    // POSIX offsets are west of UTC.
    let std = -p.hms()?;
    if p.0.is_empty() {
        return Some(Rule { std, dst: None });
    }
    p.name()?;
    let dst = if p.0.is_empty() || p.0.starts_with(',') {
        std + 3600
    } else {
        -p.hms()?
    };
    let (start, end) = if p.0.is_empty() {
        // Go's default: the US rules.
        (When::Month(3, 2, 0, 7200), When::Month(11, 1, 0, 7200))
    } else {
        p.eat(',').then_some(())?;
        let start = p.when()?;
        p.eat(',').then_some(())?;
        (start, p.when()?)
    };
    if !p.0.is_empty() {
        return None;
    }
    Some(Rule {
        std,
        dst: Some((dst, start, end)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a UTC civil time.
    fn at(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64) -> i64 {
        days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s
    }

    /// A TZif file made by hand: `version` 0 writes only the 32-bit block.
    fn tzif(version: u8, tx: &[(i64, u8)], types: &[(i32, bool)], footer: &str) -> Vec<u8> {
        let chars = b"LMT\0";
        let block = |wide: bool| {
            let mut v = Vec::new();
            v.extend_from_slice(b"TZif");
            v.push(version);
            v.extend_from_slice(&[0; 15]);
            for n in [0, 0, 0, tx.len(), types.len(), chars.len()] {
                v.extend_from_slice(&(n as u32).to_be_bytes());
            }
            for &(t, _) in tx {
                if wide {
                    v.extend_from_slice(&t.to_be_bytes());
                } else {
                    v.extend_from_slice(&(t as i32).to_be_bytes());
                }
            }
            v.extend(tx.iter().map(|&(_, i)| i));
            for &(off, dst) in types {
                v.extend_from_slice(&off.to_be_bytes());
                v.push(u8::from(dst));
                v.push(0);
            }
            v.extend_from_slice(chars);
            v
        };
        let mut v = block(false);
        if version != 0 {
            v.extend(block(true));
            v.push(b'\n');
            v.extend_from_slice(footer.as_bytes());
            v.push(b'\n');
        }
        v
    }

    #[test]
    fn hand_made_v1_uses_its_table() {
        let z = parse(&tzif(
            0,
            &[(1_000_000, 1)],
            &[(3600, false), (7200, true)],
            "",
        ))
        .unwrap();
        assert_eq!(z.offset_at(999_999), 3600);
        assert_eq!(z.offset_at(1_000_000), 7200);
        assert_eq!(z.offset_at(i64::from(i32::MAX)), 7200);
    }

    #[test]
    fn hand_made_v2_reads_the_wide_block_and_the_footer() {
        // A transition past 2038 only the 64-bit block can hold; then the rule.
        let t = at(2040, 1, 1, 0, 0, 0);
        let z = parse(&tzif(
            b'2',
            &[(t, 1)],
            &[(0, false), (10_800, false)],
            "XST-3XDT,M3.5.0,M10.5.0/3",
        ))
        .unwrap();
        assert_eq!(z.offset_at(t - 1), 0);
        assert_eq!(z.offset_at(t), 10_800);
        // Last Sunday of March 2041 is the 31st: 02:00 XST = 23:00Z the day before.
        assert_eq!(z.offset_at(at(2041, 3, 30, 22, 59, 59)), 10_800);
        assert_eq!(z.offset_at(at(2041, 3, 30, 23, 0, 0)), 14_400);
        // Last Sunday of October 2041 is the 27th: 03:00 XDT = 23:00Z the day before.
        assert_eq!(z.offset_at(at(2041, 10, 26, 22, 59, 59)), 14_400);
        assert_eq!(z.offset_at(at(2041, 10, 26, 23, 0, 0)), 10_800);
    }

    #[test]
    fn hand_made_before_the_first_transition_is_standard_time() {
        // Type 0 is daylight time and used; the first standard type applies before.
        let z = parse(&tzif(
            0,
            &[(100, 0), (200, 1)],
            &[(7200, true), (3600, false)],
            "",
        ))
        .unwrap();
        assert_eq!(z.offset_at(50), 3600);
        assert_eq!(z.offset_at(150), 7200);
    }

    #[test]
    fn broken_files_are_refused() {
        let good = tzif(b'2', &[(10, 1)], &[(0, false), (60, false)], "UTC0");
        assert!(parse(&good).is_some());
        for n in [0, 4, 20, 44, good.len() / 2] {
            assert!(parse(&good[..n]).is_none(), "cut at {n}");
        }
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        assert!(parse(&bad_magic).is_none());
        let mut bad_version = good.clone();
        bad_version[4] = b'9';
        assert!(parse(&bad_version).is_none());
        // A transition to a type that does not exist.
        assert!(parse(&tzif(0, &[(10, 5)], &[(0, false)], "")).is_none());
        assert!(parse(&tzif(0, &[], &[], "")).is_none());
        // A footer that cannot be read leaves the table in charge.
        let z = parse(&tzif(b'2', &[(10, 1)], &[(0, false), (60, false)], "??")).unwrap();
        assert_eq!(z.offset_at(1 << 40), 60);
    }

    #[test]
    fn posix_rules() {
        assert_eq!(parse_rule("IST-5:30").unwrap().offset_at(0), 19_800);
        assert_eq!(parse_rule("<-03>3").unwrap().offset_at(0), -10_800);
        // Go's default rule (the US one) when only names are given.
        let us = parse_rule("EST5EDT").unwrap();
        assert_eq!(us.offset_at(at(2030, 7, 1, 0, 0, 0)), -4 * 3600);
        assert_eq!(us.offset_at(at(2030, 1, 1, 0, 0, 0)), -5 * 3600);
        // Julian days without and with February 29.
        let j = parse_rule("AAA0BBB,J60/0,J61/0").unwrap();
        assert_eq!(j.offset_at(at(2024, 3, 1, 0, 0, 0)), 3600);
        assert_eq!(j.offset_at(at(2023, 3, 1, 0, 0, 0)), 3600);
        assert_eq!(j.offset_at(at(2023, 3, 2, 0, 0, 0)), 0);
        let d = parse_rule("AAA0BBB,59/0,60/0").unwrap();
        assert_eq!(d.offset_at(at(2024, 2, 29, 0, 0, 0)), 3600);
        assert_eq!(d.offset_at(at(2024, 3, 1, 0, 0, 0)), 0);
        for bad in [
            "",
            "A0",
            "AAA",
            "AAA0BBB,M13.1.0,M1.1.0",
            "AAA0BBB,M3.6.0,M1.1.0",
            "AAA0BBB,J0,J1",
            "AAA0BBB,M3.1.0",
            "AAA169",
            "AAA0BBB,M3.1.0,M4.1.0x",
        ] {
            assert!(parse_rule(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn names_that_leave_the_directory_are_refused_before_any_read() {
        for bad in [
            "/etc/passwd",
            "../etc/passwd",
            "Europe/../../etc/passwd",
            "\\x",
            "..",
            "a..b",
            "a\0b",
        ] {
            assert_eq!(load(bad), Err(ZoneError::InvalidName), "{bad:?}");
        }
        assert_eq!(
            load("Nowhere/Atlantis"),
            Err(ZoneError::Unknown("Nowhere/Atlantis".to_string()))
        );
        // A directory is no zone; Go answers with the read error.
        if std::path::Path::new("/usr/share/zoneinfo/Europe").is_dir() {
            assert_eq!(load("Europe"), Err(ZoneError::Read("is a directory")));
        }
        assert_eq!(
            ZoneError::InvalidName.to_string(),
            "time: invalid location name"
        );
    }

    #[test]
    fn a_file_that_is_not_tzif_is_malformed() {
        let dir = std::env::temp_dir().join(format!("dranet-tz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("Bad");
        std::fs::write(&bad, b"not a zone").unwrap();
        let good = dir.join("Good");
        std::fs::write(&good, tzif(0, &[], &[(-3600, false)], "")).unwrap();
        let (b, g) = (read(&bad), read(&good));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(b, Err(Some(ZoneError::Malformed)));
        assert_eq!(g.unwrap().offset_at(0), -3600);
        assert_eq!(read(&dir.join("Gone")), Err(None));
        assert_eq!(
            ZoneError::Malformed.to_string(),
            "malformed time zone information"
        );
    }

    /// The machine's own zone files (Debian's tzdata), read as the scheduler reads them.
    fn system(name: &str) -> Option<Zone> {
        let z = load(name);
        if !std::path::Path::new("/usr/share/zoneinfo")
            .join(name)
            .is_file()
        {
            eprintln!("no /usr/share/zoneinfo/{name} on this machine");
            return None;
        }
        Some(z.unwrap())
    }

    #[test]
    fn system_zones_across_dst_and_after_the_last_transition() {
        let cases: &[(&str, i64, i64)] = &[
            // Sydney leaves daylight time 2024-04-07 03:00 AEDT = 16:00Z the day before.
            ("Australia/Sydney", at(2024, 4, 6, 15, 59, 59), 11 * 3600),
            ("Australia/Sydney", at(2024, 4, 6, 16, 0, 0), 10 * 3600),
            ("Australia/Sydney", at(2100, 1, 15, 0, 0, 0), 11 * 3600),
            ("Australia/Sydney", at(2100, 7, 15, 0, 0, 0), 10 * 3600),
            // New York enters daylight time 2024-03-10 02:00 EST = 07:00Z.
            ("America/New_York", at(2024, 3, 10, 6, 59, 59), -5 * 3600),
            ("America/New_York", at(2024, 3, 10, 7, 0, 0), -4 * 3600),
            ("America/New_York", at(2099, 11, 1, 5, 59, 59), -4 * 3600),
            ("America/New_York", at(2099, 11, 1, 6, 0, 0), -5 * 3600),
            ("Europe/Berlin", at(2200, 7, 1, 0, 0, 0), 2 * 3600),
            ("Europe/Berlin", at(2200, 12, 1, 0, 0, 0), 3600),
            ("Asia/Kolkata", at(2030, 6, 1, 0, 0, 0), 19_800),
            // Santiago: daylight time from the first Sunday of September (Saturday 24:00).
            ("America/Santiago", at(2100, 1, 15, 0, 0, 0), -3 * 3600),
            ("America/Santiago", at(2100, 7, 15, 0, 0, 0), -4 * 3600),
            ("Europe/London", at(1970, 1, 1, 0, 0, 0), 3600),
        ];
        for &(name, t, want) in cases {
            let Some(z) = system(name) else { continue };
            assert_eq!(z.offset_at(t), want, "{name} at {t}");
        }
    }

    #[test]
    fn the_cache_reads_a_zone_once() {
        let cache = ZoneCache::default();
        let a = cache.get("Europe/Berlin");
        let b = cache.get("Europe/Berlin");
        if let (Ok(a), Ok(b)) = (a, b) {
            assert!(Arc::ptr_eq(&a, &b));
        }
        assert_eq!(cache.get("../x").unwrap_err(), ZoneError::InvalidName);
    }
}
