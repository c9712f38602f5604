//! The nodes of a cluster's ResourceSlices, each with the slices that may be on it: its own
//! (`nodeName`) and those that are for no node in particular (`allNodes`, `nodeSelector`,
//! `perDeviceNodeSelection`), which the allocator then matches against the node as the
//! scheduler does. Grouping once makes building every node's allocator linear in the slices.

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::resource::v1::ResourceSlice;

/// The slices of each node named in `spec.nodeName`, and the others.
#[derive(Debug, Default)]
pub(crate) struct ByNode<'s> {
    /// Positions of each node's own slices, ascending.
    own: HashMap<&'s str, Vec<usize>>,
    /// Positions of the slices that name no node, ascending.
    shared: Vec<usize>,
    /// Positions of each pool's slices, ascending, by (driver, pool).
    pools: HashMap<(&'s str, &'s str), Vec<usize>>,
}

impl<'s> ByNode<'s> {
    pub(crate) fn new(slices: &'s [ResourceSlice]) -> Self {
        let mut by = ByNode::default();
        for (i, s) in slices.iter().enumerate() {
            match s.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(n) => by.own.entry(n).or_default().push(i),
                None => by.shared.push(i),
            }
            by.pools
                .entry((s.spec.driver.as_str(), s.spec.pool.name.as_str()))
                .or_default()
                .push(i);
        }
        by
    }

    /// [`ByNode::slices_of`] with every slice of their pools, ascending: what Kubernetes 1.35
    /// and newer read for the node (a pool is complete, and has its counters, across nodes).
    pub(crate) fn pools_of(&self, slices: &[ResourceSlice], node: &str) -> Vec<usize> {
        let mine = self.slices_of(node);
        let mut keys: Vec<(&str, &str)> = Vec::new();
        let mut out = Vec::with_capacity(mine.len());
        for &i in &mine {
            let s = &slices[i];
            let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
            if keys.contains(&key) {
                continue;
            }
            keys.push(key);
            if let Some(all) = self.pools.get(&key) {
                out.extend_from_slice(all);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The nodes named, in [`node_order`].
    pub(crate) fn nodes(&self) -> Vec<&'s str> {
        let mut nodes: Vec<&str> = self.own.keys().copied().collect();
        nodes.sort_by(|a, b| node_order(a, b));
        nodes
    }

    /// The positions of the slices that may be on `node`, ascending (the order given, which
    /// the allocator keeps within a pool).
    pub(crate) fn slices_of(&self, node: &str) -> Vec<usize> {
        let own = self.own.get(node).map_or(&[][..], Vec::as_slice);
        let mut out = Vec::with_capacity(own.len() + self.shared.len());
        let (mut i, mut j) = (0, 0);
        while i < own.len() || j < self.shared.len() {
            let take_own = j == self.shared.len() || (i < own.len() && own[i] < self.shared[j]);
            if take_own {
                out.push(own[i]);
                i += 1;
            } else {
                out.push(self.shared[j]);
                j += 1;
            }
        }
        out
    }
}

/// Node names as a reader sorts them: runs of digits compare as numbers, so `gpu-2` comes
/// before `gpu-10`; names equal that way (`gpu-02`, `gpu-2`) fall back to plain order, so the
/// order is total and stable.
pub fn node_order(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (m, n) = (run(x), run(y));
                // Leading zeros do not make a number larger.
                let zeros = |d: &[u8]| d.iter().take_while(|c| **c == b'0').count();
                let (dx, dy) = (&x[zeros(&x[..m])..m], &y[zeros(&y[..n])..n]);
                let by_value = dx.len().cmp(&dy.len()).then_with(|| dx.cmp(dy));
                if by_value != Ordering::Equal {
                    return by_value;
                }
                (x, y) = (&x[m..], &y[n..]);
            }
            (Some(p), Some(q)) if p != q => return p.cmp(q),
            _ => (x, y) = (&x[1..], &y[1..]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_by_value() {
        let mut names = vec![
            "gpu-10", "gpu-2", "gpu-1", "cpu-3", "gpu-02", "gpu-", "gpu-1a", "gpu-1-b", "g",
        ];
        names.sort_by(|a, b| node_order(a, b));
        assert_eq!(
            names,
            [
                "cpu-3", "g", "gpu-", "gpu-1", "gpu-1-b", "gpu-1a", "gpu-02", "gpu-2", "gpu-10"
            ]
        );
        assert_eq!(node_order("a-007", "a-7"), "a-007".cmp("a-7"));
        assert_eq!(node_order("x", "x"), Ordering::Equal);
    }

    #[test]
    fn a_node_gets_its_own_slices_and_the_shared_ones_in_the_order_given() {
        let slice = |node: Option<&str>| -> ResourceSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s"},
                "spec": {"driver": "d", "nodeName": node, "allNodes": node.is_none().then_some(true),
                         "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}
            }))
            .unwrap()
        };
        let slices = [
            slice(Some("b")),
            slice(None),
            slice(Some("a")),
            slice(Some("b")),
            slice(None),
            slice(Some("")),
        ];
        let by = ByNode::new(&slices);
        assert_eq!(by.nodes(), ["a", "b"]);
        assert_eq!(by.slices_of("a"), [1, 2, 4, 5]);
        assert_eq!(by.slices_of("b"), [0, 1, 3, 4, 5]);
        assert_eq!(by.slices_of("c"), [1, 4, 5]);
    }
}
