// The GCS job table: drivers add their job when they connect and mark it finished when they
// leave. Job IDs are numbered in start order (1, 2, ...), continuing after a GCS restart on a
// persistent store. Changes are saved and published on the JOB channel. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/gcs/publisher.h"
#include "src/gcs/store_client.h"

namespace troupe {

class JobManager {
 public:
  JobManager(StoreClient* store, Publisher* publisher, const Clock* clock);

  // Loads jobs saved by an earlier GCS on the same store.
  absl::Status Initialize();
  // Records a RUNNING job; assigns the next ID when job.job_id() is empty.
  absl::StatusOr<JobId> AddJob(rpc::JobInfo job);
  // NotFound for an unknown job; finishing twice is fine.
  absl::Status MarkJobFinished(const std::string& job_id);
  std::vector<rpc::JobInfo> GetAllJobs() const;
  // Whether the job (binary ID) is known and FINISHED.
  bool IsJobFinished(const std::string& job_id) const;
  // Runs (without the lock) when a job finishes.
  void AddJobFinishedListener(std::function<void(const std::string& job_id)> listener);

 private:
  void SaveAndPublishLocked(const rpc::JobInfo& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreClient* store_;
  Publisher* publisher_;
  const Clock* clock_;
  mutable absl::Mutex mu_;
  uint32_t last_job_number_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<JobId, rpc::JobInfo> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const std::string&)>> finished_listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
