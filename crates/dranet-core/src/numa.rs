//! NUMA nodes, their SLIT distances and sockets.

use serde::{Deserialize, Serialize};

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaNode {
    /// Node id.
    pub id: u32,
    /// Its CPUs, as the kernel's cpulist (`0-47`).
    pub cpulist: String,
    /// SLIT distances to every node, indexed like [`NumaTopology::nodes`]'s ids.
    pub distances: Vec<u32>,
    /// Physical package (socket) of its first CPU; `None` for CPU-less nodes (HBM, CXL).
    pub socket: Option<u32>,
}

/// The NUMA layout of a host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NumaTopology {
    /// Nodes sorted by id.
    pub nodes: Vec<NumaNode>,
}

impl NumaTopology {
    /// The node with this id.
    pub fn node(&self, id: u32) -> Option<&NumaNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// SLIT distance from `a` to `b` (`distances` is indexed by node id, as sysfs prints it).
    pub fn distance(&self, a: u32, b: u32) -> Option<u32> {
        self.node(a)?.distances.get(b as usize).copied()
    }

    /// The list form of `resource.kubernetes.io/numaNode`: the node itself, then the other nodes
    /// of the same socket at the minimum SLIT distance from it (sorted by id). A node whose socket
    /// is unknown lists only itself.
    pub fn closest_same_socket(&self, id: u32) -> Vec<u32> {
        let mut out = vec![id];
        let Some(me) = self.node(id) else { return out };
        let Some(socket) = me.socket else { return out };
        let peers: Vec<(u32, u32)> = self
            .nodes
            .iter()
            .filter(|n| n.id != id && n.socket == Some(socket))
            .filter_map(|n| Some((n.id, self.distance(id, n.id)?)))
            .collect();
        if let Some(min) = peers.iter().map(|&(_, d)| d).min() {
            out.extend(peers.iter().filter(|&&(_, d)| d == min).map(|&(n, _)| n));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, socket: Option<u32>, distances: &[u32]) -> NumaNode {
        NumaNode {
            id,
            cpulist: String::new(),
            distances: distances.to_vec(),
            socket,
        }
    }

    #[test]
    fn closest_same_socket_nodes() {
        // Two sockets of two sub-NUMA clusters each; node 1 is 11 from node 0, socket 1 is 21 away.
        let t = NumaTopology {
            nodes: vec![
                node(0, Some(0), &[10, 11, 21, 21]),
                node(1, Some(0), &[11, 10, 21, 21]),
                node(2, Some(1), &[21, 21, 10, 12]),
                node(3, Some(1), &[21, 21, 12, 10]),
            ],
        };
        assert_eq!(t.closest_same_socket(0), vec![0, 1]);
        assert_eq!(t.closest_same_socket(3), vec![3, 2]);
        assert_eq!(t.distance(0, 2), Some(21));
        // Unknown node or socket: just the node.
        assert_eq!(t.closest_same_socket(9), vec![9]);
        let lone = NumaTopology {
            nodes: vec![node(0, None, &[10])],
        };
        assert_eq!(lone.closest_same_socket(0), vec![0]);
    }
}
