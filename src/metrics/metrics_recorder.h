// MetricsRecorder: the user metrics one process (driver or worker) recorded since it last pushed
// them to its raylet. Recording adds to an in-memory batch (a counter's increment, a gauge's
// last value, a histogram's bucket counts), so a record is a map update, never an RPC; the core
// worker takes the batch every second (and at shutdown) and sends it (ReportUserMetrics).
// Owned by the CoreWorker. Thread-safe: Record from any thread, TakeBatch/Restore from the
// reporter.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/raylet.pb.h"
#include "src/metrics/user_metric.h"

namespace troupe::metrics {

class MetricsRecorder {
 public:
  // Adds `value` (counter: increment; gauge: the new value; histogram: one observation) to the
  // series `tags` of `definition`. InvalidArgument (nothing recorded) for an invalid definition
  // or record (user_metric.h), or a definition that differs from the one this process first
  // recorded under that name.
  absl::Status Record(const rpc::UserMetricDefinition& definition, double value, const Tags& tags)
      ABSL_LOCKS_EXCLUDED(mu_);
  // What was recorded since the last TakeBatch (no points: nothing), with the definitions of the
  // metrics it names; the recorder starts over.
  rpc::ReportUserMetricsRequest TakeBatch() ABSL_LOCKS_EXCLUDED(mu_);
  // Puts back a batch that could not be sent, merged with what was recorded since (a gauge set
  // since keeps its newer value).
  void Restore(const rpc::ReportUserMetricsRequest& batch) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Series {
    double value = 0;  // counter: sum of increments; gauge: last value
    std::vector<uint64_t> buckets;
    double sum = 0;
    uint64_t count = 0;
  };
  // Adds one series' change (from Record or Restore); `newer` says the change is more recent than
  // what is pending (gauges keep the most recent value).
  void AddLocked(const rpc::UserMetricDefinition& definition, const Tags& tags,
                 const Series& change, bool newer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Every metric this process recorded, by name (checked once, kept for the process's life).
  absl::flat_hash_map<std::string, rpc::UserMetricDefinition> definitions_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, Tags>, Series> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe::metrics
