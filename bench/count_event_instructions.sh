#!/usr/bin/env bash
# Instructions task events cost per call, counted by callgrind (repeatable where a whole run's
# count is not: under valgrind, polling and timer threads add instructions with elapsed time).
# Runs `task_bench --only=METRIC --batches=N` with TROUPE_TASK_EVENTS=1 on an embedded cluster
# under callgrind (driver and workers), dumps every process while task_bench lingers, and sums the
# inclusive instructions of the task-event code:
#   call path: SubmissionFacade::RecordEvent / RecordSubmission (owner), CoreWorker::BeginExecution
#              and TaskEventBuffer::EndRunning (executor);
#   off path:  the flusher thread (building the batch, the AddTaskEventData call), and in the GCS
#              the AddTaskEventData handler (merge), its request's parsing and its completion.
# Divides by the calls made (N + 1 warm-up batches). Needs a -c opt build with symbols (the
# default: Bazel does not strip cc_binary outputs).
#
# Usage: bench/count_event_instructions.sh BINARY "METRIC..." [BATCHES (2)]
set -euo pipefail
binary=$1
metrics=$2
batches=${3:-2}
work=$(mktemp -d /tmp/count_event_instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT

calls_per_batch() {
  case $1 in
    multi_client_tasks_async | n_n_actor_calls_async | n_n_actor_calls_with_arg_async) echo 4000 ;;
    single_client_tasks_sync | 1_1_actor_calls_sync) echo 100 ;;
    *) echo 1000 ;;
  esac
}

for metric in $metrics; do
  dir="$work/$metric"
  mkdir -p "$dir"
  TROUPE_ADDRESS=local TROUPE_TASK_EVENTS=1 valgrind --tool=callgrind --trace-children=yes \
    --fair-sched=yes --callgrind-out-file="$dir/cg.%p" "$binary" --only="$metric" \
    --batches="$batches" --linger=8 >"$dir/out" 2>"$dir/err" &
  driver=$!
  until grep -q "task_bench: lingering" "$dir/err" 2>/dev/null; do
    kill -0 "$driver" 2>/dev/null || { cat "$dir/err" >&2; exit 1; }
    sleep 0.5
  done
  pids=$(pgrep -d " " -f "$dir/cg" || true)
  for pid in $pids; do callgrind_control -d "$pid" >/dev/null 2>&1 || true; done
  for _ in $(seq 40); do
    [ "$(ls "$dir"/cg.*.1 2>/dev/null | wc -l)" -ge "$(echo $pids | wc -w)" ] && break
    sleep 0.25
  done
  wait "$driver" || true
  for f in "$dir"/cg.*.1; do callgrind_annotate --inclusive=yes --threshold=100 "$f"; done \
    >"$dir/annotated" 2>/dev/null
  sum() { grep -E "$1" "$dir/annotated" | awk '{gsub(",", "", $1); s += $1} END {printf "%.0f", s}'; }
  path=$(sum 'troupe::SubmissionFacade::Record(Event|Submission)\(|troupe::CoreWorker::BeginExecution\(|troupe::TaskEventBuffer::EndRunning\(')
  off=$(sum 'TaskEventBuffer::Start\(\)::\{lambda\(\)#1\}> > >::_M_run\(\)|CallbackUnaryHandler<troupe::rpc::AddTaskEventDataRequest, troupe::rpc::AddTaskEventDataReply>::(RunHandler|Deserialize|ServerCallbackUnaryImpl::CallOnDone)\(')
  calls=$(( ($(calls_per_batch "$metric")) * (batches + 1) ))
  echo "$metric calls=$calls events_instructions_per_call: call_path=$((path / calls))" \
    "off_path=$((off / calls)) total=$(((path + off) / calls))"
done
