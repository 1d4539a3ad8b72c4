#!/usr/bin/env bash
# The long chaos run (tests/chaos_test.cc at full size: 10,000 tasks in dependency chains,
# hundreds of large objects between nodes, thousands of ordered actor calls, while workers and
# whole raylets are SIGKILLed). Prints its summary line at the end. Takes several minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || exit 1
bazel test --nocache_test_results --test_output=streamed //tests:chaos_long_test "$@"
status=$?
grep -h "chaos summary:" bazel-testlogs/tests/chaos_long_test/test.log | tail -n 1
exit $status
