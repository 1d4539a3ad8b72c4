#!/usr/bin/env bash
# Troupe's GPU check, run on a GPU machine from the bundle that scripts/gpu_bundle.sh makes
# (docs/gpu_check.md):
#   bash dist/gpu_bundle/gpu_check.sh [--only=GROUP,GROUP...]
# The machine needs an NVIDIA driver, Python with PyTorch for CUDA (its CUDA runtime and NCCL
# libraries are used, and its LibTorch builds the LibTorch-facing part here), cmake and a C++
# compiler; nothing is downloaded. Each step is one row of the table printed at the end; a step
# that cannot run, or skips, counts as failed. The last line is "gpu_check: N passed, N failed".
# Groups of steps (all by default): cuda_status nccl staging cluster torch epoch bench ddp half.
# Logs go to $GPU_CHECK_LOGS (default /tmp/troupe-gpu-check), and to $OUT when that is set (the
# table as gpu_check.txt, the logs as gpu_check_logs.tar.gz).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
only=""
for arg in "$@"; do
  case "$arg" in
    --only=*) only=",${arg#--only=}," ;;
    *) echo "gpu_check.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
started=$(date +%s)
logs="${GPU_CHECK_LOGS:-/tmp/troupe-gpu-check}"
rm -rf "$logs"
mkdir -p "$logs"

# The bundle: unpacked next to the logs when this script sits beside its tarball.
if [ -f "$here/troupe-gpu.tar.gz" ]; then
  tar -C "$logs" -xzf "$here/troupe-gpu.tar.gz"
  B="$logs/troupe-gpu"
else
  B="$here"
fi
[ -x "$B/bin/troupe" ] || { echo "gpu_check.sh: no bundle at $B (run scripts/gpu_bundle.sh)"; exit 2; }

rows=()
passed=0
failed=0
record() {  # record STEP PASS|FAIL DETAIL
  rows+=("$1|$2|$3")
  if [ "$2" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  printf '%-44s %-4s %s\n' "$1" "$2" "$3"
}
wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
# The whole check stays within $GPU_CHECK_BUDGET_S (default 480 s): each step's timeout is cut to
# what is left, and a step that finds nothing left is recorded as not run.
budget="${GPU_CHECK_BUDGET_S:-480}"
limit() {  # limit SECONDS: SECONDS, or what is left of the budget if less
  local left=$((budget - ($(date +%s) - started) - 15))
  [ $left -lt 5 ] && left=5
  echo $((left < $1 ? left : $1))
}
out_of_time() { [ $(($(date +%s) - started)) -ge $((budget - 20)) ]; }
# gtest's summary: "N passed, N failed, N skipped" from a log.
gtest_counts() {
  local log="$1"
  echo "$(grep -c '^\[       OK \]' "$log") passed, $(grep -c '^\[  FAILED  \] [A-Za-z]' "$log" |
    awk '{print int($1 / 2)}') failed, $(grep -c '^\[  SKIPPED \] [A-Za-z]' "$log" |
    awk '{print int($1 / 2)}') skipped"
}

# gtest_step STEP LOG SECONDS BINARY [ARGS...]: a GPU test binary must exit 0 having run every
# case (a skip is a failure here).
gtest_step() {
  local step="$1" log="$2" seconds="$3"
  shift 3
  timeout "$(limit "$seconds")" "$@" > "$log" 2>&1
  local rc=$?
  local counts
  counts="$(gtest_counts "$log")"
  if [ $rc -eq 0 ] && ! grep -q '^\[  SKIPPED \] [A-Za-z]' "$log" && grep -q '^\[       OK \]' "$log"; then
    record "$step" PASS "$counts"
  else
    record "$step" FAIL "exit $rc; $counts; $(grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z]|: Failure$' "$log" |
      sed 's/ ([0-9]* ms)$//' | sort -u | head -n 6 | tr '\n' ' ' | tail -c 400)"
  fi
}

# ---- the machine: Python with PyTorch, its CUDA libraries, the GPUs
python=""
for candidate in /opt/torch/.venv/bin/python3 python3; do
  if "$candidate" -c 'import torch' 2>/dev/null; then python="$candidate"; break; fi
done
if [ -z "$python" ]; then
  record environment FAIL "no Python with PyTorch (tried /opt/torch/.venv/bin/python3, python3)"
  echo "gpu_check: $passed passed, $failed failed"
  exit 1
fi
torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
site="$(dirname "$(dirname "$torch_lib")")"
nvidia_libs="$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')"
# PyTorch's CUDA runtime and NCCL for the bundle's programs (which find their other libraries
# through their RUNPATH), and for Python the same ones it loads anyway.
export LD_LIBRARY_PATH="$nvidia_libs$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$B/bin:$(dirname "$python"):$PATH"
export TROUPE_TEMP_DIR="$logs/troupe"
mkdir -p "$TROUPE_TEMP_DIR"

"$python" - > "$logs/torch.txt" 2>&1 <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")
print("cxx11_abi", torch.compiled_with_cxx11_abi())
print("devices", torch.cuda.device_count())
PY
{ c++ --version 2>&1 | head -n1; cmake --version 2>&1 | head -n1; ldd --version 2>&1 | head -n1
  . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"; } > "$logs/tools.txt"
smi_gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
smi_line="$(nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv,noheader 2>&1 | head -n1)"
smi_bus="$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -n1)"
# nvidia-smi writes 00000000:19:00.0, CUDA 0000:19:00.0: compare from the bus number on.
bus_key() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/^[0-9a-f]*:([0-9a-f]+:[0-9a-f]+\.[0-9a-f]+)$/\1/'; }
env_detail="$smi_gpus GPU(s): $smi_line; $(tr '\n' ' ' < "$logs/torch.txt"); bundle $(head -n1 "$B/MANIFEST"); $(tr '\n' ';' < "$logs/tools.txt")"
if [ "$smi_gpus" -ge 1 ] && grep -q "available True" "$logs/torch.txt"; then
  record environment PASS "$env_detail"
else
  record environment FAIL "$env_detail"
fi

# ---- the driver can run this build: every case of cuda_status_test runs (no skip) and passes
if wanted cuda_status; then
  gtest_step cuda_status_test "$logs/cuda_status_test.log" 120 "$B/bin/cuda_status_test"
fi

# ---- NCCL backend at world size 1: every op and dtype, async, timeout, abort, recreate
if wanted nccl; then
  gtest_step "nccl_test NcclTest.* (world size 1)" "$logs/nccl_test.log" 240 "$B/bin/nccl_test" \
    --gtest_filter='NcclTest.*'
  # The communicator abort, as its own row: a timed-out op leaves no spinning kernel.
  if grep -q '^\[       OK \] NcclTest.TimedOutOpLeavesNoSpinningKernel' "$logs/nccl_test.log"; then
    record "communicator abort frees a stuck kernel" PASS "NcclTest.TimedOutOpLeavesNoSpinningKernel"
  else
    record "communicator abort frees a stuck kernel" FAIL \
      "$(grep -A3 'TimedOutOpLeavesNoSpinningKernel' "$logs/nccl_test.log" | grep -m2 -vE '^\[ RUN' | tr '\n' ' ')"
  fi
  # World size >= 2 needs as many GPUs: with fewer it must say so (and that is all it can show).
  timeout "$(limit 120)" "$B/bin/nccl_test" --gtest_filter='NcclMultiGpuTest.*' > "$logs/nccl_multi.log" 2>&1
  rc=$?
  if [ "$smi_gpus" -ge 2 ]; then
    if [ $rc -eq 0 ] && ! grep -q '^\[  SKIPPED \] [A-Za-z]' "$logs/nccl_multi.log"; then
      record "nccl_test NcclMultiGpuTest.*" PASS "$(gtest_counts "$logs/nccl_multi.log")"
    else
      record "nccl_test NcclMultiGpuTest.*" FAIL "exit $rc; $(gtest_counts "$logs/nccl_multi.log")"
    fi
  elif grep -q "needs at least 2 GPUs, this machine has $smi_gpus" "$logs/nccl_multi.log"; then
    record "nccl_test NcclMultiGpuTest.* says why not" PASS \
      "skipped, saying 'needs at least 2 GPUs, this machine has $smi_gpus' (world size >= 2 NOT run)"
  else
    record "nccl_test NcclMultiGpuTest.* says why not" FAIL "exit $rc; $(gtest_counts "$logs/nccl_multi.log")"
  fi
fi

# ---- CUDA buffers through CPU groups (staged through pinned host memory), and train workers
if wanted staging; then
  gtest_step "cuda_device_memory_test (staging)" "$logs/cuda_device_memory_test.log" 120 \
    "$B/bin/cuda_device_memory_test"
  gtest_step "train_gpu_test (NCCL group; 2 x 0.5 GPU on CPU)" "$logs/train_gpu_test.log" 180 \
    "$B/bin/train_gpu_test"
fi

# ---- a cluster on this machine: the GPU count, and what GPU actors see
stop_cluster() { troupe stop >/dev/null 2>&1 || true; }
trap stop_cluster EXIT
start_cluster() {  # start_cluster LOG [flags...]
  stop_cluster
  local log="$1"
  shift
  timeout "$(limit 60)" troupe start --head --num-cpus=8 "$@" > "$log" 2>&1
}
probe_field() { sed -n "s/.*\"$2\":\"\\{0,1\\}\\([^\",]*\\).*/\\1/p" <<< "$1"; }
if wanted cluster; then
  if start_cluster "$logs/start_head.log" --gpu-visibility=assigned; then
    troupe status > "$logs/status.txt" 2>&1
    status_gpus="$(awk '/^Resources/ {r = 1} r && / GPU$/ {split($1, a, "/"); print a[2]; exit}' "$logs/status.txt")"
    if [ "${status_gpus:-none}" = "$smi_gpus" ]; then
      record "troupe status GPUs = nvidia-smi's" PASS "$status_gpus = $smi_gpus"
    else
      record "troupe status GPUs = nvidia-smi's" FAIL "troupe status: ${status_gpus:-none}, nvidia-smi: $smi_gpus"
    fi
    TROUPE_ADDRESS=auto timeout "$(limit 90)" "$B/bin/bundle_probe" gpus 1 1 > "$logs/probe_one.log" 2>&1
    line="$(grep -m1 '^{"actor"' "$logs/probe_one.log")"
    seen_bus="$(sed -n 's/.*"bus_ids":\["\([^"]*\)".*/\1/p' <<< "$line")"
    if [ -n "$line" ] && [ "$(probe_field "$line" cuda_visible_devices)" = 0 ] &&
      [ "$(probe_field "$line" devices)" = 1 ] && [ "$(bus_key "$seen_bus")" = "$(bus_key "$smi_bus")" ]; then
      record "GPU actor sees its GPU (assigned)" PASS "CUDA_VISIBLE_DEVICES=0, 1 device, bus $seen_bus"
    else
      record "GPU actor sees its GPU (assigned)" FAIL "${line:-$(tail -n 3 "$logs/probe_one.log" | tr '\n' ' ')}; nvidia-smi bus $smi_bus"
    fi
    TROUPE_ADDRESS=auto timeout "$(limit 90)" "$B/bin/bundle_probe" gpus 2 0.5 > "$logs/probe_half.log" 2>&1
    lines=$(grep -c '^{"actor"' "$logs/probe_half.log")
    same=$(grep '^{"actor"' "$logs/probe_half.log" | grep -c "\"gpu_ids\":\"0\".*\"devices\":1")
    pids=$(grep -o '"pid":[0-9]*' "$logs/probe_half.log" | sort -u | wc -l)
    if [ "$lines" = 2 ] && [ "$same" = 2 ] && [ "$pids" = 2 ]; then
      record "two 0.5-GPU actors share GPU 0" PASS "2 processes, each GPU id 0, 1 device"
    else
      record "two 0.5-GPU actors share GPU 0" FAIL "$(tr '\n' ' ' < "$logs/probe_half.log" | tail -c 400)"
    fi
  else
    record "troupe start --head" FAIL "$(tail -n 5 "$logs/start_head.log" | tr '\n' ' ')"
  fi
  stop_cluster
  # A raylet whose own CUDA_VISIBLE_DEVICES lists 4 devices (the real one last): its actors and
  # `troupe train launch` ranks get distinct entries of that list, mapped through it.
  real="$(nvidia-smi --query-gpu=index --format=csv,noheader | head -n1)"
  if CUDA_VISIBLE_DEVICES="7,6,5,$real" start_cluster "$logs/start_mapped.log" --num-gpus=4 --gpu-visibility=assigned; then
    TROUPE_ADDRESS=auto timeout "$(limit 90)" "$B/bin/bundle_probe" gpus 4 1 > "$logs/probe_mapped.log" 2>&1
    mapping_ok=true
    declare -A list=([0]=7 [1]=6 [2]=5 [3]=$real)
    seen=""
    while read -r line; do
      id="$(probe_field "$line" gpu_ids)"
      cvd="$(probe_field "$line" cuda_visible_devices)"
      seen+="$id->$cvd "
      [ "${list[$id]:-x}" = "$cvd" ] || mapping_ok=false
    done < <(grep '^{"actor"' "$logs/probe_mapped.log")
    distinct=$(grep -o '"cuda_visible_devices":"[^"]*"' "$logs/probe_mapped.log" | sort -u | wc -l)
    if $mapping_ok && [ "$distinct" = 4 ]; then
      record "actors' CUDA_VISIBLE_DEVICES mapped" PASS "raylet 7,6,5,$real: $seen"
    else
      record "actors' CUDA_VISIBLE_DEVICES mapped" FAIL "raylet 7,6,5,$real: ${seen:-$(tail -n 3 "$logs/probe_mapped.log" | tr '\n' ' ')}"
    fi
    # Each rank writes what it sees to a file (a rank's last output lines can miss the launcher's
    # stdout when it exits at once; see docs/train.md).
    mkdir -p "$logs/launch_mapped"
    TROUPE_ADDRESS=auto timeout "$(limit 90)" troupe train launch --num-workers 4 --gpus-per-worker 1 -- \
      sh -c "echo \"\$CUDA_VISIBLE_DEVICES\" > $logs/launch_mapped/rank_\$RANK" > "$logs/launch_mapped.log" 2>&1
    launched="$(for f in "$logs"/launch_mapped/rank_*; do [ -f "$f" ] && echo "${f##*_}->$(cat "$f")"; done | tr '\n' ' ')"
    if [ "$(cat "$logs"/launch_mapped/rank_* 2>/dev/null | sort -u | grep -cE "^(7|6|5|$real)$")" = 4 ]; then
      record "train launch CUDA_VISIBLE_DEVICES mapped" PASS "rank->CUDA_VISIBLE_DEVICES: $launched"
    else
      record "train launch CUDA_VISIBLE_DEVICES mapped" FAIL "${launched:-$(tail -n 3 "$logs/launch_mapped.log" | tr '\n' ' ')}"
    fi
  else
    record "troupe start (4 mapped GPUs)" FAIL "$(tail -n 5 "$logs/start_mapped.log" | tr '\n' ' ')"
  fi
  stop_cluster
fi

# ---- the LibTorch-facing part, built here against this PyTorch (under 2 minutes)
built=false
if wanted torch; then
  build="$logs/build"
  prefix="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  t0=$(date +%s)
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if timeout "$(limit 240)" cmake -S "$B" -B "$build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
      > "$logs/cmake.log" 2>&1 &&
    timeout "$(limit 240)" cmake --build "$build" -j "$(nproc)" >> "$logs/cmake.log" 2>&1; then
    seconds=$(($(date +%s) - t0))
    built=true
    if [ $seconds -lt 120 ]; then
      record "build the LibTorch part (CMake)" PASS "${seconds} s against $prefix"
    else
      record "build the LibTorch part (CMake)" FAIL "${seconds} s (over 2 minutes)"
    fi
  else
    record "build the LibTorch part (CMake)" FAIL "$(grep -m3 -iE 'error|not found' "$logs/cmake.log" | tr '\n' ' ' | tail -c 400)"
  fi
fi

# ---- training on the GPU
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
json_field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\\1/p" | head -n1; }
results="$logs/results"
mkdir -p "$results"
not_run() { record "$1" FAIL "not run: ${2}"; }
if wanted epoch; then
  if ! $built; then not_run "ResNet18 FashionMNIST 1 epoch, GPU" "the LibTorch part was not built"
  elif out_of_time; then not_run "ResNet18 FashionMNIST 1 epoch, GPU" "out of time"
  else
  # One epoch of ResNet18 on the FashionMNIST subset, one worker on the GPU.
  t0=$(date +%s)
  timeout "$(limit 150)" stdbuf -oL -eL "$build/resnet18_fashion_mnist" --use-gpu --num-workers=1 --epochs=1 \
    --limit-batches=0 --data-dir="$B/data" --storage-path="$results" --name=epoch > "$logs/epoch.log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - t0))
  accuracy="$(grep -oE 'accuracy[=: ]+[0-9.]+' "$logs/epoch.log" | tail -n1 | grep -oE '[0-9.]+$')"
  if [ $rc -eq 0 ] && [ -n "$accuracy" ] && grep -qi cuda "$logs/epoch.log"; then
    record "ResNet18 FashionMNIST 1 epoch, GPU" PASS "accuracy $accuracy, ${seconds} s wall (10,000 images)"
  else
    record "ResNet18 FashionMNIST 1 epoch, GPU" FAIL "exit $rc, ${seconds} s; $(tail -n 3 "$logs/epoch.log" | tr '\n' ' ' | tail -c 300)"
  fi
  fi
fi

if wanted bench; then
  if ! $built; then not_run "Troupe trainer / plain LibTorch >= 0.97" "the LibTorch part was not built"
  elif out_of_time; then not_run "Troupe trainer / plain LibTorch >= 0.97" "out of time"
  else
  # The same model and steps: plain LibTorch vs Troupe's trainer (1 worker), alternating rounds.
  ratios=()
  for round in 1 2 3; do
    plain="$(timeout "$(limit 60)" "$build/train_bench" --mode=plain --device=cuda --steps=300 --warmup=30 2>>"$logs/bench.log" | tee -a "$logs/bench.log" | json_field images_per_s)"
    troupe_rate="$(timeout "$(limit 60)" "$build/train_bench" --mode=troupe --workers=1 --device=cuda --steps=300 --warmup=30 2>>"$logs/bench.log" | tee -a "$logs/bench.log" | json_field images_per_s)"
    if [ -n "$plain" ] && [ -n "$troupe_rate" ]; then
      ratios+=("$(awk -v a="$troupe_rate" -v b="$plain" 'BEGIN {printf "%.3f", a / b}')")
      echo "round $round: plain $plain, troupe $troupe_rate images/s" >> "$logs/bench_rounds.txt"
    fi
  done
  if [ ${#ratios[@]} -eq 3 ]; then
    ratio="$(printf '%s\n' "${ratios[@]}" | median)"
    spread="$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n '1p;$p' | tr '\n' ' ')"
    detail="median $ratio (min max: $spread); $(tr '\n' ';' < "$logs/bench_rounds.txt")"
    if awk -v r="$ratio" 'BEGIN {exit !(r >= 0.97)}'; then
      record "Troupe trainer / plain LibTorch >= 0.97" PASS "$detail"
    else
      record "Troupe trainer / plain LibTorch >= 0.97" FAIL "$detail"
    fi
  else
    record "Troupe trainer / plain LibTorch >= 0.97" FAIL "$(tail -n 3 "$logs/bench.log" | tr '\n' ' ' | tail -c 300)"
  fi
  fi
fi

if wanted ddp; then
  if out_of_time; then not_run "DDP NCCL via troupe train launch" "out of time"
  # torchrun-style DDP with NCCL, world size 1, started by `troupe train launch` on a cluster.
  elif start_cluster "$logs/start_ddp.log"; then
    TROUPE_ADDRESS=auto timeout "$(limit 120)" troupe train launch --num-workers 1 --gpus-per-worker 1 \
      --working-dir "$B/python" -- sh -c "'$python' ddp_bench.py --from-env --device cuda \
      --backend nccl --steps=300 --warmup=30 > '$logs/ddp_result.json'" > "$logs/ddp.log" 2>&1
    rc=$?
    ddp="$(json_field images_per_s < "$logs/ddp_result.json" 2>/dev/null)"
    if [ $rc -eq 0 ] && [ -n "$ddp" ]; then
      troupe_last="$(grep '"impl": "troupe"' "$logs/bench.log" | json_field images_per_s | tail -n1)"
      record "DDP NCCL via troupe train launch" PASS \
        "$ddp images/s (Troupe trainer ${troupe_last:-?} in the rounds above)"
    else
      record "DDP NCCL via troupe train launch" FAIL "exit $rc; $(tail -n 3 "$logs/ddp.log" | tr '\n' ' ' | tail -c 300)"
    fi
  else
    record "DDP NCCL via troupe train launch" FAIL "no cluster: $(tail -n 3 "$logs/start_ddp.log" | tr '\n' ' ')"
  fi
  stop_cluster
fi

if wanted half; then
  if ! $built; then not_run "2 x 0.5-GPU workers, CPU collectives" "the LibTorch part was not built"
  elif out_of_time; then not_run "2 x 0.5-GPU workers, CPU collectives" "out of time"
  else
  # Two workers of 0.5 GPU each on the one card, gradients over CPU collectives (staged).
  t0=$(date +%s)
  timeout "$(limit 150)" stdbuf -oL -eL "$build/resnet18_fashion_mnist" --use-gpu --num-workers=2 --gpus-per-worker=0.5 \
    --collective-backend=cpu --epochs=1 --limit-batches=20 --data-dir="$B/data" \
    --storage-path="$results" --name=half > "$logs/half.log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - t0))
  accuracy="$(grep -oE 'accuracy[=: ]+[0-9.]+' "$logs/half.log" | tail -n1 | grep -oE '[0-9.]+$')"
  devices="$(grep -oE 'trains on cuda:[0-9]+' "$logs/half.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  if [ $rc -eq 0 ] && [ -n "$accuracy" ] && grep -q "collective backend cpu" "$logs/half.log" &&
    [ "$(grep -c 'trains on cuda' "$logs/half.log")" -ge 2 ]; then
    record "2 x 0.5-GPU workers, CPU collectives" PASS "accuracy $accuracy after 20 steps, ${seconds} s; $devices"
  else
    record "2 x 0.5-GPU workers, CPU collectives" FAIL "exit $rc; $devices $(tail -n 3 "$logs/half.log" | tr '\n' ' ' | tail -c 300)"
  fi
  # The same on fixed batches: the two replicas' parameters must end bit-identical (exit 1 if not).
  timeout "$(limit 90)" "$build/train_bench" --mode=troupe --workers=2 --device=cuda \
    --gpus-per-worker=0.5 --collective-backend=cpu --steps=20 --warmup=3 > "$logs/half_bench.log" 2>&1
  rc=$?
  line="$(grep -m1 '"impl"' "$logs/half_bench.log")"
  if [ $rc -eq 0 ] && grep -q '"collective_backend": "cpu"' <<< "$line" && grep -q '"device": "cuda"' <<< "$line"; then
    record "2 x 0.5-GPU replicas stay identical" PASS "$(json_field images_per_s <<< "$line") images/s over 2 workers; parameters bit-identical"
  else
    record "2 x 0.5-GPU replicas stay identical" FAIL "exit $rc; $(tail -n 3 "$logs/half_bench.log" | tr '\n' ' ' | tail -c 300)"
  fi
  fi
fi

# ---- the table
table="$logs/gpu_check.txt"
{
  echo "Troupe GPU check, $(date -u +%FT%TZ), $(($(date +%s) - started)) s"
  echo "| step | result | detail |"
  echo "| --- | --- | --- |"
  for row in "${rows[@]}"; do
    IFS='|' read -r step result detail <<< "$row"
    echo "| $step | $result | ${detail//|//} |"
  done
} > "$table"
echo
cat "$table"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$table" "$OUT/gpu_check.txt"
  tar -C "$logs" --exclude=troupe-gpu --exclude=build --exclude=results -czf "$OUT/gpu_check_logs.tar.gz" . 2>/dev/null
fi
echo "gpu_check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
