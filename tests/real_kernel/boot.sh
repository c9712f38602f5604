#!/bin/sh
# /init of the pods guest's initramfs (tests/real_kernel.rs): loads the modules, mounts the Debian
# root filesystem (.ci/qemu-rootfs.sh; the test boots it with snapshot=on, so nothing is kept),
# copies this run's programs into it and hands over to pods-init.sh there.
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in /mods/*.ko; do insmod "$m" || echo "GUEST: insmod $m failed"; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mkdir -p /newroot
mount -t ext4 /dev/vda /newroot || { echo "GUEST: cannot mount the root filesystem"; poweroff -f; }
mkdir -p /newroot/opt/t
cp /t/* /newroot/opt/t/
mount --move /dev /newroot/dev; mount --move /proc /newroot/proc; mount --move /sys /newroot/sys
exec switch_root /newroot /opt/t/pods-init.sh
