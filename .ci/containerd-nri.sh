#!/bin/bash
# Installs what the dranet-nri integration test needs: containerd 1.7 (Debian trixie's build; bookworm
# only has 1.6, which lacks NRI), runc, CNI plugins, busybox for the test images, and a Python gRPC
# client with Debian's CRI API definitions. Idempotent and quiet when everything is already there.
# Needs root. The test (crates/dranet-nri/tests/it/containerd.rs) runs this itself; CI may run it ahead.
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
# trixie, pinned low: only packages named pkg/trixie come from it (a plain install would otherwise
# upgrade libc).
"$(dirname "$0")/apt-suite.sh" trixie
apt-get -qq update
apt-get -qq -y -t bookworm install --no-install-recommends \
  runc containernetworking-plugins iptables busybox-static iproute2 util-linux \
  python3 python3-grpcio python3-grpc-tools python3-pkg-resources \
  containerd/trixie golang-github-kubernetes-cri-api-dev/trixie golang-github-gogo-protobuf-dev >/dev/null
containerd --version >&2
