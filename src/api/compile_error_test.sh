#!/usr/bin/env bash
# An unserializable argument type must fail at compile time with a message that names the type
# and says how to fix it.
set -u
dir="$TEST_SRCDIR/$TEST_WORKSPACE/src/api"
if g++ -std=c++17 -fsyntax-only -DMSGPACK_NO_BOOST -I"$dir/include" "$dir/testdata/unserializable_arg.cc" \
    2>"$TEST_TMPDIR/errors.txt"; then
  echo "FAIL: the unserializable type compiled"
  exit 1
fi
grep -q "cannot be serialized" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: no explanation"; cat "$TEST_TMPDIR/errors.txt"; exit 1; }
grep -q "MSGPACK_DEFINE" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: no fix given"; exit 1; }
grep -q "T = NotSerializable" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: type not named"; exit 1; }
echo "PASS: compile error names NotSerializable and the fix"
