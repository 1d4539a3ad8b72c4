// The cross-process entries of the GCS key-value store: every namespace that one process writes
// and another reads, its keys and the format of its values. Writers and readers include this
// header instead of each other's internals (the HTTP server reads task counters without linking
// the core worker, and GCS metrics without linking the GCS server).
//
//   namespace               key                      value (writer -> readers)
//   troupe_task_counters    <worker id hex>          rpc::TaskCounters (proto/schema.proto)
//                                                    (core worker -> /metrics)
//   troupe_metrics          gcs_rpc_latency          Prometheus text, appended to /metrics as is
//                                                    (GCS server, every 5 s -> /metrics)
//   troupe_jobs             job/<submission id>      JSON job record, Ray's JobDetails shape
//                                                    (src/jobs/job_record.h)
//                           logs/<submission id>     the job's last 1 MiB of output, raw bytes
//                                                    (job supervisor -> jobs API)
//                           workdir/<submission id>  where the job's working directory is:
//                                                    "<node id hex> <name in <session>/jobs>"
//                                                    (job supervisor -> jobs API, which removes
//                                                    it on DELETE)
//   troupe_packages         <sha256 hex>             a packed directory (src/common/package.h)
//                                                    (driver, jobs API -> raylets, supervisors)
//   troupe_executables      <sha256 hex>             a driver's executable, raw bytes
//                                                    (driver -> raylets,
//                                                    src/raylet/executable_cache.h)
//   troupe_train_runs       run/<run id>             JSON record of a DataParallelTrainer run
//                                                    (src/train/run_record.h; trainer's driver
//                                                    -> /api/v0/train_runs)
//   job-<job id hex>        user keys                user values; deleted when the job ends
//                                                    (src/common/ids.h JobKvNamespace)
//   user/<namespace>        user keys                troupe::kv (troupe/kv.h): the public KV;
//                                                    no other namespace starts with "user/"
//
// Constants only; no dependencies; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

inline constexpr char kTaskCountersNamespace[] = "troupe_task_counters";
// Why the memory monitor killed a worker: key its address (host:port), value a sentence naming the
// node and the usage. Written by the raylet before the kill; read by the lease holder (the task's
// submitter) when its push to that worker fails, to fail the task as out of memory.
inline constexpr char kWorkerKillsNamespace[] = "troupe_worker_kills";

// The GCS publishes its RPC latency histograms (Prometheus text) here every 5 s.
inline constexpr char kMetricsNamespace[] = "troupe_metrics";
inline constexpr char kGcsRpcLatencyKey[] = "gcs_rpc_latency";

// DataParallelTrainer runs, for the dashboard (src/train/run_record.h).
inline constexpr char kTrainRunsNamespace[] = "troupe_train_runs";
inline constexpr char kTrainRunKeyPrefix[] = "run/";
inline std::string TrainRunKey(const std::string& run_id) { return kTrainRunKeyPrefix + run_id; }

// The public KV's namespaces (troupe/kv.h): "user/" + the user's namespace, so that no user
// namespace is any of the internal ones above.
inline constexpr char kUserKvNamespacePrefix[] = "user/";

inline constexpr char kPackagesNamespace[] = "troupe_packages";
inline constexpr char kExecutablesNamespace[] = "troupe_executables";

namespace jobs {

inline constexpr char kJobsNamespace[] = "troupe_jobs";
// Not a KV namespace: the actor namespace of the job supervisors (named SupervisorName(id)).
inline constexpr char kSupervisorNamespace[] = "troupe_job_supervisors";

inline constexpr char kRecordKeyPrefix[] = "job/";
inline std::string RecordKey(const std::string& id) { return kRecordKeyPrefix + id; }
// The number of bytes of the job's log kept so far (decimal); the bytes are in LogChunkKey(id, n),
// n = 0, 1, ... (jobs/job_record.h says the chunk size and cap).
inline std::string LogsKey(const std::string& id) { return "logs/" + id; }
inline std::string LogChunkKey(const std::string& id, int64_t n) {
  return "logs/" + id + "/" + std::to_string(n);
}
inline std::string WorkingDirKey(const std::string& id) { return "workdir/" + id; }
inline std::string SupervisorName(const std::string& id) { return "troupe-job-" + id; }

}  // namespace jobs
}  // namespace troupe
