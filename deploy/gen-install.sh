#!/bin/bash
# Writes deploy/install.yaml from deploy/base/ (the files kustomization.yaml lists, in its order).
# A test fails when install.yaml and the base differ.
set -euo pipefail
cd "$(dirname "$0")"
{
  echo "# dranet-rs: everything a cluster needs. Generated from deploy/base/ (kubectl apply -k deploy/base"
  echo "# is the same); edit those files, then run deploy/gen-install.sh."
  for f in $(awk '/^resources:/ { on = 1; next } on && /^- / { print $2 } on && !/^- / { on = 0 }' base/kustomization.yaml); do
    echo "---"
    cat "base/$f"
  done
} > install.yaml
