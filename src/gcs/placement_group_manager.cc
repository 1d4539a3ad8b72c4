#include "src/gcs/placement_group_manager.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/resources.h"
#include "src/scheduling/scheduling_policy.h"

namespace troupe {
namespace {
constexpr char kTable[] = "PLACEMENT_GROUP";
constexpr absl::Duration kRetryDelay = absl::Seconds(1);
}  // namespace

PlacementGroupManager::PlacementGroupManager(PlacementGroupManagerDeps deps)
    : store_(deps.store),
      publisher_(deps.publisher),
      nodes_(deps.nodes),
      clock_(deps.clock),
      bundles_(deps.bundles),
      kill_actors_(std::move(deps.kill_actors)),
      job_finished_(std::move(deps.job_finished)) {}

void PlacementGroupManager::SaveAndPublishLocked(Group& group) {
  PutBestEffort(store_, kTable, group.info.placement_group_id(), group.info.SerializeAsString());
  rpc::PubMessage message;
  message.set_channel(rpc::PLACEMENT_GROUP_CHANNEL);
  message.set_key(group.info.placement_group_id());
  *message.mutable_placement_group() = group.info;
  publisher_->Publish(std::move(message));
  const auto state = group.info.state();
  if (state == rpc::PlacementGroupInfo::CREATED || state == rpc::PlacementGroupInfo::REMOVED) {
    for (auto& waiter : group.waiters) {
      answers_.emplace_back(std::move(waiter.done), state);
    }
    group.waiters.clear();
  }
}

absl::StatusOr<std::vector<ResourceSet>> PlacementGroupManager::Demands(
    const rpc::PlacementGroupInfo& group) {
  std::vector<ResourceSet> demands;
  for (int i = 0; i < group.bundles_size(); ++i) {
    const rpc::Bundle& bundle = group.bundles(i);
    auto resources = ResourceSet::FromMap({bundle.resources().begin(), bundle.resources().end()});
    if (!resources.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bundle ", i, " resources: ", resources.status().message()));
    }
    if (resources->IsEmpty()) {
      return absl::InvalidArgumentError(absl::StrCat("bundle ", i, " asks for no resources"));
    }
    demands.push_back(*std::move(resources));
  }
  return demands;
}

absl::StatusOr<int> PlacementGroupManager::Initialize() {
  auto rows = ScanTableSync(store_, kTable);
  if (!rows.ok()) return rows.status();
  absl::flat_hash_map<std::string, rpc::NodeInfo> nodes;
  for (auto& node : nodes_->GetAllNodes()) nodes[node.node_id()] = std::move(node);
  absl::flat_hash_map<std::string, rpc::NodeInfo> lost;  // not alive, holding bundles
  int loaded = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, value] : *rows) {
      rpc::PlacementGroupInfo info;
      auto id = PlacementGroupId::FromBinary(key);
      absl::StatusOr<std::vector<ResourceSet>> demands = absl::DataLossError("unparsable");
      if (info.ParseFromString(value)) demands = Demands(info);
      if (!id.ok() || !demands.ok()) {
        TROUPE_LOG(Error) << "skipping a corrupt row in the " << kTable << " table";
        continue;
      }
      ++loaded;
      Group& group = groups_[*id];
      group.info = std::move(info);
      group.demands = *std::move(demands);
      if (group.info.state() == rpc::PlacementGroupInfo::REMOVED) {
        QueueReturnsOfRemovedLocked(*id, group);  // not confirmed before the earlier GCS stopped
        continue;
      }
      bool placing = false;
      for (auto& bundle : *group.info.mutable_bundles()) {
        if (!bundle.pending_reservation_id().empty()) {
          // Asked for by the earlier GCS, answer unknown: return it whether or not it was
          // granted, and place the bundle anew.
          QueueReturnLocked(bundle.raylet_address(), bundle.node_id(),
                            bundle.pending_reservation_id());
          bundle.clear_pending_reservation_id();
          bundle.clear_node_id();
          bundle.clear_raylet_address();
          bundle.clear_reservation_id();
          placing = true;
        } else if (bundle.reservation_id().empty() && !bundle.node_id().empty()) {
          bundle.clear_node_id();  // assigned but never asked for
          bundle.clear_raylet_address();
          placing = true;
        }
        if (!bundle.node_id().empty()) {
          auto node = nodes.find(bundle.node_id());
          if (node == nodes.end() || node->second.state() != rpc::NodeInfo::ALIVE) {
            rpc::NodeInfo& dead = lost[bundle.node_id()];
            if (node != nodes.end()) dead = node->second;
            dead.set_node_id(bundle.node_id());
          }
        }
      }
      if (placing && group.info.state() == rpc::PlacementGroupInfo::CREATED) {
        group.info.set_state(rpc::PlacementGroupInfo::RESCHEDULING);  // not expected: be safe
      }
      group.retry_at = absl::InfinitePast();  // Tick() places what is missing
    }
  }
  for (const auto& [node_id, node] : lost) OnNodeDead(node);  // also sends the returns
  // Groups whose job finished while no GCS was watching (or before this one removed them).
  std::vector<std::string> removed;
  if (job_finished_) {
    absl::MutexLock lock(&mu_);
    removed = RemoveGroupsOfFinishedJobsLocked(job_finished_);
  }
  for (const auto& id : removed) kill_actors_(id);
  SendOutbox();
  return loaded;
}

absl::Status PlacementGroupManager::Create(const rpc::PlacementGroupInfo& incoming) {
  auto id = PlacementGroupId::FromBinary(incoming.placement_group_id());
  if (!id.ok()) return id.status();
  if (incoming.bundles_size() == 0) {
    return absl::InvalidArgumentError("a placement group needs at least one bundle");
  }
  for (int i = 0; i < incoming.bundles_size(); ++i) {
    const auto& resources = incoming.bundles(i).resources();
    // Also refuses shapes no node can hold (1.5 GPUs), which would stay PENDING for good.
    if (auto status = CheckResourceDemand(absl::StrCat("bundle ", i, " resources"),
                                          {resources.begin(), resources.end()});
        !status.ok()) {
      return status;
    }
  }
  auto checked = Demands(incoming);
  if (!checked.ok()) return checked.status();
  std::vector<ResourceSet> demands = *std::move(checked);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = groups_.find(*id); it != groups_.end()) {
      // A driver retrying a creation the GCS (or an earlier GCS) already took.
      const rpc::PlacementGroupInfo& known = it->second.info;
      bool same = known.name() == incoming.name() && known.strategy() == incoming.strategy() &&
                  known.detached() == incoming.detached() &&
                  known.bundles_size() == incoming.bundles_size();
      for (int i = 0; same && i < incoming.bundles_size(); ++i) {
        same = it->second.demands[i] == demands[i];
      }
      if (same) return absl::OkStatus();
      return absl::AlreadyExistsError(
          absl::StrCat("placement group ", id->Hex(), " already exists with other bundles"));
    }
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
    group.demands = std::move(demands);
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
  std::vector<rpc::LabelSelector> selectors;
  std::vector<NodeId> holding;  // nodes with surviving bundles (STRICT_SPREAD avoids them)
  for (const auto& bundle : group.info.bundles()) {
    if (bundle.node_id().empty()) {
      missing.push_back(bundle.index());
      demands.push_back(group.demands[bundle.index()]);
      selectors.push_back(bundle.label_selector());
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
      strategy == rpc::PlacementGroupInfo::STRICT_SPREAD ? holding : std::vector<NodeId>{},
      selectors);
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
    bundle->set_pending_reservation_id(LeaseId::FromRandom().Binary());
    outbox_.push_back({id, group.attempt, missing[i], node.raylet_address, bundle->node_id(),
                       bundle->pending_reservation_id()});
  }
  // Saved before the reservations go out, so a GCS restarted before their answers knows what
  // to return.
  PutBestEffort(store_, kTable, group.info.placement_group_id(), group.info.SerializeAsString());
}

void PlacementGroupManager::QueueReturnLocked(const std::string& raylet_address,
                                              const std::string& node_id,
                                              const std::string& reservation_id,
                                              std::optional<PlacementGroupId> removed_group) {
  if (dead_nodes_.contains(node_id)) return;  // the reservation died with its node
  returns_[raylet_address].push_back({node_id, reservation_id, removed_group});
}

void PlacementGroupManager::QueueReturnsOfRemovedLocked(const PlacementGroupId& id,
                                                        const Group& group) {
  for (const auto& bundle : group.info.bundles()) {
    // A pending ID is returned too: the raylet frees it if it was granted, or refuses it later.
    for (const std::string* reservation :
         {&bundle.reservation_id(), &bundle.pending_reservation_id()}) {
      if (!reservation->empty()) {
        QueueReturnLocked(bundle.raylet_address(), bundle.node_id(), *reservation, id);
      }
    }
  }
}

void PlacementGroupManager::OnReturned(const std::string& raylet_address,
                                       std::vector<Return> batch, absl::Status status) {
  bool send_more = false;
  {
    absl::MutexLock lock(&mu_);
    returning_.erase(raylet_address);
    if (!status.ok()) {
      TROUPE_LOG(Warning) << "returning " << batch.size() << " bundle reservations to "
                          << raylet_address << " failed (" << status
                          << "); trying again shortly";
      for (auto& entry : batch) {
        QueueReturnLocked(raylet_address, entry.node_id, entry.reservation_id,
                          entry.removed_group);
      }
      return;  // the next Tick() sends them again
    }
    absl::flat_hash_set<PlacementGroupId> changed;
    for (const auto& entry : batch) {
      if (!entry.removed_group) continue;
      auto it = groups_.find(*entry.removed_group);
      if (it == groups_.end()) continue;
      for (auto& bundle : *it->second.info.mutable_bundles()) {
        if (bundle.reservation_id() == entry.reservation_id) bundle.clear_reservation_id();
        if (bundle.pending_reservation_id() == entry.reservation_id) {
          bundle.clear_pending_reservation_id();
        }
      }
      changed.insert(*entry.removed_group);
    }
    for (const auto& id : changed) {
      const rpc::PlacementGroupInfo& info = groups_.at(id).info;
      PutBestEffort(store_, kTable, info.placement_group_id(), info.SerializeAsString());
    }
    auto more = returns_.find(raylet_address);
    send_more = more != returns_.end() && more->second.size() >= kMaxReturnBatch;
  }
  if (send_more) SendOutbox();
}

void PlacementGroupManager::SendOutbox(bool send_returns) {
  std::vector<Reservation> outbox;
  std::vector<std::pair<std::string, std::vector<Return>>> returns;  // one batch per raylet
  std::vector<std::map<std::string, double>> resources;  // of each reservation in outbox
  std::vector<std::pair<ReadyCallback, rpc::PlacementGroupInfo::State>> answers;
  {
    absl::MutexLock lock(&mu_);
    outbox.swap(outbox_);
    answers.swap(answers_);
    if (send_returns) {
      for (auto it = returns_.begin(); it != returns_.end();) {
        auto current = it++;
        if (!returning_.insert(current->first).second) continue;  // one batch in flight each
        std::vector<Return>& queued = current->second;
        if (queued.size() <= kMaxReturnBatch) {
          returns.emplace_back(current->first, std::move(queued));
          returns_.erase(current);
        } else {
          returns.emplace_back(current->first,
                               std::vector<Return>(std::make_move_iterator(queued.begin()),
                                                   std::make_move_iterator(queued.begin() +
                                                                           kMaxReturnBatch)));
          queued.erase(queued.begin(), queued.begin() + kMaxReturnBatch);
        }
      }
    }
    for (const auto& reservation : outbox) {
      const rpc::Bundle& bundle = groups_.at(reservation.id).info.bundles(reservation.bundle);
      resources.emplace_back(bundle.resources().begin(), bundle.resources().end());
    }
  }
  for (auto& [raylet, batch] : returns) {
    std::vector<std::string> ids;
    for (const auto& entry : batch) ids.push_back(entry.reservation_id);
    bundles_->ReturnBundles(raylet, ids,
                            [this, raylet = raylet, batch = std::move(batch)](absl::Status s) {
                              OnReturned(raylet, batch, std::move(s));
                            });
  }
  for (size_t i = 0; i < outbox.size(); ++i) {
    const Reservation reservation = outbox[i];
    bundles_->ReserveBundle(reservation.raylet_address, reservation.id, reservation.bundle,
                            resources[i], reservation.reservation_id,
                            [this, reservation](absl::StatusOr<std::string> id) {
                              OnReserved(reservation, std::move(id));
                            });
  }
  for (auto& [done, state] : answers) done(state);
}

void PlacementGroupManager::OnReserved(const Reservation& reservation,
                                       absl::StatusOr<std::string> reservation_id) {
  const bool granted = reservation_id.ok();
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(reservation.id);
    if (it == groups_.end() || it->second.attempt != reservation.attempt ||
        it->second.info.state() == rpc::PlacementGroupInfo::REMOVED) {
      if (granted) {
        QueueReturnLocked(reservation.raylet_address, reservation.node_id, *reservation_id);
      }
    } else {
      Group& group = it->second;
      rpc::Bundle* bundle = group.info.mutable_bundles(reservation.bundle);
      bundle->clear_pending_reservation_id();
      if (granted) {
        bundle->set_reservation_id(*reservation_id);
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
              QueueReturnLocked(b->raylet_address(), b->node_id(), b->reservation_id());
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
    RemoveLocked(*id, group);
  }
  kill_actors_(placement_group_id);
  SendOutbox(/*send_returns=*/false);  // batched: the next Tick() sends them
  return absl::OkStatus();
}

void PlacementGroupManager::RemoveLocked(const PlacementGroupId& id, Group& group) {
  // The record keeps the reservation IDs until their raylets confirm (OnReturned). A pending
  // one's grant also comes back stale and is returned again; the raylet ignores the second.
  QueueReturnsOfRemovedLocked(id, group);
  group.info.set_state(rpc::PlacementGroupInfo::REMOVED);
  SaveAndPublishLocked(group);
}

std::vector<std::string> PlacementGroupManager::RemoveGroupsOfFinishedJobsLocked(
    const std::function<bool(const std::string& job_id)>& finished) {
  std::vector<std::string> removed;
  for (auto& [id, group] : groups_) {
    if (group.info.state() == rpc::PlacementGroupInfo::REMOVED || group.info.detached() ||
        group.info.creator_job_id().empty() || !finished(group.info.creator_job_id())) {
      continue;
    }
    RemoveLocked(id, group);
    removed.push_back(group.info.placement_group_id());
  }
  return removed;
}

int PlacementGroupManager::OnJobFinished(const std::string& job_id) {
  std::vector<std::string> removed;
  {
    absl::MutexLock lock(&mu_);
    removed = RemoveGroupsOfFinishedJobsLocked(
        [&job_id](const std::string& creator) { return creator == job_id; });
  }
  for (const auto& id : removed) kill_actors_(id);
  SendOutbox(/*send_returns=*/false);  // batched: the next Tick() sends them
  return static_cast<int>(removed.size());
}

void PlacementGroupManager::OnNodeDead(const rpc::NodeInfo& node) {
  {
    absl::MutexLock lock(&mu_);
    dead_nodes_.insert(node.node_id());
    for (auto& [raylet, queued] : returns_) {
      queued.erase(std::remove_if(queued.begin(), queued.end(),
                                  [&](const Return& r) { return r.node_id == node.node_id(); }),
                   queued.end());
    }
    absl::erase_if(returns_, [](const auto& entry) { return entry.second.empty(); });
    for (auto& [id, group] : groups_) {
      if (group.info.state() == rpc::PlacementGroupInfo::REMOVED) {
        bool held = false;  // reservations not confirmed returned died with the node
        for (auto& bundle : *group.info.mutable_bundles()) {
          if (bundle.node_id() == node.node_id() &&
              (!bundle.reservation_id().empty() || !bundle.pending_reservation_id().empty())) {
            bundle.clear_reservation_id();
            bundle.clear_pending_reservation_id();
            held = true;
          }
        }
        if (held) {
          PutBestEffort(store_, kTable, group.info.placement_group_id(),
                        group.info.SerializeAsString());
        }
        continue;
      }
      bool lost = false;
      for (auto& bundle : *group.info.mutable_bundles()) {
        if (bundle.node_id() == node.node_id()) {
          bundle.clear_node_id();
          bundle.clear_raylet_address();
          bundle.clear_reservation_id();
          bundle.clear_pending_reservation_id();
          lost = true;
        }
      }
      if (!lost) continue;
      if (group.reserving) {
        // The attempt in flight is abandoned (its late grants are returned as stale): bundles it
        // had not reserved yet are placed again.
        for (int index : group.attempt_bundles) {
          rpc::Bundle* bundle = group.info.mutable_bundles(index);
          if (bundle->reservation_id().empty()) {
            if (!bundle->pending_reservation_id().empty()) {
              // Returned now too, so no restart between here and its late grant leaks it.
              QueueReturnLocked(bundle->raylet_address(), bundle->node_id(),
                                bundle->pending_reservation_id());
              bundle->clear_pending_reservation_id();
            }
            bundle->clear_node_id();
            bundle->clear_raylet_address();
          }
        }
      }
      if (group.info.strategy() == rpc::PlacementGroupInfo::STRICT_PACK) {
        // Everything must move together: give back what survived, then place all anew.
        for (auto& bundle : *group.info.mutable_bundles()) {
          if (!bundle.reservation_id().empty()) {
            QueueReturnLocked(bundle.raylet_address(), bundle.node_id(), bundle.reservation_id());
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
      auto expired = std::stable_partition(group.waiters.begin(), group.waiters.end(),
                                           [now](const Waiter& w) { return w.deadline > now; });
      for (auto w = expired; w != group.waiters.end(); ++w) {
        answers_.emplace_back(std::move(w->done), group.info.state());
      }
      group.waiters.erase(expired, group.waiters.end());
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
    if (it == groups_.end()) {
      return absl::NotFoundError(absl::StrCat("no placement group ", id->Hex()));
    }
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

void PlacementGroupManager::WaitUntilReady(const std::string& placement_group_id,
                                           absl::Time deadline, ReadyCallback done) {
  auto id = PlacementGroupId::FromBinary(placement_group_id);
  if (!id.ok()) return done(id.status());
  absl::StatusOr<rpc::PlacementGroupInfo::State> answer;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(*id);
    const absl::Time now = clock_->Now();
    if (shut_down_) {
      answer = absl::UnavailableError("the GCS is shutting down");
    } else if (it == groups_.end()) {
      answer = absl::NotFoundError(absl::StrCat("no placement group ", id->Hex()));
    } else if (it->second.info.state() == rpc::PlacementGroupInfo::CREATED ||
               it->second.info.state() == rpc::PlacementGroupInfo::REMOVED || deadline <= now) {
      answer = it->second.info.state();
    } else {
      it->second.waiters.push_back({std::min(deadline, now + kMaxWait), std::move(done)});
      return;
    }
  }
  done(std::move(answer));
}

void PlacementGroupManager::Shutdown() {
  std::vector<ReadyCallback> waiting;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, group] : groups_) {
      for (auto& waiter : group.waiters) waiting.push_back(std::move(waiter.done));
      group.waiters.clear();
    }
  }
  for (auto& done : waiting) done(absl::UnavailableError("the GCS is shutting down"));
}

size_t PlacementGroupManager::num_waiters() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, group] : groups_) n += group.waiters.size();
  return n;
}

std::vector<rpc::PlacementGroupInfo> PlacementGroupManager::GetAll() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::PlacementGroupInfo> all;
  for (const auto& [id, group] : groups_) all.push_back(group.info);
  return all;
}

}  // namespace troupe
