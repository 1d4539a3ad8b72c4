// Grants worker leases on this node. A caller asks for a worker able to run tasks needing some
// resources; the lease manager decides (scheduling_policy.h) whether this node, another node
// (spillback: the reply names that node's raylet) or no node (infeasible: the reply says what
// is missing) should serve it. Local requests wait in a FIFO queue until the resources are
// free, then get a worker from the WorkerLauncher; the resources stay reserved until the lease
// is returned or its worker dies. Queued requests move to another node when the cluster view
// shows one that can serve them now. Placement-group bundles are reservations (a lease with
// bundle_reservation, granted at once or refused): their resources leave the node's pool and
// serve only that group's leases; returning the reservation frees them and kills the group's
// workers here. The GCS names each reservation: asking again with a held ID answers with that
// reservation (a restarted GCS never gets a second one), and an ID returned before it arrived
// is refused.
// Owns one long-lived thread that looks up granted leases' jobs and asks the launcher for their
// workers (a worker dies with the thread that forked it); the launcher, the job lookup and the
// clock are borrowed and must outlive it.
// Thread-safe; callbacks run without the lock held. Resources are taken synchronously inside
// RequestLease / ReturnWorker / ..., so Available() is exact as soon as they return; the reply
// of a granted lease comes later, from the launcher's answer.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/raylet.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/raylet/local_resources.h"
#include "src/raylet/worker_launcher.h"
#include "src/scheduling/scheduling_policy.h"

namespace troupe {

class LeaseManager {
 public:
  using LeaseCallback = std::function<void(rpc::RequestWorkerLeaseReply)>;
  // The job's info (from the raylet's cache, else the GCS). Called on the lookup thread; may
  // block.
  using JobLookup = std::function<absl::StatusOr<rpc::JobInfo>(const JobId&)>;

  // `local_labels`: this node's labels (`troupe start --labels`), matched against label
  // selectors before the GCS's view of this node arrives.
  LeaseManager(NodeId local_node, const ResourceSet& total, WorkerLauncher* launcher,
               JobLookup lookup_job, const Clock* clock,
               std::map<std::string, std::string> local_labels = {});
  ~LeaseManager();

  void RequestLease(const rpc::RequestWorkerLeaseRequest& request, LeaseCallback done);
  // NotFound for an unknown lease. `disconnect_worker`: the worker is stopped (gracefully,
  // WorkerLauncher::StopWorker) instead of being reused.
  absl::Status ReturnWorker(const std::string& lease_id, bool disconnect_worker);
  absl::Status KillLeasedWorker(const std::string& lease_id);
  // The worker's process exited: release its lease, if any. It may also have owned leases for
  // the normal tasks it submitted (a killed actor, say, still holding idle leased workers for
  // reuse): those are returned and their workers stopped, and its queued requests are dropped,
  // or their CPUs would stay leased for good. (Owners on other nodes are not seen here.)
  void OnWorkerExit(const Worker& worker);
  void NotifyBlocked(const WorkerId& worker_id, bool blocked);
  // The latest cluster view from the GCS (every alive node, this one included).
  void UpdateClusterView(const std::vector<rpc::ResourceUsage>& cluster);

  // The GCS declared this node dead: tasks bound to it (hard affinity) fail instead of waiting.
  void MarkNodeDead(const NodeId& node_id);
  // Refuses every queued request (the raylet is shutting down).
  void RejectAllPending(const std::string& why);

  // The worker the memory monitor stops first: the most recently granted lease of a task that
  // will be retried; failing that, of any task; actors last. nullptr when nothing is leased.
  std::shared_ptr<Worker> NewestLeasedWorker() const;

  ResourceSet Available() const;
  // Demands this node was asked for in the last 10 s that no node can run, with why, for status.
  std::vector<std::string> InfeasibleDemands() const;
  int num_leased() const;
  int num_pending() const;

 private:
  struct Pending {
    rpc::RequestWorkerLeaseRequest request;
    ResourceSet demand;
    LeaseCallback done;
  };
  struct Lease {
    std::shared_ptr<Worker> worker;
    Allocation allocation;
    bool blocked = false;
    std::string bundle;  // reservation the resources came from ("" = the node's own)
    uint64_t order = 0;  // grant order
    // Who goes first when memory runs out (lower first): 0 a task that will be retried, 1 a
    // task that will not, 2 an actor (its state would be lost).
    int memory_kill_rank = 0;
    // Its worker was told to die (its bundle was returned, or KillLeasedWorker): returning the
    // lease releases it but never gives the worker back to the launcher, which would hand the
    // dying process to the next lease.
    bool killing = false;
    // The worker that asked for this lease to run its normal tasks (TaskSpec.caller_worker_id);
    // "" for actors and bundles, which outlive their creator's process by design.
    std::string owner;
  };
  struct Grant {
    Pending pending;
    Allocation allocation;
    std::string bundle;
    std::vector<int> gpu_ids;  // node device ids
    int bundle_index = 0;      // of `bundle`, when there is one
  };
  // A placement-group bundle reserved on this node: resources taken from the node, handed out
  // to the group's tasks and actors from `pool`.
  struct Bundle {
    std::string placement_group_id;
    int index = 0;
    Allocation node_allocation;
    std::unique_ptr<LocalResources> pool;
  };
  // Frees `allocation` back where it came from (a bundle's pool or the node).
  void FreeLocked(const std::string& bundle, const Allocation& allocation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node device ids of a grant from `bundle`'s pool (pool devices map onto the node's).
  std::vector<int> NodeGpuIdsLocked(const std::string& bundle, const Allocation& allocation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<NodeView> ViewsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes resources for queued requests that fit now; the caller starts their workers.
  std::vector<Grant> CollectGrantsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartGrants(std::vector<Grant> grants);
  void ReleaseLocked(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch();

  const NodeId local_node_;
  const std::map<std::string, std::string> local_labels_;
  WorkerLauncher* const launcher_;
  JobLookup lookup_job_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  LocalResources resources_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  // Workers of this node that exited (newest last, at most kRememberedDeadOwners): a lease
  // granted to one of them after it died (its worker was still starting) is returned at once.
  absl::flat_hash_set<std::string> dead_owners_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> dead_owner_order_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kRememberedDeadOwners = 4096;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, std::string> lease_of_worker_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeView> cluster_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<NodeId> dead_nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Bundle> bundles_ ABSL_GUARDED_BY(mu_);  // by reservation id
  // IDs returned while unknown here (possibly reservations still on their way, sent by a GCS
  // that died): a reservation arriving with one of them is refused. Oldest dropped first.
  absl::flat_hash_set<std::string> returned_unknown_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> returned_unknown_order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t spread_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // Infeasible demands (with why) and when they were last asked for.
  absl::flat_hash_map<std::string, absl::Time> infeasible_ ABSL_GUARDED_BY(mu_);

  // Granted leases wait here for the long-lived thread that looks up their job (from the cache,
  // else the GCS) and asks the launcher for their workers (workers die with the thread that
  // forked them). A worker that fails to start is asked for again, from that thread too.
  struct WorkerStart {
    std::shared_ptr<Grant> grant;
    JobId job_id;
    std::optional<rpc::JobInfo> job;  // known after the first attempt
    int attempts_left = 0;
  };
  void LookupLoop();
  void EnqueueStart(WorkerStart start);
  // Asks the launcher for the grant's worker; its answer completes the lease (or retries/fails).
  void PopWorkerFor(WorkerStart start);
  // The grant cannot be served: gives its resources back and rejects the request.
  void FailGrant(Grant& grant, const std::string& message);
  absl::Mutex lookup_mu_;
  std::deque<WorkerStart> lookups_ ABSL_GUARDED_BY(lookup_mu_);
  bool stop_lookups_ ABSL_GUARDED_BY(lookup_mu_) = false;
  std::thread lookup_thread_;
};

}  // namespace troupe
