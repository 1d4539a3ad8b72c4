#!/usr/bin/env bash
# The main job on a fresh machine: installs missing packages, builds Troupe, and runs the local
# cluster example (examples/local_cluster.sh): tasks, then ResNet18 on FashionMNIST trained by two
# data-parallel workers (a short run; TRAIN_FLAGS="--epochs=10 --limit-batches=0
# --lr-schedule=cosine" for the full one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bazel build -c opt --config=nocuda //src/cli:troupe //examples/tasks:quickstart \
    //examples/resnet18_fashion_mnist
bash examples/local_cluster.sh bazel-bin/src/cli/troupe bazel-bin/examples/tasks/quickstart \
    bazel-bin/examples/resnet18_fashion_mnist/resnet18_fashion_mnist
