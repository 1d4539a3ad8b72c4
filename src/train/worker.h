// The worker actor of DataParallelTrainer: one per bundle; runs the registered train loop with a
// Context, and hands rank 0's reports (metrics + packed checkpoint) to the driver, which polls
// them while the loop runs (the actor has two executor threads). Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "troupe/train.h"

namespace troupe::train::internal {

// One report as it travels to the driver: metrics and the checkpoint package ("" for none).
using WireReport = std::pair<Metrics, std::string>;

class TrainWorker {
 public:
  static TrainWorker* Create();

  // {node id hex, leased GPU ids "a,b"}: where this worker runs, to order ranks.
  std::vector<std::string> Where();
  // Runs the loop to its end. `ranks`: world_rank, local_rank, world_size, local_world_size,
  // node_rank, cpus, and 1 when the group is NCCL (0: CPU). `checkpoint`: a package to resume from
  // ("" for a fresh start).
  bool Run(std::string loop_name, LoopConfig config, std::vector<int64_t> ranks, std::string group,
           std::string experiment, std::string checkpoint);
  // Rank 0's reports since the last poll, in order.
  std::vector<WireReport> PollReports();
};

// The CPU-backend side group of the workers of collective group `group` (Context::host_group).
inline std::string HostGroupName(const std::string& group) { return group + ".cpu"; }

// Worker-process state the free functions (GetContext, Report, GetCheckpoint) read.
void QueueReport(WireReport report);

// The name `loop` was registered under with TROUPE_TRAIN_LOOP ("" if it was not).
std::string TrainLoopName(TrainLoopFn loop);

}  // namespace troupe::train::internal
