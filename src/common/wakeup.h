// A sleep that other threads can cut short. A thread with nothing to do until something happens
// (the core worker's timer while no lease lingers, no actor is looked up and no Get has a
// deadline) sleeps in Sleep(); whoever makes something happen calls Wake().
// A Wake() is never lost: one made before the Sleep() it was meant for makes that Sleep() return
// at once. Thread-safe; owns nothing.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace troupe {

class Wakeup {
 public:
  void Wake() {
    absl::MutexLock lock(&mu_);
    woken_ = true;
  }

  // Returns when Wake() was called since the last Sleep() returned (true), or after `timeout`
  // (false).
  bool Sleep(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const bool woken = mu_.AwaitWithTimeout(absl::Condition(&woken_), timeout);
    woken_ = false;
    return woken;
  }

 private:
  absl::Mutex mu_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
