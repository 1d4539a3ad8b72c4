#!/usr/bin/env bash
# Cross-node object transfer (issue 14): Troupe vs Ray vs raw TCP between two network namespaces.
# Builds the Troupe CLI and the driver (-c opt), makes sure iperf3 and the Ray virtualenv exist
# (bench/setup_peers.sh, only when missing), then runs bench/transfer_bench.py, which prints the
# table. Needs root (network namespaces, scripts/netns.sh).
#   bash bench/transfer_bench.sh [transfer_bench.py flags, e.g. --iterations 3 --no-ray]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TROUPE_BENCH_VENV:-$HOME/.cache/troupe-bench-venv}
if [ ! -x "$VENV/bin/ray" ] || ! command -v iperf3 >/dev/null; then
  bash bench/setup_peers.sh "$VENV"
fi
bazel build -c opt --jobs="${BAZEL_JOBS:-2}" //src/cli:troupe //bench:transfer_bench
exec python3 bench/transfer_bench.py --ray "$VENV/bin/ray" --python "$VENV/bin/python" "$@"
