// NodeHistory: each node's CPU, memory and object store use over the last hour, for the
// dashboard's overview (GET /api/v0/nodes/history). The HTTP server's watchdog thread records
// the GCS's resource reports (ResourceUsage: the raylets send them every 100 ms) once every
// `interval`; samples older than `window` are dropped, and so are nodes with none left.
// Thread-safe (one mutex).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/common.pb.h"

namespace troupe::http {

class NodeHistory {
 public:
  explicit NodeHistory(absl::Duration window = absl::Hours(1),
                       absl::Duration interval = absl::Seconds(10))
      : window_(window), interval_(interval) {}

  // Whether a sample is due at `now` (the first, or `interval` after the last).
  bool Due(absl::Time now) const;
  // One sample per reported node at `now`.
  void Record(absl::Time now, const std::vector<rpc::ResourceUsage>& usage);
  // {"interval_s": 10, "window_s": 3600, "nodes": {node hex: [{"t": ms, "cpu_percent",
  // "memory_used_bytes", "memory_total_bytes", "object_store_used_bytes"}, ...] oldest first}}.
  nlohmann::json ToJson() const;

 private:
  struct Sample {
    int64_t t_ms;
    double cpu_percent;
    int64_t memory_used, memory_total, store_used;
  };
  const absl::Duration window_, interval_;
  mutable absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<std::string, std::deque<Sample>> nodes_ ABSL_GUARDED_BY(mu_);  // by node id hex
};

}  // namespace troupe::http
