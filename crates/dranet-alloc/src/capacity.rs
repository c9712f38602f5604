//! Consumable capacity (`DRAConsumableCapacity`, Kubernetes 1.36): what a request consumes of a
//! device's capacities under their `requestPolicy`, and whether it still fits, as the
//! scheduler's `CmpRequestOverCapacity` decides it.
//!
//! Every capacity of the device is consumed by every allocation of it: the amount the request
//! asks for, rounded up to the policy (`validRange` from `min` in `step`s, or the next of
//! `validValues`), or, when the request does not name the capacity, the policy's `default`, else
//! the whole capacity. A request naming a capacity the device does not have never fits it. The
//! amounts of a device shared by several claims add up and must stay within each capacity.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, DeviceCapacity};

use crate::cel::Quantity;

/// A quantity and the text the scheduler writes for it (apimachinery's `String()`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Amount {
    pub value: Quantity,
    pub text: String,
}

impl Amount {
    /// A quantity as written in an object: its canonical form is what the scheduler writes.
    pub(crate) fn parse(s: &str) -> Result<Amount, String> {
        // One parse for both: on the cold path this is most of building an allocator.
        let (value, text) =
            Quantity::parse_canonical(s).map_err(|e| format!("invalid quantity {s:?}: {e}"))?;
        Ok(Amount {
            value,
            text: text.into_owned(),
        })
    }

    /// apimachinery's `NewQuantity(v, BinarySI)`: a whole number written with a binary suffix
    /// when it is a multiple of 1024 (and at least 1024 in magnitude), in decimal SI when it is
    /// below 1024, and as plain digits otherwise.
    fn binary_si(v: i64) -> Amount {
        let text = if v.unsigned_abs() < 1024 {
            Quantity::canonical(&v.to_string())
                .map(|c| c.into_owned())
                .unwrap_or_else(|_| v.to_string())
        } else {
            let (mut units, mut exp) = (v.unsigned_abs(), 0);
            while units.is_multiple_of(1024) && exp < 6 {
                units /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            let sign = if v < 0 { "-" } else { "" };
            format!("{sign}{units}{suffix}")
        };
        Amount {
            value: Quantity::from_int(v),
            text,
        }
    }
}

/// A capacity's `requestPolicy`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Policy {
    pub default: Option<Amount>,
    pub valid_values: Vec<Amount>,
    pub valid_range: Option<Range>,
}

/// `validRange`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Range {
    pub min: Amount,
    pub max: Option<Amount>,
    pub step: Option<Amount>,
}

/// One capacity of a device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Capacity {
    pub name: String,
    pub value: Amount,
    pub policy: Option<Policy>,
}

/// A device's capacities, by name as published.
pub(crate) type Capacities = Vec<Capacity>;

/// What the device's capacities are, read from its slice. Errors name the capacity.
pub(crate) fn capacities(
    map: Option<&BTreeMap<String, DeviceCapacity>>,
) -> Result<Capacities, String> {
    let mut out = Vec::new();
    for (name, c) in map.into_iter().flatten() {
        let at = |e: String| format!("capacity {name}: {e}");
        let policy = c
            .request_policy
            .as_ref()
            .map(policy)
            .transpose()
            .map_err(at)?;
        out.push(Capacity {
            name: name.clone(),
            value: Amount::parse(&c.value.0).map_err(at)?,
            policy,
        });
    }
    Ok(out)
}

fn policy(p: &CapacityRequestPolicy) -> Result<Policy, String> {
    let amount = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| Amount::parse(&q.0);
    Ok(Policy {
        default: p.default.as_ref().map(amount).transpose()?,
        valid_values: p
            .valid_values
            .iter()
            .flatten()
            .map(amount)
            .collect::<Result<_, _>>()?,
        valid_range: p
            .valid_range
            .as_ref()
            .map(|r| -> Result<Range, String> {
                Ok(Range {
                    min: amount(&r.min)?,
                    max: r.max.as_ref().map(amount).transpose()?,
                    step: r.step.as_ref().map(amount).transpose()?,
                })
            })
            .transpose()?,
    })
}

/// A request's `capacity.requests`, by capacity name as written.
pub(crate) type Requests = BTreeMap<String, Amount>;

/// What a request consumes of one capacity: the rounded request, or without one the policy's
/// default, else the whole capacity (`calculateConsumedCapacity`).
fn consumed(requested: Option<&Amount>, cap: &Capacity) -> Amount {
    let Some(req) = requested else {
        return match cap.policy.as_ref().and_then(|p| p.default.as_ref()) {
            Some(d) => d.clone(),
            None => cap.value.clone(),
        };
    };
    let Some(p) = &cap.policy else {
        return req.clone();
    };
    if let Some(r) = &p.valid_range {
        return round_up_range(req, r);
    }
    if !p.valid_values.is_empty() {
        // The first valid value at least the request (the API keeps them sorted), else the
        // request itself, which then violates the policy.
        return p
            .valid_values
            .iter()
            .find(|v| req.value <= v.value)
            .unwrap_or(req)
            .clone();
    }
    req.clone()
}

/// Up to `min`, then up to the next `min + n·step`, in whole units as the scheduler computes it
/// (`Quantity.Value()` rounds each up).
fn round_up_range(req: &Amount, r: &Range) -> Amount {
    if req.value < r.min.value {
        return r.min.clone();
    }
    let Some(step) = &r.step else {
        return req.clone();
    };
    let (Some(v), Some(step), Some(min)) = (
        req.value.ceil_int(),
        step.value.ceil_int(),
        r.min.value.ceil_int(),
    ) else {
        return req.clone();
    };
    if step == 0 {
        return req.clone();
    }
    let added = v.saturating_sub(min);
    let n = added / step + i64::from(added % step != 0);
    Amount::binary_si(min.saturating_add(step.saturating_mul(n)))
}

/// Whether an amount breaks the policy: over `max`, off the `step` grid, or not one of the
/// `validValues` (the default never does).
fn violates(amount: &Amount, policy: Option<&Policy>) -> bool {
    let Some(p) = policy else {
        return false;
    };
    if p.default.as_ref().is_some_and(|d| d.value == amount.value) {
        return false;
    }
    if let Some(r) = &p.valid_range {
        if r.max.as_ref().is_some_and(|m| amount.value > m.value) {
            return true;
        }
        if let Some(step) = &r.step {
            let (Some(v), Some(step), Some(min)) = (
                amount.value.ceil_int(),
                step.value.ceil_int(),
                r.min.value.ceil_int(),
            ) else {
                return false;
            };
            return step != 0 && v.saturating_sub(min) % step != 0;
        }
        return false;
    }
    if !p.valid_values.is_empty() {
        return !p.valid_values.iter().any(|v| v.value == amount.value);
    }
    false
}

/// Whether the request fits the device's capacities on top of what other claims (`held`) and
/// this allocation so far (`allocating`) consume of them, both aligned with `caps`: `None`
/// when the request names a capacity the device does not have (the scheduler skips the device).
pub(crate) fn fits(
    caps: &[Capacity],
    requests: Option<&Requests>,
    held: Option<&[Quantity]>,
    allocating: Option<&[Quantity]>,
) -> Option<bool> {
    if let Some(r) = requests
        && r.keys().any(|n| !caps.iter().any(|c| c.name == *n))
    {
        return None;
    }
    for (i, cap) in caps.iter().enumerate() {
        let amount = consumed(requests.and_then(|r| r.get(&cap.name)), cap);
        if violates(&amount, cap.policy.as_ref()) {
            return Some(false);
        }
        let mut total = amount.value;
        for more in [held, allocating].into_iter().flatten() {
            if let Some(q) = more.get(i) {
                total = total.checked_add(*q).unwrap_or(total);
            }
        }
        if total > cap.value.value {
            return Some(false);
        }
    }
    Some(true)
}

/// What an allocation of the device for the request consumes, aligned with `caps`
/// (`GetConsumedCapacityFromRequest`).
pub(crate) fn consumption(caps: &[Capacity], requests: Option<&Requests>) -> Vec<Amount> {
    caps.iter()
        .map(|c| consumed(requests.and_then(|r| r.get(&c.name)), c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount(s: &str) -> Amount {
        Amount::parse(s).unwrap()
    }

    fn cap(value: &str, policy: Option<Policy>) -> Capacity {
        Capacity {
            name: "bw".into(),
            value: amount(value),
            policy,
        }
    }

    fn range(min: &str, max: Option<&str>, step: Option<&str>, default: Option<&str>) -> Policy {
        Policy {
            default: default.map(amount),
            valid_values: Vec::new(),
            valid_range: Some(Range {
                min: amount(min),
                max: max.map(amount),
                step: step.map(amount),
            }),
        }
    }

    /// Measured with the 1.36 scheduler's allocator (allocbench): a request of 60G under
    /// `validRange {min: 10G, step: 5G}` consumes `58593750Ki`, 12G rounds to 15G, and the
    /// default fills a request that does not name the capacity.
    #[test]
    fn requests_round_up_to_the_policy_as_the_scheduler_writes_them() {
        let c = cap("100G", Some(range("10G", None, Some("5G"), Some("10G"))));
        let r = |s: &str| consumed(Some(&amount(s)), &c);
        assert_eq!(r("60G").text, "58593750Ki");
        assert_eq!(r("12G").value, Quantity::parse("15G").unwrap());
        assert_eq!(r("1G").text, "10G");
        assert_eq!(consumed(None, &c).text, "10G");
        let values = cap(
            "4",
            Some(Policy {
                default: Some(amount("1")),
                valid_values: vec![amount("1"), amount("2"), amount("4")],
                valid_range: None,
            }),
        );
        assert_eq!(consumed(Some(&amount("3")), &values).text, "4");
        assert_eq!(consumed(Some(&amount("5")), &values).text, "5");
        assert!(violates(&amount("5"), values.policy.as_ref()));
        assert_eq!(consumed(None, &cap("8", None)).text, "8");
    }

    #[test]
    fn binary_si_text_is_apimachinerys() {
        for (v, text) in [
            (0, "0"),
            (1000, "1k"),
            (1023, "1023"),
            (1024, "1Ki"),
            (3000, "3000"),
            (60_000_000_000, "58593750Ki"),
            (1 << 30, "1Gi"),
            (-2048, "-2Ki"),
        ] {
            assert_eq!(Amount::binary_si(v).text, text, "{v}");
        }
    }

    #[test]
    fn a_request_fits_within_what_is_left_and_the_policy() {
        let caps = vec![cap("100G", Some(range("10G", Some("50G"), None, None)))];
        let req = |s: &str| Requests::from([("bw".to_string(), amount(s))]);
        assert_eq!(fits(&caps, Some(&req("40G")), None, None), Some(true));
        assert_eq!(
            fits(&caps, Some(&req("60G")), None, None),
            Some(false),
            "over max"
        );
        let held = [Quantity::parse("70G").unwrap()];
        assert_eq!(
            fits(&caps, Some(&req("40G")), Some(&held), None),
            Some(false)
        );
        assert_eq!(
            fits(&caps, Some(&req("30G")), Some(&held), None),
            Some(true)
        );
        let other = Requests::from([("slots".to_string(), amount("1"))]);
        assert_eq!(
            fits(&caps, Some(&other), None, None),
            None,
            "no such capacity"
        );
        // Without a request, the whole capacity (no default): fits only when nothing else does.
        let whole = vec![cap("100G", None)];
        assert_eq!(fits(&whole, None, None, None), Some(true));
        assert_eq!(fits(&whole, None, Some(&held), None), Some(false));
    }
}
