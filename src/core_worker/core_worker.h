// The core worker: the runtime inside every driver and worker process. It owns the objects its
// process creates (tracking where their values live and who references them, and freeing them
// when nobody does), submits tasks through the TaskSubmitter, reads objects (inline values from
// their owner, large ones zero-copy from the node's shared-memory store, fetched from other
// nodes first when needed), and — in worker mode — executes tasks pushed to it, one at a time,
// on the thread that calls RunTaskLoop().
// It serves CoreWorkerService (proto/worker.proto) for pushes and owner queries.
// Thread-safe. A timer thread returns idle leases, expires waits and sends batched messages.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"
#include "src/common/ids.h"
#include "src/core_worker/actor_task_submitter.h"
#include "src/core_worker/memory_store.h"
#include "src/core_worker/reference_counter.h"
#include "src/core_worker/task_submitter.h"
#include "src/rpc/auth.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/raylet_client.h"
#include "src/schema/kv_schema.h"

namespace grpc {
class Server;
class ServerUnaryReactor;
}  // namespace grpc

namespace troupe {

// What running a task's function produced (filled in by the API layer, which owns the function
// registry): the serialized result, or the exception it threw.
struct TaskOutcome {
  bool threw = false;
  std::string exception_type;
  std::string exception_message;
  size_t size = 0;
  std::function<void(char*)> write;  // writes `size` bytes
  std::shared_ptr<void> keep_alive;  // whatever `write` reads from
};

struct ObjectBuffer;
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
  // Prints warnings meant for the user (the driver's stderr by default).
  std::function<void(const std::string&)> warn;
  // Worker mode: runs a task's function.
  TaskFunction execute;
};

// Bytes of an object as handed to the API: `holder` keeps them alive (a shared-memory mapping
// for objects in the store, so reads are zero-copy).
struct ObjectBuffer {
  const char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> holder;
};

// One Get result: the bytes, or why there are none.
struct GetResult {
  ObjectBuffer buffer;
  StoredObject::Error error = StoredObject::Error::kNone;
  std::string error_message;
  rpc::ReturnObject error_detail;  // for kApplication
};

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
  const NodeId& node_id() const { return node_id_; }
  const JobId& job_id() const { return options_.job_id; }
  const std::string& node_ip() const { return options_.node_ip; }
  // Inside an actor (worker mode): the actor's ID; nil elsewhere.
  const ActorId& current_actor_id() const { return current_actor_; }
  GcsClient& gcs() { return *gcs_; }

  // Returns the result's reference with one local reference held for the caller.
  ObjectRefInfo SubmitTask(const std::string& function_name, std::vector<TaskArgSpec> args,
                           const TaskSubmitOptions& options);
  // Stores `size` bytes written by `write`; the reference comes with one local reference held.
  absl::StatusOr<ObjectRefInfo> Put(size_t size, const std::function<void(char*)>& write,
                                    std::vector<ObjectRefInfo> contained);
  // Waits for every object (until `deadline`); DeadlineExceeded if one is not ready by then.
  absl::StatusOr<std::vector<GetResult>> Get(const std::vector<ObjectRefInfo>& refs,
                                             absl::Time deadline);
  std::vector<bool> Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                         absl::Time deadline);
  void Cancel(const ObjectRefInfo& ref, bool force);
  // Actors: registers the actor with the GCS (which places and creates it); returns its ID.
  // AlreadyExists when the name is taken.
  absl::StatusOr<ActorId> CreateActor(const std::string& factory_name,
                                      std::vector<TaskArgSpec> args,
                                      const TaskSubmitOptions& options,
                                      const rpc::ActorInfo& actor_options);
  ObjectRefInfo SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                                std::vector<TaskArgSpec> args);
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
  const std::string& namespace_name() const { return namespace_name_; }
  void set_namespace_name(std::string ns) { namespace_name_ = std::move(ns); }

  void AddLocalRef(const ObjectRefInfo& ref) { references_.AddLocal(ref); }
  void RemoveLocalRef(const ObjectId& id) { references_.RemoveLocal(id); }

  // Worker mode: runs pushed tasks on this thread until Exit is requested.
  void RunTaskLoop();

  // For tests and stats.
  size_t num_tracked_references() const { return references_.num_tracked(); }
  size_t num_stored_objects() const { return memory_store_.size(); }

 private:
  class GrpcService;
  // A PushTask waiting for the task loop; finished by it.
  struct PendingPush {
    const rpc::PushTaskRequest* request;
    rpc::PushTaskReply* reply;
    grpc::ServerUnaryReactor* reactor;
  };

  // Reads one ready object: inline, or mapped from this node's store (fetching it here first).
  GetResult Materialize(const ObjectRefInfo& ref, const StoredObject& object);
  absl::StatusOr<ObjectBuffer> MapLocalObject(const ObjectId& id);
  // The object's value, from our memory store (owned) or its owner (borrowed).
  absl::StatusOr<std::optional<StoredObject>> Resolve(const ObjectRefInfo& ref,
                                                      absl::Time deadline);
  void StoreReturns(const rpc::TaskSpec& spec, const rpc::PushTaskReply& reply);
  void FailTask(const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message);
  void ReleaseTaskReferences(const rpc::TaskSpec& spec);
  void OnOwnedFree(const ObjectId& id, std::vector<ObjectRefInfo> contained);
  void OnBorrowedRelease(const ObjectId& id, const std::string& owner, bool owner_knows);
  rpc::PushTaskReply ExecuteTask(const rpc::PushTaskRequest& request);
  absl::StatusOr<rpc::ReturnObject> StoreTaskReturn(const ObjectId& id, size_t size,
                                                    const std::function<void(char*)>& write);
  // Fills in a TaskSpec's common fields and holds its argument references until it is done.
  rpc::TaskSpec BuildTaskSpec(const TaskId& task_id, const std::string& function_name,
                              std::vector<TaskArgSpec> args,
                              std::vector<ObjectId>* owned_dependencies);
  // The node holding bundle `index` (-1: one of the bundles, in turn) of a placed group; waits
  // until the group is placed. NotFound if it does not exist or was removed.
  absl::StatusOr<std::pair<NodeId, int>> ResolveBundle(const std::string& group_id, int index);
  // Worker mode: queues a pushed task, keeping actor calls of each caller in order.
  void EnqueuePush(std::shared_ptr<PendingPush> push);
  void TimerLoop();
  void SetBlocked(bool blocked);
  // A writable mapping of the object file at `path` (`size` bytes): reused from an earlier
  // write when the store handed out the same file again, else freshly mapped. Mappings that are
  // not `cached` are the caller's to unmap.
  struct WriteTarget {
    char* address;
    bool cached;
  };
  absl::StatusOr<WriteTarget> MapForWrite(const std::string& path, size_t size);

  CoreWorkerOptions options_;
  std::string address_;
  NodeId node_id_;
  std::unique_ptr<ClusterToken> token_;
  std::unique_ptr<TokenAuthenticator> auth_;
  ClientPool<RayletClient> raylets_;
  ClientPool<CoreWorkerClient> workers_;
  std::shared_ptr<RayletClient> raylet_;
  MemoryStore memory_store_;
  ReferenceCounter references_;
  std::unique_ptr<TaskSubmitter> submitter_;
  std::unique_ptr<GcsClient> gcs_;
  std::unique_ptr<ActorTaskSubmitter> actor_submitter_;
  std::string namespace_name_ = "default";
  std::atomic<uint32_t> next_bundle_{0};
  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  const TaskId put_task_id_ = TaskId::FromRandom();
  std::atomic<uint32_t> put_index_{0};

  // Submitted tasks' argument references, released when the task is done.
  absl::Mutex tasks_mu_;
  absl::flat_hash_map<TaskId, std::vector<ObjectRefInfo>> task_refs_ ABSL_GUARDED_BY(tasks_mu_);

  // Worker mode: pushed tasks waiting for the task loop.
  absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  std::deque<std::shared_ptr<PendingPush>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool exit_requested_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool exit_after_task_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Per caller: the next actor-call sequence number to run, and calls that arrived early.
  struct CallerOrder {
    int64_t next = -1;
    std::map<int64_t, std::shared_ptr<PendingPush>> early;
  };
  absl::flat_hash_map<std::string, CallerOrder> caller_order_ ABSL_GUARDED_BY(queue_mu_);
  ActorId current_actor_;
  std::vector<std::thread> extra_executors_;  // actors with max_concurrency > 1
  std::atomic<bool> executing_{false};
  std::atomic<int> blocked_depth_{0};

  // Mappings of large object files this process wrote, kept because the store reuses freed
  // files: writing the next object of the same size then skips mmap and page-table setup. The
  // open fd pins the inode, so a matching (device, inode) is certainly the same file.
  struct WriteMapping {
    dev_t device;
    ino_t inode;
    size_t size;
    char* address;
    int fd;
  };
  absl::Mutex mappings_mu_;
  std::deque<WriteMapping> write_mappings_ ABSL_GUARDED_BY(mappings_mu_);

  absl::Notification stop_timer_;
  std::thread timer_;
  // Every 2 s (and at shutdown): this process's task counters into the GCS KV, for /metrics.
  void ReportTaskCounters();
  std::thread metrics_reporter_;
  std::string last_reported_counters_;
  TaskSubmitter::Counters actor_calls_;  // actor calls made by this process (retried unused)
};

}  // namespace troupe
