#!/usr/bin/env bash
# Installs everything the benchmarks run besides Troupe itself, so each bench/*.py works on a
# fresh machine. Idempotent; prints the virtualenv's python last.
#   Debian packages (through scripts/install_deps.sh, which also installs Troupe's build
#   dependencies, LibTorch for //bench:train_bench included):
#     python3-torch        bench/gloo_bench.py (run by collective_bench.py), bench/ddp_bench.py
#     python3-torchvision  bench/ddp_bench.py's ResNet18 (run by train_bench.py)
#     python3-venv         the virtualenv below
#     iperf3               bench/transfer_bench.py's raw TCP figure
#   PyPI, into a virtualenv (default ~/.cache/troupe-bench-venv):
#     ray[default]==2.60.0 bench/ray_microbench.py (run by microbenchmark.py), the `ray` CLI for
#                          cluster_start.py (--ray VENV/bin/ray), and the job SDK and CLI for
#                          the Ray-compatibility tests (installed by scripts/install_ray.sh)
#     numpy                bench/ray_microbench.py
# Usage: bash bench/setup_peers.sh [venv dir]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-$HOME/.cache/troupe-bench-venv}
NUMPY_VERSION=2.4.6

bash scripts/install_deps.sh python3-torch python3-torchvision python3-venv iperf3

# Ray (the version docs/benchmarks.md reports) into the virtualenv: scripts/install_ray.sh, which
# scripts/test.sh also runs for the Ray-compatibility tests.
bash scripts/install_ray.sh "$VENV"
"$VENV/bin/python" - "$NUMPY_VERSION" 2>/dev/null <<'PY' ||
import sys
import numpy
sys.exit(0 if numpy.__version__ == sys.argv[1] else 1)
PY
  "$VENV/bin/pip" install -q "numpy==$NUMPY_VERSION"
echo "$VENV/bin/python"
