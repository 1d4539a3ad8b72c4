#!/usr/bin/env bash
# Installs the peers the benchmarks compare against into a virtualenv (PyPI): Ray and numpy.
# Idempotent. Usage: bash bench/setup_peers.sh [venv dir]
set -euo pipefail
VENV=${1:-$HOME/.cache/troupe-bench-venv}
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -c "import ray.job_submission, aiohttp, numpy" 2>/dev/null ||
  "$VENV/bin/pip" install -q "ray[default]" numpy  # [default]: the jobs SDK, for tests/jobs_test.cc
echo "$VENV/bin/python"
