#!/usr/bin/env bash
# Runs every test: installs missing packages, checks that the build without CUDA still works and
# that clang's thread-safety analysis finds nothing, then builds and tests everything with Bazel.
# Ends with a line "N passed, N failed, N skipped" counting test cases. Extra arguments go to
# `bazel test` (e.g. a target pattern or --test_tag_filters=gpu).
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

echo "== bazel build --config=nocuda //... (the build must work without CUDA)"
if ! bazel build --config=nocuda //...; then
  echo "0 passed, 1 failed"
  exit 1
fi

# The same code compiled by clang checks the lock annotations (ABSL_GUARDED_BY, ...): a
# thread-safety finding fails the run. Its own output base keeps the g++ build's cache and
# outputs untouched (Bazel configures the C++ toolchain from CC); the disk cache is shared. Its
# server exits after 15 idle minutes rather than holding memory beside the main one. It builds
# every package (`//pkg:all`, as listed by the main server) rather than `//...`, which would
# descend into the main output base through the bazel-<workspace> symlink.
echo "== bazel build --config=clang --config=nocuda (every package; clang -Wthread-safety)"
clang_output_base="$(bazel info output_base)-clang"
mapfile -t packages < <(bazel query //... --output=package | sed 's|^|//|; s|$|:all|')
if [ ${#packages[@]} -eq 0 ] ||
  ! bazel --output_base="$clang_output_base" --max_idle_secs=900 build --config=clang \
    --config=nocuda "${packages[@]}"; then
  echo "0 passed, 1 failed"
  exit 1
fi

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(//...)
echo "== bazel test ${targets[*]}"
bazel test --nocache_test_results "${targets[@]}"
bazel_status=$?

# Count test cases from the JUnit XML of every test target that ran.
python3 - "$bazel_status" <<'PY'
import glob, os, subprocess, sys
import xml.etree.ElementTree as ET

bazel_status = int(sys.argv[1])
query = subprocess.run(["bazel", "query", "tests(//...)"], capture_output=True, text=True)
testlogs = os.path.realpath("bazel-testlogs")
passed = failed = skipped = 0
for target in query.stdout.split():
    package, name = target[2:].split(":")
    xml_path = os.path.join(testlogs, package, name, "test.xml")
    if not os.path.exists(xml_path):
        continue  # not built here (e.g. a CUDA test without CUDA): counted by bazel as skipped
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
if bazel_status != 0 and failed == 0:
    failed = 1
    print(f"bazel test exited with {bazel_status}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
