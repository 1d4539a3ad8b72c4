// The GCS's task table: task events reported by owners and executors (proto/gcs.proto
// TaskInfoService; reporting side in src/core_worker/task_event_buffer.h) merged into one
// TaskRecord per (task ID, attempt): name, kind, job, actor, the furthest state reached and when
// each state was entered, node/worker/pid of the run, error. Events of one attempt may arrive in
// any order (owner and executor report independently); fields set by any event are kept, and the
// state is the furthest one seen (FINISHED/FAILED beat RUNNING beat the pending states).
// When a job ends (OnJobFinished), its attempts not FINISHED or FAILED yet are marked abandoned:
// state FAILED with kAbandonedAtJobEnd as the error, and so are attempts of a finished job that
// first show up later. A real end reported afterwards (a worker flushing as it is stopped)
// replaces the abandonment, so a task that did run to its end shows its true final state.
// Memory is bounded per job and in all: at most `max_tasks_per_job` records of a job and
// `max_tasks` records of all jobs (finished jobs' too); beyond either the oldest record (of the
// job, or of all) is forgotten and counted for its job. Drops reported by processes (full
// buffers) are counted per job too; queries answer with the sum over the jobs they cover. Kept
// in memory only: a GCS restart forgets task history.
// Merging is on the path of every task (tens of thousands of events a second), so records are
// plain structs keyed by (TaskId, attempt), IDs inline, names in a table of names, state times in
// a fixed array: merging an event allocates nothing once its record exists. Protobuf
// (rpc::TaskRecord) is built only for the records a query returns. An event whose task ID is
// not TaskId::Size() bytes is dropped (counted for its job); other IDs of the wrong size are
// ignored.
// Thread-safe (one mutex); called from gRPC threads.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"
#include "src/common/interned_names.h"

namespace troupe {

struct TaskEventManagerOptions {
  // Attempts remembered per job (GCS flag --max-task-events-per-job); oldest forgotten first.
  int64_t max_tasks_per_job = 10000;
  // Attempts remembered in all jobs together (--max-task-events; Ray's
  // task_events_max_num_task_in_gcs, also 100,000); oldest forgotten first. ~250 bytes each.
  int64_t max_tasks = 100000;
};

class TaskEventManager {
 public:
  // The error of an attempt its job left unfinished.
  static constexpr char kAbandonedAtJobEnd[] =
      "abandoned at job end: the job finished before this task did";

  explicit TaskEventManager(TaskEventManagerOptions options)
      : options_(options), names_(kMaxNames) {}

  void AddEvents(const rpc::AddTaskEventDataRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // The job ended at `time_us` (Unix microseconds): its unfinished attempts, and those reported
  // from now on without an end, are abandoned (see above).
  void OnJobFinished(const JobId& job_id, int64_t time_us) ABSL_LOCKS_EXCLUDED(mu_);
  // Matching records, oldest first, at most request.limit() (0: all); INVALID_ARGUMENT for a
  // filter key that does not exist. Filter keys: task_id, job_id, node_id, actor_id, worker_id
  // (hex), name, state (e.g. RUNNING), type (NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK).
  absl::StatusOr<rpc::GetTaskEventsReply> GetTaskEvents(
      const rpc::GetTaskEventsRequest& request) const ABSL_LOCKS_EXCLUDED(mu_);

  size_t num_records() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kMaxNames = 100000;  // distinct task names stored once each
  static constexpr int kNumStates = rpc::TaskEvent::FAILED + 1;
  struct Key {
    TaskId task_id;
    int32_t attempt = 0;
    bool operator==(const Key& other) const {
      return task_id == other.task_id && attempt == other.attempt;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      return H::combine(std::move(h), key.task_id, key.attempt);
    }
  };
  // One attempt's merged events (rpc::TaskRecord's fields; IDs nil when not known).
  struct Record {
    JobId job_id;
    ActorId actor_id;
    NodeId node_id;
    WorkerId worker_id;
    rpc::TaskSpec::Type type = rpc::TaskSpec::NORMAL_TASK;
    rpc::TaskEvent::State state = rpc::TaskEvent::STATE_UNSPECIFIED;  // the furthest reached
    int32_t worker_pid = 0;
    uint32_t entered = 0;  // bit s: state s was entered, at state_time_us[s]
    std::array<int64_t, kNumStates> state_time_us{};
    uint64_t seq = 0;  // creation order, for oldest-first answers
    bool abandoned = false;  // FAILED by OnJobFinished, not by any report
    NameRef name;
    std::string error_message;
  };
  struct JobTasks {
    std::deque<Key> order;  // record keys, oldest first
    int64_t dropped = 0;    // forgotten (cap) + dropped by reporting processes
    int64_t finished_us = 0;  // when the job ended (OnJobFinished); 0 while it runs
  };
  void Merge(const rpc::TaskEvent& event, Record* record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks an attempt without an end abandoned at `time_us`; no-op for ended ones.
  static void AbandonIfUnfinished(int64_t time_us, Record* record);
  void AddEventLocked(const rpc::TaskEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the oldest records of all jobs beyond max_tasks.
  void ForgetBeyondTotalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void ToProto(const Key& key, const Record& record, rpc::TaskRecord* out);

  const TaskEventManagerOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<Key, Record> records_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<JobId, JobTasks> jobs_ ABSL_GUARDED_BY(mu_);
  // Every record's (key, seq), oldest first; also records a job's cap forgot already (skipped,
  // and compacted away once they are half of it). The seq tells a forgotten record from a newer
  // one of the same key (a late event of a forgotten attempt).
  std::deque<std::pair<Key, uint64_t>> all_order_ ABSL_GUARDED_BY(mu_);
  InternedNames names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
