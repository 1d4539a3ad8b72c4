// A submitted job's record, stored as JSON in the GCS KV (namespace kJobsNamespace, key
// RecordKey(submission id); its recent output under LogsKey(submission id): see
// src/schema/kv_schema.h), shaped like Ray's JobDetails so Ray Jobs API clients understand it.
// Records outlive the job's driver and the supervisor; DELETE /api/jobs/<id> removes them.
#pragma once

#include <map>
#include <string>

#include "nlohmann/json.hpp"
#include "src/schema/kv_schema.h"

namespace troupe::jobs {

// The last this many bytes of a job's output are kept (in the KV, with the record).
inline constexpr size_t kMaxLogBytes = 1 << 20;

// Ray's status strings.
inline constexpr char kPending[] = "PENDING";
inline constexpr char kRunning[] = "RUNNING";
inline constexpr char kStopped[] = "STOPPED";
inline constexpr char kSucceeded[] = "SUCCEEDED";
inline constexpr char kFailed[] = "FAILED";

inline bool IsTerminal(const std::string& status) {
  return status == kStopped || status == kSucceeded || status == kFailed;
}

// Fields (Ray's names): type, job_id, submission_id, status, entrypoint, message, error_type,
// start_time, end_time (ms since the epoch), metadata, runtime_env, entrypoint_num_cpus,
// entrypoint_num_gpus, entrypoint_resources, driver_exit_code, driver_node_id.
using JobRecord = nlohmann::json;

}  // namespace troupe::jobs
