// Collects uploaded working-directory packages (KV namespace kPackagesNamespace) and driver
// executables (kExecutablesNamespace) that no job refers to any more, so they do not fill the
// GCS's KV (its quota: src/gcs/kv_manager.h) for good.
//
// A digest is referred to by
//   - a job of the GCS job table that is RUNNING, or FINISHED less than `grace` ago
//     (JobInfo.working_dir_digest and executable_digest), and
//   - a job submitted through the jobs API (record "job/<id>" in namespace troupe_jobs) whose
//     status is not terminal (PENDING, RUNNING: its driver may not have registered yet), or
//     that ended less than `grace` ago: any record mentioning the digest counts.
// One that nothing refers to is deleted once a sweep has seen it unreferenced for `grace`
// (remembered in memory: a restarted GCS starts the wait again, so a package is never collected
// sooner than `grace` after its upload or after the last job using it ended).
// Known gap: a driver that finds a package already uploaded (and skips the upload) in the very
// sweep that collects it, after an hour unreferenced, registers a job whose workers cannot find
// it; submitting again uploads it anew.
//
// Owned by the GcsServer and driven by its timer thread (Tick); not thread-safe itself, but it
// only calls the thread-safe KvManager and JobManager.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/gcs/job_manager.h"
#include "src/gcs/kv_manager.h"

namespace troupe {

struct PackageCollectorOptions {
  // How long a package stays after nothing refers to it (`--package-grace-period-s`).
  absl::Duration grace = absl::Hours(1);
  // How often Tick() sweeps.
  absl::Duration period = absl::Minutes(1);
};

class PackageCollector {
 public:
  // Borrows all three; they must outlive the collector.
  PackageCollector(KvManager* kv, const JobManager* jobs, const Clock* clock,
                   PackageCollectorOptions options = {});

  // Sweeps when `period` has passed since the last sweep.
  void Tick();
  // One sweep now: deletes what has been unreferenced for `grace`; returns how many entries.
  int Sweep();

 private:
  KvManager* const kv_;
  const JobManager* const jobs_;
  const Clock* const clock_;
  const PackageCollectorOptions options_;
  absl::Time last_sweep_ = absl::InfinitePast();
  // "<namespace>/<digest>" -> when a sweep first saw it unreferenced.
  absl::flat_hash_map<std::string, absl::Time> unreferenced_since_;
};

}  // namespace troupe
