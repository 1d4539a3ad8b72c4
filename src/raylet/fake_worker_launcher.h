// A WorkerLauncher for tests: it starts nothing. PopWorker only records the request; the test
// answers it with GrantPop (a made-up worker) or FailPop, on the test's own thread. Pushes and
// kills are recorded too. Pops may arrive on another thread (LeaseManager starts workers from its
// lookup thread), so tests wait for them with AwaitPops instead of sleeping.
// Thread-safe; answers run the callback without the fake's lock held.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/logging.h"
#include "src/raylet/worker_launcher.h"

namespace troupe {

class FakeWorkerLauncher : public WorkerLauncher {
 public:
  struct Pop {
    rpc::JobInfo job;
    std::string cuda_visible_devices;
    bool answered = false;
  };

  void PopWorker(const rpc::JobInfo& job, const std::string& cuda_visible_devices,
                 PopCallback done) override {
    absl::MutexLock lock(&mu_);
    pops_.push_back({job, cuda_visible_devices, false});
    callbacks_.push_back(std::move(done));
  }
  void PushWorker(const std::shared_ptr<Worker>& worker) override {
    absl::MutexLock lock(&mu_);
    pushed_.push_back(worker->worker_id);
  }
  void KillWorker(const WorkerId& worker_id) override {
    absl::MutexLock lock(&mu_);
    killed_.push_back(worker_id);
  }
  void StopWorker(const WorkerId& worker_id) override {
    absl::MutexLock lock(&mu_);
    stopped_.push_back(worker_id);
  }

  // Waits until `n` pops have been asked for in all. False if that takes longer than `limit`
  // (a safety net against a hung test, not a timing assumption).
  bool AwaitPops(int n, absl::Duration limit = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(pops_.size()) >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), limit);
  }

  // Answers pop `i` with a new registered worker of its job and returns that worker.
  std::shared_ptr<Worker> GrantPop(int i) {
    auto worker = std::make_shared<Worker>();
    worker->worker_id = WorkerId::FromRandom();
    PopCallback done;
    {
      absl::MutexLock lock(&mu_);
      worker->job_id = *JobId::FromBinary(pops_.at(i).job.job_id());
      worker->pid = 1000 + i;
      worker->address = absl::StrCat("10.0.0.1:", 20000 + i);
      worker->cuda_visible_devices = pops_.at(i).cuda_visible_devices;
      done = TakeCallbackLocked(i);
    }
    done(worker);
    return worker;
  }
  // Answers pop `i` with `status` (the worker could not be started).
  void FailPop(int i, absl::Status status) {
    PopCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = TakeCallbackLocked(i);
    }
    done(std::move(status));
  }

  int num_pops() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pops_.size());
  }
  Pop pop(int i) const {
    absl::MutexLock lock(&mu_);
    return pops_.at(i);
  }
  std::vector<WorkerId> pushed() const {
    absl::MutexLock lock(&mu_);
    return pushed_;
  }
  std::vector<WorkerId> killed() const {
    absl::MutexLock lock(&mu_);
    return killed_;
  }
  std::vector<WorkerId> stopped() const {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }

 private:
  PopCallback TakeCallbackLocked(int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Pop& pop = pops_.at(i);
    TROUPE_CHECK(!pop.answered) << "pop " << i << " was answered twice";
    pop.answered = true;
    return std::move(callbacks_.at(i));
  }

  mutable absl::Mutex mu_;
  std::vector<Pop> pops_ ABSL_GUARDED_BY(mu_);
  std::vector<PopCallback> callbacks_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerId> pushed_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerId> killed_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerId> stopped_ ABSL_GUARDED_BY(mu_);  // StopWorker
};

}  // namespace troupe
