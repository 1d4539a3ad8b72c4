// /api/v0/train_runs: the DataParallelTrainer runs their drivers published into the GCS KV
// (src/train/run_record.h for the record format), newest first, at most kMaxTrainRuns. Thread-safe;
// the GCS client is borrowed.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

inline constexpr size_t kMaxTrainRuns = 100;

// The records (JSON texts) as one array, newest start first, at most kMaxTrainRuns; a text that
// is not a JSON object with a "run_id" is skipped.
nlohmann::json TrainRunsJson(const std::vector<std::string>& records);

// 200 and the array; 503 when the GCS cannot answer.
jobs::Reply TrainRuns(GcsClient& gcs);

}  // namespace troupe::http
