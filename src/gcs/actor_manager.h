// The GCS's actor table and actor lifecycle. An actor is registered with its creation task,
// then scheduled: the GCS picks a node with the scheduling policy, leases a dedicated worker
// there (following spillback like any caller), and pushes the creation task to it. States are
// PENDING_CREATION -> ALIVE -> (RESTARTING -> ALIVE)* -> DEAD, each saved and published on the
// ACTOR channel with the node, worker address, pid and, for DEAD, the cause. Deaths come from
// raylets (worker exits), the node table (node deaths), users (KillActor, ExitActor) and jobs
// (a non-detached actor dies with its job). Restarts follow max_restarts.
// Dead actors are remembered for `troupe list actors` and late callers, but only the last
// ActorManagerOptions::max_dead_actors of them (oldest death first out, record deleted from the
// store too), and a dead actor keeps only its ActorInfo (its creation task is dropped). An actor
// ID the manager does not know is answered DEAD by GetActors: a handle is only ever made after
// its actor was registered, so an unknown ID is one that was dropped (or never existed).
// Outbound calls go through the peer-client interfaces (src/rpc/peer_clients.h): LeaseClient to
// lease, return and kill the actor's worker, TaskPushClient to push its creation task. No gRPC
// here; the composition root (GcsServer) passes the gRPC implementations, tests pass fakes.
// Thread-safe; peer-client callbacks arrive on any thread (gRPC threads in production) and are
// never run with mu_ held.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/gcs/node_manager.h"
#include "src/gcs/publisher.h"
#include "src/gcs/store_client.h"
#include "src/rpc/peer_clients.h"

namespace troupe {

// What an ActorManager works with. None owned; all must outlive the manager.
struct ActorManagerDeps {
  StoreClient* store = nullptr;
  Publisher* publisher = nullptr;
  NodeManager* nodes = nullptr;  // the cluster view scheduling decisions are made on
  const Clock* clock = nullptr;
  LeaseClient* leases = nullptr;      // leases, returns and kills actor workers
  TaskPushClient* workers = nullptr;  // pushes creation tasks
};

struct ActorManagerOptions {
  // Dead actors remembered (as Ray's maximum_gcs_destroyed_actor_cached_count, 100,000 there);
  // about 1 KiB each. Applied by Tick(): 0 forgets an actor at the first tick after its death.
  size_t max_dead_actors = 10000;
};

class ActorManager {
 public:
  explicit ActorManager(ActorManagerDeps deps, ActorManagerOptions options = {});

  // Loads the actors an earlier GCS saved on the same store; call once, after the node table
  // was loaded and before serving. ALIVE actors keep their worker (callers go on calling it);
  // PENDING_CREATION / RESTARTING ones are placed again by Tick() (a worker the earlier GCS had
  // leased for them is returned and stopped first); actors on nodes that are not alive any more
  // fail as on a node death; DEAD ones stay dead. Returns how many actors were loaded.
  absl::StatusOr<int> Initialize();

  // AlreadyExists when the name is taken in its namespace by an actor that is not DEAD, or the
  // ID by another actor; InvalidArgument for a bad actor ID or resources (negative, non-finite,
  // unnamed). Registering the same actor again (a driver retrying after the GCS died mid-call)
  // is OK and changes nothing.
  absl::Status RegisterActor(const rpc::RegisterActorRequest& request);
  // By ID, or by name within a namespace (NotFound for none, or only dead ones).
  absl::StatusOr<rpc::ActorInfo> GetActor(const rpc::GetActorInfoRequest& request) const;
  std::vector<rpc::ActorInfo> GetAllActors() const;
  // The actors `ids` (binary IDs; invalid ones are skipped), in the order asked. An ID this GCS
  // does not know comes back DEAD, its death_cause saying why.
  std::vector<rpc::ActorInfo> GetActors(
      const google::protobuf::RepeatedPtrField<std::string>& ids) const;
  // Records the kill (saved, so a restarted GCS still honours it) and asks the actor's raylet to
  // stop the worker; returns once the raylet answered, or after kKillAnswerWait if it has not
  // (cut off: the kill stands). The worker's exit report (or its node's death) finishes the
  // actor.
  absl::Status KillActor(const std::string& actor_id, bool no_restart);
  static constexpr absl::Duration kKillAnswerWait = absl::Seconds(1);

  // A raylet reports that a worker or driver process of its node (`node_id`) exited or died
  // (`how`). Publishes it on the WORKER channel (raylets free the objects it owned), then fails
  // or restarts the actor it held, if any.
  void OnWorkerExit(const std::string& worker_id, const std::string& how,
                    const std::string& node_id = "");
  // OnWorkerExit for a report from outside (the ReportWorkerExit RPC), from the node `node_id`:
  // PermissionDenied, changing nothing, when the worker runs an actor on another node (only its
  // own raylet, or the process itself, reports its exit).
  absl::Status ReportWorkerExit(const std::string& worker_id, const std::string& how,
                                const std::string& node_id);
  // The actor is leaving on purpose (ExitActor): it is not restarted when its worker exits.
  // `worker_id` is the reporter: PermissionDenied unless it is the worker running the actor;
  // NotFound for an unknown actor; a dead one changes nothing.
  absl::Status OnActorExit(const std::string& actor_id, const std::string& worker_id);
  void OnNodeDead(const rpc::NodeInfo& node);
  void OnJobFinished(const std::string& job_id);
  // The group was removed: its actors die (no restart).
  void KillActorsInPlacementGroup(const std::string& placement_group_id);
  // Where an actor's bundle lives: (raylet address, bundle index), or why not yet.
  using BundleLocator = std::function<absl::StatusOr<std::pair<std::string, int>>(
      const std::string& placement_group_id, int bundle_index)>;
  void set_bundle_locator(BundleLocator locator) { locate_bundle_ = std::move(locator); }
  // Told the address of an actor's worker once that worker is gone (it exited, was killed, its
  // node died, or it was returned when the actor died with its job), so the owner can drop its
  // client to it (a gRPC channel, ~33 KiB, per actor ever created otherwise). Called under the
  // manager's lock: must not call back into it. Set before use.
  void set_worker_gone_listener(std::function<void(const std::string& worker_address)> listener) {
    worker_gone_ = std::move(listener);
  }
  // Retries placements that are waiting (no node fits yet, or a lease attempt failed), and
  // forgets the oldest dead actors beyond max_dead_actors.
  void Tick();

 private:
  struct Actor {
    rpc::ActorInfo info;
    rpc::TaskSpec creation_task;  // once DEAD, only its task_id (a registration retry's check)
    ResourceSet demand;           // info.required_resources, checked at registration
    bool scheduling = false;      // a lease or creation push is in flight
    absl::Time retry_at = absl::InfinitePast();
    uint64_t attempt = 0;  // tells replies of an earlier placement attempt apart
    bool kill_requested = false;
    bool no_restart = false;
    bool exiting = false;     // ExitActor was called
    std::string death_cause;  // set by the killer before the worker exits
  };

  absl::Status DoRegisterActor(const rpc::RegisterActorRequest& request);
  void DoWorkerExit(const std::string& worker_id, const std::string& how);
  void OnNodeDeadLocked(const rpc::NodeInfo& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places the actor, or notes why it waits. Lease requests go to outbox_, sent by
  // SendOutbox() once the lock is released.
  void ScheduleLocked(Actor& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendOutbox() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the actor's raylet to stop its worker, without waiting: the answer is logged (if not
  // OK), then `answered` runs.
  void KillWorker(const ActorId& id, const std::string& raylet, const std::string& lease,
                  std::function<void()> answered = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestLease(const ActorId& id, uint64_t attempt, const std::string& raylet_address,
                    bool grant_or_reject, int bundle_index = -1);
  void OnLeaseReply(const ActorId& id, uint64_t attempt, const std::string& raylet_address,
                    absl::StatusOr<rpc::RequestWorkerLeaseReply> reply);
  // A lease of the current attempt was refused: wait and retry, or die if it never fits.
  void OnLeaseRefusedLocked(Actor& actor, const absl::StatusOr<rpc::RequestWorkerLeaseReply>& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Buries the job's non-detached actors; their leases to return go to `to_return`.
  void OnJobFinishedLocked(const std::string& job_id,
                           std::vector<std::pair<std::string, std::string>>* to_return)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnCreated(const ActorId& id, uint64_t attempt, absl::StatusOr<rpc::PushTaskReply> reply);
  // The actor's worker is gone: restart it or declare it dead.
  void OnActorFailedLocked(Actor& actor, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(Actor& actor, rpc::ActorInfo::State state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The actor just died: drops its creation task and queues it for forgetting (not at once:
  // callers go on using `actor`, some while iterating actors_).
  void BuryLocked(const ActorId& id, Actor& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the oldest dead actors beyond max_dead_actors (memory and store). From Tick().
  void ForgetOldDeadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves the kill flags (ACTOR_KILL table), or deletes them once cleared.
  void SaveKillLocked(const Actor& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreClient* store_;
  Publisher* publisher_;
  NodeManager* nodes_;
  const Clock* clock_;
  LeaseClient* leases_;
  TaskPushClient* workers_;
  const ActorManagerOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ActorId, Actor> actors_ ABSL_GUARDED_BY(mu_);
  std::deque<ActorId> dead_ ABSL_GUARDED_BY(mu_);  // the dead in actors_, oldest death first
  absl::flat_hash_map<std::string, ActorId> by_worker_ ABSL_GUARDED_BY(mu_);
  uint64_t spread_counter_ ABSL_GUARDED_BY(mu_) = 0;
  BundleLocator locate_bundle_;
  std::function<void(const std::string&)> worker_gone_;
  struct LeaseToSend {
    ActorId id;
    uint64_t attempt;
    std::string raylet_address;
    int bundle_index = -1;  // for actors in a placement group
  };
  std::vector<LeaseToSend> outbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
