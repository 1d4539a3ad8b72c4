// Placement groups: sets of resource bundles reserved together across nodes. The GCS assigns
// bundles to nodes (AssignBundles in src/scheduling, by strategy), then reserves each on its
// raylet (a lease with bundle_reservation, granted at once or refused). All reservations
// succeeding is the commit; if any is refused the others are returned (rollback) and the group
// waits and retries. Groups that do not fit stay PENDING with the reason, and are placed when
// nodes that fit join. Removing a group records it REMOVED and kills its actors at once; its
// reservations go back to the raylets (which then kill the group's workers) in one batch per
// raylet, on the next Tick() or sooner with other traffic, so a removal costs no raylet call of
// its own. The REMOVED record keeps the reservation IDs until their raylet confirms (a restarted
// GCS sends them again); a batch that fails is sent again on a later Tick() unless its node
// died (the reservations died with it). A group lives as long as the job that created it
// (creator_job_id): when that job finishes, OnJobFinished removes it as Remove does, unless it
// is detached; a GCS restarted on a persistent store removes those whose job finished while
// it was down, or before it could. Resources come back only when the raylet has freed them
// and reported: nothing here counts a returned bundle as free, so a group created right after a
// removal cannot be placed on resources the raylet still holds (and the raylet refuses a
// reservation it cannot hold). A node death reschedules the bundles that were there.
// Callers wait for a group to be placed with WaitUntilReady (a long poll answered on the state
// change, or at the caller's deadline).
// Reservations go through a BundleClient (src/rpc/peer_clients.h); no gRPC here. The composition
// root (GcsServer) passes the gRPC implementation, tests a fake.
// Thread-safe. BundleClient callbacks arrive on any thread (gRPC threads in production); every
// outbound call and every callback this class runs (kill_actors, waiters) runs without mu_ held.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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

// What a PlacementGroupManager works with. Pointers are not owned and must outlive the manager.
struct PlacementGroupManagerDeps {
  StoreClient* store = nullptr;
  Publisher* publisher = nullptr;
  NodeManager* nodes = nullptr;  // the cluster view bundles are assigned on
  const Clock* clock = nullptr;
  BundleClient* bundles = nullptr;  // reserves and returns bundles on raylets
  // Kills the actors of a removed group (ActorManager::KillActorsInPlacementGroup).
  std::function<void(const std::string& placement_group_id)> kill_actors;
  // Whether the job (binary ID) has finished (JobManager::IsJobFinished); Initialize removes
  // the groups of finished jobs that are not detached. Null: no job counts as finished.
  std::function<bool(const std::string& job_id)> job_finished;
};

class PlacementGroupManager {
 public:
  // The group's state when answered: CREATED (ready), REMOVED (never will be), or PENDING /
  // RESCHEDULING (the deadline passed first). Not OK: NotFound for an unknown group,
  // InvalidArgument for a bad ID, Unavailable when the GCS is stopping.
  using ReadyCallback = std::function<void(absl::StatusOr<rpc::PlacementGroupInfo::State>)>;

  // Waits of WaitUntilReady last at most this long; callers wanting longer ask again.
  static constexpr absl::Duration kMaxWait = absl::Seconds(60);

  explicit PlacementGroupManager(PlacementGroupManagerDeps deps);

  // Loads the groups an earlier GCS saved on the same store; call once, after the node table
  // was loaded and before serving. CREATED groups keep their reservations (raylets hold them);
  // groups caught between reserving and recording return every reservation that may have been
  // in flight (raylets refuse those IDs if they arrive later) and are placed again by Tick();
  // bundles on nodes that are not alive any more are placed again as on a node death; REMOVED
  // groups stay removed. Returns how many groups were loaded.
  absl::StatusOr<int> Initialize();
  // InvalidArgument for an empty group or bundle, or bad resources; AlreadyExists for a taken
  // name, or an ID taken by another group. Creating the same group again (a driver retrying
  // after the GCS died mid-call) is OK and changes nothing.
  absl::Status Create(const rpc::PlacementGroupInfo& group);
  absl::Status Remove(const std::string& placement_group_id);
  // The job finished: removes the groups it created that are not detached, as Remove does.
  // Returns how many it removed.
  int OnJobFinished(const std::string& job_id);
  absl::StatusOr<rpc::PlacementGroupInfo> Get(const rpc::GetPlacementGroupRequest& request) const;
  std::vector<rpc::PlacementGroupInfo> GetAll() const;
  void OnNodeDead(const rpc::NodeInfo& node);
  // Calls `done` exactly once: at once when the answer is known (on this thread), else when the
  // group becomes CREATED or REMOVED (on the thread that changes it) or by Tick() once
  // min(deadline, now + kMaxWait) has passed.
  void WaitUntilReady(const std::string& placement_group_id, absl::Time deadline,
                      ReadyCallback done);
  // Retries groups that wait for room, and answers waiters whose deadline passed.
  void Tick();
  // Answers every waiter with Unavailable, and later ones at once (the GCS is stopping).
  void Shutdown();
  size_t num_waiters() const;

 private:
  struct Waiter {
    absl::Time deadline;
    ReadyCallback done;
  };
  struct Group {
    rpc::PlacementGroupInfo info;
    std::vector<ResourceSet> demands;  // per bundle, checked at Create
    std::vector<Waiter> waiters;       // WaitUntilReady calls not answered yet
    bool reserving = false;
    uint64_t attempt = 0;
    absl::Time retry_at = absl::InfinitePast();
    int replies_missing = 0;
    bool any_refused = false;
    std::vector<int> attempt_bundles;  // bundles this attempt reserves
  };
  struct Reservation {
    PlacementGroupId id;
    uint64_t attempt;
    int bundle;
    std::string raylet_address;
    std::string node_id;
    std::string reservation_id;  // chosen here, saved before it is sent
  };
  // A reservation to give back. For a removed group, `removed_group` names it: its record keeps
  // the ID until the raylet confirms.
  struct Return {
    std::string node_id;
    std::string reservation_id;
    std::optional<PlacementGroupId> removed_group;
  };
  // At most this many reservations go back in one call.
  static constexpr size_t kMaxReturnBatch = 1000;
  // Per-bundle resources of `group`, checked; InvalidArgument naming the bad bundle.
  static absl::StatusOr<std::vector<ResourceSet>> Demands(const rpc::PlacementGroupInfo& group);

  // Assigns the bundles without a node and queues their reservations in outbox_.
  void ScheduleLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends queued reservations and answers queued waiters; with `send_returns`, also one batch
  // of queued returns to each raylet that has none in flight.
  void SendOutbox(bool send_returns = true) ABSL_LOCKS_EXCLUDED(mu_);
  void OnReserved(const Reservation& reservation, absl::StatusOr<std::string> reservation_id);
  void QueueReturnLocked(const std::string& raylet_address, const std::string& node_id,
                         const std::string& reservation_id,
                         std::optional<PlacementGroupId> removed_group = std::nullopt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues every reservation a REMOVED group's record still holds.
  void QueueReturnsOfRemovedLocked(const PlacementGroupId& id, const Group& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A batch's answer: confirmed IDs leave their removed groups' records; a failed batch waits
  // for the next Tick() (dropped if its node died meanwhile).
  void OnReturned(const std::string& raylet_address, std::vector<Return> batch,
                  absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Marks the group REMOVED (saved and published) and queues its reservations' return; the
  // caller kills its actors and sends the outbox without mu_.
  void RemoveLocked(const PlacementGroupId& id, Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the groups of finished jobs that are not detached; returns their IDs (binary).
  std::vector<std::string> RemoveGroupsOfFinishedJobsLocked(
      const std::function<bool(const std::string& job_id)>& finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves, publishes, and queues the answers of waiters once the group is CREATED or REMOVED.
  void SaveAndPublishLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreClient* store_;
  Publisher* publisher_;
  NodeManager* nodes_;
  const Clock* clock_;
  BundleClient* bundles_;
  std::function<void(const std::string&)> kill_actors_;
  std::function<bool(const std::string&)> job_finished_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PlacementGroupId, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<Reservation> outbox_ ABSL_GUARDED_BY(mu_);
  // Returns not sent yet, by raylet address; raylets with a batch in flight; nodes seen dead.
  absl::flat_hash_map<std::string, std::vector<Return>> returns_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> returning_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dead_nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<ReadyCallback, rpc::PlacementGroupInfo::State>> answers_
      ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
