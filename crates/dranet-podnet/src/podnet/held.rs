//! The pod namespaces that hold our links, kept open until each link is given back.
//!
//! A runtime tears a sandbox down without waiting for a plugin that passed its deadline
//! (containerd's NRI `plugin_request_timeout`, 2 s by default, less on some nodes): it unmounts
//! the namespace and kills its last process while the detach is still under way. A namespace
//! that goes away destroys the virtual links in it and sends a NIC back unconfigured; held open
//! here, it stays until the detach has given every link back, whatever the runtime does.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::netns::{Netns, NetnsId};

/// Open pod namespaces by journal key.
#[derive(Debug, Default)]
pub(super) struct Held {
    by_key: Mutex<HashMap<String, Netns>>,
}

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Netns>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `ns` open for the link under `key`.
    pub(super) fn hold(&self, key: &str, ns: &Netns) {
        match ns.try_clone() {
            Ok(ns) => {
                self.map().insert(key.to_string(), ns);
            }
            // Without it the detach reads the namespace by path, as before.
            Err(e) => tracing::warn!(key, error = %e, "could not keep the pod namespace open"),
        }
    }

    /// The namespace held for `key`, if it is `id`.
    pub(super) fn get(&self, key: &str, id: NetnsId) -> Option<Netns> {
        let map = self.map();
        let ns = map.get(key)?;
        if ns.id().ok()? != id {
            return None;
        }
        ns.try_clone().ok()
    }

    /// Lets the namespace of `key` go.
    pub(super) fn release(&self, key: &str) {
        self.map().remove(key);
    }
}
