#!/usr/bin/env bash
# examples/bazel_consumer: a separate Bazel workspace that uses this repository through
# local_repository (docs/sdk.md). By default (//sdk:bazel_consumer_test, in the normal test run)
# it loads and analyses the consumer's //:app, which resolves every Troupe target it needs and the
# repositories the consumer's WORKSPACE must declare. With --build
# (//sdk:bazel_consumer_build_test, manual: it compiles all of Troupe in a fresh output base)
# it also builds the app and runs it on an embedded cluster.
set -euo pipefail

build=0
[ "${1:-}" = "--build" ] && build=1
# The consumer is read from the real source tree (.bazelignore keeps it out of this workspace, so
# it cannot be a data dependency), found through this script's own runfile link.
repo="$(dirname "$(dirname "$(realpath "${TEST_SRCDIR:?run under bazel test}/troupe/sdk/bazel_consumer_test.sh")")")"
consumer="$repo/examples/bazel_consumer"
user_root="${TEST_TMPDIR:?}/bazel_root"
# --symlink_prefix=/: no bazel-* links in the source tree; the server lives in the test's own
# output root and is shut down at the end.
bazel_in_consumer() { (cd "$consumer" && bazel --output_user_root="$user_root" --max_idle_secs=60 "$@"); }
trap 'bazel_in_consumer shutdown >/dev/null 2>&1 || true' EXIT

echo "== analysing //:app of $consumer"
bazel_in_consumer build --nobuild --symlink_prefix=/ --config=nocuda //:app
if [ "$build" -eq 0 ]; then
  echo "bazel_consumer_test: the consumer workspace resolves and analyses"
  exit 0
fi

echo "== building and running //:app"
bazel_in_consumer build --symlink_prefix=/ --config=nocuda --jobs=2 //:app
app="$(bazel_in_consumer info --config=nocuda bazel-bin)/app"
output="$("$app")"
echo "$output"
grep -q "Twice(Put(21)) = 42, accumulator = 42" <<< "$output"
echo "bazel_consumer_test: the consumer workspace builds and its app runs"
