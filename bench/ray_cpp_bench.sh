#!/usr/bin/env bash
# Ray's C++ API as a peer: builds bench/ray_cpp_bench.cc with g++ against the `ray-cpp` wheel in
# the benchmarks' virtualenv (bench/setup_peers.sh installs it; no Bazel, unlike Ray's template)
# and runs it against a `ray start --head --num-cpus=2` cluster of its own (with {"custom": 100}
# for the placement groups, as ray_perf.py's ray.init(resources=...)).
#
#   bash bench/ray_cpp_bench.sh build             # the driver and ray_cpp_bench.so (its workers' code)
#   bash bench/ray_cpp_bench.sh run [flags]       # builds if stale, starts a head, runs, stops it
#       flags go to the program: --seconds=S (per metric, default 2), --only=metric,metric
#
# Prints the program's JSON lines (one per metric) on stdout. The head is `ray start --head
# --block` in its own temp dir, stopped with SIGTERM to that process only (never `ray stop`, which
# kills every Ray process on the machine).
# Environment: TROUPE_BENCH_VENV (default ~/.cache/troupe-bench-venv), RAY_CPP_BENCH_OUT (where
# the binaries go, default ~/.cache/troupe-ray-cpp-bench), CXX (default g++).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TROUPE_BENCH_VENV:-$HOME/.cache/troupe-bench-venv}
OUT=${RAY_CPP_BENCH_OUT:-$HOME/.cache/troupe-ray-cpp-bench}
CXX=${CXX:-g++}
SOURCES=(bench/ray_cpp_bench.cc bench/bench_util.h)

die() {
  echo "ray_cpp_bench.sh: $*" >&2
  exit 1
}

ray_cpp_dir() {
  [ -x "$VENV/bin/python" ] || die "no virtualenv at $VENV: run bash bench/setup_peers.sh"
  local dir
  dir=$("$VENV/bin/python" -c 'import os, ray; print(os.path.join(os.path.dirname(ray.__file__), "cpp"))') ||
    die "Ray is not importable from $VENV/bin/python: run bash bench/setup_peers.sh"
  [ -f "$dir/include/ray/api.h" ] && [ -f "$dir/lib/libray_api.so" ] ||
    die "Ray's C++ API is not installed in $VENV ($dir/include/ray/api.h or lib/libray_api.so missing): run bash bench/setup_peers.sh (pip install ray-cpp)"
  echo "$dir"
}

build() {
  local cpp
  cpp=$(ray_cpp_dir)
  mkdir -p "$OUT"
  local stale=0 f
  for f in "${SOURCES[@]}" "$cpp/lib/libray_api.so"; do
    [ "$OUT/ray_cpp_bench" -nt "$f" ] && [ "$OUT/ray_cpp_bench.so" -nt "$f" ] || stale=1
  done
  [ "$stale" = 1 ] || return 0
  echo "ray_cpp_bench.sh: building $OUT/ray_cpp_bench{,.so} against $cpp" >&2
  # The wheel's libray_api.so is built with the pre-C++11 std::string ABI (Ray's template sets
  # the same define); one object, position-independent, linked as the driver and as the library
  # the C++ workers load from the code search path.
  "$CXX" -std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I . -isystem "$cpp/include" \
    -c bench/ray_cpp_bench.cc -o "$OUT/ray_cpp_bench.o"
  local link=(-L "$cpp/lib" -lray_api "-Wl,-rpath,$cpp/lib" -pthread)
  "$CXX" "$OUT/ray_cpp_bench.o" -o "$OUT/ray_cpp_bench.tmp" "${link[@]}"
  "$CXX" -shared "$OUT/ray_cpp_bench.o" -o "$OUT/ray_cpp_bench.so.tmp" "${link[@]}"
  mv "$OUT/ray_cpp_bench.so.tmp" "$OUT/ray_cpp_bench.so"
  mv "$OUT/ray_cpp_bench.tmp" "$OUT/ray_cpp_bench"
  rm -f "$OUT/ray_cpp_bench.o"
}

# Stops the `ray start --block` process $1 (SIGTERM: it stops the processes it started) and
# removes its temp dir $2 once no process of that cluster is left writing there.
stop_head() {
  local status=$? i
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for ((i = 0; i < 60; ++i)); do
    pgrep -f "$2" >/dev/null || break
    sleep 0.5
  done
  rm -rf "$2" 2>/dev/null || { sleep 1; rm -rf "$2" || true; }
  exit "$status"
}

run() {
  build
  local port temp head i
  port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  temp=$(mktemp -d /tmp/raycpp.XXXXXX)  # short: Ray's unix socket paths live under it
  # Token authentication on, as `ray.init()` turns it on for a new local cluster (the Python
  # side), with a token of this run's own: `ray start` would otherwise turn it on only if
  # ~/.ray/auth_token happens to exist, and Ray's C++ driver sends a token only when told to.
  export RAY_AUTH_MODE=token
  RAY_AUTH_TOKEN=$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(32))')
  export RAY_AUTH_TOKEN
  "$VENV/bin/ray" start --head --block --port="$port" --num-cpus=2 --resources='{"custom": 100}' \
    --include-dashboard=false \
    --disable-usage-stats --temp-dir="$temp" > "$temp/ray_start.log" 2>&1 &
  head=$!
  # shellcheck disable=SC2064  # expand now: the trap must stop this head and remove this dir
  trap "stop_head $head '$temp'" EXIT
  for ((i = 0; i < 120; ++i)); do
    grep -q "Ray runtime started" "$temp/ray_start.log" && break
    kill -0 "$head" 2>/dev/null || { cat "$temp/ray_start.log" >&2; die "ray start --head failed"; }
    sleep 0.5
  done
  grep -q "Ray runtime started" "$temp/ray_start.log" ||
    { cat "$temp/ray_start.log" >&2; die "ray start --head did not come up within 60 s"; }
  # The GCS address as `ray start` wrote it (the node's IP, not 127.0.0.1: Ray's C++ driver
  # replaces 127.0.0.1 by an IP of its own choosing and then finds no node to connect to).
  local address rc=0
  address=$(cat "$temp/ray_current_cluster")
  "$OUT/ray_cpp_bench" --address="$address" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "ray_cpp_bench.sh: the driver failed ($rc); the cluster's logs:" >&2
    tail -n 20 "$temp"/session_latest/logs/*.err "$temp"/session_latest/logs/cpp*.log 2>/dev/null >&2 || true
  fi
  return "$rc"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) die "usage: bash bench/ray_cpp_bench.sh build | run [--seconds=S] [--only=metric,...]" ;;
esac
