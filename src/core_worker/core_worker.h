// The core worker: the runtime inside every driver and worker process, and the composition root
// of its parts. It owns and wires together:
//   ObjectService     objects this process owns, Put/Get/Wait, owner-side object queries
//   SubmissionFacade  building and submitting tasks and actor calls, actors and placement groups
//                     through the GCS
//   TaskSubmitter / ActorTaskSubmitter   leasing workers and pushing tasks / actor calls
//   TaskExecutor      worker mode: the queue of pushed tasks, run on the thread that calls
//                     RunTaskLoop()
//   CoreWorkerGrpcService  CoreWorkerService (proto/worker.proto), glue only
//   NodeDeathWatcher  follows node deaths from the GCS (drivers from Start, workers from their
//                     first submission) and tells the submitters and the ObjectService
// and the clients they use (raylet and worker client pools, the GCS client, and the gRPC
// implementations of the peer-client interfaces), plus the Clock they read.
// Its public methods are the API layer's (src/api) view of the runtime; most forward to a part.
// Thread-safe. Its own threads (gRPC's are listed in docs/architecture.md, "Threads"): the
// reporter sends task events and task counters to the GCS; in drivers, and in workers once they
// submit or wait with a deadline, the timer returns idle leases, looks up actors and expires
// waits, and (after a submission) another follows node deaths; in drivers, another probes the
// GCS and the raylet. An actor that only answers calls thus has the reporter and the thread
// that runs its calls.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/common/wakeup.h"
#include "src/core_worker/actor_task_submitter.h"
#include "src/core_worker/cluster_liveness.h"
#include "src/core_worker/node_death_watcher.h"
#include "src/core_worker/object_service.h"
#include "src/core_worker/periodic_jobs.h"
#include "src/core_worker/stream_tracker.h"
#include "src/core_worker/submission_facade.h"
#include "src/core_worker/task_event_buffer.h"
#include "src/core_worker/task_executor.h"
#include "src/core_worker/task_submitter.h"
#include "src/metrics/metrics_recorder.h"
#include "src/rpc/auth.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/grpc_peer_clients.h"
#include "src/rpc/raylet_client.h"
#include "src/schema/kv_schema.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace troupe {

// What running a task's function produced (filled in by the API layer, which owns the function
// registry): the serialized result, or the exception it threw.
struct TaskOutcome {
  bool threw = false;
  std::string exception_type;
  std::string exception_message;
  std::string exception_stack;  // where it was thrown: frames, one per line ("" if unknown)
  size_t size = 0;
  std::function<void(char*)> write;  // writes `size` bytes
  std::shared_ptr<void> keep_alive;  // whatever `write` reads from (and the refs inside it)
  // ObjectRefs inside the value; `keep_alive` holds them until the caller has taken them over.
  std::vector<ObjectRefInfo> contained;
  // Set when the outcome comes later (an async actor's method waiting for something): called
  // once, on the thread that ran the task, with what to call with the final outcome (exactly
  // once, on the actor's event loop thread; that one is never pending).
  std::function<void(std::function<void(TaskOutcome)>)> pending;
  // A task with spec.num_returns() > 1: one value per return object, in order (then size,
  // write and contained above are unused); `keep_alive` holds what they read.
  struct Part {
    size_t size = 0;
    std::function<void(char*)> write;
    std::vector<ObjectRefInfo> contained;
  };
  std::vector<Part> parts;
};

using TaskFunction =
    std::function<TaskOutcome(const rpc::TaskSpec& spec, const std::vector<ObjectBuffer>& args)>;

struct CoreWorkerOptions {
  bool is_driver = true;
  std::string raylet_address;  // this node's raylet
  std::string gcs_address;
  std::string token;
  std::string node_ip = "127.0.0.1";
  JobId job_id;
  WorkerId worker_id = WorkerId::FromRandom();
  int64_t max_inline_bytes = 100 * 1024;
  // Bytes of task specs kept to rebuild lost objects (docs/fault_tolerance.md).
  int64_t max_lineage_bytes = 64 << 20;
  // Prints warnings meant for the user (the driver's stderr by default).
  std::function<void(const std::string&)> warn;
  // Worker mode: runs a task's function.
  TaskFunction execute;
  // Testing only: the probability that the reply of an actor call this process makes is dropped
  // after the actor ran it (as if the connection reset after delivery), as given in
  // $TROUPE_TESTING_DROP_ACTOR_REPLIES ("" or "0": never). Start() refuses a bad value.
  std::string testing_drop_actor_replies;
  // Drivers: how long the GCS or this node's raylet may stay unreachable before every pending
  // and new call fails with a ClusterUnreachable status (cluster_liveness.h). Zero or less: never
  // give up. Workers do not watch (their raylet ends them).
  absl::Duration cluster_reconnect_timeout = absl::Seconds(60);
  // Report task events (task state API, timeline; task_event_buffer.h). The API layer sets it
  // from $TROUPE_TASK_EVENTS ("0": off), e.g. to measure their cost.
  bool record_task_events = true;
  // Time for every timeout and deadline of this process (not owned; must outlive the core
  // worker). Null: the real clock.
  const Clock* clock = nullptr;
};

// Per-process task counters go to the GCS KV as rpc::TaskCounters under kTaskCountersNamespace
// (src/schema/kv_schema.h); kept after the process ends, so the sums are cluster totals.

class CoreWorker {
 public:
  explicit CoreWorker(CoreWorkerOptions options);
  ~CoreWorker();

  // Starts the gRPC server and registers with the raylet.
  absl::Status Start();
  void Shutdown();
  const std::string& address() const { return address_; }
  // OK while the cluster is reachable (or not watched); the ClusterUnreachable status once the
  // driver gave up on it. Any thread.
  absl::Status cluster_status() const { return liveness_ ? liveness_->status() : absl::OkStatus(); }
  const NodeId& node_id() const { return node_id_; }
  const WorkerId& worker_id() const { return options_.worker_id; }
  const JobId& job_id() const { return options_.job_id; }
  const std::string& node_ip() const { return options_.node_ip; }
  // Inside an actor (worker mode): the actor's ID; nil elsewhere. Any thread.
  ActorId current_actor_id() const { return executor_->current_actor_id(); }
  GcsClient& gcs() { return *gcs_; }

  // Returns the result's reference with one local reference held for the caller; InvalidArgument
  // (nothing submitted) for a resource map CheckResourceDemand refuses.
  absl::StatusOr<ObjectRefInfo> SubmitTask(const std::string& function_name,
                                           std::vector<TaskArgSpec> args,
                                           const TaskSubmitOptions& options);
  // Stores `size` bytes written by `write`; the reference comes with one local reference held.
  absl::StatusOr<ObjectRefInfo> Put(size_t size, const std::function<void(char*)>& write,
                                    std::vector<ObjectRefInfo> contained);
  // Waits for every object (until `deadline`); DeadlineExceeded if one is not ready by then.
  absl::StatusOr<std::vector<GetResult>> Get(const std::vector<ObjectRefInfo>& refs,
                                             absl::Time deadline);
  std::vector<bool> Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                         absl::Time deadline);
  // See SubmissionFacade::Cancel and docs/api.md, "Cancellation".
  void Cancel(const ObjectRefInfo& ref, bool force, bool recursive = true);
  // Streaming generators (stream_tracker.h). The reader (the stream's owner): the next item of
  // the stream whose end object is `stream`, nullopt once it ended (read the end object for
  // how), DeadlineExceeded at `deadline`; FailedPrecondition in a process that does not own it.
  absl::StatusOr<std::optional<ObjectRefInfo>> NextStreamItem(const ObjectRefInfo& stream,
                                                              absl::Time deadline);
  int64_t NumUnreadStreamItems(const ObjectRefInfo& stream);
  // Inside a streaming generator (on the thread running it): stores the next item and reports
  // it to the reader, waiting while the reader lags by the bound. Cancelled once the stream was
  // cancelled or dropped (the generator should stop); Unavailable if the reader is gone;
  // FailedPrecondition outside a generator.
  absl::Status ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                                std::vector<ObjectRefInfo> contained);
  // Inside a task or actor call (on the thread running it): whether its owner cancelled it.
  // False on any other thread.
  static bool IsCurrentTaskCancelled() { return TaskExecutor::CurrentTaskCancelled(); }
  // Inside an async actor's call (or a closure posted to it): the call, to resume it on the
  // actor's event loop. Null elsewhere (also in a call of an actor that is not async).
  static std::shared_ptr<TaskExecutor::ActorCall> CurrentActorCall() {
    return TaskExecutor::CurrentCall();
  }
  // Inside a task or actor call: its spec; null elsewhere.
  static const rpc::TaskSpec* CurrentTaskSpec() { return TaskExecutor::CurrentTaskSpec(); }
  // Runs `ready` once the object is ready to read (its value or its error), on some thread (at
  // once, on this one, if it is); never blocks. See ObjectService::NotifyWhenReady.
  void NotifyWhenReady(const ObjectRefInfo& ref, std::function<void()> ready) {
    objects_->NotifyWhenReady(ref, std::move(ready));
  }
  // Actors: registers the actor with the GCS (which places and creates it); returns its ID.
  // AlreadyExists when the name is taken.
  absl::StatusOr<ActorId> CreateActor(const std::string& factory_name,
                                      std::vector<TaskArgSpec> args,
                                      const TaskSubmitOptions& options,
                                      const rpc::ActorInfo& actor_options);
  ObjectRefInfo SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                                std::vector<TaskArgSpec> args,
                                const ActorCallSubmitOptions& options = {});
  absl::Status KillActor(const ActorId& actor_id, bool no_restart);
  // The live actor with that name, if any.
  absl::StatusOr<std::optional<ActorId>> GetNamedActor(const std::string& name,
                                                       const std::string& namespace_name);
  // Placement groups (thin wrappers over the GCS service).
  absl::StatusOr<PlacementGroupId> CreatePlacementGroup(rpc::PlacementGroupInfo group);
  absl::Status RemovePlacementGroup(const PlacementGroupId& id);
  // True once placed; false at `deadline` or if the group was removed.
  absl::StatusOr<bool> WaitPlacementGroup(const PlacementGroupId& id, absl::Time deadline);
  absl::StatusOr<std::optional<PlacementGroupId>> GetPlacementGroup(const std::string& name);

  // Worker mode, inside an actor: tell the GCS the actor is leaving, and exit once the current
  // call has been answered.
  void ExitActorAfterCurrentTask();
  // The namespace actors are created in and looked up by default. Any thread.
  std::string namespace_name() const {
    absl::MutexLock lock(&identity_mu_);
    return namespace_name_;
  }
  void set_namespace_name(std::string ns) {
    absl::MutexLock lock(&identity_mu_);
    namespace_name_ = std::move(ns);
  }

  void AddLocalRef(const ObjectRefInfo& ref) { objects_->references().AddLocal(ref); }
  void RemoveLocalRef(const ObjectId& id) { objects_->references().RemoveLocal(id); }

  // Worker mode: runs pushed tasks on this thread until Exit is requested.
  void RunTaskLoop();
  // Worker mode, the raylet's graceful stop (SIGTERM at its job's end): reports the task events
  // buffered so far at once (what a task that never returns submitted and its RUNNING state),
  // then ends RunTaskLoop after the task it runs; Shutdown reports the rest. Any thread.
  void RequestStop();

  // User metrics (troupe/metrics.h): recorded here, pushed to this node's raylet every second
  // and at Shutdown. InvalidArgument for a bad definition or record (nothing recorded). Any
  // thread.
  absl::Status RecordMetric(const rpc::UserMetricDefinition& definition, double value,
                            const metrics::Tags& tags) {
    return user_metrics_.Record(definition, value, tags);
  }

  // For tests and stats.
  size_t num_tracked_references() const { return objects_->references().num_tracked(); }
  size_t num_stored_objects() const { return objects_->memory_store().size(); }

 private:
  // Worker mode: runs one pushed task (reads its arguments, calls options_.execute, stores the
  // result) on the executor's thread, and answers it through `finish` (later, on the actor's
  // event loop thread, when its outcome is pending).
  void ExecuteTask(const rpc::PushTaskRequest& request, TaskExecutor::Finish finish);
  // The rest of ExecuteTask once the outcome is known: the result into `reply`, task events,
  // references held for the arguments and those the task borrowed. `ran`: the function ran (an
  // exception it threw goes to the worker's log too); false for a task refused before it ran.
  rpc::PushTaskReply CompleteTask(const rpc::TaskSpec& spec, bool ran, TaskOutcome outcome,
                                  rpc::PushTaskReply reply, uint64_t execution,
                                  const std::vector<ObjectRefInfo>& held);
  // CancelTask from a task's owner (gRPC thread): the executor, then the task's children.
  void HandleCancelTask(const rpc::CancelTaskRequest& request);
  // Worker mode: hands the references inside a task's result over to its caller (who will hold
  // them with the result): owners of the ones this worker does not own learn the caller
  // borrows them before this worker lets go. Adds them to `reply`, as inside
  // reply->returns(return_index).
  void HandOverContained(const rpc::TaskSpec& spec, const std::vector<ObjectRefInfo>& contained,
                         int return_index, rpc::PushTaskReply* reply);
  // Worker mode: stores a value `spec` produced as object out->object_id(): inline in `out` when
  // small, else in this node's store (ResourceExhausted when full); hands the refs inside it to
  // the caller (HandOverContained, into `reply`).
  absl::Status StoreValue(const rpc::TaskSpec& spec, size_t size,
                          const std::function<void(char*)>& write,
                          const std::vector<ObjectRefInfo>& contained, int return_index,
                          rpc::ReturnObject* out, rpc::PushTaskReply* reply);
  void TimerLoop();
  // Worker mode: the executing side's task events: a run of `spec` starts here (the token for
  // TaskEventBuffer::EndRunning; 0 when events are off).
  uint64_t BeginExecution(const rpc::TaskSpec& spec);

  CoreWorkerOptions options_;
  RealClock real_clock_;
  const Clock* clock_;  // options_.clock, or real_clock_
  std::string address_;
  NodeId node_id_;
  std::unique_ptr<ClusterToken> token_;
  std::unique_ptr<TokenAuthenticator> auth_;
  ClientPool<RayletClient> raylets_;
  ClientPool<CoreWorkerClient> workers_;
  std::shared_ptr<RayletClient> raylet_;
  GrpcLeaseClient lease_client_;
  // Worker mode: the raylet that started this process (its parent); 0 in drivers.
  const int parent_pid_;
  const int pid_;
  std::unique_ptr<GrpcTaskPushClient> push_client_;  // set by Start()
  // User-facing GCS calls (actor and placement group creation, KV, named actors): they wait out
  // a GCS restart, retrying kUnavailable for up to the reconnect limit (or until the cluster is
  // declared unreachable). background_gcs_ makes one attempt per call: for lookups made on the
  // timer and reply threads (actor directory, kill causes, counters), which must not block.
  std::unique_ptr<GcsClient> gcs_;
  std::unique_ptr<GcsClient> background_gcs_;
  std::unique_ptr<GrpcActorDirectory> actor_directory_;
  std::unique_ptr<ObjectService> objects_;
  std::unique_ptr<StreamTracker> streams_;  // the streams this process reads
  std::unique_ptr<TaskExecutor> executor_;
  std::unique_ptr<TaskSubmitter> submitter_;
  std::unique_ptr<ActorTaskSubmitter> actor_submitter_;
  // This process's task events (owner and executor side), reported to the GCS in batches.
  std::unique_ptr<TaskEventBuffer> task_events_;
  std::unique_ptr<SubmissionFacade> submission_;
  // The namespace actors are created in and looked up by default: set by the driver after
  // Start, read by API calls on any thread.
  mutable absl::Mutex identity_mu_;
  std::string namespace_name_ ABSL_GUARDED_BY(identity_mu_) = "default";
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;

  absl::Notification stop_timer_;
  // The timer (TimerLoop) ticks every kTimerTick while its parts need it and sleeps otherwise;
  // they wake it through WakeTimer(), which starts it the first time (drivers start it in
  // Start; a worker that never submits nor waits with a deadline never needs it).
  static constexpr absl::Duration kTimerTick = absl::Milliseconds(10);
  static constexpr absl::Duration kIdleTimerCheck = absl::Seconds(1);
  // Starts the timer if it is not running yet (once Start has built the parts it ticks; not
  // after Shutdown began), then wakes it. Any thread, also with a part's lock held (the new
  // thread takes it only once running).
  void WakeTimer() ABSL_LOCKS_EXCLUDED(timer_mu_);
  // Only starts it (the submission paths: one atomic load once it runs, no wake-up per call).
  void EnsureTimer() ABSL_LOCKS_EXCLUDED(timer_mu_);
  Wakeup timer_wakeup_;
  std::atomic<bool> timer_started_{false};
  absl::Mutex timer_mu_;
  bool timer_startable_ ABSL_GUARDED_BY(timer_mu_) = false;  // Start built the parts
  bool timer_wanted_ ABSL_GUARDED_BY(timer_mu_) = false;     // woken before that
  std::thread timer_ ABSL_GUARDED_BY(timer_mu_);
  // Every 2 s (and at shutdown): this process's task counters into the GCS KV, for /metrics.
  void ReportTaskCounters();
  // Reports to the GCS that may block on it (task events, task counters), on one thread of
  // their own (off the timer, whose ticks must stay on time). Real time, like the GCS.
  static constexpr absl::Duration kTaskCountersInterval = absl::Seconds(2);
  PeriodicJobs reporter_{&real_clock_};
  // Drivers: watches the GCS and the local raylet (probes on liveness_thread_); null in workers.
  std::unique_ptr<GcsClient> probe_gcs_;  // short deadlines, for probes only
  std::unique_ptr<ClusterLiveness> liveness_;
  std::thread liveness_thread_;
  void OnClusterUnreachable(const absl::Status& status);
  // Starts following node deaths (once; a no-op after Shutdown began). Any thread.
  void WatchNodeDeaths() ABSL_LOCKS_EXCLUDED(node_watch_mu_);
  // The GCS declared a node dead: what this process has in flight there fails over.
  void OnNodeDead(const NodeId& node_id, const std::string& raylet_address);
  std::atomic<bool> watching_nodes_{false};
  absl::Mutex node_watch_mu_;
  std::unique_ptr<NodeDeathWatcher> node_watcher_ ABSL_GUARDED_BY(node_watch_mu_);
  std::thread node_watcher_thread_ ABSL_GUARDED_BY(node_watch_mu_);
  std::string last_reported_counters_;
  // User metrics recorded since the last push to the raylet (FlushUserMetrics, on reporter_).
  metrics::MetricsRecorder user_metrics_;
  static constexpr absl::Duration kUserMetricsInterval = absl::Seconds(1);
  void FlushUserMetrics();
};

}  // namespace troupe
