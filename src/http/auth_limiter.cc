#include "src/http/auth_limiter.h"

#include <algorithm>
#include <cmath>

namespace troupe::http {

AuthFailureLimiter::AuthFailureLimiter(AuthFailureLimiterOptions options)
    : options_(std::move(options)) {}

void AuthFailureLimiter::RefillLocked(Bucket& bucket, absl::Time now) const {
  const double seconds = std::max(0.0, absl::ToDoubleSeconds(now - bucket.at));
  bucket.failures_left =
      std::min<double>(options_.burst, bucket.failures_left + seconds * options_.per_second);
  bucket.at = now;
}

absl::Duration AuthFailureLimiter::RetryAfter(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(address);
  if (it == buckets_.end()) return absl::ZeroDuration();
  RefillLocked(it->second, options_.clock());
  if (it->second.failures_left >= 1) return absl::ZeroDuration();
  const double wait = (1 - it->second.failures_left) / options_.per_second;
  return absl::Seconds(std::max(1.0, std::ceil(wait)));
}

void AuthFailureLimiter::Failed(const std::string& address) {
  const absl::Time now = options_.clock();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(address);
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_addresses) {
      // Forget addresses that have waited long enough to be whole again; failing that, any one.
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        RefillLocked(b->second, now);
        b = b->second.failures_left >= options_.burst ? buckets_.erase(b) : std::next(b);
      }
      if (buckets_.size() >= options_.max_addresses) buckets_.erase(buckets_.begin());
    }
    it = buckets_.emplace(address, Bucket{static_cast<double>(options_.burst), now}).first;
  }
  RefillLocked(it->second, now);
  it->second.failures_left = std::max(0.0, it->second.failures_left - 1);
}

}  // namespace troupe::http
