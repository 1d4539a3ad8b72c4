// WaitUntil: the one way tests wait for something another thread or process will do (a node to
// be marked dead, an actor to restart, resources to be given back). It polls a condition until
// it holds or a timeout passes, and says what it waited for and for how long, so a failure reads
// "timed out after 10s waiting for the killed actor's calls to fail" instead of a bare
// "Value of: dead  Actual: false".
//
// Use it only where the test cannot be told directly; a unit test with a FakeClock and fakes
// answering on the test thread needs no waiting at all. Stateless; callable from any thread
// (the condition runs on the calling thread).
#pragma once

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace troupe::testing {

// Calls `condition` until it returns true (success) or `timeout` has passed since the call
// (failure), sleeping `poll_interval` between calls; it is always called at least once, and once
// more at the deadline. `what` names the awaited event in the message: "waiting for <what>".
//   ASSERT_TRUE(WaitUntil([&] { return NodeState(id) == "DEAD"; }, absl::Seconds(5),
//                         "the killed node to be marked DEAD"));
::testing::AssertionResult WaitUntil(absl::FunctionRef<bool()> condition, absl::Duration timeout,
                                     absl::string_view what = "the condition",
                                     absl::Duration poll_interval = absl::Milliseconds(50));

}  // namespace troupe::testing
