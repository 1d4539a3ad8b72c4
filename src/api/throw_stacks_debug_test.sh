#!/bin/bash
# A program built with g++ -g (throw_stacks_program.cc) prints the stack of the exception it
# throws: each frame names its function and its file:line, the throw site first, down to the
# function that ran the "task", and nothing of main or libc below it.
set -euo pipefail
program="$(dirname "$0")/throw_stacks_program"
out="$("$program")"
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
line() { sed -n "$1p" <<<"$out"; }
[[ "$(line 1)" == "#0 Parse(int) at "*"throw_stacks_program.cc:9" ]] || fail "frame 0: $(line 1)"
[[ "$(line 2)" == "#1 Task(int) at "*"throw_stacks_program.cc:12" ]] || fail "frame 1: $(line 2)"
[[ "$(line 3)" == "#2 RunTask(int) at "*"throw_stacks_program.cc:17" ]] || fail "frame 2: $(line 3)"
[ "$(wc -l <<<"$out")" -eq 3 ] || fail "expected 3 frames, the capture's caller last"
echo PASS
