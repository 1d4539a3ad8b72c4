#!/bin/bash
# The C++ "compiler" of scripts/test.sh's thread-safety check (bazel --config=clang): clang with
# -fsyntax-only for every compile (-c ... -o FILE.o), which runs the whole front end, the
# -Wthread-safety analysis included, and writes the .d dependency file Bazel checks, but skips
# code generation; an empty FILE.o stands in for the object nobody links. Every other call (Bazel's
# toolchain probes, version queries) runs clang unchanged.
#
# With TROUPE_CLANG_CHECK_FILES naming a file (one source path per line, as
# scripts/clang_check_files.py writes it), a source not listed there is only preprocessed (clang
# -E, for the .d file Bazel reads to know the action's inputs): nothing visible in it is annotated,
# so the analysis could not report anything.
set -u
compile=false
output=""
source=""
previous=""
for arg in "$@"; do
  [ "$arg" = "-c" ] && compile=true
  [ "$previous" = "-o" ] && output="$arg"
  [ "$previous" = "-c" ] && source="$arg"
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
list="${TROUPE_CLANG_CHECK_FILES:-}"
if [ -n "$list" ] && [ ! -r "$list" ]; then
  echo "clang_syntax_only.sh: TROUPE_CLANG_CHECK_FILES names $list, which cannot be read" >&2
  exit 1
fi
if [ -n "$list" ] && ! grep -qxF -- "$source" "$list"; then
  clang -E -o /dev/null "${args[@]}" || exit
else
  clang -fsyntax-only "${args[@]}" || exit
fi
: > "$output"
