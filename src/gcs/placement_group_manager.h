// Placement groups: sets of resource bundles reserved together across nodes. The GCS assigns
// bundles to nodes (AssignBundles in src/scheduling, by strategy), then reserves each on its
// raylet (a lease with bundle_reservation, granted at once or refused). All reservations
// succeeding is the commit; if any is refused the others are returned (rollback) and the group
// waits and retries. Groups that do not fit stay PENDING with the reason, and are placed when
// nodes that fit join. Removing a group returns its reservations (raylets then kill the group's
// workers) and kills its actors; a node death reschedules the bundles that were there.
// Thread-safe; RPC callbacks arrive on gRPC threads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/gcs/node_manager.h"
#include "src/gcs/publisher.h"
#include "src/gcs/store_client.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/raylet_client.h"

namespace troupe {

class PlacementGroupManager {
 public:
  using KillActorsCallback = std::function<void(const std::string& placement_group_id)>;

  PlacementGroupManager(StoreClient* store, Publisher* publisher, NodeManager* nodes,
                        const Clock* clock, const std::string& token,
                        KillActorsCallback kill_actors);

  // InvalidArgument for an empty group or bundle; AlreadyExists for a taken name.
  absl::Status Create(const rpc::PlacementGroupInfo& group);
  absl::Status Remove(const std::string& placement_group_id);
  absl::StatusOr<rpc::PlacementGroupInfo> Get(const rpc::GetPlacementGroupRequest& request) const;
  std::vector<rpc::PlacementGroupInfo> GetAll() const;
  void OnNodeDead(const rpc::NodeInfo& node);
  // Retries groups that wait for room.
  void Tick();

 private:
  struct Group {
    rpc::PlacementGroupInfo info;
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
  };

  // Assigns the bundles without a node and queues their reservations in outbox_.
  void ScheduleLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendOutbox() ABSL_LOCKS_EXCLUDED(mu_);
  void OnReserved(const Reservation& reservation,
                  absl::StatusOr<rpc::RequestWorkerLeaseReply> reply);
  void SaveAndPublishLocked(const Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreClient* store_;
  Publisher* publisher_;
  NodeManager* nodes_;
  const Clock* clock_;
  ClientPool<RayletClient> raylets_;
  KillActorsCallback kill_actors_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PlacementGroupId, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<Reservation> outbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> returns_ ABSL_GUARDED_BY(mu_);  // raylet, id
};

}  // namespace troupe
