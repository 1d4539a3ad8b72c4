#include "src/common/wait_until.h"

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe::testing {
namespace {

TEST(WaitUntilTest, SucceedsAtOnceWhenTheConditionAlreadyHolds) {
  int checks = 0;
  ::testing::AssertionResult result = WaitUntil(
      [&] {
        ++checks;
        return true;
      },
      absl::Seconds(10), "nothing");
  EXPECT_TRUE(result);
  EXPECT_EQ(checks, 1);
}

TEST(WaitUntilTest, SucceedsWhenAnotherThreadMakesTheConditionTrue) {
  std::atomic<bool> done{false};
  std::thread setter([&] { done = true; });
  EXPECT_TRUE(WaitUntil([&] { return done.load(); }, absl::Seconds(30), "the setter thread",
                        absl::Milliseconds(1)));
  setter.join();
}

TEST(WaitUntilTest, FailureSaysWhatItWaitedForAndHowOften) {
  int checks = 0;
  ::testing::AssertionResult result = WaitUntil(
      [&] {
        ++checks;
        return false;
      },
      absl::Milliseconds(30), "the node to be marked DEAD", absl::Milliseconds(10));
  ASSERT_FALSE(result);
  EXPECT_GE(checks, 2);  // the first check and the one at the deadline, at least
  EXPECT_TRUE(absl::StrContains(result.message(), "waiting for the node to be marked DEAD"))
      << result.message();
  EXPECT_TRUE(absl::StrContains(result.message(), "timed out after ")) << result.message();
}

TEST(WaitUntilTest, AZeroTimeoutChecksOnce) {
  int checks = 0;
  EXPECT_FALSE(WaitUntil(
      [&] {
        ++checks;
        return false;
      },
      absl::ZeroDuration()));
  EXPECT_EQ(checks, 1);
}

}  // namespace
}  // namespace troupe::testing
