#!/usr/bin/env bash
# All-reduce between members in separate network namespaces (each with its own /dev/shm, so they
# talk TCP), on the Mesh directly: the transfer loop without a cluster around it (root).
#   bazel build -c opt //bench:mesh_allreduce_bench
#   bash bench/mesh_allreduce_bench.sh [RANKS] [extra flags for mesh_allreduce_bench...]
# PREFIX (env, default mab) names the namespaces; PERF="perf record -g -o F" wraps rank 0; BIN
# (env) runs another build of the member.
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${1:-2}
shift || true
PREFIX=${PREFIX:-mab}
BIN=${BIN:-$(pwd)/bazel-bin/bench/mesh_allreduce_bench}
KV=$(mktemp -d /tmp/mesh_allreduce_bench.XXXXXX)
trap 'rm -rf "$KV"' EXIT
[ -e "/run/netns/${PREFIX}n${RANKS}" ] || scripts/netns.sh up "$PREFIX" "$RANKS" --private-shm >/dev/null
pids=()
for ((r = 0; r < RANKS; r++)); do
  wrap=()
  if [ "$r" = 0 ] && [ -n "${PERF:-}" ]; then read -ra wrap <<<"$PERF"; fi
  scripts/netns.sh exec "$PREFIX" $((r + 1)) -- "${wrap[@]}" "$BIN" --rank=$r --ranks="$RANKS" \
    --kv-dir="$KV" --ip="$(scripts/netns.sh ip "$PREFIX" $((r + 1)))" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
