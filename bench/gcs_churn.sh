#!/usr/bin/env bash
# GCS memory through actor and job churn: starts a one-node head, runs ROUNDS drivers that each
# create N actors (a new job each; the actors die with it), and prints the GCS's anonymous
# memory (RssAnon) 3 s after each driver exited, then 15 s after the last. A GCS that forgets
# what it may levels off; one that keeps every dead actor or finished job's records grows.
# No Ray side: Ray's actors are Python processes, and 1,000 of them do not fit this machine.
#
#   bazel build -c opt --config=nocuda //src/cli:troupe //bench:scale_bench
#   bash bench/gcs_churn.sh [--rounds=8] [--actors=1000] [-- extra `troupe start` flags]
#   e.g. bash bench/gcs_churn.sh --rounds=10 -- --max-dead-actors=1000 --max-task-events=5000
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=8 actors=1000
troupe=${TROUPE:-bazel-bin/src/cli/troupe} bench=${SCALE_BENCH:-bazel-bin/bench/scale_bench}
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds=*) rounds=${1#*=} ;;
    --actors=*) actors=${1#*=} ;;
    --) shift; break ;;
    *) echo "unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
  shift
done
for binary in "$troupe" "$bench"; do
  [ -x "$binary" ] || { echo "$binary missing: build it first (see the top of $0)" >&2; exit 2; }
done
temp=$(mktemp -d /tmp/troupe-churn-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() { "$troupe" stop --temp-dir="$temp" >/dev/null 2>&1 || true; rm -rf "$temp"; }
trap cleanup EXIT
"$troupe" start --head --port="$port" --http-port=0 --num-cpus=2 --temp-dir="$temp" "$@" >/dev/null
session="$temp/session_latest"
gcs=$(cut -d' ' -f1 "$session/pids/gcs.pid")
anon_mib() { awk '/RssAnon/ {printf "%.1f", $2 / 1024}' "/proc/$gcs/status"; }
export TROUPE_ADDRESS="127.0.0.1:$port" TROUPE_TOKEN="$(cat "$session/token")"
sleep 2
echo "GCS anonymous memory: idle $(anon_mib) MiB"
for round in $(seq 1 "$rounds"); do
  "$bench" --mode=many_actors --n="$actors" --hold=1 >/dev/null
  sleep 3
  echo "after round $round ($actors actors, one job): $(anon_mib) MiB"
done
sleep 15
echo "15 s after the last round: $(anon_mib) MiB"
