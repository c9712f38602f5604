#!/bin/sh
# /init of the real-kernel test's guest (tests/real_kernel.rs): sets up the host layout the test
# describes on the qemu topology it boots, runs dranet, and prints dranet's answers and the
# kernel's own view (sysfs, `ip`) between markers for the test to compare. Then powers off.
export PATH=/bin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /run; mount -t tmpfs tmp /tmp
for m in /mods/*.ko; do insmod "$m" || echo "GUEST: insmod $m failed"; done
/bin/ip link set lo up

# NICs are found by the MACs the test gave them on the qemu command line.
bymac() { for n in /sys/class/net/*; do [ "$(cat "$n/address")" = "$1" ] && basename "$n" && return; done; }
i=0
while [ -z "$(bymac 52:54:00:00:00:0f)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
UP=$(bymac 52:54:00:00:00:01)
A=$(bymac 52:54:00:00:00:0a)
B=$(bymac 52:54:00:00:00:0b)
C=$(bymac 52:54:00:00:00:0c)
D=$(bymac 52:54:00:00:00:0d)
E=$(bymac 52:54:00:00:00:0e)
F=$(bymac 52:54:00:00:00:0f)
for n in $UP $A $B $C $D $E $F; do /bin/ip link set "$n" up; done
# The uplink: the main table's default route.
/bin/ip addr add 10.0.2.15/24 dev "$UP"
/bin/ip route add default via 10.0.2.2 dev "$UP"
# A rail whose only default is in its policy table.
/bin/ip addr add 10.7.0.1/24 dev "$C"
/bin/ip route add default via 10.7.0.254 dev "$C" table 101
/bin/ip rule add from 10.7.0.1 table 101
# A backup default in the main table.
/bin/ip addr add 10.8.0.1/24 dev "$D"
/bin/ip route add default via 10.8.0.254 dev "$D" metric 500
# SR-IOV: two VFs of the PF on NUMA node 0.
echo 2 > "/sys/class/net/$A/device/sriov_numvfs" || echo "GUEST: sriov_numvfs failed"
# Soft-RoCE on a veth, on a PCI NIC and on the uplink.
/bin/ip link add veth0 type veth peer name veth1
/bin/ip link set veth0 up; /bin/ip link set veth1 up
/bin/rdma link add rxe0 type rxe netdev veth0 || echo "GUEST: rxe0 failed"
/bin/rdma link add rxe1 type rxe netdev "$B" || echo "GUEST: rxe1 failed"
/bin/rdma link add rxe2 type rxe netdev "$UP" || echo "GUEST: rxe2 failed"
# A CNI bridge with a pod's veth as its port, and an ifb.
/bin/ip link add cni0 type bridge
/bin/ip link add vethpod0 type veth peer name eth9
/bin/ip link set vethpod0 master cni0
# Loading ifb made ifb0 and ifb1 already.
[ -e /sys/class/net/ifb0 ] || /bin/ip link add ifb0 type ifb
sleep 1

section() { echo "=== BEGIN $1"; cat "$2"; echo "=== END $1"; }
echo "UP=$UP A=$A B=$B C=$C D=$D E=$E F=$F" > /tmp/names
# --filter true: discovery as the kernel has it (veth-backed rxe, rails); the default filter's
# allowlist is tested on its own.
/bin/dranet inventory --node-name guest --cloud-provider-hint none --filter true -o json \
  --show-excluded > /tmp/inventory.json 2> /tmp/inventory.err
echo "rc=$?" >> /tmp/inventory.err
/bin/dranet topo > /tmp/topo 2>&1
/bin/dranet inventory --cloud-provider-hint none -o json > /dev/null 2> /tmp/hostname.err
echo "rc=$?" >> /tmp/hostname.err
/bin/ip -j route show table all > /tmp/routes.json
{
  for d in /sys/bus/pci/devices/*; do
    drv=$(basename "$(readlink "$d/driver")" 2>/dev/null)
    pf=$(basename "$(readlink "$d/physfn")" 2>/dev/null)
    echo "pci $(basename "$d") class=$(cat "$d/class") numa=$(cat "$d/numa_node") driver=${drv:--} physfn=${pf:--} path=$(readlink -f "$d")"
  done
  for n in /sys/class/net/*; do
    echo "net $(basename "$n") mac=$(cat "$n/address") device=$(readlink -f "$n/device" 2>/dev/null || echo -) master=$(basename "$(readlink "$n/master")" 2>/dev/null || echo -)"
  done
  for r in /sys/class/infiniband/*; do
    echo "rdma $(basename "$r") parent=$(cat "$r/parent" 2>/dev/null || echo -) device=$(readlink -f "$r/device" 2>/dev/null || echo -)"
  done
  echo "hostname $(cat /proc/sys/kernel/hostname)"
} > /tmp/sysfs
for s in names inventory.json inventory.err topo hostname.err routes.json sysfs; do section "$s" "/tmp/$s"; done
echo "=== DONE"
poweroff -f
