// Follows the node's worker log files and publishes new lines to the GCS (LOG_CHANNEL), tagged
// with the worker's job, pid and node, so drivers can print their workers' output. Files of
// exited workers are read to the end before they are dropped. A file that has not grown since
// the last tick costs one stat() (LogTail).
// Not thread-safe: Tick() is called from one thread (the raylet's log thread).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/common/ids.h"
#include "src/raylet/log_tail.h"
#include "src/raylet/worker_pool.h"
#include "src/rpc/gcs_client.h"

namespace troupe {

class LogMonitor {
 public:
  LogMonitor(NodeId node_id, WorkerPool* pool, GcsClient* gcs)
      : node_id_(node_id), pool_(pool), gcs_(gcs) {}

  // Reads what was appended since the last call and publishes whole lines.
  void Tick();

 private:
  struct Followed {
    explicit Followed(const std::string& path) : tail(path) {}
    std::shared_ptr<Worker> worker;
    LogTail tail;
    bool gone = false;  // the worker exited: read to the end, then forget
  };

  const NodeId node_id_;
  WorkerPool* pool_;
  GcsClient* gcs_;
  std::map<std::string, Followed> files_;  // by log path
};

}  // namespace troupe
