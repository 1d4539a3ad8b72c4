#!/usr/bin/env bash
# The main job for now: a three-node Troupe cluster on this machine (a head and two worker
# nodes on loopback, each with its own resources), a driver running tasks on it, the cluster's
# status, and a clean stop. The training example (ResNet18 on FashionMNIST) joins once the train
# library lands.
#   examples/local_cluster.sh [path/to/troupe] [path/to/quickstart]
set -euo pipefail
TROUPE=${1:-bazel-bin/src/cli/troupe}
DRIVER=${2:-bazel-bin/examples/tasks/quickstart}
export TROUPE_TEMP_DIR=${TROUPE_TEMP_DIR:-$(mktemp -d /tmp/troupe-example.XXXXXX)}
PORT=${TROUPE_EXAMPLE_PORT:-6380}
trap '"$TROUPE" stop >/dev/null 2>&1 || true' EXIT

"$TROUPE" start --head --port="$PORT" --num-cpus=2 --resources='{"head_slot": 1}'
"$TROUPE" start --address="127.0.0.1:$PORT" --num-cpus=2 --num-gpus=1 --labels='{"role": "trainer"}'
"$TROUPE" start --address="127.0.0.1:$PORT" --num-cpus=2 --num-gpus=1 --labels='{"role": "trainer"}'
echo
echo "== a driver on the cluster"
TROUPE_ADDRESS="127.0.0.1:$PORT" "$DRIVER"
echo
sleep 1  # raylets report every 100 ms and idle leases return after 50 ms: let status catch up
"$TROUPE" status
echo
"$TROUPE" stop
