#!/usr/bin/env bash
# Runs every test: installs what the tests need (missing Debian packages: scripts/install_deps.sh;
# Ray from PyPI into ~/.cache/troupe-bench-venv for the Ray-compatibility tests:
# scripts/install_ray.sh, in the background while the builds run), checks that the build without
# CUDA still works and that clang's thread-safety analysis finds nothing, then builds and tests
# everything with Bazel. Ends with a line "N passed, N failed, N skipped" counting the test cases
# of the targets this run tested (from Bazel's build event file; results of earlier runs are never
# counted). Extra arguments go to `bazel test`: flags (e.g. --test_tag_filters=gpu) keep the
# default pattern //...; target patterns (//..., @..., :name) replace it.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

# Ray for the Ray-compatibility tests (quick when installed). If it cannot be installed the run
# goes on, says so loudly here and before the summary, and those tests skip quoting the reason.
ray_log="$(mktemp "${TMPDIR:-/tmp}/troupe-install-ray.XXXXXX")"
bash scripts/install_ray.sh > "$ray_log" 2>&1 &
ray_pid=$!
ray_warning=""
ray_done=false
finish_ray() {
  $ray_done && return
  ray_done=true
  if ! wait "$ray_pid"; then
    ray_warning="$(printf '%s\n' \
      "!!! WARNING: Ray could not be installed (scripts/install_ray.sh):" \
      "$(sed 's/^/!!!   /' "$ray_log")" \
      "!!! The Ray-compatibility tests (Ray's job SDK and CLI against our head) SKIP in this run.")"
    echo "$ray_warning"
  else
    cat "$ray_log"
  fi
  rm -f "$ray_log"
}
fail_run() {
  finish_ray
  echo "0 passed, 1 failed"
  exit 1
}

# Where the time goes: each phase's seconds, printed before the summary line (issue 30 tracks the
# whole run's time from a fresh clone).
phase_start=$SECONDS
phases=""
end_phase() { phases+="$1 $((SECONDS - phase_start)) s; "; phase_start=$SECONDS; }

echo "== bazel build --config=nocuda //... (the build must work without CUDA)"
bazel build --config=nocuda //... || fail_run

# The same code compiled by clang checks the lock annotations (ABSL_GUARDED_BY, ...): a
# thread-safety finding fails the run. Its own output base keeps the g++ build's cache and
# outputs untouched (Bazel configures the C++ toolchain from CC); the disk cache is shared. Its
# server exits after 15 idle minutes rather than holding memory beside the main one. It builds
# every package (`//pkg:all`, as listed by the main server) rather than `//...`, which would
# descend into the main output base through the bazel-<workspace> symlink. The analysis runs in
# clang's front end, so the compiler is scripts/clang_syntax_only.sh (clang -fsyntax-only: no code
# generation, a third less CPU, empty objects that nothing links). It runs in the background at
# the lowest CPU priority while the tests run, taking the CPU they leave idle (they wait on
# processes and the network much of the time), and the run waits for it before the summary. A
# probe first: the wrapper must reject a guarded member written without its lock, or the check
# could pass without analysing anything.
end_phase "deps and nocuda build"
clang_cc="$PWD/scripts/clang_syntax_only.sh"
probe_dir="$(mktemp -d "${TMPDIR:-/tmp}/troupe-tsa-probe.XXXXXX")"
printf '%s\n' '#include "absl/base/thread_annotations.h"' '#include "absl/synchronization/mutex.h"' \
  'struct Probe { absl::Mutex mu; int v ABSL_GUARDED_BY(mu) = 0; void Set() { v = 1; } };' \
  >"$probe_dir/probe.cc"
if "$clang_cc" -std=c++17 -Wthread-safety -Werror=thread-safety -c "$probe_dir/probe.cc" \
  -o "$probe_dir/probe.o" 2>/dev/null; then
  rm -rf "$probe_dir"
  echo "clang accepted an unguarded write: -Wthread-safety is not analysing (clang installed?)"
  fail_run
fi
rm -rf "$probe_dir"
clang_output_base="$(bazel info output_base)-clang"
# Only the sources in which the analysis can find something are compiled (the others are only
# preprocessed): those that see a lock annotation or an absl::Mutex (scripts/clang_check_files.py).
# The list lives at a fixed path so that the actions' keys stay the same from run to run.
check_files="$clang_output_base.check_files"
python3 scripts/clang_check_files.py > "$check_files" || fail_run
# The product's packages whole; of tests/bench/examples/proto/gpu/sdk only the targets built from
# listed files (the product headers they include are checked with the product).
not_product='^(tests|bench|examples|proto|gpu|sdk)(/|$)'
mapfile -t packages < <(bazel query //... --output=package | grep -vE "$not_product" |
  sed 's|^|//|; s|$|:all|')
[ ${#packages[@]} -gt 0 ] || fail_run
mapfile -t outside < <(grep -E "$not_product" "$check_files" | sed -E 's|^(.*)/([^/]*)$|//\1:\2|')
if [ ${#outside[@]} -gt 0 ]; then
  mapfile -t -O ${#packages[@]} packages < <(bazel query --output=label \
    "kind(rule, rdeps(//tests/... + //bench/... + //examples/... + //gpu/... + //sdk/..., set(${outside[*]}), 1))")
fi
clang_log="$(mktemp "${TMPDIR:-/tmp}/troupe-clang-check.XXXXXX")"
echo "== bazel build --config=clang --config=nocuda (${#packages[@]} packages and targets," \
  "$(wc -l < "$check_files") sources analysed; clang -Wthread-safety, -fsyntax-only; in the" \
  "background at nice 19, output in $clang_log)"
clang_start=$SECONDS
nice -n 19 bazel --output_base="$clang_output_base" --max_idle_secs=900 build --config=clang \
  --config=nocuda --repo_env=CC="$clang_cc" --action_env=TROUPE_CLANG_CHECK_FILES="$check_files" \
  --output_groups=compilation_outputs \
  "${packages[@]}" >"$clang_log" 2>&1 &
clang_pid=$!
# A server left from an earlier run keeps the priority it started with: lower it (and the
# compilers it starts from now on) once it answers.
(
  for _ in $(seq 1 60); do
    pid="$(cat "$clang_output_base/server/server.pid.txt" 2>/dev/null)"
    if [ -n "$pid" ] && [ -d "/proc/$pid/task" ]; then  # every thread: Linux nice is per thread
      for task in /proc/"$pid"/task/*; do renice -n 19 -p "${task##*/}" >/dev/null 2>&1; done
      exit 0
    fi
    sleep 1
  done
) &

# Flags alone keep the default pattern: a target pattern is an argument that starts with //, @
# or :, or anything after a "--".
args=("$@")
has_pattern=false
after_dashes=false
for arg in "${args[@]}"; do
  if $after_dashes || [[ "$arg" == //* || "$arg" == @* || "$arg" == :* ]]; then has_pattern=true; fi
  [ "$arg" = "--" ] && after_dashes=true
done
$has_pattern || args+=(//...)
# The build event file names the targets tested; a result older than start_marker is stale.
start_marker="$(mktemp "${TMPDIR:-/tmp}/troupe-test-start.XXXXXX")"
events="$(mktemp "${TMPDIR:-/tmp}/troupe-test-events.XXXXXX")"
finish_ray
end_phase "the wait for Ray"
echo "== bazel test ${args[*]}"
# Four tests at a time (.bazelrc's --jobs=3 is for the builds): the tests wait on processes,
# sockets and timers much of the time. --local_test_jobs makes a test take one of four test slots
# instead of one of the machine's CPUs: without it Bazel books a CPU per test, so on this 2-core
# VM only two ran at once, whatever --jobs said.
bazel test --jobs=4 --local_test_jobs=4 --nocache_test_results \
  --build_event_json_file="$events" "${args[@]}"
bazel_status=$?
end_phase "bazel test"
echo "== waiting for the clang thread-safety check"
wait "$clang_pid"
clang_status=$?
clang_failure=""
if [ "$clang_status" -ne 0 ]; then
  tail -n 60 "$clang_log"
  clang_failure="the clang thread-safety check failed ($clang_status): its log is above"
else
  tail -n 2 "$clang_log"
fi
rm -f "$clang_log"
end_phase "the rest of the clang check (it took $((SECONDS - clang_start)) s in all)"
echo "== time: ${phases}whole run $SECONDS s"

# Count test cases from the JUnit XML of every test target this run tested: the targets come from
# the build event file (testResult events), never from what bazel-testlogs holds from earlier runs.
RAY_WARNING="$ray_warning" CLANG_FAILURE="$clang_failure" python3 - "$bazel_status" "$events" \
  "$start_marker" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET

bazel_status, events_path, start_marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]
run_start = os.stat(start_marker).st_mtime  # made just before `bazel test` started
os.unlink(start_marker)
# label -> the test.xml of its last attempt (a flaky test's retries, shards: each its own file).
results = {}
with open(events_path) as f:
    for line in f:
        event = json.loads(line)
        test = event.get("id", {}).get("testResult")
        if not test:
            continue
        payload = event.get("testResult", {})
        key = (test["label"], test.get("shard", 0), test.get("run", 0))
        xml_files = [o["uri"] for o in payload.get("testActionOutput", [])
                     if o.get("name") == "test.xml" and o.get("uri", "").startswith("file://")]
        results[key] = (payload.get("status", ""), xml_files[0][len("file://"):] if xml_files else "")
os.unlink(events_path)
passed = failed = skipped = 0
for (target, shard, run), (status, xml_path) in sorted(results.items()):
    if not xml_path or not os.path.exists(xml_path) or os.stat(xml_path).st_mtime < run_start:
        failed += 1
        print(f"FAILED (no results written by this run, status {status or 'unknown'}): {target}")
        continue
    try:
        root = ET.parse(xml_path).getroot()
    except ET.ParseError:
        failed += 1
        print(f"unreadable results: {target}")
        continue
    cases = root.iter("testcase")
    found = False
    for case in cases:
        found = True
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {target} {case.get('classname')}.{case.get('name')}")
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if not found:  # a test binary that crashed before writing cases
        failed += 1
        print(f"FAILED (no test cases reported): {target}")
if not results:  # a green run must have tested something
    failed += 1
    print("no test target was tested (do the patterns and filters match any?)")
if bazel_status != 0 and failed == 0:
    failed = 1
    print(f"bazel test exited with {bazel_status}")
if os.environ.get("CLANG_FAILURE"):
    failed += 1
    print("FAILED: " + os.environ["CLANG_FAILURE"])
if os.environ.get("RAY_WARNING"):
    print(os.environ["RAY_WARNING"])
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
