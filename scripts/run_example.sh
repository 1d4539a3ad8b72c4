#!/usr/bin/env bash
# The main job on a fresh machine: installs missing packages, builds Troupe, and runs the local
# cluster example (examples/local_cluster.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bazel build -c opt //src/cli:troupe //examples/tasks:quickstart
bash examples/local_cluster.sh bazel-bin/src/cli/troupe bazel-bin/examples/tasks/quickstart
