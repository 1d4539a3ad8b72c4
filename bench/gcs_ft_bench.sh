#!/usr/bin/env bash
# GCS fault tolerance on Redis (issues 13, 32), Troupe and Ray side by side in one run: builds the
# Troupe CLI and driver (-c opt), makes sure the Ray virtualenv exists (bench/setup_peers.sh, only
# when it is missing), runs bench/gcs_ft_bench.py and prints its tables and ratios. Needs
# /usr/bin/redis-server (Debian's redis-server); every head gets its own private one.
#   bash bench/gcs_ft_bench.sh [gcs_ft_bench.py flags, e.g. --quick, --json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TROUPE_BENCH_VENV:-$HOME/.cache/troupe-bench-venv}
if [ ! -x /usr/bin/redis-server ]; then bash scripts/install_deps.sh redis-server; fi
if [ ! -x "$VENV/bin/ray" ]; then bash bench/setup_peers.sh "$VENV"; fi
bazel build -c opt --jobs="${BAZEL_JOBS:-2}" //src/cli:troupe //bench:gcs_ft_bench
exec python3 bench/gcs_ft_bench.py --ray "$VENV/bin/ray" --python "$VENV/bin/python" "$@"
