#!/usr/bin/env bash
# Instructions per call of task_bench metrics, counted by callgrind: repeatable where wall-clock
# time is not (a shared or loaded machine). For each metric, runs `task_bench --only=METRIC` on an
# embedded cluster under `valgrind --tool=callgrind --trace-children=yes` twice, with --batches=LO
# and --batches=HI, sums the instructions of the driver and its workers (dumped while task_bench
# lingers, before Shutdown kills the workers), and prints
#   METRIC events=MODE instructions_per_call=(I(HI) - I(LO)) / (calls in HI-LO batches)
# so start-up and shutdown cancel out. Each run's number of processes counted goes to stderr:
# compare like with like (a worker started or ended in one run and not the other skews a figure;
# actor metrics keep a fixed set of processes, task metrics may not).
#
# Usage: bench/count_instructions.sh BINARY "METRIC..." [MODES (default "1 0")] [LO HI (2 6)]
#   BINARY: a -c opt task_bench (bazel build -c opt //bench:task_bench; copy it to compare builds)
#   MODES: TROUPE_TASK_EVENTS values to measure.
set -euo pipefail
binary=$1
metrics=$2
modes=${3:-"1 0"}
lo=${4:-2}
hi=${5:-6}
work=$(mktemp -d /tmp/count_instructions.XXXXXX)
[ -n "${KEEP:-}" ] && echo "counts kept in $work" >&2 || trap 'rm -rf "$work"' EXIT

# Calls per batch, as task_bench runs them.
calls_per_batch() {
  case $1 in
    multi_client_tasks_async | n_n_actor_calls_async | n_n_actor_calls_with_arg_async) echo 4000 ;;
    single_client_tasks_sync | 1_1_actor_calls_sync) echo 100 ;;
    *) echo 1000 ;;
  esac
}

# Total instructions of one run (driver + workers), counted up to the linger.
count() {
  local metric=$1 mode=$2 batches=$3 dir
  dir=$(mktemp -d "$work/$1.$2.$3.XXXX")
  TROUPE_ADDRESS=local TROUPE_TASK_EVENTS=$mode valgrind --tool=callgrind --trace-children=yes --fair-sched=yes \
    --callgrind-out-file="$dir/cg.%p" "$binary" --only="$metric" --batches="$batches" \
    --linger=8 >"$dir/out" 2>"$dir/err" &
  local driver=$!
  until grep -q "task_bench: lingering" "$dir/err" 2>/dev/null; do
    if ! kill -0 "$driver" 2>/dev/null; then
      echo "task_bench exited early; see $dir/err" >&2
      cat "$dir/err" >&2
      exit 1
    fi
    sleep 0.5
  done
  # The driver and its workers (all run under callgrind writing into $dir): dump their counts now.
  local pids; pids=$(pgrep -d " " -f "$dir/cg" || true)
  for pid in $pids; do callgrind_control -d "$pid" >/dev/null 2>&1 || true; done
  local want; want=$(echo $pids | wc -w)
  for _ in $(seq 20); do
    [ "$(ls "$dir"/cg.*.1 2>/dev/null | wc -l)" -ge "$want" ] && break
    sleep 0.25
  done
  echo "$metric events=$mode batches=$batches: counted $(ls "$dir"/cg.*.1 | wc -l) of $want processes" >&2
  wait "$driver" || true
  # Dumps are named cg.PID.1 (the final cg.PID of the driver is not counted: it has Shutdown).
  # %.0f, not %d: mawk's %d stops at 2^31 - 1, which a 4-batch run passes.
  cat "$dir"/cg.*.1 | awk '/^summary:/ {s += $2} END {printf "%.0f\n", s}'
}

for metric in $metrics; do
  per_batch=$(calls_per_batch "$metric")
  for mode in $modes; do
    low=$(count "$metric" "$mode" "$lo")
    high=$(count "$metric" "$mode" "$hi")
    echo "$metric events=$mode instructions_per_call=$(((high - low) / ((hi - lo) * per_batch)))" \
      "(I($lo batches)=$low I($hi batches)=$high)"
  done
done
