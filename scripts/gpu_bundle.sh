#!/usr/bin/env bash
# Makes the GPU bundle: one ignored folder, dist/gpu_bundle/, that a lent GPU machine (no Debian
# packages, no network, its own PyTorch for CUDA; see docs/gpu_check.md) can run Troupe's GPU
# check from:
#   dist/gpu_bundle/gpu_check.sh        the check (scripts/gpu_check.sh), run there as
#                                       `bash dist/gpu_bundle/gpu_check.sh`
#   dist/gpu_bundle/troupe-gpu.tar.gz   bin/ troupe, bundle_probe, and the GPU tests nccl_test,
#                                       cuda_status_test, cuda_device_memory_test, train_gpu_test;
#                                       lib/ libtroupe_gpu.so and every library ldd lists for them
#                                       except the C/C++ runtime's and the GPU driver's, CUDA's and
#                                       NCCL's (the machine's PyTorch provides those);
#                                       include/ troupe/*.h and absl/; source/ the LibTorch-facing
#                                       sources with gpu/CMakeLists.txt at the top, built there;
#                                       python/ddp_bench.py; data/ a FashionMNIST subset.
# The folder stays under 48 MiB so that it travels with the source tree (64 MiB in all).
#
#   bash scripts/gpu_bundle.sh                  builds with Bazel (-c opt), then assembles
#   bash scripts/gpu_bundle.sh --prebuilt=DIR --out=DIR --no-data
#                                               assembles from DIR/<package>/<target> (bazel-bin's
#                                               layout; gpu/bundle_test.sh passes its runfiles);
#                                               binaries that DIR lacks are left out
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

prebuilt="" out="$repo/dist/gpu_bundle" data=true
for arg in "$@"; do
  case "$arg" in
    --prebuilt=*) prebuilt="${arg#--prebuilt=}" ;;
    --out=*) out="${arg#--out=}" ;;
    --no-data) data=false ;;
    *) echo "gpu_bundle.sh: unknown argument '$arg' (see the comment at the top)" >&2; exit 2 ;;
  esac
done

command -v patchelf >/dev/null || { echo "gpu_bundle.sh: needs patchelf (scripts/install_deps.sh)" >&2; exit 1; }

# Targets, as paths under bazel-bin; the first three must be there.
required=(src/cli/troupe gpu/bundle_probe gpu/libtroupe_gpu.so)
optional=(src/collective/nccl_test src/collective/cuda_status_test
  src/collective/cuda_device_memory_test tests/train_gpu_test)
if [ -z "$prebuilt" ]; then
  [ -e /usr/local/cuda/include/nccl.h ] ||
    { echo "gpu_bundle.sh: needs the CUDA toolkit with NCCL at /usr/local/cuda" >&2; exit 1; }
  labels=()
  for path in "${required[@]}" "${optional[@]}"; do labels+=("//${path%/*}:${path##*/}"); done
  # Statically linked against Troupe (tests too: --dynamic_mode=off), so each stands alone.
  bazel build -c opt --dynamic_mode=off "${labels[@]}"
  prebuilt="$(bazel info -c opt bazel-bin)"
fi
for path in "${required[@]}"; do
  [ -f "$prebuilt/$path" ] || { echo "gpu_bundle.sh: $prebuilt/$path is missing" >&2; exit 1; }
done

stage="$(mktemp -d "${TMPDIR:-/tmp}/troupe-gpu-bundle.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/troupe-gpu"
mkdir -p "$root"/{bin,lib,include,source,python,data}

# Binaries and the library, stripped (the bundle's size limit; symbols stay for the dynamic linker).
for path in "${required[@]}" "${optional[@]}"; do
  [ -f "$prebuilt/$path" ] || continue
  name="${path##*/}"
  case "$name" in
    *.so) strip --strip-unneeded -o "$root/lib/$name" "$prebuilt/$path" ;;
    *) strip -o "$root/bin/$name" "$prebuilt/$path" ;;
  esac
done

# Every library the dynamic linker finds for them, except those every Linux has (the C and C++
# runtimes: a newer one runs code built against this one) and the GPU stack (the driver's, CUDA's
# and NCCL's, which must come from the machine that has the GPU).
system_lib='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libstdc\+\+\.|libgcc_s\.)'
gpu_lib='^(libcuda\.|libcudart\.|libnccl\.|libnvidia|libcublas|libnvrtc)'
for elf in "$root"/bin/* "$root"/lib/*.so; do
  ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname file; do
  if [[ "$soname" =~ $system_lib || "$soname" =~ $gpu_lib ]]; then continue; fi
  [ -e "$root/lib/$soname" ] || cp -L "$file" "$root/lib/$soname"
done
# Each finds the others by its own location (no LD_LIBRARY_PATH needed, so that programs the
# bundle's programs start, Python say, keep their own libraries): bin/ looks in ../lib, lib/ in
# itself. The GPU stack is looked up as usual (LD_LIBRARY_PATH, then the build's CUDA path).
for elf in "$root"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib:/usr/local/cuda/lib64' "$elf"; done
for elf in "$root"/lib/*; do patchelf --set-rpath '$ORIGIN:/usr/local/cuda/lib64' "$elf"; done
for elf in "$root"/bin/* "$root"/lib/*.so; do
  if ldd "$elf" | grep -q "not found"; then
    missing="$(ldd "$elf" | awk '/not found/ {print $1}' | grep -Ev "$gpu_lib" || true)"
    [ -z "$missing" ] || { echo "gpu_bundle.sh: $elf needs $missing, not found here" >&2; exit 1; }
  fi
done

# What the GPU machine compiles: the public headers, the third-party headers they and the sources
# include (msgpack-c, header-only, used with MSGPACK_NO_BOOST; absl's and zlib's, whose libraries are in
# lib/),
# and the LibTorch-facing sources at their repository paths. gpu/bundle_test.sh checks that
# nothing else outside the C/C++ runtime is included.
for dir in src/api/include src/collective/include src/train/include; do cp -r "$dir/troupe" "$root/include/"; done
cp -r /usr/include/absl /usr/include/msgpack /usr/include/msgpack.hpp /usr/include/zlib.h \
  /usr/include/zconf.h "$root/include/"
for file in src/train/torch/train_torch.cc src/train/worker.h src/common/flag_parser.h \
    src/common/flag_parser.cc \
    examples/fashion_mnist/fashion_mnist.cc examples/fashion_mnist/fashion_mnist.h \
    examples/fashion_mnist/run.cc examples/fashion_mnist/run.h \
    examples/resnet18_fashion_mnist/main.cc bench/train_bench.cc gpu/crash_trace.cc; do
  mkdir -p "$root/source/$(dirname "$file")"
  cp "$file" "$root/source/$file"
done
cp gpu/CMakeLists.txt "$root/CMakeLists.txt"
cp bench/ddp_bench.py "$root/python/"
cp scripts/gpu_check.sh "$root/gpu_check.sh"
{
  echo "commit $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "made $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cuda toolkit $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "nccl headers $(awk '/define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' /usr/local/cuda/include/nccl.h)"
} > "$root/MANIFEST"

# A FashionMNIST subset: the first 10,000 training images and the whole test set (IDX files as the
# example reads them, gzipped).
if $data; then
  python3 - "$root/data" <<'PY'
import gzip, struct, sys
src, dst, keep = "/usr/share/datasets/fashion-mnist", sys.argv[1], 10000
for name, limit in [("train-images-idx3-ubyte", keep), ("train-labels-idx1-ubyte", keep),
                    ("t10k-images-idx3-ubyte", None), ("t10k-labels-idx1-ubyte", None)]:
    raw = gzip.open(f"{src}/{name}.gz").read()
    magic, count = struct.unpack(">II", raw[:8])
    dims = (magic & 0xFF) - 1  # dimensions after the count
    header = 8 + 4 * dims
    item = 1
    for d in struct.unpack(">" + "I" * dims, raw[8:header]):
        item *= d
    n = count if limit is None else min(limit, count)
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as out:
        out.write(struct.pack(">II", magic, n) + raw[8:header] + raw[header:header + n * item])
PY
fi

mkdir -p "$out"
rm -f "$out/troupe-gpu.tar.gz" "$out/gpu_check.sh"
tar -C "$stage" -czf "$out/troupe-gpu.tar.gz" troupe-gpu
cp scripts/gpu_check.sh "$out/gpu_check.sh"
size=$(du -sb "$out" | cut -f1)
echo "gpu_bundle.sh: $out is $((size / 1024 / 1024)) MiB ($(tar -tzf "$out/troupe-gpu.tar.gz" | wc -l) files)"
if [ "$size" -gt $((48 * 1024 * 1024)) ]; then
  echo "gpu_bundle.sh: over the 48 MiB it may take (it must travel with the tree)" >&2
  exit 1
fi
