#!/usr/bin/env bash
# Runs every benchmark, each beside its peers in the same run (Ray through its Python API and its
# C++ API, PyTorch's gloo and DDP, plain LibTorch, raw TCP, torchrun and Ray Train through worker
# failures), and writes one results file per benchmark to bench/results/<UTC date>/ (quick runs:
# bench/results/<UTC date>-quick/), with each program's printed output (<name>.log) and
# machine.txt (the machine, the peers' versions, the load). Then prints the summary tables
# (bench/summarize.py); a full run also rewrites the generated parts of docs/benchmarks.md and
# README.md from them.
#
#   bash bench/setup_peers.sh             # once per machine: Ray, ray-cpp, Ray Train, torch ...
#   bash bench/run_all.sh                 # every benchmark but the elastic_bench ones (about
#                                         # 47.5 minutes on the 2-core VM, 2026-11-28, most of
#                                         # them Ray's side; docs/benchmarks.md says where)
#   bash bench/run_all.sh --only=elastic_bench  # training through failures beside torchrun and
#                                         # Ray Train, Troupe's elastic group (3 to 4 workers):
#                                         # its own command (3 rounds of 3 sides x 4 scenarios,
#                                         # each training ResNet18: 24 minutes)
#   bash bench/run_all.sh --only=elastic_bench_netns  # a whole node dies under Troupe's elastic
#                                         # group (3 namespaced nodes; 3 rounds, 2 minutes)
#   bash bench/run_all.sh --only=elastic_bench_chaos  # the long chaos run: a worker killed every
#                                         # 10 s through 2 epochs, beside 2 failure-free epochs
#                                         # (Troupe only; about 23 minutes)
#   bash bench/run_all.sh --quick         # fewer rounds and sizes, elastic_bench's recovery
#                                         # scenario included: a check that every benchmark
#                                         # runs, not figures to quote
#   bash bench/run_all.sh --only=microbenchmark,tls_bench [--out=DIR] [--no-docs]
#
# Needs root (network namespaces for the cross-host benchmarks). Run it on a quiet machine: every
# results file records the load average, and figures from a loaded machine are marked as such.
# A benchmark that fails is reported at the end (and the run exits 1); the others still run.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=false
only=""
out=""
update_docs=true
while [ $# -gt 0 ]; do
  arg="$1"
  shift
  case "$arg" in
    --only | --out)  # also written as --only=X, --out=X
      if [ $# -eq 0 ] || [ "${1#--}" != "$1" ]; then
        echo "run_all.sh: $arg needs a value (see --help)" >&2
        exit 2
      fi
      set -- "$arg=$1" "${@:2}"
      continue ;;
    --quick) quick=true ;;
    --only=*) only="${arg#--only=}" ;;
    --out=*) out="${arg#--out=}" ;;
    --no-docs) update_docs=false ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# name | full flags | quick flags (none: left out of quick runs, whose budget is 10 minutes),
# in the order they run (Ray's microbenchmark and the two
# benchmarks of a user's conditions first). Each program writes $out/<name>.json (--json) and prints its
# table into $out/<name>.log. Steps in own_command run in a full run only when --only names them.
steps=(
  "microbenchmark|bench/microbenchmark.py --ray-cpp --rounds=3 --seconds=1 --ray-sleep=1 --compared-only|bench/microbenchmark.py --ray-cpp --rounds=2 --seconds=0.5 --ray-sleep=0 --quick --only=single_client_tasks_async,1_1_actor_calls_sync"
  "gcs_ft_bench|bench/gcs_ft_bench.py --no-throughput|bench/gcs_ft_bench.py --quick --no-throughput"
  "scale_bench|bench/scale_bench.py|bench/scale_bench.py --quick"
  "cluster_start|bench/cluster_start.py|bench/cluster_start.py --quick"
  "collective_bench|bench/collective_bench.py|bench/collective_bench.py --quick"
  "collective_bench_netns|bench/collective_bench.py --netns|bench/collective_bench.py --netns --quick"
  "train_bench|bench/train_bench.py|bench/train_bench.py --quick"
  "transfer_bench|bench/transfer_bench.py|bench/transfer_bench.py --quick"
  "reconstruction_bench|bench/reconstruction_bench.py|bench/reconstruction_bench.py --quick"
  "tls_bench|bench/tls_bench.py|bench/tls_bench.py --quick"
  "elastic_bench|bench/elastic_bench.py --troupe-elastic=3:4|bench/elastic_bench.py --troupe-elastic=3:4 --quick --scenarios=recovery"
  "elastic_bench_netns|bench/elastic_bench.py --netns --sides=troupe --workers=3 --troupe-elastic=2:3|"
  "elastic_bench_chaos|bench/elastic_bench.py --sides=troupe --troupe-elastic=3:4 --rounds=1 --scenarios=clean,chaos --chaos-epochs=2|"
)
own_command=" elastic_bench elastic_bench_netns elastic_bench_chaos "
if [ -n "$only" ] && [ -z "${only//,/}" ]; then
  echo "run_all.sh: --only names no benchmark (see --help for the names)" >&2
  exit 2
fi

names=" "
for step in "${steps[@]}"; do names+="${step%%|*} "; done
IFS=',' read -r -a wanted <<<"$only"
for name in "${wanted[@]}"; do
  if [ -n "$name" ] && [[ "$names" != *" $name "* ]]; then
    echo "run_all.sh: --only names '$name', which is not a benchmark; the benchmarks:$names" >&2
    exit 2
  fi
done

venv="${TROUPE_BENCH_VENV:-$HOME/.cache/troupe-bench-venv}"
python="$venv/bin/python"
if ! "$python" -c "import ray" 2>/dev/null || [ ! -d "$("$python" -c 'import ray, os; print(os.path.dirname(ray.__file__))' 2>/dev/null)/cpp" ]; then
  echo "run_all.sh: Ray and ray-cpp are not installed in $venv: run bash bench/setup_peers.sh first" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "run_all.sh: needs root (the cross-host benchmarks make network namespaces)" >&2
  exit 1
fi

if [ -z "$out" ]; then
  out="bench/results/$(date -u +%F)"
  $quick && out+="-quick"
fi
mkdir -p "$out"
echo "== results go to $out"

run_start=$SECONDS
echo "== bazel build -c opt --config=nocuda (the benchmark binaries; this machine has no GPU)"
bazel build -c opt --config=nocuda //src/cli:troupe //src/raylet:troupe_simulated_nodes \
  //bench:all //examples/resnet18_fashion_mnist || { echo "run_all.sh: the build failed" >&2; exit 1; }
build_seconds=$((SECONDS - run_start))
# The programs run the binaries under bazel-bin: a build of another configuration in this
# checkout while they run (e.g. `bazel test //...`) re-points it, and they would run other
# binaries. Each step checks that it still points where this build left it.
bin_dir="$(readlink -f bazel-bin)"

{
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "OS: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
  echo "peers: Ray $("$python" -c 'import ray; print(ray.__version__)') (Python API and ray-cpp)," \
    "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)" \
    "(Debian's, for gloo/DDP)"
  echo "troupe: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench ':!bench/results' || echo ' (with local changes)'), built -c opt --config=nocuda"
  echo "run: $($quick && echo quick || echo full)${only:+ --only=$only}, started $(date -u +%FT%TZ), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt.new"
# A run limited with --only adds to the description of the run it completes.
if [ -n "$only" ] && [ -f "$out/machine.txt" ]; then
  cat "$out/machine.txt.new" >> "$out/machine.txt" && rm "$out/machine.txt.new"
else
  mv "$out/machine.txt.new" "$out/machine.txt"
fi

# Before each benchmark: wait (up to 2 minutes) until the machine is idle, i.e. fewer than 0.3
# CPUs busy over 5 s (a step's own processes are gone within seconds of its end; the 1-minute
# load average still reads 4-6 a minute later), and hand the figure to the program, which marks
# its results loaded from it (bench_common.is_loaded) rather than from the lagging load average.
wait_idle() {
  local waited=0
  while :; do
    busy=$(python3 -c 'import sys; sys.path.insert(0, "bench"); import bench_common
print("%.2f" % bench_common.busy_cpus(5))')
    if awk -v b="$busy" 'BEGIN { exit !(b < 0.3) }' || [ "$waited" -ge 120 ]; then break; fi
    waited=$((waited + 5))
  done
  export TROUPE_BENCH_BUSY_BEFORE="$busy"
}


failed=()
times=""
for step in "${steps[@]}"; do
  IFS='|' read -r name full quick_flags <<<"$step"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  flags="$full"
  $quick && flags="$quick_flags"
  [ -n "$flags" ] || continue  # no quick form (the long chaos run)
  if ! $quick && [ -z "$only" ] && [[ "$own_command" == *" $name "* ]]; then continue; fi
  wait_idle
  step_start=$SECONDS
  echo "== $name: /usr/bin/python3 $flags --json=$out/$name.json (CPUs busy over the last 5 s: $busy; load average $(cut -d' ' -f1 /proc/loadavg))"
  # shellcheck disable=SC2086  # flags are words
  if /usr/bin/python3 $flags --json="$out/$name.json" > "$out/$name.log" 2>&1 &&
    [ "$(readlink -f bazel-bin)" = "$bin_dir" ]; then
    tail -n 40 "$out/$name.log"
  else
    [ "$(readlink -f bazel-bin)" = "$bin_dir" ] ||
      echo "!! bazel-bin was re-pointed to $(readlink -f bazel-bin) while $name ran (a build in this checkout): its figures may come from other binaries; do not build here during run_all.sh" | tee -a "$out/$name.log"
    echo "!! $name failed; the end of $out/$name.log:"
    tail -n 30 "$out/$name.log"
    failed+=("$name")
    rm -f "$out/$name.json"
  fi
  times+="$name $((SECONDS - step_start)) s (CPUs busy before: $busy); "
done
echo "run: build $build_seconds s; ${times}whole run $((SECONDS - run_start)) s" | tee -a "$out/machine.txt"

echo "== summary (python3 bench/summarize.py $out)"
summarize=(python3 bench/summarize.py "$out")
if ! $quick && $update_docs && [ -z "$only" ] && [ ${#failed[@]} -eq 0 ]; then
  summarize+=(--write)  # a complete full run rewrites docs/benchmarks.md's summary and README's figures
fi
"${summarize[@]}" || failed+=("summarize")

if [ ${#failed[@]} -gt 0 ]; then
  echo "run_all.sh: failed: ${failed[*]} (their logs are in $out); docs were not rewritten"
  exit 1
fi
