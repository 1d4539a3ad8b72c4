// WorkerLogPrinter: prints a driver's job's worker output on this process's stdout as the raylets
// publish it on the GCS log channel, each line prefixed "(pid=..., node=...) " like Ray does.
// Follows the channel with long polls (woken by the GCS when lines arrive), on a thread it owns.
// Thread-safety: Stop and the destructor may run on any one thread.
#pragma once

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/common/ids.h"
#include "src/rpc/gcs_client.h"

namespace troupe::internal {

class WorkerLogPrinter {
 public:
  // `gcs` must outlive this printer.
  WorkerLogPrinter(GcsClient* gcs, JobId job_id);
  ~WorkerLogPrinter() { Stop(); }
  WorkerLogPrinter(const WorkerLogPrinter&) = delete;
  WorkerLogPrinter& operator=(const WorkerLogPrinter&) = delete;

  // Prints what is already published and what arrives until the channel has been quiet for
  // kQuietPeriod (at most kDrainLimit in all), then stops following. A raylet publishes a worker's
  // output every 100 ms, so the last lines of a task that just ended are not lost when the
  // driver exits right after it (`troupe train launch` lost them). Idempotent.
  void Stop();
  static constexpr absl::Duration kQuietPeriod = absl::Milliseconds(250);
  static constexpr absl::Duration kDrainLimit = absl::Seconds(1);

 private:
  void Follow();

  GcsClient* const gcs_;
  const JobId job_id_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace troupe::internal
