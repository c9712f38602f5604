#!/bin/sh
# Side-by-side speed of dranet_core::alloc and the Kubernetes 1.34.9 scheduler's allocator
# (allocbench from the k8s kit) on identical inputs, per claim (issue 18).
#
#   scripts/alloc-side-by-side.sh [GO_ITERATIONS]     (default 300)
#
# Runs the criterion bench `alloc_side_by_side` (which writes the case files and a manifest),
# then `allocbench -bench N -name CLAIM` on the same files for each claim, and prints a table:
# Go p50 (NewAllocator + Allocate), ours cold (index built from the typed slices + compile +
# allocate) and warm (index kept) criterion medians, and the ratios.
# Env: DRANET_K8S_KIT (default ../shared/k8s/kit.sh beside the repository), CARGO_TARGET_DIR,
# BENCH_ARGS (criterion args, default "--warm-up-time 1 --measurement-time 3").
set -eu
cd "$(dirname "$0")/.."
N=${1:-300}
KIT=${DRANET_K8S_KIT:-$PWD/../shared/k8s/kit.sh}
[ -x "$KIT" ] || { echo "alloc-side-by-side: no k8s kit at $KIT (set DRANET_K8S_KIT)" >&2; exit 2; }
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
# shellcheck disable=SC2086
cargo bench -p dranet-core --bench alloc_side_by_side -- ${BENCH_ARGS:---warm-up-time 1 --measurement-time 3} >&2
MANIFEST=$TARGET/tmp/alloc-side-by-side/manifest.tsv
median_us() { jq '.median.point_estimate / 1000' "$TARGET/criterion/$1/$2/new/estimates.json"; }
printf '| case | claim | scheduler p50 | ours cold | ours warm | ratio cold | ratio warm |\n'
printf '|---|---|---:|---:|---:|---:|---:|\n'
while IFS="$(printf '\t')" read -r case claim files; do
    # shellcheck disable=SC2086
    go=$("$KIT" allocbench -pretty=false -bench "$N" -name "$claim" $files | jq '.bench.p50Us')
    cold=$(median_us "$case-$claim" cold)
    warm=$(median_us "$case-$claim" warm)
    awk -v c="$case" -v n="$claim" -v g="$go" -v co="$cold" -v w="$warm" 'BEGIN {
        printf "| %s | %s | %.0f µs | %.1f µs | %.1f µs | %.0f× | %.0f× |\n", c, n, g, co, w, g / co, g / w }'
done < "$MANIFEST"
