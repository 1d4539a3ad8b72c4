#!/usr/bin/env bash
# Mistakes the API refuses at compile time must fail with a message that says what is wrong and
# how to fix it:
#   - an unserializable argument type: the message names the type and MSGPACK_DEFINE;
#   - a task-only option on an actor call (resources): the message says they belong to the actor.
#   - SetNumReturns<N>() with N other than the returned std::tuple's size: the message says what N
#     must be.
set -u
dir="$TEST_SRCDIR/$TEST_WORKSPACE/src/api"
compile() {  # compile FILE: succeeds if FILE compiled; the compiler's messages in errors.txt
  g++ -std=c++17 -fsyntax-only -DMSGPACK_NO_BOOST -I"$dir/include" "$dir/testdata/$1" \
    2>"$TEST_TMPDIR/errors.txt"
}
if compile unserializable_arg.cc; then
  echo "FAIL: the unserializable type compiled"
  exit 1
fi
grep -q "cannot be serialized" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: no explanation"; cat "$TEST_TMPDIR/errors.txt"; exit 1; }
grep -q "MSGPACK_DEFINE" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: no fix given"; exit 1; }
grep -q "T = NotSerializable" "$TEST_TMPDIR/errors.txt" || { echo "FAIL: type not named"; exit 1; }
echo "PASS: compile error names NotSerializable and the fix"

if compile actor_call_resources.cc; then
  echo "FAIL: resources on an actor call compiled"
  exit 1
fi
grep -q "an actor call runs with its actor's resources" "$TEST_TMPDIR/errors.txt" ||
  { echo "FAIL: no explanation for resources on an actor call"; cat "$TEST_TMPDIR/errors.txt"; exit 1; }
grep -q "troupe::Actor(Factory).SetResources" "$TEST_TMPDIR/errors.txt" ||
  { echo "FAIL: no fix given for resources on an actor call"; exit 1; }
echo "PASS: resources on an actor call are refused, saying where they belong"

if compile num_returns_mismatch.cc; then
  echo "FAIL: SetNumReturns<3>() on a function returning a 2-tuple compiled"
  exit 1
fi
grep -q "N must be the number of elements of the std::tuple the function returns" \
  "$TEST_TMPDIR/errors.txt" ||
  { echo "FAIL: no explanation for a wrong SetNumReturns"; cat "$TEST_TMPDIR/errors.txt"; exit 1; }
echo "PASS: a SetNumReturns count other than the tuple's size is refused, saying what N must be"
