#!/bin/bash
# Installs what the dranet-nri integration test needs: containerd 1.7 (Debian trixie's build; bookworm
# only has 1.6, which lacks NRI), runc, CNI plugins, busybox for the test images, and a Python gRPC
# client with Debian's CRI API definitions. Idempotent and quiet when everything is already there.
# Needs root. The test (crates/dranet-nri/tests/containerd.rs) runs this itself; CI may run it ahead.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(cni)
[ -x /bin/busybox ] || need+=(busybox)
/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null || need+=(python)
[ -f /usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto ] || need+=(cri-api)
[ ${#need[@]} -eq 0 ] && exit 0
echo "containerd-nri.sh: installing (${need[*]})" >&2

export DEBIAN_FRONTEND=noninteractive
# trixie is offered by the same archive but not configured here: add it pinned low, so nothing is
# taken from it unless named as pkg/trixie (a plain install would otherwise upgrade libc). The
# archive's address and keyring are the ones this machine already uses for bookworm. Either kind of source file
# may be absent (awk then fails, which is not an error here).
archive() {
  # deb822 sources: the URIs of a stanza whose Suites include bookworm.
  awk 'BEGIN { RS = "" }
       /Suites:[^\n]*bookworm([ \n]|$)/ {
         u = ""; k = "/usr/share/keyrings/debian-archive-keyring.gpg"
         for (i = 1; i <= NF; i++) { if ($i == "URIs:") u = $(i + 1); if ($i == "Signed-By:") k = $(i + 1) }
         if (u != "") { print u, k; exit }
       }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
  # one-line sources: deb URI bookworm main
  awk '$1 == "deb" && $3 == "bookworm" { print $2, "/usr/share/keyrings/debian-archive-keyring.gpg"; exit }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
}
if ! grep -rqs 'trixie' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  read -r uri keyring < <(archive | head -n1) || true
  if [ -z "${uri:-}" ]; then
    echo "containerd-nri.sh: no bookworm archive in this machine's apt sources to add trixie from" >&2
    exit 1
  fi
  printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$uri" "$keyring" >/etc/apt/sources.list.d/dranet-trixie.sources
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >/etc/apt/preferences.d/dranet-trixie
fi
apt-get -qq update
apt-get -qq -y -t bookworm install --no-install-recommends \
  runc containernetworking-plugins iptables busybox-static iproute2 util-linux \
  python3 python3-grpcio python3-grpc-tools python3-pkg-resources \
  containerd/trixie golang-github-kubernetes-cri-api-dev/trixie golang-github-gogo-protobuf-dev >/dev/null
containerd --version >&2
