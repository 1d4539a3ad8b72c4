// The objects side of a core worker: the objects this process owns (their values in the
// MemoryStore, their references in the ReferenceCounter, freeing them when nobody references
// them), reads of any object (Get/Wait: inline values from the memory store or the owner, large
// ones zero-copy from this node's shared-memory store, fetched from other nodes first when
// needed), Put, storing task returns, and the owner's side of CoreWorkerService's object calls
// (GetObjectStatus long-polls, borrowers, new copies).
// Owned by CoreWorker; owns the MemoryStore, the ReferenceCounter and the cached write mappings.
// Uses the raylet and worker client pools (not owned). Thread-safe: Get/Wait block the calling
// thread (an API thread or a task executor); handlers run on gRPC threads; callbacks from the
// memory store and owners run without this object's locks held.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/core_worker/memory_store.h"
#include "src/core_worker/reference_counter.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/raylet_client.h"

namespace troupe {

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
  // kLost only: the value was in object stores and no copy could be read or fetched (their
  // nodes died), so an owner may rebuild it.
  bool copies_lost = false;
};

// Rebuilds objects this process owns whose every copy is lost, from their lineage
// (SubmissionFacade implements it). Called without ObjectService's locks held.
class ObjectReconstructor {
 public:
  virtual ~ObjectReconstructor() = default;
  // Every copy of `id` (owned here) is gone; its memory-store value was erased, so readers
  // wait. Either runs its task again (the new value arrives as a task return) or stores the
  // error that replaces it. `what_happened` completes "object <id> ...".
  virtual void Reconstruct(const ObjectId& id, const std::string& what_happened) = 0;
  // Nothing references `id` any more (its lineage may go).
  virtual void ReleaseLineage(const ObjectId& id) = 0;
};

class ObjectService {
 public:
  struct Options {
    std::string raylet_address;  // this node's raylet
    WorkerId worker_id;
    bool is_driver = true;
    int64_t max_inline_bytes = 100 * 1024;
  };
  // `raylets`, `workers` and `clock` are not owned and must outlive this.
  ObjectService(Options options, ClientPool<RayletClient>* raylets,
                ClientPool<CoreWorkerClient>* workers, const Clock* clock);
  ~ObjectService();

  // Once, before any object is created or read (CoreWorker::Start): this process's address
  // (owner address of the objects it creates) and node.
  void SetIdentity(const std::string& address, const NodeId& node_id);
  // Stops: expires every waiter, waits for owner queries in flight, unmaps cached mappings.
  void Shutdown();

  // Once, before tasks are submitted (CoreWorker::Start); not owned, must outlive this. Without
  // one, a lost object fails its readers with ObjectLostError.
  void SetReconstructor(ObjectReconstructor* reconstructor) { reconstructor_ = reconstructor; }
  // Whether `id` was made by this process's Put (it has no lineage).
  bool IsPut(const ObjectId& id) const { return id.CreatingTaskId() == put_task_id_; }

  ReferenceCounter& references() { return references_; }
  MemoryStore& memory_store() { return memory_store_; }

  // Stores `size` bytes written by `write`; the reference comes with one local reference held.
  absl::StatusOr<ObjectRefInfo> Put(size_t size, const std::function<void(char*)>& write,
                                    std::vector<ObjectRefInfo> contained);
  // Waits for every object (until `deadline`); DeadlineExceeded if one is not ready by then.
  absl::StatusOr<std::vector<GetResult>> Get(const std::vector<ObjectRefInfo>& refs,
                                             absl::Time deadline);
  // Waits until `num_ready` of `refs` are ready (or failed, or lost) or `deadline` passes;
  // returns which are. Wakes on the memory store (owned objects) and the owners' long-polling
  // GetObjectStatus (borrowed ones); never polls.
  std::vector<bool> Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                         absl::Time deadline);
  // Runs `ready` once `ref` is ready to read (its value or its error; also when it cannot be:
  // freed, its owner gone, or this process shutting down). Never blocks: at once on this thread
  // if it is ready; later on the thread that stores it (owned) or on a gRPC thread (borrowed:
  // its owner's long-polling GetObjectStatus). Async actors' co_await rests on it.
  void NotifyWhenReady(const ObjectRefInfo& ref, std::function<void()> ready);
  // Writes a task return (or a large Put) into this node's object store, recorded there as owned
  // by the process `owner_worker_id` on node `owner_node_id` (binary IDs; the task's caller), so
  // the store frees it when that process exits or dies.
  absl::StatusOr<rpc::ReturnObject> StoreTaskReturn(const ObjectId& id, size_t size,
                                                    const std::function<void(char*)>& write,
                                                    const std::string& owner_worker_id,
                                                    const std::string& owner_node_id);
  const WorkerId& worker_id() const { return options_.worker_id; }
  // This process's address (owner address of what it creates); set by SetIdentity.
  const std::string& address() const { return address_; }
  // A task this process submitted finished: records its returns (dropping those nobody wants
  // any more) with the references nested in them (held as long as the return is; ones owned
  // elsewhere were registered with their owners by the worker), and the borrowers the worker
  // reported.
  // `keep_live_copies` (always so for several returns): a return that already holds a value in
  // the object store keeps it, and the reply's copy is listed beside it (a rerun made it again).
  void StoreReturns(const rpc::PushTaskReply& reply, bool keep_live_copies = false);
  // A task this process submitted will not run: its return becomes `error`.
  void StoreError(const ObjectId& return_id, const std::string& function_name,
                  StoredObject::Error error, const std::string& message);
  // The GCS declared node `node_id` (raylet at `raylet_address`) dead: copies there are not
  // read (a partitioned node would hang the fetch; one that comes back is fenced off), and new
  // copies it reports are refused. An object whose every copy was there is rebuilt (owned) or
  // reported lost when next read. Idempotent; any thread.
  void OnNodeDead(const NodeId& node_id, const std::string& raylet_address)
      ABSL_LOCKS_EXCLUDED(dead_mu_);
  // Worker mode: whether a task is running (a Get inside it then lends the worker's CPUs back to
  // the raylet while it blocks).
  void SetExecuting(bool executing) { executing_ = executing; }

  // Owner side of CoreWorkerService. GetObjectStatus answers through `done` once the object is
  // ready or after the request's timeout (PENDING).
  void HandleGetObjectStatus(const rpc::GetObjectStatusRequest& request,
                             rpc::GetObjectStatusReply* reply,
                             std::function<void(absl::Status)> done);
  absl::Status HandleAddObjectLocation(const rpc::AddObjectLocationRequest& request);
  void HandleAddBorrowers(const rpc::AddBorrowersRequest& request);
  void HandleRemoveBorrowers(const rpc::RemoveBorrowersRequest& request);

 private:
  struct WaitState;
  // Reads one ready object: inline, or mapped from this node's store (fetching it here first).
  GetResult Materialize(const ObjectRefInfo& ref, const StoredObject& object);
  absl::StatusOr<ObjectBuffer> MapLocalObject(const ObjectId& id);
  // The object's value, from our memory store (owned) or its owner (borrowed).
  absl::StatusOr<std::optional<StoredObject>> Resolve(const ObjectRefInfo& ref,
                                                      absl::Time deadline);
  // Wait on a borrowed object: asks its owner (`wait` long), again while PENDING.
  void AskOwner(std::shared_ptr<WaitState> state, size_t index, const ObjectRefInfo& ref,
                absl::Duration wait);
  // NotifyWhenReady of a borrowed object: asks its owner (`wait` long) until it is not PENDING.
  void WatchOwner(const ObjectRefInfo& ref, absl::Duration wait, std::function<void()> ready);
  void OnOwnedFree(const ObjectId& id, std::vector<ObjectRefInfo> contained);
  // Owned `id`, read as `seen`, has no readable copy: unless someone acted on it already (the
  // stored value changed), erases the value and asks the reconstructor to rebuild it.
  void OnCopiesLost(const ObjectId& id, const StoredObject& seen, const std::string& why);
  // Borrowed `ref` has no readable copy: OwnerDied if its owner is gone too, else `lost`.
  GetResult ExplainBorrowedLoss(const ObjectRefInfo& ref, GetResult lost);
  void OnBorrowedRelease(const ObjectId& id, const std::string& owner, bool owner_knows);
  void SetBlocked(bool blocked);
  // A writable mapping of the object file at `path` (`size` bytes): reused from an earlier
  // write when the store handed out the same file again, else freshly mapped. Mappings that are
  // not `cached` are the caller's to unmap.
  struct WriteTarget {
    char* address;
    bool cached;
  };
  absl::StatusOr<WriteTarget> MapForWrite(const std::string& path, size_t size);

  const Options options_;
  ClientPool<RayletClient>* raylets_;
  ClientPool<CoreWorkerClient>* workers_;
  const Clock* clock_;
  std::shared_ptr<RayletClient> raylet_;
  std::string address_;  // set once by SetIdentity, before concurrent use
  NodeId node_id_;
  MemoryStore memory_store_;
  ReferenceCounter references_;
  const TaskId put_task_id_ = TaskId::FromRandom();
  std::atomic<uint32_t> put_index_{0};
  std::atomic<bool> executing_{false};
  std::atomic<int> blocked_depth_{0};
  ObjectReconstructor* reconstructor_ = nullptr;  // set once, before concurrent use
  // Serialises the "still the value we saw?" check of OnCopiesLost with its erase.
  absl::Mutex lost_mu_;

  // Nodes declared dead (binary IDs) and their raylets.
  bool IsDeadRaylet(const std::string& raylet_address) const ABSL_LOCKS_EXCLUDED(dead_mu_);
  mutable absl::Mutex dead_mu_;
  absl::flat_hash_set<std::string> dead_nodes_ ABSL_GUARDED_BY(dead_mu_);
  absl::flat_hash_set<std::string> dead_raylets_ ABSL_GUARDED_BY(dead_mu_);

  // Owner queries of Wait still in flight (their callbacks use this object).
  absl::Mutex queries_mu_;
  int queries_in_flight_ ABSL_GUARDED_BY(queries_mu_) = 0;
  // NotifyWhenReady's owner queries, cancelled at Shutdown (after which none starts).
  uint64_t next_watch_ ABSL_GUARDED_BY(queries_mu_) = 0;
  absl::flat_hash_map<uint64_t, std::function<void()>> watch_cancels_ ABSL_GUARDED_BY(queries_mu_);
  absl::flat_hash_set<uint64_t> watches_answered_early_ ABSL_GUARDED_BY(queries_mu_);
  // Borrowed objects being watched, and who waits for each.
  absl::flat_hash_map<ObjectId, std::vector<std::function<void()>>> watch_waiters_
      ABSL_GUARDED_BY(queries_mu_);
  bool shut_down_ ABSL_GUARDED_BY(queries_mu_) = false;

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
};

}  // namespace troupe
