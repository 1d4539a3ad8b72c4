// AuthFailureLimiter: how fast one client address may guess the cluster token. Each address has a
// bucket of `burst` failed attempts, refilled at `per_second`; once it is empty, the address's
// token checks (dashboard logins, requests carrying a Bearer token) are answered 429 with
// Retry-After, without looking at what they carry, until a failure's worth has refilled. Other
// addresses are never affected, and an address that does not fail never waits. At most
// `max_addresses` buckets are kept (full ones are dropped first). Owned by the HTTP server's routes
// (http_server.cc), shared by the dashboard login (dashboard.h) and the Bearer check.
// Thread-safe (one mutex); the clock is injected for tests.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace troupe::http {

struct AuthFailureLimiterOptions {
  int burst = 10;           // failures an address may make at once
  double per_second = 1.0;  // failures it may make per second after that
  size_t max_addresses = 4096;
  std::function<absl::Time()> clock = absl::Now;
};

class AuthFailureLimiter {
 public:
  explicit AuthFailureLimiter(AuthFailureLimiterOptions options = {});

  // Zero if `address` may try now; else how long until it may (at least 1 s, whole seconds).
  absl::Duration RetryAfter(const std::string& address);
  // Records a failed attempt from `address`.
  void Failed(const std::string& address);

 private:
  struct Bucket {
    double failures_left;
    absl::Time at;  // when failures_left was computed
  };
  // Brings `bucket` up to now.
  void RefillLocked(Bucket& bucket, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AuthFailureLimiterOptions options_;
  absl::Mutex mu_;
  std::map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe::http
