#include "src/gcs/actor_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/common/logging.h"
#include "src/common/resources.h"
#include "src/scheduling/scheduling_policy.h"

namespace troupe {
namespace {
constexpr char kTable[] = "ACTOR";  // ActorInfo by actor ID
// The creation task by actor ID, written once at registration: a restarted GCS needs it to place
// actors that are pending or restarting.
constexpr char kTaskTable[] = "ACTOR_TASK";
constexpr char kKillTable[] = "ACTOR_KILL";  // PendingActorKill by actor ID
constexpr absl::Duration kRetryDelay = absl::Seconds(1);
}  // namespace

ActorManager::ActorManager(ActorManagerDeps deps, ActorManagerOptions options)
    : store_(deps.store),
      publisher_(deps.publisher),
      nodes_(deps.nodes),
      clock_(deps.clock),
      leases_(deps.leases),
      workers_(deps.workers),
      options_(options) {}

void ActorManager::SetStateLocked(Actor& actor, rpc::ActorInfo::State state) {
  const bool dies = state == rpc::ActorInfo::DEAD && actor.info.state() != rpc::ActorInfo::DEAD;
  actor.info.set_state(state);
  if (dies) {
    actor.info.set_end_time_ms(absl::ToUnixMillis(clock_->Now()));
    TROUPE_LOG(Info) << "actor " << BytesToHex(actor.info.actor_id()).substr(0, 8) << " ("
                     << actor.info.class_name() << ") is DEAD: " << actor.info.death_cause();
    if (actor.kill_requested || actor.exiting) {
      store_->AsyncDelete(kKillTable, actor.info.actor_id(), nullptr);
    }
  }
  PutBestEffort(store_, kTable, actor.info.actor_id(), actor.info.SerializeAsString());
  rpc::PubMessage message;
  message.set_channel(rpc::ACTOR_CHANNEL);
  message.set_key(actor.info.actor_id());
  *message.mutable_actor() = actor.info;
  publisher_->Publish(std::move(message));
  if (dies) BuryLocked(*ActorId::FromBinary(actor.info.actor_id()), actor);
}

void ActorManager::BuryLocked(const ActorId& id, Actor& actor) {
  // Its worker is gone or going (killed, returned with its job): drop the client to it. Deaths
  // through OnActorFailedLocked told the listener already, and cleared the address.
  if (worker_gone_ && !actor.info.worker_address().empty()) {
    worker_gone_(actor.info.worker_address());
  }
  // A dead actor is never placed again: its creation task (arguments included) is dead weight.
  std::string task_id = std::move(*actor.creation_task.mutable_task_id());
  actor.creation_task = rpc::TaskSpec();
  actor.creation_task.set_task_id(std::move(task_id));
  store_->AsyncDelete(kTaskTable, actor.info.actor_id(), nullptr);
  dead_.push_back(id);  // forgotten by a later Tick(): callers may still hold `actor`
}

void ActorManager::ForgetOldDeadLocked() {
  while (dead_.size() > options_.max_dead_actors) {
    const ActorId id = dead_.front();
    dead_.pop_front();
    auto it = actors_.find(id);
    if (it == actors_.end()) continue;
    // A worker whose exit is still to be reported (its constructor threw) finds nothing.
    if (auto w = by_worker_.find(it->second.info.worker_id());
        w != by_worker_.end() && w->second == id) {
      by_worker_.erase(w);
    }
    store_->AsyncDelete(kTable, id.Binary(), nullptr);
    actors_.erase(it);
  }
}

void ActorManager::SaveKillLocked(const Actor& actor) {
  if (!actor.kill_requested && !actor.exiting) {
    store_->AsyncDelete(kKillTable, actor.info.actor_id(), nullptr);
    return;
  }
  rpc::PendingActorKill kill;
  kill.set_no_restart(actor.no_restart);
  kill.set_exiting(actor.exiting);
  kill.set_death_cause(actor.death_cause);
  kill.set_kill_requested(actor.kill_requested);
  PutBestEffort(store_, kKillTable, actor.info.actor_id(), kill.SerializeAsString());
}

absl::StatusOr<int> ActorManager::Initialize() {
  auto rows = ScanTableSync(store_, kTable);
  if (!rows.ok()) return rows.status();
  auto tasks = ScanTableSync(store_, kTaskTable);
  if (!tasks.ok()) return tasks.status();
  auto kills = ScanTableSync(store_, kKillTable);
  if (!kills.ok()) return kills.status();
  absl::flat_hash_map<std::string, rpc::NodeInfo> dead_nodes;  // not alive in the node table
  absl::flat_hash_map<std::string, bool> alive_nodes;
  for (const auto& node : nodes_->GetAllNodes()) {
    if (node.state() == rpc::NodeInfo::ALIVE) {
      alive_nodes[node.node_id()] = true;
    } else {
      dead_nodes[node.node_id()] = node;
    }
  }
  absl::flat_hash_map<std::string, rpc::NodeInfo> lost_nodes;  // of ALIVE actors
  std::vector<std::pair<std::string, std::string>> to_return;  // (raylet, lease)
  int loaded = 0;
  std::vector<std::pair<int64_t, ActorId>> loaded_dead;  // (end_time_ms, ID)
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, value] : *rows) {
      rpc::ActorInfo info;
      auto id = ActorId::FromBinary(key);
      if (!id.ok() || !info.ParseFromString(value)) {
        TROUPE_LOG(Error) << "skipping a corrupt row in the " << kTable << " table";
        continue;
      }
      ++loaded;
      Actor& actor = actors_[*id];
      actor.info = std::move(info);
      const auto& wanted = actor.info.required_resources();
      if (auto demand = ResourceSet::FromMap({wanted.begin(), wanted.end()}); demand.ok()) {
        actor.demand = *std::move(demand);
      }
      const auto state = actor.info.state();
      auto task = tasks->find(key);
      if (state == rpc::ActorInfo::DEAD) {
        // Only the task ID is kept (an earlier version kept the whole task, and its row).
        rpc::TaskSpec spec;
        if (task != tasks->end() && spec.ParseFromString(task->second)) {
          actor.creation_task.set_task_id(spec.task_id());
          store_->AsyncDelete(kTaskTable, key, nullptr);
        }
        loaded_dead.emplace_back(actor.info.end_time_ms(), *id);
        continue;
      }
      if (task != tasks->end()) (void)actor.creation_task.ParseFromString(task->second);
      if (auto kill = kills->find(key); kill != kills->end()) {
        rpc::PendingActorKill pending;
        if (pending.ParseFromString(kill->second)) {
          actor.kill_requested = pending.kill_requested();
          actor.no_restart = pending.no_restart();
          actor.exiting = pending.exiting();
          actor.death_cause = pending.death_cause();
        }
      }
      const std::string& node_id = actor.info.node_id();
      if (state == rpc::ActorInfo::ALIVE) {
        // Its worker's exit report still finds it; on a node that died meanwhile it fails below.
        by_worker_[actor.info.worker_id()] = *id;
        if (!alive_nodes.contains(node_id) && !lost_nodes.contains(node_id)) {
          rpc::NodeInfo& node = lost_nodes[node_id];
          if (auto it = dead_nodes.find(node_id); it != dead_nodes.end()) {
            node = it->second;
          } else {
            node.set_node_id(node_id);
            node.set_death_reason("unknown to the restarted GCS");
          }
        }
        continue;
      }
      // PENDING_CREATION / RESTARTING: the earlier GCS may have leased a worker and pushed the
      // creation task without recording the result; that worker is stopped, and the actor is
      // placed again from scratch.
      if (!actor.info.lease_id().empty() && alive_nodes.contains(node_id)) {
        to_return.emplace_back(actor.info.raylet_address(), actor.info.lease_id());
      }
      actor.info.clear_worker_id();
      actor.info.clear_worker_address();
      actor.info.clear_lease_id();
      actor.info.clear_pid();
      if (!tasks->contains(key)) {
        actor.info.set_death_cause("its creation task was not saved before the GCS restarted");
        SetStateLocked(actor, rpc::ActorInfo::DEAD);
        continue;
      }
      if (actor.kill_requested && actor.no_restart) {
        actor.info.set_death_cause(actor.death_cause);
        SetStateLocked(actor, rpc::ActorInfo::DEAD);
        continue;
      }
      actor.retry_at = absl::InfinitePast();  // Tick() places it
    }
    // Actors whose node died while no GCS was watching fail as on a node death.
    for (const auto& [node_id, node] : lost_nodes) OnNodeDeadLocked(node);
    // The loaded dead died before those that died just now, oldest first.
    std::sort(loaded_dead.begin(), loaded_dead.end());
    for (auto it = loaded_dead.rbegin(); it != loaded_dead.rend(); ++it) {
      dead_.push_front(it->second);
    }
  }
  for (const auto& [raylet, lease] : to_return) {
    leases_->ReturnWorker(raylet, lease, /*disconnect=*/true);
  }
  SendOutbox();
  return loaded;
}

absl::Status ActorManager::DoRegisterActor(const rpc::RegisterActorRequest& request) {
  auto id = ActorId::FromBinary(request.actor().actor_id());
  if (!id.ok()) return id.status();
  // Client data: refuse what scheduling could not handle, never crash on it.
  const auto& wanted = request.actor().required_resources();
  auto demand = ResourceSet::FromMap({wanted.begin(), wanted.end()});
  if (!demand.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor.required_resources: ", demand.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (auto it = actors_.find(*id); it != actors_.end()) {
    // A driver retrying a registration the GCS (or an earlier GCS) already took.
    const rpc::ActorInfo& known = it->second.info;
    if (known.job_id() == request.actor().job_id() && known.name() == request.actor().name() &&
        known.namespace_name() == request.actor().namespace_name() &&
        known.class_name() == request.actor().class_name() &&
        it->second.creation_task.task_id() == request.creation_task().task_id()) {
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(
        absl::StrCat("actor ", id->Hex(), " is already registered with another spec"));
  }
  const rpc::ActorInfo& incoming = request.actor();
  if (!incoming.name().empty()) {
    for (const auto& [other_id, other] : actors_) {
      if (other.info.name() == incoming.name() &&
          other.info.namespace_name() == incoming.namespace_name() &&
          other.info.state() != rpc::ActorInfo::DEAD) {
        return absl::AlreadyExistsError(absl::StrCat(
            "an actor named '", incoming.name(), "' already exists in namespace '",
            incoming.namespace_name(), "' (pick another name, or troupe::GetActor it)"));
      }
    }
  }
  Actor& actor = actors_[*id];
  actor.info = incoming;
  actor.info.set_state(rpc::ActorInfo::PENDING_CREATION);
  actor.info.set_start_time_ms(absl::ToUnixMillis(clock_->Now()));
  actor.creation_task = request.creation_task();
  // Shown by the state API beside the required resources.
  *actor.info.mutable_label_selector() = actor.creation_task.strategy().label_selector();
  actor.demand = *std::move(demand);
  PutBestEffort(store_, kTaskTable, actor.info.actor_id(), actor.creation_task.SerializeAsString());
  SetStateLocked(actor, rpc::ActorInfo::PENDING_CREATION);
  ScheduleLocked(actor);
  return absl::OkStatus();
}

absl::Status ActorManager::RegisterActor(const rpc::RegisterActorRequest& request) {
  absl::Status status = DoRegisterActor(request);
  SendOutbox();
  return status;
}

void ActorManager::ScheduleLocked(Actor& actor) {
  const ActorId actor_id = *ActorId::FromBinary(actor.info.actor_id());
  if (!actor.info.placement_group_id().empty()) {
    // In a placement group: the bundle's node, once the group is placed.
    auto bundle = locate_bundle_(actor.info.placement_group_id(), actor.info.bundle_index());
    if (!bundle.ok()) {
      if (bundle.status().code() == absl::StatusCode::kNotFound) {
        actor.info.set_death_cause(std::string(bundle.status().message()));
        SetStateLocked(actor, rpc::ActorInfo::DEAD);
        return;
      }
      actor.retry_at = clock_->Now() + absl::Milliseconds(100);
      actor.info.set_pending_reason(std::string(bundle.status().message()));
      return;
    }
    actor.scheduling = true;
    outbox_.push_back({actor_id, ++actor.attempt, bundle->first, bundle->second});
    return;
  }
  std::vector<NodeView> views = NodeViewsFromUsage(nodes_->GetAllResourceUsage());
  SchedulingDecision decision = ChooseNode(actor.demand, actor.creation_task.strategy(),
                                           NodeId::Nil(), views, &spread_counter_);
  switch (decision.kind) {
    case SchedulingDecision::Kind::kLocal:
    case SchedulingDecision::Kind::kRemote: {
      actor.scheduling = true;
      outbox_.push_back({actor_id, ++actor.attempt, decision.raylet_address});
      return;
    }
    case SchedulingDecision::Kind::kInfeasible:
      actor.retry_at = clock_->Now() + kRetryDelay;
      if (actor.info.pending_reason() != decision.reason) {
        actor.info.set_pending_reason(decision.reason);
        SetStateLocked(actor, actor.info.state());
      }
      return;
    case SchedulingDecision::Kind::kFailed:
      actor.info.set_death_cause(absl::StrCat("cannot be scheduled: ", decision.reason));
      SetStateLocked(actor, rpc::ActorInfo::DEAD);
      return;
  }
}

void ActorManager::SendOutbox() {
  std::vector<LeaseToSend> outbox;
  {
    absl::MutexLock lock(&mu_);
    outbox.swap(outbox_);
  }
  for (const auto& lease : outbox) {
    RequestLease(lease.id, lease.attempt, lease.raylet_address, /*grant_or_reject=*/false,
                 lease.bundle_index);
  }
}

void ActorManager::RequestLease(const ActorId& id, uint64_t attempt,
                                const std::string& raylet_address, bool grant_or_reject,
                                int bundle_index) {
  rpc::RequestWorkerLeaseRequest request;
  {
    absl::MutexLock lock(&mu_);
    auto it = actors_.find(id);
    // Died between ScheduleLocked and now: its creation task is gone.
    if (it == actors_.end() || it->second.info.state() == rpc::ActorInfo::DEAD) return;
    const rpc::TaskSpec& creation = it->second.creation_task;
    rpc::TaskSpec* spec = request.mutable_resource_spec();
    spec->set_job_id(creation.job_id());
    spec->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
    *spec->mutable_required_resources() = creation.required_resources();
    *spec->mutable_strategy() = creation.strategy();
    spec->set_function_name(creation.function_name());
    spec->set_detached_actor(it->second.info.detached());
    if (!it->second.info.placement_group_id().empty()) {
      spec->set_placement_group_id(it->second.info.placement_group_id());
      spec->set_bundle_index(bundle_index);
      spec->clear_strategy();
    }
  }
  request.set_grant_or_reject(grant_or_reject);
  leases_->RequestWorkerLease(
      raylet_address, request,
      [this, id, attempt, raylet_address](absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
        OnLeaseReply(id, attempt, raylet_address, std::move(reply));
      });
}

void ActorManager::OnLeaseReply(const ActorId& id, uint64_t attempt,
                                const std::string& raylet_address,
                                absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
  if (reply.ok() && !reply->retry_at_raylet_address().empty()) {
    return RequestLease(id, attempt, reply->retry_at_raylet_address(), true);
  }
  const bool granted = reply.ok() && !reply->lease_id().empty();
  bool current = false;
  rpc::PushTaskRequest push;
  {
    absl::MutexLock lock(&mu_);
    auto it = actors_.find(id);
    current = it != actors_.end() && it->second.attempt == attempt &&
              it->second.info.state() != rpc::ActorInfo::DEAD;
    if (current) {
      Actor& actor = it->second;
      if (!granted) return OnLeaseRefusedLocked(actor, reply);
      actor.info.set_node_id(reply->node_id());
      actor.info.set_worker_id(reply->worker_id());
      actor.info.set_worker_address(reply->worker_address());
      actor.info.set_pid(reply->worker_pid());
      actor.info.set_raylet_address(raylet_address);
      actor.info.set_lease_id(reply->lease_id());
      actor.info.clear_pending_reason();
      by_worker_[reply->worker_id()] = id;
      // Saved (not published) so a GCS restarted before the creation finishes can stop this
      // worker instead of leaking it.
      PutBestEffort(store_, kTable, actor.info.actor_id(), actor.info.SerializeAsString());
      *push.mutable_task() = actor.creation_task;
      push.mutable_task()->set_actor_num_restarts(static_cast<int32_t>(actor.info.num_restarts()));
      if (!actor.info.placement_group_id().empty()) {
        // The actor's runtime context names its group and bundle (GetRuntimeContext).
        push.mutable_task()->set_placement_group_id(actor.info.placement_group_id());
        push.mutable_task()->set_bundle_index(reply->bundle_index());
      }
      for (int gpu : reply->gpu_ids()) push.add_gpu_ids(gpu);
    } else if (!granted) {
      return;
    }
  }
  if (current) {
    workers_->PushTask(reply->worker_address(), std::move(push),
                       [this, id, attempt](absl::StatusOr<rpc::PushTaskReply> r) {
                         OnCreated(id, attempt, std::move(r));
                       });
  } else {  // a stale attempt's lease, or the actor died meanwhile: nobody will use it
    leases_->ReturnWorker(raylet_address, reply->lease_id(), /*disconnect=*/false);
  }
}

void ActorManager::OnLeaseRefusedLocked(Actor& actor,
                                        const absl::StatusOr<rpc::RequestWorkerLeaseReply>& reply) {
  actor.scheduling = false;
  if (reply.ok() && reply->rejected() && !reply->failure_message().empty()) {
    actor.info.set_death_cause(absl::StrCat("cannot be scheduled: ", reply->failure_message()));
    SetStateLocked(actor, rpc::ActorInfo::DEAD);
    return;
  }
  if (reply.ok() && reply->infeasible()) actor.info.set_pending_reason(reply->failure_message());
  actor.retry_at =
      clock_->Now() + (reply.ok() && reply->rejected() ? absl::Milliseconds(100) : kRetryDelay);
}

void ActorManager::OnCreated(const ActorId& id, uint64_t attempt,
                             absl::StatusOr<rpc::PushTaskReply> reply) {
  std::string kill_raylet, kill_lease;  // a worker to stop, once the lock is released
  {
    absl::MutexLock lock(&mu_);
    auto it = actors_.find(id);
    if (it == actors_.end() || it->second.attempt != attempt) return;
    Actor& actor = it->second;
    actor.scheduling = false;
    if (actor.info.state() == rpc::ActorInfo::DEAD) return;
    if (!reply.ok()) return;  // the worker died: its exit report restarts or buries the actor
    const rpc::ReturnObject* result = reply->returns_size() > 0 ? &reply->returns(0) : nullptr;
    if (result != nullptr && result->is_application_error()) {
      actor.no_restart = true;
      actor.info.set_death_cause(absl::StrCat("the constructor threw ", result->exception_type(),
                                              ": ", result->error_message()));
      SetStateLocked(actor, rpc::ActorInfo::DEAD);
      kill_raylet = actor.info.raylet_address();
      kill_lease = actor.info.lease_id();
    } else if (actor.kill_requested) {
      kill_raylet = actor.info.raylet_address();
      kill_lease = actor.info.lease_id();
    } else {
      SetStateLocked(actor, rpc::ActorInfo::ALIVE);
    }
  }
  if (!kill_lease.empty()) KillWorker(id, kill_raylet, kill_lease);
}

void ActorManager::OnActorFailedLocked(Actor& actor, const std::string& cause) {
  by_worker_.erase(actor.info.worker_id());
  if (worker_gone_ && !actor.info.worker_address().empty()) {
    worker_gone_(actor.info.worker_address());
  }
  actor.info.clear_worker_address();
  actor.info.clear_lease_id();
  const bool restarts_left =
      actor.info.max_restarts() < 0 || actor.info.num_restarts() < actor.info.max_restarts();
  if (actor.no_restart || actor.exiting || !restarts_left) {
    actor.info.set_death_cause(restarts_left || actor.no_restart || actor.exiting
                                   ? cause
                                   : absl::StrCat(cause, " (no restarts left: max_restarts=",
                                                  actor.info.max_restarts(), ")"));
    SetStateLocked(actor, rpc::ActorInfo::DEAD);
    return;
  }
  actor.info.set_num_restarts(actor.info.num_restarts() + 1);
  actor.info.set_death_cause(cause);  // why it is restarting
  if (actor.kill_requested) {
    actor.kill_requested = false;
    actor.death_cause.clear();
    SaveKillLocked(actor);
  }
  SetStateLocked(actor, rpc::ActorInfo::RESTARTING);
  ScheduleLocked(actor);
}

void ActorManager::OnWorkerExit(const std::string& worker_id, const std::string& how,
                                const std::string& node_id) {
  rpc::PubMessage message;
  message.set_channel(rpc::WORKER_CHANNEL);
  message.set_key(worker_id);
  message.mutable_worker_exit()->set_worker_id(worker_id);
  message.mutable_worker_exit()->set_node_id(node_id);
  message.mutable_worker_exit()->set_how(how);
  publisher_->Publish(std::move(message));
  DoWorkerExit(worker_id, how);
  SendOutbox();
}

void ActorManager::DoWorkerExit(const std::string& worker_id, const std::string& how) {
  absl::MutexLock lock(&mu_);
  auto it = by_worker_.find(worker_id);
  if (it == by_worker_.end()) return;
  auto found = actors_.find(it->second);
  by_worker_.erase(it);
  if (found == actors_.end() || found->second.info.state() == rpc::ActorInfo::DEAD) return;
  Actor& actor = found->second;
  std::string cause;
  if (actor.exiting) {
    cause = "the actor exited with troupe::ExitActor()";
  } else if (actor.kill_requested) {
    cause = actor.death_cause.empty() ? "killed by troupe::Kill" : actor.death_cause;
  } else {
    cause = absl::StrCat("the actor's process (pid ", actor.info.pid(), ") ", how);
  }
  OnActorFailedLocked(actor, cause);
}

absl::Status ActorManager::ReportWorkerExit(const std::string& worker_id, const std::string& how,
                                            const std::string& node_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = by_worker_.find(worker_id);
    auto found = it == by_worker_.end() ? actors_.end() : actors_.find(it->second);
    if (found != actors_.end() && found->second.info.node_id() != node_id) {
      return absl::PermissionDeniedError(absl::StrCat(
          "worker ", BytesToHex(worker_id).substr(0, 8), " runs actor ", it->second.ShortHex(),
          " on node ", BytesToHex(found->second.info.node_id()).substr(0, 8),
          "; only that node's raylet reports its exit, not node ",
          node_id.empty() ? std::string("(none given)") : BytesToHex(node_id).substr(0, 8)));
    }
  }
  OnWorkerExit(worker_id, how, node_id);
  return absl::OkStatus();
}

absl::Status ActorManager::OnActorExit(const std::string& actor_id, const std::string& worker_id) {
  auto id = ActorId::FromBinary(actor_id);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  auto it = actors_.find(*id);
  if (it == actors_.end()) return absl::NotFoundError(absl::StrCat("no actor ", id->Hex()));
  Actor& actor = it->second;
  if (actor.info.state() == rpc::ActorInfo::DEAD) return absl::OkStatus();
  if (actor.info.worker_id().empty() || actor.info.worker_id() != worker_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "actor ", id->ShortHex(), " is not running in worker ", BytesToHex(worker_id).substr(0, 8),
        ": only the worker running an actor can report that it exits (troupe::ExitActor)"));
  }
  actor.exiting = true;
  SaveKillLocked(actor);
  return absl::OkStatus();
}

void ActorManager::OnNodeDead(const rpc::NodeInfo& node) {
  {
    absl::MutexLock lock(&mu_);
    OnNodeDeadLocked(node);
  }
  SendOutbox();
}

void ActorManager::OnNodeDeadLocked(const rpc::NodeInfo& node) {
  for (auto& [id, actor] : actors_) {
    if (actor.info.node_id() == node.node_id() && actor.info.state() != rpc::ActorInfo::DEAD &&
        !actor.info.worker_id().empty()) {
      const std::string node_died =
          absl::StrCat("its node ", BytesToHex(node.node_id()).substr(0, 8), " died (",
                       node.death_reason(), ")");
      // A kill that its raylet never answered is finished by the node's death.
      OnActorFailedLocked(actor, actor.kill_requested && !actor.death_cause.empty()
                                     ? absl::StrCat(actor.death_cause, "; ", node_died)
                                     : node_died);
    }
  }
}

void ActorManager::OnJobFinished(const std::string& job_id) {
  std::vector<std::pair<std::string, std::string>> to_return;  // (raylet, lease)
  {
    absl::MutexLock lock(&mu_);
    OnJobFinishedLocked(job_id, &to_return);
  }
  for (const auto& [raylet, lease] : to_return) {
    leases_->ReturnWorker(raylet, lease, /*disconnect=*/true);
  }
}

void ActorManager::OnJobFinishedLocked(
    const std::string& job_id, std::vector<std::pair<std::string, std::string>>* to_return) {
  for (auto& [id, actor] : actors_) {
    if (actor.info.job_id() != job_id || actor.info.detached() ||
        actor.info.state() == rpc::ActorInfo::DEAD) {
      continue;
    }
    actor.no_restart = true;
    actor.kill_requested = true;
    actor.death_cause = "its job finished (the actor is not detached)";
    if (!actor.info.lease_id().empty()) {
      to_return->emplace_back(actor.info.raylet_address(), actor.info.lease_id());
    }
    by_worker_.erase(actor.info.worker_id());
    actor.info.set_death_cause(actor.death_cause);
    SetStateLocked(actor, rpc::ActorInfo::DEAD);
  }
}

void ActorManager::KillActorsInPlacementGroup(const std::string& placement_group_id) {
  std::vector<ActorId> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, actor] : actors_) {
      if (actor.info.placement_group_id() == placement_group_id &&
          actor.info.state() != rpc::ActorInfo::DEAD) {
        ids.push_back(id);
      }
    }
  }
  for (const auto& id : ids) {
    {
      absl::MutexLock lock(&mu_);
      auto it = actors_.find(id);
      if (it == actors_.end()) continue;
      it->second.death_cause = "its placement group was removed";
    }
    (void)KillActor(id.Binary(), /*no_restart=*/true);
  }
}

absl::Status ActorManager::KillActor(const std::string& actor_id, bool no_restart) {
  auto id = ActorId::FromBinary(actor_id);
  if (!id.ok()) return id.status();
  std::string raylet, lease;
  {
    absl::MutexLock lock(&mu_);
    auto it = actors_.find(*id);
    if (it == actors_.end()) return absl::NotFoundError(absl::StrCat("no actor ", id->Hex()));
    Actor& actor = it->second;
    if (actor.info.state() == rpc::ActorInfo::DEAD) return absl::OkStatus();
    actor.kill_requested = true;
    actor.no_restart = no_restart;
    if (actor.death_cause.empty()) {  // a cause set by the caller (group removal) stays
      actor.death_cause =
          no_restart ? "killed by troupe::Kill" : "killed by troupe::Kill (restarting)";
    }
    SaveKillLocked(actor);
    if (actor.info.lease_id().empty()) {
      if (no_restart) {
        actor.info.set_death_cause(actor.death_cause);
        SetStateLocked(actor, rpc::ActorInfo::DEAD);
      }
      return absl::OkStatus();
    }
    raylet = actor.info.raylet_address();
    lease = actor.info.lease_id();
  }
  // Recorded. The caller waits for the raylet's answer — then the process is gone when Kill
  // returns, and the caller's next call reaches the restarted actor or fails — but at most
  // kKillAnswerWait: a cut-off raylet would hold it (and this thread) for the call's 10 s
  // deadline. The worker's exit report finishes the job (restart, or DEAD with the cause).
  auto answered = std::make_shared<absl::Notification>();
  KillWorker(*id, raylet, lease, [answered] { answered->Notify(); });
  answered->WaitForNotificationWithTimeout(kKillAnswerWait);
  return absl::OkStatus();
}

void ActorManager::KillWorker(const ActorId& id, const std::string& raylet,
                              const std::string& lease, std::function<void()> answered) {
  leases_->KillLeasedWorker(raylet, lease, [id, raylet, answered](absl::Status killed) {
    if (killed.ok()) {
      // Stopped: nothing to log.
    } else if (killed.code() == absl::StatusCode::kUnavailable ||
               killed.code() == absl::StatusCode::kDeadlineExceeded) {
      // The actor's node cannot be reached (it died and is not declared dead yet, or a
      // partition): the kill stands, and the node's death finishes it with the kill's cause.
      TROUPE_LOG(Warning) << "actor " << id.ShortHex() << ": its raylet " << raylet
                          << " did not answer the kill (" << killed.message()
                          << "); it dies with its node";
    } else {  // e.g. the lease ended meanwhile: the worker's exit report is on its way
      TROUPE_LOG(Warning) << "actor " << id.ShortHex() << ": its raylet " << raylet
                          << " refused the kill (" << killed.message() << ")";
    }
    if (answered) answered();
  });
}

absl::StatusOr<rpc::ActorInfo> ActorManager::GetActor(
    const rpc::GetActorInfoRequest& request) const {
  absl::MutexLock lock(&mu_);
  if (!request.actor_id().empty()) {
    auto id = ActorId::FromBinary(request.actor_id());
    if (!id.ok()) return id.status();
    auto it = actors_.find(*id);
    if (it == actors_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no actor ", id->Hex(), " (dead actors are forgotten beyond the last ",
                       options_.max_dead_actors, ": troupe start --max-dead-actors)"));
    }
    return it->second.info;
  }
  for (const auto& [id, actor] : actors_) {
    if (actor.info.name() == request.name() &&
        actor.info.namespace_name() == request.namespace_name() &&
        actor.info.state() != rpc::ActorInfo::DEAD) {
      return actor.info;
    }
  }
  return absl::NotFoundError(absl::StrCat("no live actor named '", request.name(),
                                          "' in namespace '", request.namespace_name(), "'"));
}

std::vector<rpc::ActorInfo> ActorManager::GetAllActors() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::ActorInfo> all;
  for (const auto& [id, actor] : actors_) all.push_back(actor.info);
  return all;
}

std::vector<rpc::ActorInfo> ActorManager::GetActors(
    const google::protobuf::RepeatedPtrField<std::string>& ids) const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::ActorInfo> found;
  found.reserve(ids.size());
  for (const std::string& binary : ids) {
    auto id = ActorId::FromBinary(binary);
    if (!id.ok()) continue;
    if (auto it = actors_.find(*id); it != actors_.end()) {
      found.push_back(it->second.info);
      continue;
    }
    // Handles are made only after registration: the actor died and was forgotten, or never was.
    rpc::ActorInfo& unknown = found.emplace_back();
    unknown.set_actor_id(binary);
    unknown.set_state(rpc::ActorInfo::DEAD);
    unknown.set_death_cause(absl::StrCat("the GCS has no record of actor ", id->Hex(),
                                         ": it died and was forgotten (the GCS remembers the last ",
                                         options_.max_dead_actors,
                                         " dead actors: troupe start --max-dead-actors), or it "
                                         "was never created on this cluster"));
  }
  return found;
}

void ActorManager::Tick() {
  {
    absl::MutexLock lock(&mu_);
    ForgetOldDeadLocked();
    const absl::Time now = clock_->Now();
    for (auto& [id, actor] : actors_) {
      const auto state = actor.info.state();
      if ((state == rpc::ActorInfo::PENDING_CREATION || state == rpc::ActorInfo::RESTARTING) &&
          !actor.scheduling && actor.retry_at <= now) {
        ScheduleLocked(actor);
      }
    }
  }
  SendOutbox();
}

}  // namespace troupe
