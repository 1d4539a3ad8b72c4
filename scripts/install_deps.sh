#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Troupe builds and tests with. Idempotent: does nothing when
# everything is present, and runs `apt-get update` only when something is missing. Package names
# given as arguments are installed too (bench/setup_peers.sh passes the benchmarks' own).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-rules-java   # Bazel 4.2.3, offline
  g++ clang protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libhiredis-dev redis-server libmsgpack-cxx-dev libcpp-httplib-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev python3
  libboost-dev libssl-dev                           # Boost.Beast/Asio (HTTP, WebSocket) with OpenSSL
  libtorch-dev zlib1g-dev dataset-fashion-mnist     # the train library and its examples
  python3-torch                                     # DDP/gloo scripts for the launcher tests
  prometheus curl                                   # scraping /metrics in the jobs tests
  chromium chromium-driver python3-selenium         # the dashboard's browser test
  cmake pkg-config dpkg-dev                         # the SDK tests and the .deb (docs/sdk.md)
  python3-yaml python3-jsonschema                   # k8s_manifests_test's schema checks
  python3-venv                                      # the Ray virtualenv (scripts/install_ray.sh)
  patchelf debootstrap                              # the GPU bundle and its bare-root test
)
PACKAGES+=("$@")

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing missing packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
