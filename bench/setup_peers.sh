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
#     ray-cpp (same version as ray)  Ray's C++ API (headers, libray_api.so, `ray cpp`, the C++
#                          workers' default_worker) for bench/ray_cpp_bench.sh
#     ray[train] (same version as ray)  Ray Train's own dependencies (pandas, pyarrow, fsspec ...)
#                          for bench/elastic_peer_train.py (run by elastic_bench.py)
#   Debian's torch, exposed to the virtualenv (Ray Train's workers import it): a .pth file adds
#   VENV/debian-torch, which holds only a link to Debian's torch package, so nothing else of
#   /usr/lib/python3/dist-packages (Debian's numpy, ...) shadows the virtualenv's packages.
#   (PyPI's torch wheels would pull gigabytes of CUDA libraries.)
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
# Ray's C++ API, pinned to the installed Ray's version (the wheel adds ray/cpp/ to that package,
# which `ray start` then uses to start C++ workers).
"$VENV/bin/python" - 2>/dev/null <<'PY' ||
import importlib.metadata, os, sys
import ray
cpp = os.path.join(os.path.dirname(ray.__file__), "cpp", "include", "ray", "api.h")
sys.exit(0 if importlib.metadata.version("ray-cpp") == ray.__version__ and os.path.exists(cpp) else 1)
PY
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "ray-cpp==$("$VENV/bin/python" -c 'import ray; print(ray.__version__)')"

# Ray Train's dependencies, at the installed Ray's version.
"$VENV/bin/python" -c 'import ray.train' 2>/dev/null ||
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "ray[train]==$("$VENV/bin/python" -c 'import ray; print(ray.__version__)')"
# Debian's torch for the virtualenv: built for Debian's python3, so the versions must match.
venv_version=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
debian_version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$venv_version" != "$debian_version" ]; then
  echo "setup_peers.sh: $VENV runs Python $venv_version, Debian's torch is built for" \
    "$debian_version: remove $VENV and run this again" >&2
  exit 1
fi
mkdir -p "$VENV/debian-torch"
ln -sfn /usr/lib/python3/dist-packages/torch "$VENV/debian-torch/torch"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$VENV/debian-torch" > "$site/debian-torch.pth"
"$VENV/bin/python" -c 'import torch, ray.train.torch' || {
  echo "setup_peers.sh: Debian's torch does not import in $VENV (see above)" >&2
  exit 1
}
echo "$VENV/bin/python"
