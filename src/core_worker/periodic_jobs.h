// Periodic background jobs that share one thread. The core worker's reports to the GCS (task
// events every second, task counters every 2 s) used to have a thread each; every thread counts
// against the machine's process-ID limit (kernel.pid_max) once per worker process, and each
// actor is a worker process, so they now take turns on one. Jobs may block (they make RPCs):
// they are kept off the caller's timer (CoreWorker::TimerLoop), whose ticks must stay on time.
// A job first runs one `interval` after Add, then one `interval` after each run was found due
// (a slow job delays the others due with it, never piles up runs); jobs due together run in the
// order added.
// Owned by CoreWorker. Thread-safe: RunDue from any thread (jobs run without the lock, one
// RunDue at a time); Add, Start and Stop from the owner's thread, Add before Start. Jobs run on
// the thread Start() made (or the caller of RunDue, in tests).
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace troupe {

class PeriodicJobs {
 public:
  explicit PeriodicJobs(const Clock* clock) : clock_(clock) {}
  // Stops the thread (no job runs after this returns).
  ~PeriodicJobs() { Stop(); }
  PeriodicJobs(const PeriodicJobs&) = delete;
  PeriodicJobs& operator=(const PeriodicJobs&) = delete;

  // Runs `job` every `interval` (> 0), first one interval from now. Before Start (the thread
  // sleeps until the next job it knows of is due).
  void Add(absl::Duration interval, std::function<void()> job) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs every job due at `now` (the loop's step, public for tests); returns when the next one
  // is due (InfiniteFuture: no jobs).
  absl::Time RunDue(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the thread that runs the jobs when due (once).
  void Start();
  // Ends the thread and waits for a job in progress. Idempotent.
  void Stop();

 private:
  struct Job {
    absl::Duration interval;
    std::function<void()> run;
    absl::Time next_due;
  };
  const Clock* const clock_;
  absl::Mutex mu_;
  std::vector<Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::Mutex run_mu_;  // one RunDue at a time: a job never runs twice at once
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace troupe
