// The submitting side of a core worker: builds TaskSpecs from the API's arguments (holding the
// argument references until the task is done), hands tasks to the TaskSubmitter (once the owned
// arguments exist) and actor calls to the ActorTaskSubmitter, records their outcome in the
// ObjectService, cancels tasks, and creates/looks up actors and placement groups through the GCS.
// It keeps the lineage of normal tasks (lineage.h) and rebuilds lost objects from it: the
// ObjectService calls Reconstruct when every copy of an object this process owns is gone; the
// task runs again (after its lost or freed owned arguments are rebuilt the same way), within
// the task's max_retries, or the object's readers get why it cannot be rebuilt.
// Owned by CoreWorker; uses (does not own) the ObjectService, both submitters and the GcsClient.
// Thread-safe: called from API threads; OnTaskReply/OnTaskFailure run on the submitters'
// callback threads.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/gcs.pb.h"
#include "proto/worker.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/core_worker/actor_task_submitter.h"
#include "src/core_worker/lineage.h"
#include "src/core_worker/object_service.h"
#include "src/core_worker/stream_tracker.h"
#include "src/core_worker/task_event_buffer.h"
#include "src/core_worker/task_submitter.h"

namespace troupe {

class GcsClient;

struct TaskArgSpec {
  bool by_reference = false;
  std::string value;
  ObjectRefInfo ref;
  std::vector<ObjectRefInfo> contained;  // refs inside `value`
};

struct TaskSubmitOptions {
  std::string placement_group_id;  // binary; "" for none
  int bundle_index = -1;
  std::string name;
  std::map<std::string, double> resources;
  int max_retries = 3;
  bool retry_exceptions = false;
  rpc::SchedulingStrategy strategy;
  // A streaming generator (stream_tracker.h): the caller reads its items as it yields them;
  // at most stream_backpressure of them wait unread (0: no bound). Its spec is not kept as
  // lineage: lost items are not rebuilt.
  bool streaming = false;
  int64_t stream_backpressure = 0;
  // Return objects (ObjectIds of indices 1..num_returns); more than 1: the function's result is
  // split into that many objects, each owned, freed and rebuilt on its own.
  int num_returns = 1;
};

// Options of one actor call: the task options that apply to it (it runs on its actor's worker,
// with the actor's resources and retry policy).
struct ActorCallSubmitOptions {
  std::string name;  // shown in the task state API; "": the method's name
  std::string concurrency_group;  // "": the actor's default group
  int num_returns = 1;  // as TaskSubmitOptions::num_returns
  bool streaming = false;  // as TaskSubmitOptions::streaming
  int64_t stream_backpressure = 0;
};

class SubmissionFacade : public ObjectReconstructor {
 public:
  struct Options {
    JobId job_id;
    // Bytes of task specs kept for rebuilding lost objects (Lineage::Options::max_bytes).
    int64_t max_lineage_bytes = 64 << 20;
    std::function<void(const std::string&)> warn;  // for the user
    // True once the placement group is placed; false at the deadline or once removed.
    std::function<absl::StatusOr<bool>(const PlacementGroupId&, absl::Time)> wait_placement_group;
    // Where the owner's side of task events goes (submitted, pending, failures decided here,
    // retries); not owned, must outlive this. Null: not recorded.
    TaskEventSink* task_events = nullptr;
    // The task running on the calling thread (binary TaskId; "" outside a task): the parent of
    // what is submitted, cancelled with it when Cancel is recursive. Null: never a parent.
    std::function<std::string()> current_task;
    // The streams this process reads (not owned; must outlive this). Null: streaming tasks are
    // refused.
    StreamTracker* streams = nullptr;
  };
  // None of the pointers is owned; all must outlive this.
  SubmissionFacade(Options options, ObjectService* objects, TaskSubmitter* tasks,
                   ActorTaskSubmitter* actor_calls, GcsClient* gcs, const Clock* clock);

  // Once, before anything is submitted (CoreWorker::Start): this process's address and node.
  void SetIdentity(const std::string& address, const NodeId& node_id);

  // Returns the first result's reference (ObjectId index 1; options.num_returns of them follow
  // it), with one local reference held for the caller on each. A resource
  // map CheckResourceDemand refuses is InvalidArgument naming it, and nothing is submitted
  // (CreateActor and CreatePlacementGroup check theirs the same way).
  absl::StatusOr<ObjectRefInfo> SubmitTask(const std::string& function_name,
                                           std::vector<TaskArgSpec> args,
                                           const TaskSubmitOptions& options);
  // Cancels the task or actor call behind `ref` (see docs/api.md, "Cancellation"): a no-op for
  // a ref this process does not own, one whose value is ready, or one no submitter knows.
  // `force` kills the worker (of a normal task) or the actor (of an actor call already sent).
  // `recursive`: the worker running it also cancels what it submitted (CancelTask).
  void Cancel(const ObjectRefInfo& ref, bool force, bool recursive = true);
  // The CancelTask side, on the worker that ran task `parent` (binary TaskId): cancels every
  // task and actor call `parent` submitted whose result is not ready (not forced, recursive).
  void CancelChildren(const std::string& parent) ABSL_LOCKS_EXCLUDED(mu_);
  // Task `parent` finished here: forgets what it submitted.
  void ForgetChildren(const std::string& parent) ABSL_LOCKS_EXCLUDED(mu_);
  // Registers the actor with the GCS (which places and creates it). AlreadyExists when the name
  // is taken. `namespace_name` applies when actor_options has none.
  absl::StatusOr<ActorId> CreateActor(const std::string& factory_name,
                                      std::vector<TaskArgSpec> args,
                                      const TaskSubmitOptions& options,
                                      const rpc::ActorInfo& actor_options,
                                      const std::string& namespace_name);
  ObjectRefInfo SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                                std::vector<TaskArgSpec> args,
                                const ActorCallSubmitOptions& options = {});
  absl::Status KillActor(const ActorId& actor_id, bool no_restart);
  absl::StatusOr<std::optional<ActorId>> GetNamedActor(const std::string& name,
                                                       const std::string& namespace_name);
  absl::StatusOr<PlacementGroupId> CreatePlacementGroup(rpc::PlacementGroupInfo group);
  absl::Status RemovePlacementGroup(const PlacementGroupId& id);
  absl::StatusOr<std::optional<PlacementGroupId>> GetPlacementGroup(const std::string& name);

  // The submitters' callbacks: a task ran (its returns may hold an application error), or will
  // not run.
  void OnTaskReply(const rpc::TaskSpec& spec, const rpc::PushTaskReply& reply);
  void OnTaskFailure(const rpc::TaskSpec& spec, StoredObject::Error error,
                     const std::string& message);
  // The TaskSubmitter gave attempt spec.attempt() up (`why`; empty when the task threw and is
  // retried on exceptions: its executor reported that) and submits the next one.
  void OnTaskRetry(const rpc::TaskSpec& spec, const std::string& why);
  // The cluster is gone (cluster_liveness.h): every task and actor call still pending fails with
  // kClusterUnreachable and `message`, and so does every one submitted afterwards, at once.
  void FailAllAsUnreachable(const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);

  // ObjectReconstructor (called by the ObjectService, any thread).
  void Reconstruct(const ObjectId& id, const std::string& what_happened) override;
  void ReleaseLineage(const ObjectId& id) override;
  const Lineage& lineage() const { return lineage_; }
  // Tasks re-run so far to rebuild lost objects (recursive ones included), for cluster metrics.
  int64_t reconstructions() const { return reconstructions_.load(); }

 private:
  // Fills in a TaskSpec's common fields and holds its argument references until it is done.
  rpc::TaskSpec BuildTaskSpec(const TaskId& task_id, const std::string& function_name,
                              std::vector<TaskArgSpec> args,
                              std::vector<ObjectId>* owned_dependencies);
  void ReleaseTaskReferences(const rpc::TaskSpec& spec);
  // Records a state change of `spec`'s attempt (with its name, kind and actor when `describe`).
  void RecordEvent(const rpc::TaskSpec& spec, rpc::TaskEvent::State state, bool describe,
                   std::string error_message = "");
  // An attempt's first event, describing it: SUBMITTED at `submitted` and, in the same event,
  // the state it reached at once (`state`: a pending one; SUBMITTED when it stays there).
  void RecordSubmission(const rpc::TaskSpec& spec, rpc::TaskEvent::State state,
                        absl::Time submitted);
  // Runs a lineage spec again to rebuild its lost return `return_id`: holds its arguments,
  // rebuilds owned ones that are gone, submits once they exist (or fails the object if one
  // cannot be rebuilt).
  void Resubmit(rpc::TaskSpec spec, const ObjectId& return_id);
  // The node holding bundle `index` (-1: one of the bundles, in turn) of a placed group; waits
  // until the group is placed. NotFound if it does not exist or was removed.
  absl::StatusOr<std::pair<NodeId, int>> ResolveBundle(const std::string& group_id, int index);

  const Options options_;
  ObjectService* objects_;
  TaskSubmitter* tasks_;
  ActorTaskSubmitter* actor_calls_;
  GcsClient* gcs_;
  const Clock* clock_;
  std::string address_;  // set once by SetIdentity, before concurrent use
  NodeId node_id_;
  std::atomic<uint32_t> next_bundle_{0};
  Lineage lineage_;
  std::atomic<int64_t> reconstructions_{0};

  // Submitted tasks' argument references, released when the task is done.
  absl::Mutex mu_;
  absl::flat_hash_map<TaskId, std::vector<ObjectRefInfo>> task_refs_ ABSL_GUARDED_BY(mu_);
  // Tasks and actor calls submitted and not yet answered, by their first return: the function's
  // name and how many returns the task has.
  struct PendingReturns {
    std::string function_name;
    int num_returns = 1;
  };
  absl::flat_hash_map<ObjectId, PendingReturns> pending_returns_ ABSL_GUARDED_BY(mu_);
  // What each running task (binary TaskId) of this worker submitted, for recursive Cancel.
  absl::flat_hash_map<std::string, std::vector<ObjectId>> children_ ABSL_GUARDED_BY(mu_);
  // Records `spec` as a child of the task running on this thread, if any.
  void RecordChild(const rpc::TaskSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel without the ownership check (children are this process's own).
  void CancelOwned(const ObjectId& id, bool force, bool recursive);
  // Set by FailAllAsUnreachable.
  std::optional<std::string> unreachable_ ABSL_GUARDED_BY(mu_);
  // Records a new task's return as pending; false (and fails it) once the cluster is gone.
  bool TrackPending(const rpc::TaskSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
};

}  // namespace troupe
