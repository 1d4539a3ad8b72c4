#include "src/gcs/placement_group_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/resources.h"
#include "src/scheduling/scheduling_policy.h"

namespace troupe {
namespace {
constexpr char kTable[] = "PLACEMENT_GROUP";
constexpr absl::Duration kRetryDelay = absl::Seconds(1);
}  // namespace

PlacementGroupManager::PlacementGroupManager(StoreClient* store, Publisher* publisher,
                                             NodeManager* nodes, const Clock* clock,
                                             const std::string& token,
                                             KillActorsCallback kill_actors)
    : store_(store),
      publisher_(publisher),
      nodes_(nodes),
      clock_(clock),
      raylets_(token),
      kill_actors_(std::move(kill_actors)) {}

void PlacementGroupManager::SaveAndPublishLocked(const Group& group) {
  PutLogged(store_, kTable, group.info.placement_group_id(), group.info.SerializeAsString());
  rpc::PubMessage message;
  message.set_channel(rpc::PLACEMENT_GROUP_CHANNEL);
  message.set_key(group.info.placement_group_id());
  *message.mutable_placement_group() = group.info;
  publisher_->Publish(std::move(message));
}

absl::Status PlacementGroupManager::Create(const rpc::PlacementGroupInfo& incoming) {
  auto id = PlacementGroupId::FromBinary(incoming.placement_group_id());
  if (!id.ok()) return id.status();
  if (incoming.bundles_size() == 0) {
    return absl::InvalidArgumentError("a placement group needs at least one bundle");
  }
  for (const auto& bundle : incoming.bundles()) {
    auto resources = ResourceSet::FromMap({bundle.resources().begin(), bundle.resources().end()});
    if (!resources.ok()) return resources.status();
    if (resources->IsEmpty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bundle ", bundle.index(), " asks for no resources"));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!incoming.name().empty()) {
      for (const auto& [other_id, other] : groups_) {
        if (other.info.name() == incoming.name() &&
            other.info.state() != rpc::PlacementGroupInfo::REMOVED) {
          return absl::AlreadyExistsError(
              absl::StrCat("a placement group named '", incoming.name(), "' already exists"));
        }
      }
    }
    Group& group = groups_[*id];
    group.info = incoming;
    group.info.set_state(rpc::PlacementGroupInfo::PENDING);
    for (int i = 0; i < group.info.bundles_size(); ++i) group.info.mutable_bundles(i)->set_index(i);
    ScheduleLocked(group);
    SaveAndPublishLocked(group);
  }
  SendOutbox();
  return absl::OkStatus();
}

void PlacementGroupManager::ScheduleLocked(Group& group) {
  std::vector<int> missing;
  std::vector<ResourceSet> demands;
  std::vector<NodeId> holding;  // nodes with surviving bundles (STRICT_SPREAD avoids them)
  for (const auto& bundle : group.info.bundles()) {
    if (bundle.node_id().empty()) {
      missing.push_back(bundle.index());
      demands.push_back(
          *ResourceSet::FromMap({bundle.resources().begin(), bundle.resources().end()}));
    } else if (auto node = NodeId::FromBinary(bundle.node_id()); node.ok()) {
      holding.push_back(*node);
    }
  }
  if (missing.empty()) return;
  std::vector<NodeView> views = NodeViewsFromUsage(nodes_->GetAllResourceUsage());
  std::sort(views.begin(), views.end(),
            [](const NodeView& a, const NodeView& b) { return a.node_id < b.node_id; });
  auto strategy = group.info.strategy();
  if (strategy == rpc::PlacementGroupInfo::STRICT_PACK && !holding.empty()) {
    strategy = rpc::PlacementGroupInfo::PACK;  // only reached after a full reset, see OnNodeDead
  }
  BundleAssignment assignment = AssignBundles(
      demands, strategy, views,
      strategy == rpc::PlacementGroupInfo::STRICT_SPREAD ? holding : std::vector<NodeId>{});
  if (!assignment.ok) {
    group.retry_at = clock_->Now() + kRetryDelay;
    if (group.info.pending_reason() != assignment.reason) {
      group.info.set_pending_reason(assignment.reason);
      SaveAndPublishLocked(group);
    }
    return;
  }
  group.reserving = true;
  group.attempt++;
  group.attempt_bundles = missing;
  group.replies_missing = static_cast<int>(missing.size());
  group.any_refused = false;
  const PlacementGroupId id = *PlacementGroupId::FromBinary(group.info.placement_group_id());
  for (size_t i = 0; i < missing.size(); ++i) {
    const NodeView& node = views[assignment.node_of_bundle[i]];
    rpc::Bundle* bundle = group.info.mutable_bundles(missing[i]);
    bundle->set_node_id(node.node_id.Binary());
    bundle->set_raylet_address(node.raylet_address);
    outbox_.push_back({id, group.attempt, missing[i], node.raylet_address});
  }
}

void PlacementGroupManager::SendOutbox() {
  std::vector<Reservation> outbox;
  std::vector<std::pair<std::string, std::string>> returns;
  std::vector<std::tuple<PlacementGroupId, int, rpc::Bundle>> bundles;
  {
    absl::MutexLock lock(&mu_);
    outbox.swap(outbox_);
    returns.swap(returns_);
    for (const auto& reservation : outbox) {
      const Group& group = groups_.at(reservation.id);
      bundles.emplace_back(reservation.id, reservation.bundle,
                           group.info.bundles(reservation.bundle));
    }
  }
  for (const auto& [raylet, reservation_id] : returns) {
    raylets_.Get(raylet)->ReturnWorkerAsync(reservation_id, false);
  }
  for (size_t i = 0; i < outbox.size(); ++i) {
    const Reservation reservation = outbox[i];
    const rpc::Bundle& bundle = std::get<2>(bundles[i]);
    rpc::RequestWorkerLeaseRequest request;
    rpc::TaskSpec* spec = request.mutable_resource_spec();
    *spec->mutable_required_resources() = bundle.resources();
    spec->set_placement_group_id(reservation.id.Binary());
    spec->set_bundle_index(reservation.bundle);
    spec->set_bundle_reservation(true);
    request.set_grant_or_reject(true);
    raylets_.Get(reservation.raylet_address)
        ->RequestWorkerLeaseAsync(
            request, [this, reservation](absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
              OnReserved(reservation, std::move(reply));
            });
  }
}

void PlacementGroupManager::OnReserved(const Reservation& reservation,
                                       absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
  const bool granted = reply.ok() && !reply->lease_id().empty();
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(reservation.id);
    if (it == groups_.end() || it->second.attempt != reservation.attempt ||
        it->second.info.state() == rpc::PlacementGroupInfo::REMOVED) {
      if (granted) returns_.emplace_back(reservation.raylet_address, reply->lease_id());
    } else {
      Group& group = it->second;
      rpc::Bundle* bundle = group.info.mutable_bundles(reservation.bundle);
      if (granted) {
        bundle->set_reservation_id(reply->lease_id());
      } else {
        group.any_refused = true;
      }
      if (--group.replies_missing == 0) {
        group.reserving = false;
        if (!group.any_refused) {
          group.info.set_state(rpc::PlacementGroupInfo::CREATED);  // every node said yes
          group.info.clear_pending_reason();
        } else {
          // Roll back this attempt's reservations (earlier ones stay) and try again shortly.
          for (int index : group.attempt_bundles) {
            rpc::Bundle* b = group.info.mutable_bundles(index);
            if (!b->reservation_id().empty()) {
              returns_.emplace_back(b->raylet_address(), b->reservation_id());
            }
            b->clear_reservation_id();
            b->clear_node_id();
            b->clear_raylet_address();
          }
          group.info.set_pending_reason("a node filled up while reserving; retrying");
          group.retry_at = clock_->Now() + absl::Milliseconds(200);
        }
        SaveAndPublishLocked(group);
      }
    }
  }
  SendOutbox();
}

absl::Status PlacementGroupManager::Remove(const std::string& placement_group_id) {
  auto id = PlacementGroupId::FromBinary(placement_group_id);
  if (!id.ok()) return id.status();
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(*id);
    if (it == groups_.end()) {
      return absl::NotFoundError(absl::StrCat("no placement group ", id->Hex()));
    }
    Group& group = it->second;
    if (group.info.state() == rpc::PlacementGroupInfo::REMOVED) return absl::OkStatus();
    for (auto& bundle : *group.info.mutable_bundles()) {
      if (!bundle.reservation_id().empty()) {
        returns_.emplace_back(bundle.raylet_address(), bundle.reservation_id());
        bundle.clear_reservation_id();
      }
    }
    group.info.set_state(rpc::PlacementGroupInfo::REMOVED);
    SaveAndPublishLocked(group);
  }
  kill_actors_(placement_group_id);
  SendOutbox();
  return absl::OkStatus();
}

void PlacementGroupManager::OnNodeDead(const rpc::NodeInfo& node) {
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, group] : groups_) {
      if (group.info.state() == rpc::PlacementGroupInfo::REMOVED) continue;
      bool lost = false;
      for (auto& bundle : *group.info.mutable_bundles()) {
        if (bundle.node_id() == node.node_id()) {
          bundle.clear_node_id();
          bundle.clear_raylet_address();
          bundle.clear_reservation_id();
          lost = true;
        }
      }
      if (!lost) continue;
      if (group.info.strategy() == rpc::PlacementGroupInfo::STRICT_PACK) {
        // Everything must move together: give back what survived, then place all anew.
        for (auto& bundle : *group.info.mutable_bundles()) {
          if (!bundle.reservation_id().empty()) {
            returns_.emplace_back(bundle.raylet_address(), bundle.reservation_id());
          }
          bundle.clear_node_id();
          bundle.clear_raylet_address();
          bundle.clear_reservation_id();
        }
      }
      group.info.set_state(rpc::PlacementGroupInfo::RESCHEDULING);
      group.attempt++;  // replies for the old attempt are ignored
      group.reserving = false;
      ScheduleLocked(group);
      SaveAndPublishLocked(group);
    }
  }
  SendOutbox();
}

void PlacementGroupManager::Tick() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [id, group] : groups_) {
      const auto state = group.info.state();
      if ((state == rpc::PlacementGroupInfo::PENDING ||
           state == rpc::PlacementGroupInfo::RESCHEDULING) &&
          !group.reserving && group.retry_at <= now) {
        ScheduleLocked(group);
      }
    }
  }
  SendOutbox();
}

absl::StatusOr<rpc::PlacementGroupInfo> PlacementGroupManager::Get(
    const rpc::GetPlacementGroupRequest& request) const {
  absl::MutexLock lock(&mu_);
  if (!request.placement_group_id().empty()) {
    auto id = PlacementGroupId::FromBinary(request.placement_group_id());
    if (!id.ok()) return id.status();
    auto it = groups_.find(*id);
    if (it == groups_.end())
      return absl::NotFoundError(absl::StrCat("no placement group ", id->Hex()));
    return it->second.info;
  }
  for (const auto& [id, group] : groups_) {
    if (group.info.name() == request.name() &&
        group.info.state() != rpc::PlacementGroupInfo::REMOVED) {
      return group.info;
    }
  }
  return absl::NotFoundError(absl::StrCat("no placement group named '", request.name(), "'"));
}

std::vector<rpc::PlacementGroupInfo> PlacementGroupManager::GetAll() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::PlacementGroupInfo> all;
  for (const auto& [id, group] : groups_) all.push_back(group.info);
  return all;
}

}  // namespace troupe
