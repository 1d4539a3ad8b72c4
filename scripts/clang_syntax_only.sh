#!/bin/bash
# The C++ "compiler" of scripts/test.sh's thread-safety check (bazel --config=clang): clang with
# -fsyntax-only for every compile (-c ... -o FILE.o), which runs the whole front end, the
# -Wthread-safety analysis included, and writes the .d dependency file Bazel checks, but skips
# code generation; an empty FILE.o stands in for the object nobody links. Every other call (Bazel's
# toolchain probes, version queries) runs clang unchanged.
set -u
compile=false
output=""
previous=""
for arg in "$@"; do
  [ "$arg" = "-c" ] && compile=true
  [ "$previous" = "-o" ] && output="$arg"
  previous="$arg"
done
if ! $compile || [[ "$output" != *.o ]]; then
  exec clang "$@"
fi
args=()
skip=false
for arg in "$@"; do
  if $skip; then skip=false; continue; fi
  if [ "$arg" = "-o" ]; then skip=true; continue; fi
  args+=("$arg")
done
clang -fsyntax-only "${args[@]}" || exit
: > "$output"
