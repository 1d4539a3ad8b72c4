// The GCS's task table: task events reported by owners and executors (proto/gcs.proto
// TaskInfoService; reporting side in src/core_worker/task_event_buffer.h) merged into one
// TaskRecord per (task ID, attempt): name, kind, job, actor, the furthest state reached and when
// each state was entered, node/worker/pid of the run, error. Events of one attempt may arrive in
// any order (owner and executor report independently); fields set by any event are kept, and the
// state is the furthest one seen (FINISHED/FAILED beat RUNNING beat the pending states).
// Memory is bounded per job: at most `max_tasks_per_job` records; beyond that the oldest record
// of the job is forgotten and counted. Drops reported by processes (full buffers) are counted per
// job too; queries answer with the sum over the jobs they cover. Kept in memory only: a GCS
// restart forgets task history.
// Thread-safe (one mutex); called from gRPC threads.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"

namespace troupe {

struct TaskEventManagerOptions {
  // Attempts remembered per job (GCS flag --max-task-events-per-job); oldest forgotten first.
  int64_t max_tasks_per_job = 10000;
};

class TaskEventManager {
 public:
  explicit TaskEventManager(TaskEventManagerOptions options) : options_(options) {}

  void AddEvents(const rpc::AddTaskEventDataRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Matching records, oldest first, at most request.limit() (0: all); INVALID_ARGUMENT for a
  // filter key that does not exist. Filter keys: task_id, job_id, node_id, actor_id, worker_id
  // (hex), name, state (e.g. RUNNING), type (NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK).
  absl::StatusOr<rpc::GetTaskEventsReply> GetTaskEvents(
      const rpc::GetTaskEventsRequest& request) const ABSL_LOCKS_EXCLUDED(mu_);

  size_t num_records() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Record {
    rpc::TaskRecord task;
    uint64_t seq = 0;  // creation order, for oldest-first answers
  };
  struct JobTasks {
    std::deque<std::string> order;  // record keys, oldest first
    int64_t dropped = 0;            // forgotten (cap) + dropped by reporting processes
  };
  static std::string KeyOf(const std::string& task_id, int32_t attempt);
  static void Merge(const rpc::TaskEvent& event, rpc::TaskRecord* task);
  void AddEventLocked(const rpc::TaskEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TaskEventManagerOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Record> records_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, JobTasks> jobs_ ABSL_GUARDED_BY(mu_);  // by binary job ID
};

}  // namespace troupe
