#!/usr/bin/env bash
# The GPU bundle is self-contained (scripts/gpu_bundle.sh, docs/gpu_check.md): assembled from this
# build's troupe, bundle_probe and libtroupe_gpu.so, unpacked into a bare Debian 12 root (debootstrap
# minbase: no -dev package, none of the build's libraries), where its CPU paths run: a head and a
# worker node start, a task, a nested task and an actor run, the programs finding the bundle's
# libraries by their RUNPATH. Only the GPU stack (CUDA's runtime,
# NCCL) may be missing there, which the GPU machine's PyTorch provides. Needs root; the first run
# needs debootstrap and Debian's mirror (the root is cached, scripts/debian_root.sh).
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "bundle_test.sh needs root (chroot, mount)"; exit 1; }
runfiles="${RUNFILES_DIR:-$0.runfiles}/troupe"
# The repository itself (the bundle takes sources from it): where the runfiles' links point.
repo="$(cd "$(dirname "$(readlink -f "$runfiles/scripts/gpu_bundle.sh")")/.." && pwd)"
work="${TEST_TMPDIR:-$(mktemp -d)}"

echo "== scripts/gpu_bundle.sh from this build's binaries"
bash "$repo/scripts/gpu_bundle.sh" --prebuilt="$runfiles" --out="$work/bundle" --no-data
for path in bin/troupe bin/bundle_probe lib/libtroupe_gpu.so include/troupe/api.h \
    include/absl/status/status.h source/src/train/torch/train_torch.cc \
    source/examples/fashion_mnist/run.cc source/bench/train_bench.cc CMakeLists.txt \
    python/ddp_bench.py gpu_check.sh MANIFEST; do
  tar -tzf "$work/bundle/troupe-gpu.tar.gz" "troupe-gpu/$path" >/dev/null 2>&1 ||
    { echo "FAIL: the bundle lacks $path"; exit 1; }
done

echo "== the sources built on the GPU machine include only the bundle's headers, the C/C++ runtime's and LibTorch's"
# Every include of those sources but LibTorch's (torch/, c10/, ATen/, and the two headers that
# pull it in), compiled
# here with the bundle's include/ first: a header found outside the bundle must belong to the C
# or C++ runtime (the GPU machine has those), or the bundle lacks it.
mkdir -p "$work/headers"
tar -C "$work/headers" -xzf "$work/bundle/troupe-gpu.tar.gz" troupe-gpu/include troupe-gpu/source
unpacked="$work/headers/troupe-gpu"
find "$unpacked/source" -name '*.cc' -o -name '*.h' | xargs grep -h '^#include' |
  grep -vE 'torch|c10/|ATen/|fashion_mnist\.h' | sort -u > "$work/headers/all.cc"
[ -s "$work/headers/all.cc" ] || { echo "FAIL: no includes found in the bundle's sources"; exit 1; }
g++ -std=c++17 -fsyntax-only -H -DMSGPACK_NO_BOOST -I"$unpacked/source" -I"$unpacked/include" \
  "$work/headers/all.cc" 2> "$work/headers/tree.txt" || { cat "$work/headers/tree.txt"; exit 1; }
outside="$(sed -n 's/^\.\+ //p' "$work/headers/tree.txt" | grep -v "^$unpacked/" | xargs -r realpath | sort -u)"
[ -n "$outside" ] || { echo "FAIL: g++ -H listed no header outside the bundle (not even <string>?)"; exit 1; }
foreign="$(xargs -r dpkg -S <<< "$outside" 2>&1 | grep -vE '^(libc6-dev|libstdc\+\+-[0-9]+-dev|linux-libc-dev|libgcc-[0-9]+-dev)(:[a-z0-9]+)?: ' || true)"
[ -z "$foreign" ] || { echo "FAIL: headers the GPU machine may lack (the bundle must carry them):"; echo "$foreign"; exit 1; }
echo "$(wc -l < "$work/headers/all.cc") includes; outside the bundle only the C/C++ runtime's ($(wc -l <<< "$outside") headers)"

echo "== the programs built there link libstdc++ ahead of LibTorch"
# PyTorch's wheels export their own std::filesystem functions, which crash when called (see
# gpu/CMakeLists.txt): libstdc++ must come first on the link line. Configured here against
# Debian's LibTorch (Makefiles: each program's link line is in link.txt).
tar -C "$work/headers" -xzf "$work/bundle/troupe-gpu.tar.gz" troupe-gpu/CMakeLists.txt troupe-gpu/lib
cmake -S "$unpacked" -B "$work/cmake" > "$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
for program in resnet18_fashion_mnist train_bench; do
  link="$(cat "$work/cmake/CMakeFiles/$program.dir/link.txt")"
  before_torch="${link%%libtorch*}"
  [[ "$before_torch" != "$link" && "$before_torch" == *"-lstdc++"* ]] ||
    { echo "FAIL: $program does not link libstdc++ before LibTorch: $link"; exit 1; }
done

source "$repo/scripts/debian_root.sh"
root="$(mktemp -d /tmp/troupe-bundle-root.XXXXXX)"
trap 'debian_root_cleanup "$root"' EXIT
debian_root_make "$root"
debian_root_mount "$root" proc /proc -t proc
debian_root_mount "$root" /dev /dev --bind
debian_root_mount "$root" tmpfs /dev/shm -t tmpfs  # the node's object store, private to this root
debian_root_mount "$root" tmpfs /tmp -t tmpfs
tar -C "$root/opt" -xzf "$work/bundle/troupe-gpu.tar.gz"

in_root() {  # runs bash -c "$1" in the root: loopback only, own PIDs, no environment of ours
  unshare --net --pid --fork --mount --mount-proc="$root/proc" -- \
    bash -c 'ip link set lo up && exec "$@"' _ chroot "$root" /usr/bin/env -i \
    PATH=/opt/troupe-gpu/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TROUPE_TEMP_DIR=/tmp/troupe \
    bash -euo pipefail -c "$1"
}

echo "== the root is bare: no -dev package, and troupe cannot start away from the bundle's lib/"
dev_packages="$(chroot "$root" dpkg-query -W -f='${Package}\n' | grep -- '-dev$' || true)"
[ -z "$dev_packages" ] || { echo "FAIL: the root has -dev packages: $dev_packages"; exit 1; }
if in_root 'cp /opt/troupe-gpu/bin/troupe /tmp/troupe-alone && /tmp/troupe-alone --version' >/dev/null 2>&1; then
  echo "FAIL: troupe ran without the bundle's lib/: the root has its libraries, so this proves nothing"
  exit 1
fi

echo "== every library the bundle's programs need is in it, but CUDA's and NCCL's"
missing="$(in_root 'for f in /opt/troupe-gpu/bin/* /opt/troupe-gpu/lib/libtroupe_gpu.so; do
    ldd "$f" | awk -v f="$f" "/not found/ {print f \": \" \$1}"; done')"
echo "${missing:-(nothing missing)}"
unexpected="$(grep -vE ': (libcudart|libnccl)\.' <<< "$missing" | grep . || true)"
[ -z "$unexpected" ] || { echo "FAIL: missing from the bundle: $unexpected"; exit 1; }

echo "== in the root: a head, a worker node, a task, a nested task and an actor"
in_root '
  troupe start --head --num-cpus=1 >/tmp/head.log 2>&1 || { cat /tmp/head.log; exit 1; }
  troupe start --address=127.0.0.1:6380 --num-cpus=1 >/tmp/worker.log 2>&1 || { cat /tmp/worker.log; exit 1; }
  troupe status | tee /tmp/status.txt
  grep -q "^2 alive" /tmp/status.txt || { echo "FAIL: not 2 alive nodes"; exit 1; }
  TROUPE_ADDRESS=auto bundle_probe basics | tee /tmp/probe.txt
  grep -q "^basics ok" /tmp/probe.txt
  troupe stop
' || { echo "FAIL: the bundle's CPU paths in the bare root"; exit 1; }
echo "bundle_test: the GPU bundle runs its CPU paths in a bare Debian 12 root"
