// What DataParallelTrainer::Fit tells the cluster about a run, for the dashboard's Training page
// (/api/v0/train_runs, src/http/train_runs_view.h): one JSON record per run in the GCS KV,
// namespace kTrainRunsNamespace (src/schema/kv_schema.h), key "run/<run_id>", rewritten by the
// driver when the run starts, when workers are placed, after each batch of rank 0's reports and
// when the run ends. The format (documented in docs/train.md):
//
//   {"run_id", "name", "status": "RUNNING" | "FINISHED" | "FAILED", "error", "job_id",
//    "start_time_ms", "end_time_ms" (0 while running), "num_workers", "min_workers" (elastic
//    runs: below num_workers), "max_workers" (replacements up to it; 0: none), "use_gpu",
//    "strategy", "resources_per_worker": {...}, "storage_path", "attempt", "restarts", "workers":
//    [{"rank", "node_id", "gpu"}],   // the current attempt's placement "metrics": [{"epoch": 1,
//    "accuracy": ...}, ...],   // rank 0's reports, in order (last 1000) "checkpoints": [{"path",
//    "metrics": {...}}],       // the kept ones, oldest first "membership": [{"generation",
//    "change": "left" | "restart", "why", "ranks": [2],
//                    "world_size", "step", "time_ms", "recovery_s", "detail"}]}  // in order
//
// Publishing never fails training: a KV error is ignored (the record is for display only).
// Plain data; not thread-safe (the trainer's driver thread owns it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/train.h"

namespace troupe::train {

// Reports kept in a record; older ones are dropped (the driver's Result keeps them all).
inline constexpr size_t kMaxRecordedReports = 1000;

struct RunRecord {
  struct Worker {
    int rank = 0;
    std::string node_id;  // hex
    int gpu = -1;         // -1: none
  };
  std::string run_id;
  std::string name;
  std::string status = "RUNNING";
  std::string error;
  std::string job_id;  // hex, the driver's job
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  int num_workers = 0;
  int min_workers = 0;
  int max_workers = 0;
  bool use_gpu = false;
  std::string strategy;
  std::map<std::string, double> resources_per_worker;
  std::string storage_path;
  int attempt = 0;
  int restarts = 0;
  std::vector<Worker> workers;
  std::vector<Metrics> metrics;
  std::vector<Checkpoint> checkpoints;
  std::vector<MembershipEvent> membership;  // elastic changes and restarts, in order
};

// The record as JSON text (the format above). Non-finite metric values become null.
std::string RunRecordJson(const RunRecord& record);

// A new run id: "<name>-<start ms>-<8 hex>".
std::string NewRunId(const std::string& name, int64_t start_time_ms);

// Writes the record to the KV (overwriting); ignores failures. Needs troupe::Init.
void PublishRunRecord(const RunRecord& record);

}  // namespace troupe::train
