#!/bin/sh
# Side-by-side speed of dranet_alloc's allocator and the Kubernetes 1.34.9 scheduler's allocator
# (allocbench from the k8s kit) on identical inputs, per claim (issue 18).
#
#   scripts/alloc-side-by-side.sh [GO_ITERATIONS]     (default 300)
#
# Runs the criterion bench `alloc_side_by_side` (which writes the case files and a manifest),
# then allocbench on the same files for each claim in its three timing modes, and prints a table
# of p50 / criterion median pairs and their ratios:
#   cold      NewAllocator + Allocate, compiled CEL kept (allocbench's default; ours: a ProgramCache)
#   cold-cel  the same with every selector compiled anew (allocbench -cold-cel; ours: no cache)
#   warm      the allocator kept, Allocate only (allocbench -reuse; ours: the Allocator kept)
# Env: DRANET_K8S_KIT (default ../shared/k8s/kit.sh beside the repository), CARGO_TARGET_DIR,
# BENCH_ARGS (criterion args, default "--warm-up-time 1 --measurement-time 3").
set -eu
cd "$(dirname "$0")/.."
N=${1:-300}
KIT=${DRANET_K8S_KIT:-$PWD/../shared/k8s/kit.sh}
[ -x "$KIT" ] || { echo "alloc-side-by-side: no k8s kit at $KIT (set DRANET_K8S_KIT)" >&2; exit 2; }
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
# shellcheck disable=SC2086
cargo bench -p dranet-alloc --bench alloc_side_by_side -- ${BENCH_ARGS:---warm-up-time 1 --measurement-time 3} >&2
MANIFEST=$TARGET/tmp/alloc-side-by-side/manifest.tsv
median_us() { jq '.median.point_estimate / 1000' "$TARGET/criterion/$1/$2/new/estimates.json"; }
printf '| case | claim | scheduler cold | ours cold | ratio | scheduler cold-cel | ours cold-cel | ratio | scheduler warm | ours warm | ratio |\n'
printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
while IFS="$(printf '\t')" read -r case claim files; do
    # shellcheck disable=SC2086
    go() { "$KIT" allocbench -pretty=false -bench "$N" -name "$claim" "$@" $files | jq '.bench.p50Us'; }
    g_cold=$(go)
    g_cel=$(go -cold-cel)
    g_warm=$(go -reuse)
    o_cold=$(median_us "$case-$claim" cold)
    o_cel=$(median_us "$case-$claim" cold-cel)
    o_warm=$(median_us "$case-$claim" warm)
    awk -v c="$case" -v n="$claim" -v gc="$g_cold" -v oc="$o_cold" -v gl="$g_cel" -v ol="$o_cel" \
        -v gw="$g_warm" -v ow="$o_warm" 'function us(x) { return x < 10 ? sprintf("%.1f µs", x) : sprintf("%.0f µs", x) }
        BEGIN { printf "| %s | %s | %s | %s | %.0f× | %s | %s | %.0f× | %s | %s | %.0f× |\n",
            c, n, us(gc), us(oc), gc / oc, us(gl), us(ol), gl / ol, us(gw), us(ow), gw / ow }'
done < "$MANIFEST"
