// Sends tasks to workers, the fast path of Troupe: tasks with the same resource shape and
// strategy share a queue; the submitter leases workers for a queue from its raylet (following
// spillback to other nodes), pushes tasks straight to the leased workers over gRPC — about
// max_backlog_ms of work in flight per worker, so RPC latency overlaps execution, in at most
// max_calls_in_flight_per_worker calls; the tasks that go to one worker at the same moment
// travel in one call (PushTasks, results streaming back one by one; a lone task goes as a plain
// PushTask) — and gives leases back once they have been idle for `lease_linger`.
// Workers that die mid-task have their tasks retried on new leases (up to max_retries); tasks
// that can never be scheduled stay queued with a warning, and run as soon as a node that fits
// them joins.
// Node deaths (OnNodeDead, told by the core worker from the GCS's node channel) are handled like
// the deaths of every worker on that node: calls to the node (pushes and lease requests) are
// cancelled at once, their tasks retried or failed, and the node is fenced: whatever its workers
// or raylet answer afterwards (a reply that raced the cancellation, a grant) is refused, so a
// partitioned node that comes back cannot overwrite a retried result or a reported failure.
// Talks to raylets through a LeaseClient and to workers through a TaskPushClient (peer_clients.h;
// neither owned), and reads time from a Clock (not owned), so tests drive it with fakes.
// Thread-safe. Callbacks run on the peer clients' threads (gRPC threads in production), without
// the submitter's lock held.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/core_worker/memory_store.h"
#include "src/core_worker/task_counters.h"
#include "src/rpc/peer_clients.h"

namespace troupe {

struct TaskSubmitterOptions {
  std::string local_raylet_address;
  // Tasks pushed ahead to one leased worker: as many as add up to about max_backlog_ms of run
  // time (the workers' reported run_us, moving average), at most max_tasks_in_flight_per_worker,
  // at least one. Short tasks pipeline deep, because the tasks a worker is topped up with travel
  // in one call and each call costs far more CPU than a short task; long ones go one per worker,
  // so they spread over workers instead of waiting behind each other.
  int max_tasks_in_flight_per_worker = 64;
  double max_backlog_ms = 2.0;
  // Calls (PushTask or PushTasks) in flight to one leased worker: the tasks queued meanwhile
  // wait and leave together in its next call.
  int max_calls_in_flight_per_worker = 2;
  int max_pending_lease_requests = 10;
  absl::Duration lease_linger = absl::Milliseconds(50);
  absl::Duration infeasible_retry = absl::Seconds(1);
};

class TaskSubmitter {
 public:
  struct Callbacks {
    // The worker ran the task (its returns may hold an application error).
    std::function<void(const rpc::TaskSpec&, rpc::PushTaskReply)> on_reply;
    // The task will not run: why, and as which error.
    std::function<void(const rpc::TaskSpec&, StoredObject::Error, const std::string&)> on_failure;
    // Something the user should see (printed by the driver).
    std::function<void(const std::string&)> warn;
    // Why the worker at this address was killed by its node's memory monitor, if it was
    // (optional; blocking, on a peer client's thread).
    std::function<std::optional<std::string>(const std::string& worker_address)> oom_cause;
    // Attempt spec.attempt() failed (why; empty when it threw and retries on exceptions) and the
    // next one is submitted (optional; for task events).
    std::function<void(const rpc::TaskSpec&, const std::string& why)> on_retry;
    // Called (with the submitter's lock held: it must not call back) when the submitter may need
    // Tick() again after having needed none (optional; wakes the core worker's sleeping timer).
    std::function<void()> wake_timer;
  };

  // `leases`, `pushes` and `clock` are not owned and must outlive the submitter.
  TaskSubmitter(TaskSubmitterOptions options, LeaseClient* leases, TaskPushClient* pushes,
                const Clock* clock, Callbacks callbacks);

  using Counters = TaskCounters;
  const Counters& counters() const { return counters_; }

  void Submit(rpc::TaskSpec spec);
  // Queued here: dropped and failed as cancelled (true). Pushed to a worker and `force`: its
  // worker is killed and the task fails as cancelled (true). Pushed and not `force`: the worker
  // is told (CancelTask, with `recursive`): a task still in its queue is answered as cancelled,
  // a running one sees troupe::IsCancelled(); either way it fails as cancelled (true). Not
  // known here (finished, or never submitted): false, nothing happens.
  bool Cancel(const TaskId& task_id, bool force, bool recursive = true);
  // The GCS declared node `node_id` (raylet at `raylet_address`) dead: its leases are void,
  // calls to it are cancelled and their tasks retried or failed as if its workers died, and
  // nothing it answers from now on is accepted. Idempotent.
  void OnNodeDead(const NodeId& node_id, const std::string& raylet_address)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Returns leases idle past the linger and retries lease requests that were waiting (the core
  // worker's timer calls it every 10 ms while NeedsTick()).
  void Tick();
  // Whether Tick() has anything to do, now or later: tasks queued or workers leased. While it
  // is false nothing changes with time alone; what makes it true calls `wake_timer`.
  bool NeedsTick() const ABSL_LOCKS_EXCLUDED(mu_);
  // Stops: cancels every call in flight, waits for their callbacks, gives every lease back.
  // Nothing is submitted afterwards.
  void Shutdown();

 private:
  // Tasks per worker in flight, by the queue's average run time (TaskSubmitterOptions).
  int PipelineDepth(const rpc::TaskSpec& lease_spec, double average_run_ms) const;

  struct LeasedWorker {
    std::string lease_id;
    std::string worker_address;
    std::string raylet_address;
    std::string node_id;  // binary, from the grant
    std::vector<int> gpu_ids;
    int bundle_index = 0;      // in a placement group: the bundle the lease came from
    int in_flight = 0;         // tasks pushed and not answered
    int pushes_in_flight = 0;  // calls (PushTask or PushTasks) not ended
    int64_t next_sequence = 0;  // the next task's place in this lease's order (lease_sequence)
    absl::Time idle_since;
    bool on_dead_node = false;  // guarded by mu_: set by OnNodeDead, never cleared
  };
  struct Queue {
    std::deque<rpc::TaskSpec> tasks;
    std::vector<std::shared_ptr<LeasedWorker>> workers;
    int pending_lease_requests = 0;
    absl::Time retry_leases_at = absl::InfinitePast();
    bool warned_infeasible = false;
    // The run time workers report for the queue's tasks, moving average; -1 until the first
    // reply (until then a worker gets one task at a time). While every worker has its calls out
    // or its pipeline full, tasks gather here and leave together when a call ends or results
    // come back.
    double average_run_ms = -1;
    rpc::TaskSpec lease_spec;    // resources, strategy and job of the queue's tasks
  };
  struct Running {
    std::string key;
    std::shared_ptr<LeasedWorker> worker;
  };
  // Tasks pushed to one worker in one call; the results of the call fill it in.
  struct Batch {
    std::vector<rpc::TaskSpec> specs;
    size_t unanswered = 0;  // touched only by the call's (serialized) result callbacks
  };
  // Work decided under the lock, done after it is released.
  // Tasks for one worker in one call, in order; the first one's place in the lease's order.
  struct PlannedPush {
    std::shared_ptr<LeasedWorker> worker;
    std::vector<rpc::TaskSpec> specs;
    int64_t first_sequence = 0;
  };
  struct Actions {
    std::vector<PlannedPush> pushes;
    std::vector<std::pair<std::string, rpc::TaskSpec>> lease_requests;  // (key, spec)
  };

  static std::string KeyOf(const rpc::TaskSpec& spec);
  void ScheduleLocked(const std::string& key, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(Actions actions);
  void RequestLease(const std::string& key, const rpc::TaskSpec& spec,
                    const std::string& raylet_address, bool grant_or_reject);
  void OnLeaseReply(const std::string& key, const rpc::TaskSpec& spec,
                    const std::string& raylet_address,
                    absl::StatusOr<rpc::RequestWorkerLeaseReply> reply);
  void Push(PlannedPush push);
  // Outcomes of some of a batch's tasks (indices into batch->specs); ends the call once every
  // task has had one.
  void OnPushResults(const std::shared_ptr<LeasedWorker>& worker, Batch* batch, uint64_t call_id,
                     TaskPushClient::PushResults results);
  // Outcomes of tasks pushed to `worker`: the bookkeeping for all of them under one lock (and
  // one scheduling pass), then each task's reply, retry or failure on its own.
  void OnPushReplies(
      const std::shared_ptr<LeasedWorker>& worker,
      std::vector<std::pair<rpc::TaskSpec, absl::StatusOr<rpc::PushTaskReply>>> outcomes,
      bool call_ended);
  // After the bookkeeping: reports the task's reply, or retries or fails it.
  void FinishPush(const LeasedWorker& worker, rpc::TaskSpec spec,
                  absl::StatusOr<rpc::PushTaskReply> reply, bool cancelled, bool node_died);
  // Requeues for another attempt if retries are left; else reports `error`.
  void RetryOrFail(rpc::TaskSpec spec, StoredObject::Error error, const std::string& message);

  const TaskSubmitterOptions options_;
  LeaseClient* leases_;
  TaskPushClient* pushes_;
  const Clock* clock_;
  Callbacks callbacks_;

  // An RPC in flight: how to cancel it, and the node it went to (so a node's death cancels it).
  struct Call {
    std::function<void()> cancel;  // null until SetCanceller
    std::string raylet_address;    // the raylet asked, or the raylet of the worker pushed to
    std::string node_id;           // binary; "" when not known (a lease request)
    bool doomed = false;           // its node died: cancel as soon as the canceller is known
  };
  // Whether the GCS declared this node (binary ID) or the node of this raylet dead.
  bool IsDeadLocked(const std::string& node_id, const std::string& raylet_address) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers an RPC about to be sent to a node; false once shut down (then do not send it).
  bool BeginCall(const std::string& raylet_address, const std::string& node_id, uint64_t* call_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels at once if the call's node died meanwhile.
  void SetCanceller(uint64_t call_id, std::function<void()> cancel) ABSL_LOCKS_EXCLUDED(mu_);
  void EndCall(uint64_t call_id) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  // Nodes the GCS declared dead (binary IDs) and their raylets' addresses.
  absl::flat_hash_set<std::string> dead_nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dead_raylets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Queue> queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TaskId, Running> running_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<TaskId> cancelled_ ABSL_GUARDED_BY(mu_);
  Counters counters_;
};

}  // namespace troupe
