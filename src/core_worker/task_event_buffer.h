// Task events on the reporting side: a TaskEventSink is where the core worker records the state
// changes of tasks, actor calls and actor creation tasks (SUBMITTED ... FINISHED/FAILED, per
// attempt); TaskEventBuffer is the real one. Recording is on the task fast path, so it only
// appends a small fixed-size struct (IDs inline, the task's name as a pointer into a table of
// names) to a bounded in-memory buffer under a short lock: no heap allocation per event in the
// common case. Flush() converts what accumulated to proto (on an arena) and reports it to the
// GCS (proto/gcs.proto AddTaskEventData), in one call per `max_batch_events` events; the owner
// calls it every `flush_interval` (the core worker from its PeriodicJobs thread, which also
// reports task counters: one thread for both) and once more at shutdown. When the buffer is
// full new events are dropped and counted per job; the counts travel with the next report, so
// the GCS can say how much it never saw.
// The report function (a GCS client call in production) is the only way out: no gRPC here.
// Owned by CoreWorker. Thread-safe: Record and Flush from any thread. Starts no thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"
#include "src/common/interned_names.h"

namespace troupe {

// One state change of one attempt of a task, as a recorder describes it. IDs are fixed-size
// values (no heap copies on the task path); `name` only needs to live through the Record call
// (the buffer keeps it once, in its name table). Fields the recording side does not know stay
// nil / empty / zero and are merged by the GCS from other events.
struct TaskStateEvent {
  TaskId task_id;
  int32_t attempt = 0;
  JobId job_id;
  rpc::TaskEvent::State state = rpc::TaskEvent::STATE_UNSPECIFIED;
  absl::Time time;
  // An owner's first event for an attempt may be a pending state (PENDING_NODE_ASSIGNMENT,
  // PENDING_ARGS_AVAIL) reached at once: it then also says when the attempt was SUBMITTED, so a
  // submission costs one event instead of two. InfinitePast: not set.
  absl::Time submitted_time = absl::InfinitePast();
  absl::string_view name;
  rpc::TaskSpec::Type type = rpc::TaskSpec::NORMAL_TASK;
  ActorId actor_id;  // nil: none
  std::string error_message;
};

// task_id, attempt and job_id of `spec` (IDs of the wrong size become nil).
TaskStateEvent TaskStateEventOf(const rpc::TaskSpec& spec);

// The name a task is shown under (task state API, `troupe list tasks`, timeline): the name the
// caller gave it (SetName), else its function's registered name.
inline absl::string_view TaskDisplayNameOf(const rpc::TaskSpec& spec) {
  return spec.name().empty() ? spec.function_name() : spec.name();
}

// Where task state changes are recorded. Implementations must be cheap and never block for long:
// callers are on the task submission and execution paths.
class TaskEventSink {
 public:
  virtual ~TaskEventSink() = default;
  virtual void Record(TaskStateEvent event) = 0;
};

class TaskEventBuffer : public TaskEventSink {
 public:
  struct Options {
    size_t max_buffered_events = 100000;  // beyond this, events are dropped (and counted)
    size_t max_batch_events = 10000;      // events per report call
    absl::Duration flush_interval = absl::Seconds(1);  // how often the owner should Flush()
    // This process, for the executing side's events (BeginRunning / EndRunning).
    NodeId node_id;
    WorkerId worker_id;
    int32_t pid = 0;
    size_t max_names = 10000;  // distinct task names kept once each (then: a copy per event)
  };
  // Sends one batch; a failed call's events are counted as dropped (reported next time).
  using Report = std::function<absl::Status(const rpc::AddTaskEventDataRequest&)>;

  TaskEventBuffer(Options options, Report report);

  void Record(TaskStateEvent event) override ABSL_LOCKS_EXCLUDED(mu_);
  // The executing side. A run starts (`running` describes it; its state is set here):
  // it is reported RUNNING only if it is still running at a flush, so a run that ends between
  // two flushes costs one event, its end (which carries the start time). Returns the token for
  // EndRunning.
  uint64_t BeginRunning(TaskStateEvent running) ABSL_LOCKS_EXCLUDED(mu_);
  // The run ended in `state` (FINISHED or FAILED, with `error_message`) at `end`. A run that was
  // reported RUNNING has its end flushed here, at once (call this before the task's reply is
  // sent: the process may be killed as soon as its caller has the result); others wait for the
  // next flush.
  void EndRunning(uint64_t token, rpc::TaskEvent::State state, absl::Time end,
                  std::string error_message) ABSL_LOCKS_EXCLUDED(mu_);
  // Reports everything buffered now, in batches; returns the number of calls made (none when
  // there is nothing to say). Serialized with itself, so batches leave in order.
  int Flush() ABSL_LOCKS_EXCLUDED(mu_, flush_mu_);

  // Events dropped so far (full buffer or failed report), over the process's life.
  int64_t num_dropped() const { return num_dropped_.load(std::memory_order_relaxed); }
  size_t num_buffered() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // An event as buffered: a TaskStateEvent with its name in names_ (or its own copy).
  struct Buffered {
    TaskId task_id;
    JobId job_id;
    ActorId actor_id;
    int32_t attempt = 0;
    rpc::TaskEvent::State state = rpc::TaskEvent::STATE_UNSPECIFIED;
    rpc::TaskSpec::Type type = rpc::TaskSpec::NORMAL_TASK;
    // Run by this process: node, worker and pid are this process's (filled in at the flush).
    bool executed_here = false;
    absl::Time time;
    absl::Time submitted_time = absl::InfinitePast();
    // An end event of a run never reported RUNNING: when it started.
    absl::Time start_time = absl::InfinitePast();
    NameRef name;
    std::string error_message;
  };
  Buffered BufferedLocked(TaskStateEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ToProto(const Buffered& event, rpc::TaskEvent* out) const;
  void AppendLocked(Buffered event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Report report_;
  mutable absl::Mutex mu_;
  std::vector<Buffered> events_ ABSL_GUARDED_BY(mu_);
  InternedNames names_ ABSL_GUARDED_BY(mu_);
  // Runs in progress here, by token; `reported` once a flush sent their RUNNING event.
  struct Running {
    Buffered event;
    bool reported = false;
  };
  absl::flat_hash_map<uint64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 0;
  // Drops not reported yet, per job.
  absl::flat_hash_map<JobId, int64_t> unreported_drops_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> num_dropped_{0};
  absl::Mutex flush_mu_;  // one Flush at a time, so batches leave in order
};

}  // namespace troupe
