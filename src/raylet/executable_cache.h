// Finds the program that runs a job's workers on this node. Workers are the driver's own
// executable; its bytes are stored in the GCS KV under their SHA-256 (namespace
// "troupe_executables"), so a node without the driver's filesystem fetches it once and caches
// it in `cache_dir`. On the driver's own node (or a shared filesystem) the original file is used
// when its digest matches. Working-directory packages (namespace "troupe_packages") are unpacked
// once per digest under `cache_dir`. Thread-safe.
#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/common.pb.h"
#include "src/schema/kv_schema.h"
#include "src/rpc/gcs_client.h"

namespace troupe {

class ExecutableCache {
 public:
  ExecutableCache(std::string cache_dir, GcsClient* gcs)
      : cache_dir_(std::move(cache_dir)), gcs_(gcs) {}

  absl::StatusOr<std::string> Resolve(const rpc::JobInfo& job);
  // The directory workers of `job` start in: its working-directory package unpacked here
  // (fetched from the GCS once), or "" when the job has none.
  absl::StatusOr<std::string> ResolveWorkingDir(const rpc::JobInfo& job);

 private:
  std::string cache_dir_;
  GcsClient* gcs_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> path_by_digest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
