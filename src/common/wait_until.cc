#include "src/common/wait_until.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace troupe::testing {

::testing::AssertionResult WaitUntil(absl::FunctionRef<bool()> condition, absl::Duration timeout,
                                     absl::string_view what, absl::Duration poll_interval) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  int checks = 0;
  while (true) {
    ++checks;
    if (condition()) {
      return ::testing::AssertionSuccess()
             << what << " after " << absl::FormatDuration(absl::Now() - start);
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(poll_interval, deadline - now));
  }
  return ::testing::AssertionFailure()
         << "timed out after " << absl::FormatDuration(absl::Now() - start) << " waiting for "
         << what << " (checked " << checks << " times)";
}

}  // namespace troupe::testing
