// A submitted job's record, stored as JSON in the GCS KV (namespace kJobsNamespace, key
// RecordKey(submission id): see src/schema/kv_schema.h), shaped like Ray's JobDetails so Ray Jobs
// API clients understand it. Its output (the log) is kept whole up to kMaxJobLogBytes, in
// kLogChunkBytes pieces under LogChunkKey(id, n), with the number of bytes kept under
// LogsKey(id) (decimal). Records and logs outlive the job's driver and the supervisor;
// DELETE /api/jobs/<id> removes them.
#pragma once

#include <map>
#include <string>

#include "nlohmann/json.hpp"
#include "src/schema/kv_schema.h"

namespace troupe::jobs {

// A job's output is kept whole up to this many bytes; what it writes past them is dropped, and
// the log ends with kLogTruncatedMarker instead. The log only ever grows, so a byte offset into it
// names the same byte forever (a tail resumes from one).
inline constexpr int64_t kMaxJobLogBytes = 16 << 20;
inline constexpr char kLogTruncatedMarker[] =
    "\n[troupe: this job's output passed the 16 MiB log cap; the rest was not kept]\n";
// The KV holds the log in pieces of this size (a GCS value stays small).
inline constexpr int64_t kLogChunkBytes = 256 << 10;
// At most this much of the log goes out in one tail step (one supervisor reply, one frame).
inline constexpr int64_t kMaxTailStepBytes = 1 << 20;

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
