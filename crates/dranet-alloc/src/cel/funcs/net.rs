//! The Kubernetes IP and CIDR libraries: `ip()`, `cidr()`, their predicates and containment.

use std::net::IpAddr;

use super::{nso, string_arg};
use crate::cel::activation::Activation;
use crate::cel::value::{Error, R, Value};

/// `netip.ParseAddr` plus the library's refusals (zones, IPv4-mapped IPv6).
pub(crate) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    if s.contains('%') {
        return Err(format!("IP address {s:?} with zone value is not allowed"));
    }
    let ip: IpAddr = s.parse().map_err(|_| {
        format!("IP Address {s:?} parse error during conversion from string: ParseAddr({s:?}): unable to parse IP")
    })?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok(ip)
}

pub(crate) fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let err = || {
        format!(
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix({s:?}): invalid prefix"
        )
    };
    let (addr, bits) = s.split_once('/').ok_or_else(err)?;
    if addr.contains('%') {
        return Err(err());
    }
    let ip: IpAddr = addr.parse().map_err(|_| err())?;
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return Err(err());
    }
    let b: u8 = bits.parse().map_err(|_| err())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if b > max {
        return Err(err());
    }
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok((ip, b))
}

fn ip_arg(v: &Value<'_>) -> R<IpAddr> {
    match v {
        Value::Ip(ip) => Ok(*ip),
        _ => nso(),
    }
}

pub(crate) fn ip<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    parse_ip(&string_arg(&a[0])?)
        .map(Value::Ip)
        .map_err(Error::msg)
}
pub(crate) fn is_ip<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(parse_ip(&string_arg(&a[0])?).is_ok()))
}
pub(crate) fn ip_is_canonical<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let s = string_arg(&a[0])?;
    let ip = parse_ip(&s).map_err(Error::msg)?;
    Ok(Value::Bool(ip.to_string() == s))
}
pub(crate) fn ip_family<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(if ip_arg(&a[0])?.is_ipv4() { 4 } else { 6 }))
}

fn ip_prop<'a>(a: &[Value<'a>], f: fn(IpAddr) -> bool) -> R<Value<'a>> {
    Ok(Value::Bool(f(ip_arg(&a[0])?)))
}
pub(crate) fn ip_is_unspecified<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| ip.is_unspecified())
}
pub(crate) fn ip_is_loopback<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| ip.is_loopback())
}
pub(crate) fn ip_is_link_local_multicast<'a>(
    _: &Activation<'a>,
    a: &mut [Value<'a>],
) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v.segments()[0] & 0xff0f == 0xff02,
    })
}
pub(crate) fn ip_is_link_local_unicast<'a>(
    _: &Activation<'a>,
    a: &mut [Value<'a>],
) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => v.octets()[..2] == [169, 254],
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
    })
}
pub(crate) fn ip_is_global_unicast<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    ip_prop(a, |ip| match ip {
        IpAddr::V4(v) => {
            !v.is_unspecified()
                && !v.is_broadcast()
                && !v.is_loopback()
                && !v.is_multicast()
                && v.octets()[..2] != [169, 254]
        }
        IpAddr::V6(v) => {
            !v.is_unspecified()
                && !v.is_loopback()
                && !v.is_multicast()
                && v.segments()[0] & 0xffc0 != 0xfe80
        }
    })
}

fn cidr_arg(v: &Value<'_>) -> R<(IpAddr, u8)> {
    match v {
        Value::Cidr(ip, p) => Ok((*ip, *p)),
        _ => nso(),
    }
}

fn masked(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v) => {
            let n = u32::from(v);
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            IpAddr::V4((n & m).into())
        }
        IpAddr::V6(v) => {
            let n = u128::from(v);
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            IpAddr::V6((n & m).into())
        }
    }
}

pub(crate) fn cidr<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    parse_cidr(&string_arg(&a[0])?)
        .map(|(ip, b)| Value::Cidr(ip, b))
        .map_err(Error::msg)
}
pub(crate) fn is_cidr<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Bool(parse_cidr(&string_arg(&a[0])?).is_ok()))
}

pub(crate) fn cidr_contains_ip<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (net, bits) = cidr_arg(&a[0])?;
    let ip = match &a[1] {
        Value::Str(s) => parse_ip(s).map_err(Error::msg)?,
        v => ip_arg(v)?,
    };
    Ok(Value::Bool(
        net.is_ipv4() == ip.is_ipv4() && masked(net, bits) == masked(ip, bits),
    ))
}

pub(crate) fn cidr_contains_cidr<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (net, bits) = cidr_arg(&a[0])?;
    let (other, obits) = match &a[1] {
        Value::Str(s) => parse_cidr(s).map_err(|e| {
            Error::msg(format!(
                "network address parse error during conversion from string: {e}"
            ))
        })?,
        v => cidr_arg(v)?,
    };
    Ok(Value::Bool(
        net.is_ipv4() == other.is_ipv4()
            && masked(net, bits) == masked(other, bits)
            && bits <= obits,
    ))
}

pub(crate) fn cidr_ip<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Ip(cidr_arg(&a[0])?.0))
}
pub(crate) fn cidr_masked<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    let (ip, b) = cidr_arg(&a[0])?;
    Ok(Value::Cidr(masked(ip, b), b))
}
pub(crate) fn cidr_prefix_length<'a>(_: &Activation<'a>, a: &mut [Value<'a>]) -> R<Value<'a>> {
    Ok(Value::Int(i64::from(cidr_arg(&a[0])?.1)))
}
