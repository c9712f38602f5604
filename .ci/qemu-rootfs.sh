#!/bin/bash
# Builds the Debian user space of the qemu guest that runs pods over soft-RoCE (tests/real_kernel.rs,
# issue 37): containerd with NRI, runc, the CNI plugins, iproute2 and rdma-core's tools, unpacked from
# Debian packages (never installed on this machine) into an ext4 image, plus the pods' image (busybox
# and the RDMA tools) as an OCI archive inside it. Results, under $DRANET_QEMU_DIR (default
# /var/cache/dranet-qemu):
#   rootfs.ext4   the guest's root filesystem (the test boots it with snapshot=on: never written)
#   rootfs.key    what it was built from; a change to this script or to a package version rebuilds it
#   debs/         the downloaded packages (a rebuild downloads only what changed)
# Idempotent and quiet when the image is current. Needs root (apt, file owners in the image).
set -euo pipefail
dir=${DRANET_QEMU_DIR:-/var/cache/dranet-qemu}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
exec 9>"$dir/.rootfs.lock"
flock 9

# Guest packages (dash: busybox's shell runs its own applets before $PATH, e.g. its `ip`;
# ca-certificates: the API client loads the system roots even for plain HTTP): bookworm unless named; containerd 1.7 (NRI) exists only from trixie. apt takes a
# named package's dependencies from its suite too when it can, so runc and libc6 are pinned to
# bookworm by name (the guest runs bookworm's libc, as the host does).
GUEST_PKGS=(busybox-static dash ca-certificates iproute2 containerd/trixie runc/bookworm libc6/bookworm containernetworking-plugins
  ibverbs-utils ibverbs-providers rdmacm-utils perftest)
# The pods' image: a shell and the RDMA tools.
POD_PKGS=(busybox-static ibverbs-utils ibverbs-providers rdmacm-utils perftest)

# What apt resolves for a package set on an empty system: "Inst <pkg> (<version> <suite> [arch])".
resolve() {
  apt-get -s -y -t bookworm --no-install-recommends \
    -o Dir::State::status="$dir/empty-status" install "$@" 2>/dev/null | awk '$1 == "Inst"'
}
# The image's key: this script and the versions apt picks (the pods' packages are among the guest's).
key() {
  sha256sum "$0" | cut -d' ' -f1
  resolve "${GUEST_PKGS[@]}"
}
# A cheap stand-in for the key: unchanged package lists cannot resolve to other versions.
lists() {
  sha256sum "$0" | cut -d' ' -f1
  stat -c '%n %Y %s' /var/lib/apt/lists/*_Packages* 2>/dev/null || true
}

: >"$dir/empty-status"
if [ -f "$dir/rootfs.ext4" ] && [ -f "$dir/rootfs.key" ]; then
  [ -f "$dir/rootfs.lists" ] && [ "$(lists)" = "$(cat "$dir/rootfs.lists")" ] && exit 0
  if [ "$(key)" = "$(cat "$dir/rootfs.key")" ]; then
    lists >"$dir/rootfs.lists"
    exit 0
  fi
fi
echo "qemu-rootfs.sh: building the guest's user space under $dir" >&2
export DEBIAN_FRONTEND=noninteractive
"$here/apt-suite.sh" trixie
apt-get -qq update
command -v mke2fs >/dev/null || apt-get -qq -y -t bookworm install --no-install-recommends e2fsprogs >/dev/null

# The packages and their dependencies as apt resolves them for an empty system: a dpkg status file
# of our own, so nothing installed here counts and nothing here is installed.
debs=$dir/debs
mkdir -p "$debs/partial"
download() {
  apt-get -qq -y -t bookworm --no-install-recommends \
    -o Dir::State::status="$dir/empty-status" -o Dir::Cache::archives="$debs" \
    -o APT::Get::Download-Only=true -o Debug::NoLocking=true \
    install "$@" >/dev/null
  # The .deb files of exactly this set, as apt names them.
  resolve "$@" | awk '{ print $2, $3 }' | tr -d '(' |
    while read -r pkg ver; do
      ver=${ver//:/%3a}
      ls "$debs/${pkg}_${ver}_"*.deb
    done
}

# Unpacks .deb files into a merged-/usr tree (bookworm's layout: /bin, /sbin, /lib, /lib64 are links).
unpack() {
  local root=$1
  shift
  rm -rf "$root"
  mkdir -p "$root"/usr/{bin,sbin,lib,lib64}
  for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
  for deb in "$@"; do
    dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$root"
  done
  mkdir -p "$root"/{etc,proc,sys,dev,run,tmp,root,var/tmp}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf 'include /etc/ld.so.conf.d/*.conf\n' >"$root/etc/ld.so.conf"
  ldconfig -r "$root"
  # What ca-certificates' maintainer script (not run here) would make: the bundle TLS clients load.
  if [ -d "$root/usr/share/ca-certificates" ]; then
    mkdir -p "$root/etc/ssl/certs"
    cat "$root"/usr/share/ca-certificates/*/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  fi
  # busybox's applets where Debian put no program of that name.
  for a in $("$root/bin/busybox" --list); do
    [ -e "$root/usr/bin/$a" ] || [ -e "$root/usr/sbin/$a" ] || ln -s busybox "$root/usr/bin/$a"
  done
}

mapfile -t guest_debs < <(download "${GUEST_PKGS[@]}")
mapfile -t pod_debs < <(download "${POD_PKGS[@]}")
work=$dir/build
rm -rf "$work"
mkdir -p "$work"
unpack "$work/rootfs" "${guest_debs[@]}"
unpack "$work/pod" "${pod_debs[@]}"
# Documentation and locales are of no use to a test guest.
rm -rf "$work"/{rootfs,pod}/usr/share/{doc,man,locale,info,lintian}

# The pods' image: one uncompressed layer (containerd unpacks it without gzip, which is slow under
# emulation), laid out as an OCI archive that `ctr images import` takes.
oci=$work/oci
mkdir -p "$oci/blobs/sha256"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/pod" -cf "$work/layer.tar" .
blob() { # file -> "sha256:<hex> <size>", stored under blobs/
  local h
  h=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$oci/blobs/sha256/$h"
  echo "sha256:$h $(stat -c %s "$1")"
}
read -r layer_digest layer_size < <(blob "$work/layer.tar")
ref=localhost/dranet-rdma/pod:1
printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/bin:/usr/sbin:/bin:/sbin"],"Cmd":["/bin/sleep","2147483"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$layer_digest" >"$work/config.json"
read -r config_digest config_size < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$work/manifest.json"
read -r manifest_digest manifest_size < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"1"}}]}' \
  "$manifest_digest" "$manifest_size" "$ref" >"$oci/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$oci/oci-layout"
mkdir -p "$work/rootfs/opt/images"
tar -C "$oci" -cf "$work/rootfs/opt/images/pod.tar" .

size_mb=$(($(du -sm "$work/rootfs" | cut -f1) + 256))
rm -f "$work/rootfs.ext4"
mke2fs -q -t ext4 -L dranet-guest -d "$work/rootfs" "$work/rootfs.ext4" "${size_mb}M" >/dev/null
mv "$work/rootfs.ext4" "$dir/rootfs.ext4"
key >"$dir/rootfs.key"
lists >"$dir/rootfs.lists"
rm -rf "$work"
echo "qemu-rootfs.sh: $dir/rootfs.ext4 (${size_mb} MiB; pods' image $ref)" >&2
