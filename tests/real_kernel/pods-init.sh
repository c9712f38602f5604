#!/bin/dash
# The pods guest's init in its Debian root (tests/real_kernel.rs): the node as a RoCE node looks to
# dranet, then the test binary's guest side (tests/real_kernel/pods.rs), then power off.
#   - two virtio NICs on one qemu hub (MACs ...:01:01 and ...:01:02), soft-RoCE rxe0 and rxe1 on them;
#   - a veth whose end `low` carries macvlans oob0, oob1 (the pods' claimed NICs) and bench1..8;
#   - an uplink veth `upl` with the main table's default; veths vrf-test-pod-N/vrf-rtr-N;
#   - the RDMA subsystem in exclusive mode: it can only change while no other namespace exists.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp; mount -t tmpfs lib /var/lib
mount -t cgroup2 cgroup2 /sys/fs/cgroup
[ -e /var/run ] || ln -s /run /var/run
mkdir -p /run/netns /var/lib/kubelet /run/podlogs /etc/cni/net.d
hostname guest
# What an installed system has and containerd copies into each sandbox.
printf "127.0.0.1 localhost guest\n::1 localhost\n" > /etc/hosts; : > /etc/resolv.conf
fail() { echo "GUEST: $*"; echo "=== EXIT 1"; poweroff -f; }
rdma system set netns exclusive || fail "rdma system set netns exclusive"
# GIDs appear with the addresses: no duplicate address detection to wait for.
sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
ip link set lo up
bymac() { for n in /sys/class/net/*; do [ "$(cat "$n/address")" = "$1" ] && basename "$n" && return; done; }
N0=$(bymac 52:54:00:00:01:01); N1=$(bymac 52:54:00:00:01:02)
[ -n "$N0" ] && [ -n "$N1" ] || fail "the two NICs on the hub are missing"
ip link set "$N0" up && ip link set "$N1" up
rdma link add rxe0 type rxe netdev "$N0" || fail "rxe0"
rdma link add rxe1 type rxe netdev "$N1" || fail "rxe1"
ip link add low type veth peer name lowp && ip link set low up && ip link set lowp up
for m in oob0 oob1 bench1 bench2 bench3 bench4 bench5 bench6 bench7 bench8; do
  ip link add link low name "$m" type macvlan mode bridge || fail "macvlan $m"
done
# Upstream's IPVLAN and VRF scenarios (real_kernel/sharing.rs): the kernel's modules, a node
# uplink (the main table's default, so the shared NIC's default at metric 500 is a backup one),
# and upstream's two veth pairs of the VRF scenario.
# A Kubernetes node forwards IPv4; a pod's namespace inherits it, and a VRF device in it too
# (the router pod of the VRF scenario routes through its VRF).
sysctl -qw net.ipv4.ip_forward=1
for m in ipvlan vrf; do [ -d "/sys/module/$m" ] || fail "module $m not loaded"; done
ip link add upl type veth peer name uplp && ip link set upl up && ip link set uplp up
ip addr add 10.0.2.15/24 dev upl && ip route add default via 10.0.2.2 dev upl || fail "uplink"
for p in 1 2; do
  ip link add "vrf-test-pod-$p" type veth peer name "vrf-rtr-$p" || fail "veth vrf-test-pod-$p"
  ip link set "vrf-test-pod-$p" up && ip link set "vrf-rtr-$p" up
done
cat > /etc/cni/net.d/10-pods.conflist <<JSON
{"cniVersion": "1.0.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "dataDir": "/run/cni-ipam"}},
  {"type": "loopback"}]}
JSON
cat > /opt/t/containerd.toml <<TOML
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_registration_timeout = "5s"
  # containerd's default request timeout (2s), under TCG (about 10x slower than a node): an
  # 8-NIC attach passes it, and dranet answers in time and attaches after (docs/running.md).
  plugin_request_timeout = "2s"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/dranet-rdma/pod:1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
sleep 1
DRANET_REAL_KERNEL_GUEST=1 /opt/t/real_kernel --exact guest_pods --nocapture --test-threads 1
echo "=== EXIT $?"
poweroff -f
