#include "src/common/wakeup.h"

#include <thread>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(WakeupTest, SleepTimesOutWithoutWake) {
  Wakeup wakeup;
  EXPECT_FALSE(wakeup.Sleep(absl::Milliseconds(1)));
}

TEST(WakeupTest, WakeBeforeSleepIsNotLost) {
  Wakeup wakeup;
  wakeup.Wake();
  // An hour: this returns only because the earlier Wake() was kept.
  EXPECT_TRUE(wakeup.Sleep(absl::Hours(1)));
  // Consumed by that Sleep(): the next one waits again.
  EXPECT_FALSE(wakeup.Sleep(absl::Milliseconds(1)));
}

TEST(WakeupTest, WakeFromAnotherThreadEndsSleep) {
  Wakeup wakeup;
  std::thread waker([&] { wakeup.Wake(); });
  EXPECT_TRUE(wakeup.Sleep(absl::Hours(1)));
  waker.join();
}

}  // namespace
}  // namespace troupe
