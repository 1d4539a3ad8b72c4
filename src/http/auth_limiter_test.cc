#include "src/http/auth_limiter.h"

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

class AuthFailureLimiterTest : public ::testing::Test {
 protected:
  AuthFailureLimiterOptions Options() {
    AuthFailureLimiterOptions options;
    options.burst = 3;
    options.per_second = 0.5;  // one failure every 2 s
    options.clock = [this] { return now_; };
    return options;
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(AuthFailureLimiterTest, AnAddressPastItsBurstWaitsAndOthersDoNot) {
  AuthFailureLimiter limiter(Options());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(limiter.RetryAfter("10.0.0.1"), absl::ZeroDuration()) << i;
    limiter.Failed("10.0.0.1");
  }
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1"), absl::Seconds(2));
  EXPECT_EQ(limiter.RetryAfter("10.0.0.2"), absl::ZeroDuration());  // someone else: unaffected
  now_ += absl::Seconds(1);
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1"), absl::Seconds(1));
  now_ += absl::Seconds(1);
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1"), absl::ZeroDuration());  // one failure's worth back
  limiter.Failed("10.0.0.1");
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1"), absl::Seconds(2));
  // Waiting long refills the burst, never more.
  now_ += absl::Hours(1);
  for (int i = 0; i < 3; ++i) limiter.Failed("10.0.0.1");
  EXPECT_GT(limiter.RetryAfter("10.0.0.1"), absl::ZeroDuration());
}

TEST_F(AuthFailureLimiterTest, KeepsAtMostMaxAddresses) {
  AuthFailureLimiterOptions options = Options();
  options.max_addresses = 2;
  AuthFailureLimiter limiter(options);
  for (int i = 0; i < 3; ++i) limiter.Failed("a");
  limiter.Failed("b");
  now_ += absl::Hours(1);  // both whole again: dropped to make room
  for (int i = 0; i < 3; ++i) limiter.Failed("c");
  EXPECT_GT(limiter.RetryAfter("c"), absl::ZeroDuration());
  EXPECT_EQ(limiter.RetryAfter("a"), absl::ZeroDuration());
}

}  // namespace
}  // namespace troupe::http
