#!/bin/bash
# Runs the dranet-podnet tests inside a throw-away qemu guest with Debian's 6.1 kernel and
# its veth, macvlan and vrf modules: the kernel features the CI machine lacks (VRF). TCG only
# (no KVM needed). Needs root for apt; about a minute on 2 cores after the first build.
#   tests/qemu/podnet-guest.sh            # the podnet tests (module podnet:: of the crate's tests)
#   tests/qemu/podnet-guest.sh vrf        # a filter, as for cargo test
set -euo pipefail
cd "$(dirname "$0")/../.."
# The guest has no dnsmasq: the crate's other modules (dhcp::) stay on the host.
FILTER=${1:-podnet::}
G=${G:-/tmp/dranet-podnet-guest}
mkdir -p "$G"

# qemu, busybox and Debian's 6.1 kernel, shared with the real-kernel test (tests/real_kernel.rs).
.ci/qemu-guest.sh
K=${DRANET_QEMU_DIR:-/var/cache/dranet-qemu}/kimg
KV=$(basename "$(ls "$K"/boot/vmlinuz-* | head -1)"); KV=${KV#vmlinuz-}

BIN=$(cargo test -p dranet-podnet --test it --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*/it-[^"]*"' | tail -1 | cut -d'"' -f4)
[ -x "$BIN" ] || { echo "podnet test binary not found" >&2; exit 1; }

R="$G/initrd"
rm -rf "$R"
mkdir -p "$R"/{bin,proc,sys,dev,run,tmp,mods,lib64,lib/x86_64-linux-gnu,var}
ln -s ../run "$R/var/run"   # as on Debian: ip keeps namespaces in /run/netns
cp /bin/busybox "$R/bin/"
for a in sh mount umount insmod cat id kill sleep echo mkdir poweroff; do ln -s busybox "$R/bin/$a"; done
cp /usr/sbin/ip "$R/bin/ip"   # the real iproute2: busybox's ip applet has no netns
cp "$BIN" "$R/bin/podnet"
for l in $(ldd /usr/sbin/ip "$BIN" | awk '/=>/{print $3}' | sort -u); do cp -L "$l" "$R/lib/x86_64-linux-gnu/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
for m in veth macvlan vrf; do
  f=$(find "$K/lib/modules/$KV" -name "$m.ko*" | head -1)
  [ -n "$f" ] && cp "$f" "$R/mods/"
done
cat > "$R/init" <<INIT
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mkdir -p /run/netns
for m in /mods/*; do insmod \$m 2>/dev/null; done
echo "guest kernel: \$(cat /proc/sys/kernel/osrelease)"
/bin/podnet --test-threads 1 --nocapture $FILTER
echo "podnet-exit=\$?"
poweroff -f
INIT
chmod +x "$R/init"
(cd "$R" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$G/initrd.gz")

timeout 900 qemu-system-x86_64 -accel tcg -machine q35 -smp 2 -m 1024 \
  -kernel "$K/boot/vmlinuz-$KV" -initrd "$G/initrd.gz" \
  -append "console=ttyS0 panic=-1 quiet" -display none -serial stdio -nodefaults -no-reboot \
  | tee "$G/console.log"
grep -q "podnet-exit=0" "$G/console.log"
