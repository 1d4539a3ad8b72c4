// Placement groups: sets of resource bundles reserved together across nodes. The GCS assigns
// bundles to nodes (AssignBundles in src/scheduling, by strategy), then reserves each on its
// raylet (a lease with bundle_reservation, granted at once or refused). All reservations
// succeeding is the commit; if any is refused the others are returned (rollback) and the group
// waits and retries. Groups that do not fit stay PENDING with the reason, and are placed when
// nodes that fit join. Removing a group returns its reservations (raylets then kill the group's
// workers) and kills its actors; a node death reschedules the bundles that were there.
// Callers wait for a group to be placed with WaitUntilReady (a long poll answered on the state
// change, or at the caller's deadline).
// Reservations go through a BundleClient (src/rpc/peer_clients.h); no gRPC here. The composition
// root (GcsServer) passes the gRPC implementation, tests a fake.
// Thread-safe. BundleClient callbacks arrive on any thread (gRPC threads in production); every
// outbound call and every callback this class runs (kill_actors, waiters) runs without mu_ held.
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <utility>
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

// What a PlacementGroupManager works with. Pointers are not owned and must outlive the manager.
struct PlacementGroupManagerDeps {
  StoreClient* store = nullptr;
  Publisher* publisher = nullptr;
  NodeManager* nodes = nullptr;  // the cluster view bundles are assigned on
  const Clock* clock = nullptr;
  BundleClient* bundles = nullptr;  // reserves and returns bundles on raylets
  // Kills the actors of a removed group (ActorManager::KillActorsInPlacementGroup).
  std::function<void(const std::string& placement_group_id)> kill_actors;
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
    std::string reservation_id;  // chosen here, saved before it is sent
  };
  // Per-bundle resources of `group`, checked; InvalidArgument naming the bad bundle.
  static absl::StatusOr<std::vector<ResourceSet>> Demands(const rpc::PlacementGroupInfo& group);

  // Assigns the bundles without a node and queues their reservations in outbox_.
  void ScheduleLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends queued reservations and returns, and answers queued waiters.
  void SendOutbox() ABSL_LOCKS_EXCLUDED(mu_);
  void OnReserved(const Reservation& reservation, absl::StatusOr<std::string> reservation_id);
  // Saves, publishes, and queues the answers of waiters once the group is CREATED or REMOVED.
  void SaveAndPublishLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreClient* store_;
  Publisher* publisher_;
  NodeManager* nodes_;
  const Clock* clock_;
  BundleClient* bundles_;
  std::function<void(const std::string&)> kill_actors_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PlacementGroupId, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<Reservation> outbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> returns_ ABSL_GUARDED_BY(mu_);  // raylet, id
  std::vector<std::pair<ReadyCallback, rpc::PlacementGroupInfo::State>> answers_
      ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
