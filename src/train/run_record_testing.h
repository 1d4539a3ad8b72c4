// Test helpers (testonly): training-run records (run_record.h) as a trainer's driver publishes
// them, for the tests of what reads them (the dashboard's /api/v0/train_runs, `troupe list
// train-runs`). Plain values; each call builds a new one (thread-safe).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "src/train/run_record.h"

namespace troupe::train {

// A RUNNING run named `name` that started at `start_time_ms` (its run id from NewRunId): placed
// SPREAD, one CPU per worker, rank r on node "aa01", "bb02", ... (no GPUs).
inline RunRecord TestRunRecord(const std::string& name, int64_t start_time_ms,
                               int num_workers = 2) {
  RunRecord record;
  record.name = name;
  record.start_time_ms = start_time_ms;
  record.run_id = NewRunId(name, start_time_ms);
  record.num_workers = num_workers;
  record.strategy = "SPREAD";
  record.resources_per_worker = {{"CPU", 1}};
  for (int rank = 0; rank < num_workers; ++rank) {
    record.workers.push_back(
        {rank, absl::StrFormat("%c%c%02d", 'a' + rank, 'a' + rank, rank + 1), -1});
  }
  return record;
}

// An elastic run's change: rank 2 of 4 died in step 42 (41 committed), generation 2 went on
// with 3 workers, and the next step committed 0.25 s after the failure was noticed.
inline MembershipEvent TestRankLeftEvent() {
  MembershipEvent left;
  left.generation = 2;
  left.change = "left";
  left.why = "died";
  left.ranks = {2};
  left.world_size = 3;
  left.step = 41;
  left.time_ms = 1234;
  left.recovery_s = 0.25;
  left.detail = "rank 0 reported rank 2: rank 2 is gone";
  return left;
}

}  // namespace troupe::train
