//! Upstream dranet's end-to-end scenarios (`tests/e2e.bats` of kubernetes-sigs/dranet): the host
//! state each sets up on the link the pod gets, and what the pod must show, written once for the
//! namespace tests (dranet-podnet) and the real-cluster ones (`tests/k8s/upstream.rs`). `ip` runs
//! one iproute2 command where the test's host is (a namespace, or the node itself).

/// The permanent neighbours (IPv4 and IPv6) of `link`, after its address 169.254.169.15/32.
pub fn add_permanent_neighbours(link: &str, ip: impl Fn(&[&str])) {
    ip(&["addr", "add", "169.254.169.15/32", "dev", link]);
    ip(&[
        "neigh",
        "add",
        "192.168.1.1",
        "lladdr",
        "00:11:22:33:44:55",
        "dev",
        link,
        "nud",
        "permanent",
    ]);
    ip(&[
        "-6",
        "neigh",
        "add",
        "2001:db8::1",
        "lladdr",
        "00:aa:bb:cc:dd:ee",
        "dev",
        link,
        "nud",
        "permanent",
    ]);
}

/// What `ip neigh show` in the pod holds after [`add_permanent_neighbours`], the link named
/// `eth99` by upstream's claim.
pub const PERMANENT_NEIGHBOURS_IN_POD: [&str; 2] = [
    "192.168.1.1 dev eth99 lladdr 00:11:22:33:44:55 PERM",
    "2001:db8::1 dev eth99 lladdr 00:aa:bb:cc:dd:ee PERM",
];

/// `link` with 169.254.169.13/24, a route of table 100 through it and a rule (priority 500) to
/// that table.
pub fn add_table_100_and_rule_500(link: &str, ip: impl Fn(&[&str])) {
    ip(&["addr", "add", "169.254.169.13/24", "dev", link]);
    ip(&[
        "route",
        "add",
        "10.10.10.0/24",
        "via",
        "169.254.169.1",
        "dev",
        link,
        "table",
        "100",
    ]);
    ip(&[
        "rule",
        "add",
        "from",
        "10.20.30.0/24",
        "table",
        "100",
        "priority",
        "500",
    ]);
}

/// The route of table 100 in the pod after [`add_table_100_and_rule_500`] (`ip route show table
/// 100`).
pub const TABLE_100_ROUTE_IN_POD: &str = "10.10.10.0/24 via 169.254.169.1 dev eth99";

/// `link` with an IPv6 /96, whose subnet route the pod must get as the kernel's (metric 256).
pub fn add_ipv6_subnet(link: &str, ip: impl Fn(&[&str])) {
    ip(&["-6", "addr", "add", "fd36::3:0:e:0:0/96", "dev", link]);
}
