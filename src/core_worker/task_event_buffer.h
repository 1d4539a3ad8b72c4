// Task events on the reporting side: a TaskEventSink is where the core worker records the state
// changes of tasks, actor calls and actor creation tasks (SUBMITTED ... FINISHED/FAILED, per
// attempt); TaskEventBuffer is the real one. Recording is on the task fast path, so it only
// appends a small struct to a bounded in-memory buffer under a short lock; a background thread
// converts what accumulated to proto and reports it to the GCS (proto/gcs.proto
// AddTaskEventData) every `flush_interval` and once more at Stop, in one call per
// `max_batch_events` events. When the buffer is full new events are dropped and counted per job;
// the counts travel with the next report, so the GCS can say how much it never saw.
// The report function (a GCS client call in production) is the only way out: no gRPC here.
// Owned by CoreWorker. Thread-safe: Record from any thread; Start/Stop from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/gcs.pb.h"

namespace troupe {

// One state change of one attempt of a task. IDs are binary (as in rpc::TaskSpec); fields the
// recording side does not know stay empty / zero and are merged by the GCS from other events.
struct TaskStateEvent {
  std::string task_id;
  int32_t attempt = 0;
  std::string job_id;
  rpc::TaskEvent::State state = rpc::TaskEvent::STATE_UNSPECIFIED;
  absl::Time time;
  std::string name;
  rpc::TaskSpec::Type type = rpc::TaskSpec::NORMAL_TASK;
  std::string actor_id;
  std::string node_id;
  std::string worker_id;
  int32_t worker_pid = 0;
  std::string error_message;
  // Set by the executing side: node, worker and pid are this process's (filled in at flush,
  // off the task path), and, on an end event, when the run started.
  bool executed_here = false;
  absl::Time start_time = absl::InfinitePast();
};

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
    absl::Duration flush_interval = absl::Seconds(1);
    // This process, for events recorded with `executed_here` (binary IDs).
    std::string node_id;
    std::string worker_id;
    int32_t pid = 0;
  };
  // Sends one batch; a failed call's events are counted as dropped (reported next time).
  using Report = std::function<absl::Status(const rpc::AddTaskEventDataRequest&)>;

  TaskEventBuffer(Options options, Report report);
  // Stops the flusher without a last flush (call Stop() first to send what is left).
  ~TaskEventBuffer();

  void Record(TaskStateEvent event) override ABSL_LOCKS_EXCLUDED(mu_);
  // The executing side. A run starts (`running` describes it; its state and time are set here):
  // it is reported RUNNING only if it is still running at a flush, so a run that ends between
  // two flushes costs one event, its end (which carries the start time). Returns the token for
  // EndRunning.
  uint64_t BeginRunning(TaskStateEvent running) ABSL_LOCKS_EXCLUDED(mu_);
  // The run ended in `state` (FINISHED or FAILED, with `error_message`) at `end`.
  void EndRunning(uint64_t token, rpc::TaskEvent::State state, absl::Time end,
                  std::string error_message) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the background flusher (once).
  void Start();
  // Stops the flusher and flushes what is left. Idempotent. Record after Stop still buffers
  // (and a later Flush sends it).
  void Stop();
  // Reports everything buffered now, in batches; returns the number of calls made (tests; the
  // flusher calls it). Serialized with itself.
  int Flush() ABSL_LOCKS_EXCLUDED(mu_, flush_mu_);

  // Events dropped so far (full buffer or failed report), over the process's life.
  int64_t num_dropped() const { return num_dropped_.load(std::memory_order_relaxed); }
  size_t num_buffered() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ToProto(const TaskStateEvent& event, rpc::TaskEvent* out) const;
  void AppendLocked(TaskStateEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Report report_;
  mutable absl::Mutex mu_;
  std::vector<TaskStateEvent> events_ ABSL_GUARDED_BY(mu_);
  // Runs in progress here, by token; `reported` once a flush sent their RUNNING event.
  struct Running {
    TaskStateEvent event;
    bool reported = false;
  };
  absl::flat_hash_map<uint64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 0;
  // Drops not reported yet, per job (binary ID).
  absl::flat_hash_map<std::string, int64_t> unreported_drops_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> num_dropped_{0};
  absl::Mutex flush_mu_;  // one Flush at a time, so batches leave in order
  absl::Notification stop_;
  std::thread flusher_;
};

}  // namespace troupe
