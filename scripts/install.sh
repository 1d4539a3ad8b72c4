#!/usr/bin/env bash
# Builds the Troupe SDK (optimised, CPU) and installs it under a prefix (docs/sdk.md):
#
#   bash scripts/install.sh --prefix=DIR [--destdir=DIR] [--libdir=lib] [--jobs=N]
#
# DIR/bin/troupe, DIR/lib/libtroupe.so* and libtroupe_train.so*, DIR/include/troupe/*.h,
# DIR/lib/cmake/Troupe/ (find_package(Troupe)) and DIR/lib/pkgconfig/troupe.pc. --destdir stages
# the tree for a package (written under DESTDIR/DIR, configured for DIR). The version is the
# repository's VERSION file.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="" layout_args=() jobs=2
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix="$(realpath -m "${arg#*=}")" ;;
    --destdir=* | --libdir=*) layout_args+=("$arg") ;;
    --jobs=*) jobs="${arg#*=}" ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$prefix" ]; then
  echo "install.sh: --prefix=DIR is required (see --help)" >&2
  exit 2
fi

# -c opt: optimised, and what the .deb ships. --config=nocuda: the CLI's collectives, like the
# SDK libraries (sdk/BUILD), must not need CUDA's libraries, which no Debian package provides.
targets=(//sdk:libtroupe.so //sdk:libtroupe_train.so //src/cli:troupe)
bazel build -c opt --config=nocuda --jobs="$jobs" "${targets[@]}"
bin_root="$(bazel info -c opt --config=nocuda bazel-bin)"

bash sdk/layout.sh --bin-root="$bin_root" --src-root="$PWD" --prefix="$prefix" "${layout_args[@]}"
echo "Installed Troupe $(cat VERSION) under ${prefix} (see docs/sdk.md)"
