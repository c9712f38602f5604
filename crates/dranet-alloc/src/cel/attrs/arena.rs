//! The indexes of many devices built one after another, sharing one string of names.

use std::sync::{Arc, OnceLock};

use dranet_core::{AttributeValue, Quantity};

use super::{AttributesError, CapEntry, DeviceAttributes, Entry, Lazy, Span};
use crate::cel::hash::key_hash;

/// Appends a name as given to `keys`; an unqualified name's domain is the driver's name,
/// stored at `driver`.
fn push_name(keys: &mut String, driver: (u32, u32), name: &str) -> Span {
    let start = keys.len() as u32;
    keys.push_str(name);
    let end = keys.len() as u32;
    match name.bytes().position(|b| b == b'/') {
        Some(i) => Span {
            domain: start,
            domain_end: start + i as u32,
            name: start + i as u32 + 1,
            name_end: end,
        },
        None => Span {
            domain: driver.0,
            domain_end: driver.1,
            name: start,
            name_end: end,
        },
    }
}

/// The names of the attribute indexes built one after another (an allocator's), in one string
/// shared by all of them, and how the last device's names were ordered.
///
/// The devices of a slice mostly publish the same names in the same order (the API gives them
/// sorted): a device whose driver and names are the previous device's reuses their place in
/// the string, their hashes and their order, instead of copying, hashing and sorting them
/// again.
#[derive(Debug, Default)]
pub(crate) struct NameArena<'n> {
    keys: String,
    /// The last driver and where its name is in `keys`.
    driver: Option<(&'n str, (u32, u32))>,
    attrs: NameList<'n>,
    caps: NameList<'n>,
}

/// An attribute value given to [`NameArena::index`].
#[derive(Debug)]
pub(crate) enum Given<'n> {
    /// Any value.
    Value(AttributeValue),
    /// A string value, copied into the names string and made a String only when read.
    Str(&'n str),
}

/// One device's attribute (or capacity) names as given, and their index order.
#[derive(Debug, Default)]
struct NameList<'n> {
    names: Vec<&'n str>,
    /// By position in `names`.
    spans: Vec<Span>,
    /// Positions in `names` in index order, with their hash (0 for capacities).
    order: Vec<(u64, u32)>,
}

impl<'n> NameList<'n> {
    /// Forgets the names, so the next device's are ordered and checked anew.
    fn forget(&mut self) {
        self.names.clear();
        self.spans.clear();
        self.order.clear();
    }

    fn same<V>(&self, given: &[(&'n str, V)]) -> bool {
        self.names.len() == given.len() && self.names.iter().zip(given).all(|(a, (b, _))| a == b)
    }

    /// Takes `given`'s names, stores them in `keys` and orders them: attributes by (hash,
    /// domain, name), capacities (`hashed` false) by (domain, name). A name given twice is an
    /// error naming it.
    fn set<V>(
        &mut self,
        keys: &mut String,
        driver: (u32, u32),
        given: &[(&'n str, V)],
        hashed: bool,
    ) -> Result<(), AttributesError> {
        self.forget();
        for (i, (name, _)) in given.iter().enumerate() {
            let span = push_name(keys, driver, name);
            self.names.push(name);
            self.spans.push(span);
            let hash = if hashed {
                key_hash(span.domain(keys), span.name(keys))
            } else {
                0
            };
            self.order.push((hash, i as u32));
        }
        let k = keys.as_str();
        let spans = &self.spans;
        self.order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                spans[a.1 as usize]
                    .pair(k)
                    .cmp(&spans[b.1 as usize].pair(k))
            })
        });
        if let Some(w) = self.order.windows(2).find(|w| {
            w[0].0 == w[1].0 && spans[w[0].1 as usize].pair(k) == spans[w[1].1 as usize].pair(k)
        }) {
            let name = spans[w[0].1 as usize].qualified(k);
            // Not reusable: the next device must not skip this check.
            self.forget();
            return Err(if hashed {
                AttributesError::DuplicateAttribute(name)
            } else {
                AttributesError::DuplicateCapacity(name)
            });
        }
        Ok(())
    }
}

impl<'n> NameArena<'n> {
    /// An arena sized for the API's limits on a device (32 attributes and capacities), so
    /// building indexes does not grow its lists.
    pub(crate) fn new() -> NameArena<'n> {
        let list = |n| NameList {
            names: Vec::with_capacity(n),
            spans: Vec::with_capacity(n),
            order: Vec::with_capacity(n),
        };
        NameArena {
            // A few lists of names of about 300 bytes each, then the devices' string values;
            // it starts below the size (1 KiB) from which glibc's malloc consolidates its
            // free lists first.
            keys: String::with_capacity(960),
            driver: None,
            attrs: list(dranet_core::attributes::MAX_ATTRIBUTES_PER_DEVICE),
            caps: list(4),
        }
    }

    /// Indexes one device's attributes and capacities published by `driver`: the values are
    /// taken out of `attributes` (what is left there is to be cleared). The index's names stay
    /// in the arena until [`NameArena::finish`] gives them to it.
    pub(crate) fn index(
        &mut self,
        driver: &'n str,
        attributes: &mut [(&'n str, Given<'n>)],
        capacity: &[(&'n str, Quantity)],
    ) -> Result<DeviceAttributes, AttributesError> {
        let driver_at = match self.driver {
            Some((d, at)) if d == driver => at,
            _ => {
                let start = self.keys.len() as u32;
                self.keys.push_str(driver);
                let at = (start, self.keys.len() as u32);
                self.driver = Some((driver, at));
                self.attrs.forget();
                self.caps.forget();
                at
            }
        };
        if !self.attrs.same(attributes) {
            self.attrs
                .set(&mut self.keys, driver_at, attributes, true)?;
        }
        if !self.caps.same(capacity) {
            self.caps.set(&mut self.keys, driver_at, capacity, false)?;
        }
        let mut attrs: Vec<Entry> = Vec::with_capacity(attributes.len());
        for &(hash, i) in &self.attrs.order {
            let i = i as usize;
            // Left behind: a value without an allocation, for the caller to clear.
            let value = match std::mem::replace(&mut attributes[i].1, Given::Str("")) {
                Given::Value(v) => Lazy::Ready(v),
                Given::Str(text) => {
                    let start = self.keys.len() as u32;
                    self.keys.push_str(text);
                    Lazy::Text {
                        at: (start, self.keys.len() as u32),
                        value: OnceLock::new(),
                    }
                }
            };
            attrs.push(Entry {
                hash,
                span: self.attrs.spans[i],
                value,
            });
        }
        let caps: Vec<CapEntry> = self
            .caps
            .order
            .iter()
            .map(|&(_, i)| CapEntry {
                span: self.caps.spans[i as usize],
                value: capacity[i as usize].1,
            })
            .collect();
        Ok(DeviceAttributes {
            keys: Arc::default(),
            attrs,
            capacity: caps,
        })
    }

    /// The names, for every index built from this arena ([`DeviceAttributes::set_names`]).
    pub(crate) fn finish(self) -> Arc<str> {
        Arc::from(self.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::super::DeviceAttributes;
    use super::{AttributeValue, Given, NameArena, Quantity};

    type Attrs<'a> = Vec<(&'a str, AttributeValue)>;
    /// A device: its driver, attributes and capacities.
    type Dev = (&'static str, Attrs<'static>, Vec<(&'static str, Quantity)>);

    fn int(names: &[&'static str], base: i64) -> Attrs<'static> {
        names
            .iter()
            .zip(base..)
            .map(|(n, i)| (*n, AttributeValue::Int(i)))
            .collect()
    }

    fn strings(names: &[&'static str], text: &str) -> Attrs<'static> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| match i % 2 {
                0 => (*n, AttributeValue::String(format!("{text}{i}"))),
                _ => (*n, AttributeValue::Bool(true)),
            })
            .collect()
    }

    /// Builds indexes one after another from one arena, as the allocator does.
    fn from_arena(devices: &[Dev]) -> Vec<Result<DeviceAttributes, String>> {
        let mut arena = NameArena::new();
        let mut out: Vec<Result<DeviceAttributes, String>> = devices
            .iter()
            .map(|(driver, attrs, caps)| {
                // Strings as the allocator gives them: read only when asked for.
                let mut attrs: Vec<(&str, Given)> = attrs
                    .iter()
                    .map(|(n, v)| match v {
                        AttributeValue::String(s) => (*n, Given::Str(s)),
                        v => (*n, Given::Value(v.clone())),
                    })
                    .collect();
                arena
                    .index(driver, &mut attrs, caps)
                    .map_err(|e| e.to_string())
            })
            .collect();
        let names = arena.finish();
        for d in out.iter_mut().flatten() {
            d.set_names(&names);
        }
        out
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn indexes_sharing_an_arena_equal_indexes_built_alone() {
        let same = ["b", "resource.kubernetes.io/pcieRoot", "a", "c"];
        let devices = vec![
            ("dra.net", int(&same, 0), vec![("memory", q("1Gi"))]),
            // The same names: reused, with the device's own values.
            ("dra.net", int(&same, 10), vec![("memory", q("2Gi"))]),
            // Other names, then the same again: the order is computed anew each time.
            ("dra.net", int(&["z", "a"], 20), vec![]),
            ("dra.net", int(&same, 30), vec![("x.io/memory", q("3"))]),
            // The same names under another driver: unqualified ones are in its domain.
            ("gpu.example.com", int(&same, 40), vec![("memory", q("4"))]),
            // Strings, kept in the arena until read.
            ("dra.net", strings(&same, "x"), vec![]),
            ("dra.net", strings(&same, "yy"), vec![]),
            // Another driver again, and no names at all: nothing of the last device is kept.
            ("dra.net", int(&[], 0), vec![]),
            ("dra.net", int(&["a"], 50), vec![]),
        ];
        let shared = from_arena(&devices);
        for ((driver, attrs, caps), got) in devices.iter().zip(shared) {
            let got = got.unwrap();
            let alone = DeviceAttributes::new(driver, attrs.clone(), caps.clone()).unwrap();
            assert_eq!(got, alone, "{driver} {attrs:?}");
            for (name, value) in attrs {
                assert_eq!(got.get_qualified(name, driver), Some(value), "{name}");
            }
        }
        let last =
            DeviceAttributes::new("gpu.example.com", int(&same, 40), [("memory", q("4"))]).unwrap();
        assert_eq!(
            last.get("gpu.example.com", "a"),
            Some(&AttributeValue::Int(42))
        );
        assert_eq!(last.get("dra.net", "a"), None);
        assert_eq!(last.capacity("gpu.example.com", "memory"), Some(q("4")));
    }

    #[test]
    fn a_name_given_twice_is_reported_for_every_device_that_gives_it() {
        let twice = ["numaNode", "dra.net/numaNode"];
        let devices = vec![
            ("dra.net", int(&["numaNode"], 0), vec![]),
            ("dra.net", int(&twice, 0), vec![]),
            // The same list again: not taken as checked.
            ("dra.net", int(&twice, 0), vec![]),
            (
                "dra.net",
                int(&["a"], 0),
                vec![("m", q("1")), ("dra.net/m", q("2"))],
            ),
            (
                "dra.net",
                int(&["a"], 0),
                vec![("m", q("1")), ("dra.net/m", q("2"))],
            ),
        ];
        let got: Vec<Result<(), String>> = from_arena(&devices)
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect();
        let attr = Err("attribute dra.net/numaNode is given twice".to_string());
        let cap = Err("capacity dra.net/m is given twice".to_string());
        assert_eq!(got, vec![Ok(()), attr.clone(), attr, cap.clone(), cap]);
    }
}
