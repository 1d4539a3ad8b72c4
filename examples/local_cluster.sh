#!/usr/bin/env bash
# The main job: a three-node Troupe cluster on this machine (a head and two worker nodes on
# loopback, each with its own resources), a driver running tasks on it, data-parallel training
# of ResNet18 on FashionMNIST across two worker actors (short by default: TRAIN_FLAGS adds or
# overrides flags, e.g. TRAIN_FLAGS="--epochs=10 --limit-batches=0 --lr-schedule=cosine" for the
# full run), the cluster's status, and a clean stop.
#   examples/local_cluster.sh [path/to/troupe] [path/to/quickstart] [path/to/resnet18_fashion_mnist]
set -euo pipefail
TROUPE=${1:-bazel-bin/src/cli/troupe}
DRIVER=${2:-bazel-bin/examples/tasks/quickstart}
TRAINER=${3:-bazel-bin/examples/resnet18_fashion_mnist/resnet18_fashion_mnist}
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
echo "== ResNet18 on FashionMNIST, 2 data-parallel workers"
# shellcheck disable=SC2086
TROUPE_ADDRESS="127.0.0.1:$PORT" "$TRAINER" --num-workers=2 \
    --storage-path="$TROUPE_TEMP_DIR/results" ${TRAIN_FLAGS:-}
echo
sleep 1  # raylets report every 100 ms and idle leases return after 50 ms: let status catch up
"$TROUPE" status
echo
"$TROUPE" stop
