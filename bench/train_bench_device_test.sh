#!/usr/bin/env bash
# `bazel test //bench:train_bench_device_test`: train_bench's --device flag on the Bazel build's
# CPU-only LibTorch (Debian's): --device=cuda fails at once, in both modes, saying this LibTorch
# has no CUDA; a bad --device or --mode is a usage error. (The GPU comparison itself runs on a
# GPU machine against a CUDA LibTorch.)
set -u
bench="$TEST_SRCDIR/$TEST_WORKSPACE/bench/train_bench"
failures=0

# expect CODE TEXT ARGS...: train_bench ARGS exits with CODE and its stderr contains TEXT.
expect() {
  local code="$1" text="$2"
  shift 2
  local err status
  err="$("$bench" "$@" 2>&1 >/dev/null)"
  status=$?
  if [[ "$status" != "$code" || "$err" != *"$text"* ]]; then
    echo "FAIL: train_bench $*: exit $status (want $code), stderr: $err (want: $text)"
    failures=$((failures + 1))
  else
    echo "ok: train_bench $*"
  fi
}

expect 2 "--device=cuda: this LibTorch has no CUDA" --mode=plain --device=cuda
expect 2 "--device=cuda: this LibTorch has no CUDA" --mode=troupe --device=cuda
expect 2 "--device=cuda: this LibTorch has no CUDA" --mode=troupe --use-gpu --workers=2 --gpus-per-worker=0.5
expect 2 "--device must be cpu or cuda, got 'gpu'" --mode=plain --device=gpu
expect 2 "--mode must be plain or troupe, got 'fast'" --mode=fast
# --device=cpu still trains (a few plain steps).
out="$("$bench" --mode=plain --device=cpu --steps=1 --warmup=0 2>&1)"
if [[ "$out" != *'"impl": "libtorch"'* || "$out" != *'"device": "cpu"'* ]]; then
  echo "FAIL: train_bench --mode=plain --device=cpu printed: $out"
  failures=$((failures + 1))
else
  echo "ok: train_bench --mode=plain --device=cpu"
fi
exit $((failures > 0))
