#!/bin/bash
# Runs bench/bench_harness_test.py (the benchmark harness on fake sides) with the system python3.
set -euo pipefail
dir="$(dirname "$0")"
exec python3 "$dir/bench_harness_test.py" -v
