//! The allocator: a node's devices in pools, the DeviceClasses, what their selectors say of
//! each device once computed. Built in [`build`](crate::build), claims compiled in
//! [`claim`](crate::claim), allocated in [`search`](crate::search).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::resource::v1::{DeviceClassConfiguration, DeviceSelector};

use crate::capacity::Capacities;
use crate::cel::{ProgramCache, hash_words};
use crate::device::{Device, DeviceId};
use crate::error::AllocError;
use crate::features::{Features, SchedulerBugs};
use crate::node::Node;
use crate::selectors::{Match, Programs, selector_programs};
use crate::source::{CounterKey, PoolCounters, SliceInfo};
use crate::version::KubernetesVersion;

/// A pool as the search sees it.
#[derive(Debug, Clone)]
pub(crate) struct Pool<'a> {
    pub(crate) driver: Cow<'a, str>,
    pub(crate) name: Cow<'a, str>,
    /// Slices present differ from `resourceSliceCount`.
    pub(crate) incomplete: Option<String>,
    /// A device name appears twice.
    pub(crate) invalid: Option<String>,
    /// Its devices in [`Allocator::devices`].
    pub(crate) devices: std::ops::Range<usize>,
    /// Kubernetes 1.35+: its shared counters.
    pub(crate) counters: Option<Box<PoolCounters>>,
}

impl Pool<'_> {
    pub(crate) fn into_owned(self) -> Pool<'static> {
        Pool {
            driver: Cow::Owned(self.driver.into_owned()),
            name: Cow::Owned(self.name.into_owned()),
            incomplete: self.incomplete,
            invalid: self.invalid,
            devices: self.devices,
            counters: self.counters,
        }
    }

    pub(crate) fn label(&self) -> String {
        format!("{}/{}", self.driver, self.name)
    }
}

/// A DeviceClass: its selectors, compiled on first use (a claim names few of a cluster's
/// classes), its config, and what its selectors say of each device, computed on first use and
/// kept, since neither changes while the allocator lives.
#[derive(Debug)]
pub(crate) struct ClassEntry<'a> {
    pub(crate) name: Cow<'a, str>,
    /// [`class_hash`] of the name, which a compiled claim keeps to be recognised.
    pub(crate) hash: u64,
    /// What `programs` is compiled from; empty once an owned allocator has compiled them.
    pub(crate) selectors: &'a [DeviceSelector],
    pub(crate) programs: OnceLock<Programs>,
    pub(crate) config: Cow<'a, [DeviceClassConfiguration]>,
    pub(crate) matches: OnceLock<Vec<Match>>,
}

impl ClassEntry<'_> {
    /// The compiled selectors, or the first that does not compile.
    pub(crate) fn programs(
        &self,
        cache: Option<&ProgramCache>,
        version: KubernetesVersion,
    ) -> &Programs {
        self.programs
            .get_or_init(|| selector_programs(self.selectors, cache, version))
    }

    pub(crate) fn into_owned(
        self,
        cache: Option<&ProgramCache>,
        version: KubernetesVersion,
    ) -> ClassEntry<'static> {
        self.programs(cache, version);
        ClassEntry {
            name: Cow::Owned(self.name.into_owned()),
            hash: self.hash,
            selectors: &[],
            programs: self.programs,
            config: Cow::Owned(self.config.into_owned()),
            matches: self.matches,
        }
    }
}

/// The devices of a node (from ResourceSlices of any drivers) and the DeviceClasses, ready to
/// allocate claims against.
///
/// Built from typed ResourceSlices ([`Allocator::new`]), it borrows them (`'a`): what it needs
/// of a device is read from the slice when needed, not copied up front, which is most of the
/// cost of deciding one claim on a freshly built allocator. Built from JSON
/// ([`Allocator::from_json`]), it owns everything (`Allocator<'static>`).
#[derive(Debug)]
pub struct Allocator<'a> {
    pub(crate) devices: Vec<Device<'a>>,
    pub(crate) pools: Vec<Pool<'a>>,
    /// The order the search visits pools in (indexes into `pools`); empty for the order of
    /// `pools` ([`Allocator::visit_order`]).
    pub(crate) order: Vec<usize>,
    pub(crate) slices: Vec<SliceInfo<'a>>,
    /// Built on first use: only `allocated` lists and [`Allocator::device`] need it. Device
    /// positions sorted by (driver, pool, name, position).
    pub(crate) index: OnceLock<Vec<u32>>,
    /// Sorted by name, one entry per name (the last class given of a name).
    pub(crate) classes: Vec<ClassEntry<'a>>,
    pub(crate) version: KubernetesVersion,
    pub(crate) features: Features,
    pub(crate) bugs: SchedulerBugs,
    pub(crate) node: Option<Node>,
    /// Shared counters, by the key the scheduler keeps them under.
    pub(crate) counter_keys: Vec<CounterKey>,
    /// With consumable capacity: each device's capacities and their policies (empty without).
    pub(crate) capacities: Vec<Capacities>,
    pub(crate) warnings: Vec<String>,
    /// Where claims' selectors are compiled ([`Options::programs`](crate::Options::programs)).
    pub(crate) programs: Option<Arc<ProgramCache>>,
    /// Claims allocated so far (saturating), to know a kept allocator from a cold one.
    pub(crate) claims: AtomicU32,
}

impl<'a> Allocator<'a> {
    /// The same allocator owning its devices, their indexes built.
    pub(crate) fn into_owned(self) -> Allocator<'static> {
        Allocator {
            devices: self.devices.into_iter().map(Device::into_owned).collect(),
            pools: self.pools.into_iter().map(Pool::into_owned).collect(),
            order: self.order,
            slices: self.slices.into_iter().map(SliceInfo::into_owned).collect(),
            index: self.index,
            classes: self
                .classes
                .into_iter()
                .map(|c| c.into_owned(self.programs.as_deref(), self.version))
                .collect(),
            version: self.version,
            features: self.features,
            bugs: self.bugs,
            node: self.node,
            counter_keys: self.counter_keys,
            capacities: self.capacities,
            warnings: self.warnings,
            programs: self.programs,
            claims: self.claims,
        }
    }

    /// All devices of the pools the node can reach, pools in (driver, pool) order, each
    /// pool's devices in slice order. Check [`Device::on_node`] for devices of
    /// `perDeviceNodeSelection` slices.
    pub fn devices(&self) -> &[Device<'a>] {
        &self.devices
    }

    /// A device by identity.
    pub fn device(&self, id: &DeviceId) -> Option<&Device<'a>> {
        self.position(id).map(|i| &self.devices[i])
    }

    /// The position of a device in [`Allocator::devices`]; for a name given twice in a pool
    /// (an invalid pool), the first.
    pub(crate) fn position(&self, id: &DeviceId) -> Option<usize> {
        let key = Device::key;
        let index = self.index.get_or_init(|| {
            let mut v: Vec<u32> = (0..self.devices.len() as u32).collect();
            // Stable: of equal names, the first given comes first.
            v.sort_by(|&x, &y| key(&self.devices[x as usize]).cmp(&key(&self.devices[y as usize])));
            v
        });
        let want = (id.driver.as_str(), id.pool.as_str(), id.device.as_str());
        let at = index.partition_point(|&i| key(&self.devices[i as usize]) < want);
        let i = *index.get(at)? as usize;
        (key(&self.devices[i]) == want).then_some(i)
    }

    /// The position of the class named `name`.
    pub(crate) fn class_index(&self, name: &str) -> Option<usize> {
        self.classes
            .binary_search_by(|c| c.name.as_ref().cmp(name))
            .ok()
    }

    /// The name of the class at `class`.
    pub(crate) fn class_name(&self, class: usize) -> &str {
        self.classes.get(class).map_or("", |c| &c.name)
    }

    /// The pools in the order the search visits them.
    pub(crate) fn visit_order(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pools.len()).map(|i| self.order.get(i).copied().unwrap_or(i))
    }

    /// The node this allocator allocates for (`None`: every slice is taken to be on it).
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// The Kubernetes version whose scheduler this allocator reproduces.
    pub fn version(&self) -> KubernetesVersion {
        self.version
    }

    /// The feature set.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The scheduler bugs reproduced.
    pub fn bugs(&self) -> &SchedulerBugs {
        &self.bugs
    }

    /// The pools the search visits, as `(driver, pool)`, in the order it visits them.
    pub fn pool_order(&self) -> Vec<(&str, &str)> {
        self.visit_order()
            .map(|p| (self.pools[p].driver.as_ref(), self.pools[p].name.as_ref()))
            .collect()
    }

    /// Sets the order the search visits pools in: `order` lists `(driver, pool)` pairs; pools
    /// it leaves out keep their relative order after the listed ones. The scheduler's order is
    /// random (Go map iteration), so trying every order enumerates every answer it may give.
    /// Naming a pool that does not exist is an error.
    pub fn set_pool_order(&mut self, order: &[(&str, &str)]) -> Result<(), AllocError> {
        let mut new = Vec::with_capacity(self.pools.len());
        for (d, p) in order {
            let i = self
                .pools
                .iter()
                .position(|x| x.driver == *d && x.name == *p)
                .ok_or_else(|| AllocError::InvalidSlice {
                    slice: format!("pool {d}/{p}"),
                    reason: "no such pool".into(),
                })?;
            if !new.contains(&i) {
                new.push(i);
            }
        }
        for i in self.visit_order() {
            if !new.contains(&i) {
                new.push(i);
            }
        }
        self.order = new;
        Ok(())
    }

    /// What was ignored or is not simulated (outdated slices, incomplete pools, …).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether this allocator has been asked for more than one claim: it is kept, and indexing
    /// the devices its selectors read pays for itself.
    pub(crate) fn reused(&self) -> bool {
        self.claims.load(Ordering::Relaxed) > 1
    }
}

/// The hash a compiled claim keeps of a class's name ([`ClassEntry::hash`]).
pub(crate) fn class_hash(name: &str) -> u64 {
    hash_words(name.len() as u64, name.as_bytes())
}
