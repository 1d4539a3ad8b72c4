#include "src/core_worker/periodic_jobs.h"

#include <algorithm>

namespace troupe {

void PeriodicJobs::Add(absl::Duration interval, std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(Job{interval, std::move(job), clock_->Now() + interval});
}

absl::Time PeriodicJobs::RunDue(absl::Time now) {
  absl::MutexLock run_lock(&run_mu_);
  std::vector<std::function<void()>> due;
  absl::Time next = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&mu_);
    for (Job& job : jobs_) {
      if (job.next_due <= now) {
        job.next_due = now + job.interval;
        due.push_back(job.run);
      }
      next = std::min(next, job.next_due);
    }
  }
  for (const auto& run : due) run();  // without the lock: jobs block on RPCs
  return next;
}

void PeriodicJobs::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    absl::Time next = RunDue(clock_->Now());
    while (!stop_.WaitForNotificationWithTimeout(next - clock_->Now())) {
      next = RunDue(clock_->Now());
    }
  });
}

void PeriodicJobs::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

}  // namespace troupe
