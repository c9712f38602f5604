#!/bin/bash
# Installs what the real-kernel test (tests/real_kernel.rs) needs: qemu with igb emulation
# (bookworm-backports: bookworm's qemu 7.2 has no igb, which SR-IOV needs), busybox and iproute2 for
# the guest, and Debian's own 6.1 kernel, unpacked with its modules into $DRANET_QEMU_DIR (default
# /var/cache/dranet-qemu), where the test looks for it. Idempotent and quiet when all is there.
# Needs root.
set -euo pipefail
dir=${DRANET_QEMU_DIR:-/var/cache/dranet-qemu}

need=()
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"' || need+=(qemu)
[ -x /bin/busybox ] || need+=(busybox)
command -v rdma >/dev/null || need+=(iproute2)
command -v depmod >/dev/null || need+=(kmod)
ls "$dir"/kimg/boot/vmlinuz-* >/dev/null 2>&1 || need+=(kernel)
[ ${#need[@]} -eq 0 ] && exit 0
echo "qemu-guest.sh: installing (${need[*]})" >&2

export DEBIAN_FRONTEND=noninteractive
"$(dirname "$0")/apt-suite.sh" bookworm-backports
apt-get -qq update
apt-get -qq -y -t bookworm install --no-install-recommends busybox-static iproute2 kmod \
  qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports \
  qemu-system-data/bookworm-backports seabios/bookworm-backports ipxe-qemu/bookworm-backports \
  >/dev/null 2>&1 ||
  apt-get -qq -y -t bookworm install --no-install-recommends busybox-static iproute2 kmod \
    qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports \
    qemu-system-data/bookworm-backports seabios/bookworm-backports >/dev/null

# The newest 6.1 kernel image bookworm has, unpacked (not installed: the host keeps its own).
if ! ls "$dir"/kimg/boot/vmlinuz-* >/dev/null 2>&1; then
  pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -1 | cut -d' ' -f1)
  [ -n "$pkg" ] || { echo "qemu-guest.sh: no linux-image-6.1 package in bookworm" >&2; exit 1; }
  mkdir -p "$dir" && rm -rf "$dir/kimg" "$dir"/*.deb
  (cd "$dir" && apt-get -qq download "$pkg" && dpkg-deb -x ./"$pkg"_*.deb kimg && rm -f ./*.deb)
  depmod -b "$dir/kimg" "${pkg#linux-image-}"
fi
qemu-system-x86_64 --version | head -1 >&2
