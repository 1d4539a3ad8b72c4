#include "src/raylet/lease_manager.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/logging.h"

namespace troupe {
namespace {

// Tries to start a lease's worker before the lease fails.
constexpr int kWorkerStartAttempts = 3;
// Job lookups failing with a transient error are retried this often, this far apart.
constexpr int kJobLookupRetries = 5;
constexpr absl::Duration kJobLookupRetryDelay = absl::Milliseconds(200);
// How long an infeasible demand stays in InfeasibleDemands() after it was last asked for.
constexpr absl::Duration kInfeasibleDemandMemory = absl::Seconds(10);

rpc::RequestWorkerLeaseReply Rejected(const std::string& message) {
  rpc::RequestWorkerLeaseReply reply;
  reply.set_rejected(true);
  reply.set_failure_message(message);
  return reply;
}

}  // namespace

LeaseManager::LeaseManager(NodeId local_node, const ResourceSet& total, WorkerLauncher* launcher,
                           JobLookup lookup_job, const Clock* clock,
                           std::map<std::string, std::string> local_labels)
    : local_node_(local_node),
      local_labels_(std::move(local_labels)),
      launcher_(launcher),
      lookup_job_(std::move(lookup_job)),
      clock_(clock),
      resources_(total),
      lookup_thread_([this] { LookupLoop(); }) {}

LeaseManager::~LeaseManager() {
  {
    absl::MutexLock lock(&lookup_mu_);
    stop_lookups_ = true;
  }
  lookup_thread_.join();
}

void LeaseManager::LookupLoop() {
  while (true) {
    WorkerStart start;
    {
      absl::MutexLock lock(&lookup_mu_);
      lookup_mu_.Await(absl::Condition(
          +[](LeaseManager* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->lookup_mu_) {
            return self->stop_lookups_ || !self->lookups_.empty();
          },
          this));
      if (stop_lookups_) return;
      start = std::move(lookups_.front());
      lookups_.pop_front();
    }
    if (!start.job) {
      absl::StatusOr<rpc::JobInfo> found = lookup_job_(start.job_id);
      for (int attempt = 0;
           attempt < kJobLookupRetries && !found.ok() &&
           (absl::IsDeadlineExceeded(found.status()) || absl::IsUnavailable(found.status()));
           ++attempt) {
        TROUPE_LOG(Warning) << "looking up job " << start.job_id.Hex() << " failed ("
                            << found.status().message() << "); retrying";
        // A real pause between GCS calls (not a deadline), so not the injected clock's.
        absl::SleepFor(kJobLookupRetryDelay);
        found = lookup_job_(start.job_id);
      }
      if (!found.ok()) {
        FailGrant(*start.grant, absl::StrCat("cannot start a worker: ", found.status().message()));
        continue;
      }
      start.job = *std::move(found);
    }
    PopWorkerFor(std::move(start));
  }
}

void LeaseManager::EnqueueStart(WorkerStart start) {
  absl::MutexLock lock(&lookup_mu_);
  lookups_.push_back(std::move(start));
}

std::vector<NodeView> LeaseManager::ViewsLocked() const {
  std::vector<NodeView> views;
  bool has_local = false;
  for (const NodeView& node : cluster_) {
    views.push_back(node);
    if (node.node_id == local_node_) {
      views.back().available = resources_.available();
      views.back().total = resources_.total();
      views.back().labels = local_labels_;
      has_local = true;
    }
  }
  if (!has_local) {
    views.push_back(
        {local_node_, "", resources_.total(), resources_.available(), local_labels_});
  }
  return views;
}

void LeaseManager::RequestLease(const rpc::RequestWorkerLeaseRequest& request, LeaseCallback done) {
  const rpc::TaskSpec& spec = request.resource_spec();
  std::map<std::string, double> amounts(spec.required_resources().begin(),
                                        spec.required_resources().end());
  auto demand = ResourceSet::FromMap(amounts);
  if (!demand.ok()) return done(Rejected(std::string(demand.status().message())));
  std::optional<rpc::RequestWorkerLeaseReply> answer_now;
  {
    absl::MutexLock lock(&mu_);
    if (spec.bundle_reservation()) {
      // Reserve a placement-group bundle now, or refuse (the GCS tries elsewhere or later).
      const std::string& named = request.reservation_id();
      if (!named.empty()) {
        if (auto held = bundles_.find(named); held != bundles_.end()) {
          if (held->second.placement_group_id != spec.placement_group_id() ||
              held->second.index != spec.bundle_index()) {
            return done(Rejected("the reservation ID is taken by another bundle"));
          }
          rpc::RequestWorkerLeaseReply reply;  // a repeated request: the same reservation
          reply.set_lease_id(named);
          reply.set_node_id(local_node_.Binary());
          return done(reply);
        }
        if (returned_unknown_.contains(named)) {
          return done(Rejected("the reservation was returned before it arrived"));
        }
      }
      auto allocation = resources_.Allocate(*demand);
      if (!allocation) return done(Rejected(""));
      const std::string reservation = named.empty() ? LeaseId::FromRandom().Binary() : named;
      Bundle& bundle = bundles_[reservation];
      bundle.placement_group_id = spec.placement_group_id();
      bundle.index = spec.bundle_index();
      bundle.node_allocation = *allocation;
      bundle.pool = std::make_unique<LocalResources>(*demand);
      rpc::RequestWorkerLeaseReply reply;
      reply.set_lease_id(reservation);
      reply.set_node_id(local_node_.Binary());
      return done(reply);
    }
    const bool elsewhere = spec.strategy().kind() == rpc::SchedulingStrategy::NODE_AFFINITY &&
                           spec.strategy().node_id() != local_node_.Binary();
    if (!spec.placement_group_id().empty() && elsewhere) {
      // The bundle lives on another node: send the caller there. A node we do not know yet may
      // still be joining (ask again later); a dead one means the group moved (fail the task).
      auto target = NodeId::FromBinary(spec.strategy().node_id());
      if (target.ok() && dead_nodes_.contains(*target)) {
        answer_now = Rejected(
            "the node holding its placement-group bundle died; the group is "
            "being rescheduled (submit again)");
      } else {
        answer_now.emplace();
        answer_now->set_infeasible(true);
        answer_now->set_failure_message(
            "the node holding its placement-group bundle is not "
            "known here yet");
      }
      for (const NodeView& node : cluster_) {
        if (node.node_id.Binary() == spec.strategy().node_id()) {
          answer_now.emplace();
          answer_now->set_retry_at_raylet_address(node.raylet_address);
        }
      }
    } else if (!spec.placement_group_id().empty()) {
      // The bundle is here: wait for room in it.
      queue_.push_back({request, *demand, std::move(done)});
    } else if (request.grant_or_reject()) {
      // After a spillback: grant here or say no (the caller then asks its own raylet again).
      if (!demand->IsSubsetOf(resources_.available())) answer_now = Rejected("");
    } else {
      SchedulingDecision decision =
          ChooseNode(*demand, spec.strategy(), local_node_, ViewsLocked(), &spread_counter_);
      switch (decision.kind) {
        case SchedulingDecision::Kind::kRemote:
          answer_now.emplace();
          answer_now->set_retry_at_raylet_address(decision.raylet_address);
          break;
        case SchedulingDecision::Kind::kInfeasible: {
          if (spec.strategy().kind() == rpc::SchedulingStrategy::NODE_AFFINITY &&
              !spec.strategy().soft()) {
            auto target = NodeId::FromBinary(spec.strategy().node_id());
            if (target.ok() && dead_nodes_.contains(*target)) {
              answer_now = Rejected(absl::StrCat("NodeAffinity: node ", target->Hex(),
                                                 " is dead (soft affinity falls back to other "
                                                 "nodes)"));
              break;
            }
          }
          std::string entry = absl::StrCat("{", demand->ToString(), "}: ", decision.reason);
          if (!infeasible_.contains(entry))
            TROUPE_LOG(Warning) << "infeasible task demand " << entry;
          infeasible_[entry] = clock_->Now();
          answer_now.emplace();
          answer_now->set_infeasible(true);
          answer_now->set_failure_message(decision.reason);
          break;
        }
        case SchedulingDecision::Kind::kFailed:
          answer_now = Rejected(decision.reason);
          break;
        case SchedulingDecision::Kind::kLocal:
          break;
      }
    }
    if (!answer_now && spec.placement_group_id().empty()) {
      queue_.push_back({request, *demand, std::move(done)});
    }
  }
  if (answer_now) return done(*answer_now);
  Dispatch();
}

std::vector<LeaseManager::Grant> LeaseManager::CollectGrantsLocked() {
  std::vector<Grant> grants;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const rpc::TaskSpec& spec = it->request.resource_spec();
    std::optional<Allocation> allocation;
    std::string from_bundle;
    int from_bundle_index = 0;
    if (spec.placement_group_id().empty()) {
      allocation = resources_.Allocate(it->demand);
    } else {
      bool group_here = false;
      for (auto& [reservation, bundle] : bundles_) {
        if (bundle.placement_group_id != spec.placement_group_id()) continue;
        if (spec.bundle_index() >= 0 && bundle.index != spec.bundle_index()) continue;
        group_here = true;
        allocation = bundle.pool->Allocate(it->demand);
        if (allocation) {
          from_bundle = reservation;
          from_bundle_index = bundle.index;
          break;
        }
      }
      if (!group_here) {
        it->done(Rejected(absl::StrCat("placement group ", BytesToHex(spec.placement_group_id()),
                                       " has no bundle ", spec.bundle_index(),
                                       " on this node (removed, or being rescheduled)")));
        it = queue_.erase(it);
        continue;
      }
    }
    if (!allocation) {
      ++it;
      continue;
    }
    std::vector<int> gpu_ids = NodeGpuIdsLocked(from_bundle, *allocation);
    grants.push_back({std::move(*it), std::move(*allocation), from_bundle, std::move(gpu_ids),
                      from_bundle_index});
    it = queue_.erase(it);
  }
  return grants;
}

std::vector<int> LeaseManager::NodeGpuIdsLocked(const std::string& bundle,
                                                const Allocation& allocation) {
  std::vector<int> ids = allocation.GpuIds();
  if (bundle.empty()) return ids;
  const Allocation& reserved = bundles_.at(bundle).node_allocation;
  for (int& id : ids) {
    if (id < static_cast<int>(reserved.gpu_shares.size())) id = reserved.gpu_shares[id].first;
  }
  return ids;
}

void LeaseManager::FreeLocked(const std::string& bundle, const Allocation& allocation) {
  if (bundle.empty()) {
    resources_.Free(allocation);
  } else if (auto it = bundles_.find(bundle); it != bundles_.end()) {
    it->second.pool->Free(allocation);
  }  // else: the bundle is gone and took its resources with it
}

void LeaseManager::Dispatch() {
  std::vector<Grant> grants;
  {
    absl::MutexLock lock(&mu_);
    grants = CollectGrantsLocked();
  }
  StartGrants(std::move(grants));
}

void LeaseManager::FailGrant(Grant& grant, const std::string& message) {
  {
    absl::MutexLock lock(&mu_);
    FreeLocked(grant.bundle, grant.allocation);
  }
  grant.pending.done(Rejected(message));
  Dispatch();
}

void LeaseManager::StartGrants(std::vector<Grant> grants) {
  for (auto& grant : grants) {
    auto job_id = JobId::FromBinary(grant.pending.request.resource_spec().job_id());
    if (!job_id.ok()) {
      FailGrant(grant, absl::StrCat("cannot start a worker: ", job_id.status().message()));
      continue;
    }
    // Workers are started by one long-lived thread: a worker dies with the thread that forked it
    // (PR_SET_PDEATHSIG), and gRPC retires its callback threads. That thread also asks the GCS
    // about jobs this raylet has not cached (from a gRPC callback it could starve a GCS living
    // in the same process).
    EnqueueStart(
        {std::make_shared<Grant>(std::move(grant)), *job_id, std::nullopt, kWorkerStartAttempts});
  }
}

void LeaseManager::PopWorkerFor(WorkerStart start) {
  const std::string devices = absl::StrJoin(start.grant->gpu_ids, ",");
  const rpc::JobInfo job = *start.job;
  launcher_->PopWorker(
      job, devices,
      [this, start = std::move(start)](absl::StatusOr<std::shared_ptr<Worker>> worker) {
        const std::shared_ptr<Grant>& grant = start.grant;
        if (!worker.ok()) {
          // A worker can fail to start on an overloaded node; try a fresh one before giving up.
          // The answer may come on any thread (a gRPC thread, the reaper), so the next try is
          // started from the lookup thread again.
          if (start.attempts_left > 1) {
            TROUPE_LOG(Warning) << "starting a worker failed (" << worker.status().message()
                                << "); trying again";
            WorkerStart again = start;
            --again.attempts_left;
            return EnqueueStart(std::move(again));
          }
          return FailGrant(*grant,
                           absl::StrCat("cannot start a worker: ", worker.status().message()));
        }
        rpc::RequestWorkerLeaseReply reply;
        const std::string lease_id = LeaseId::FromRandom().Binary();
        (*worker)->detached = grant->pending.request.resource_spec().detached_actor();
        bool owner_gone = false;
        {
          absl::MutexLock lock(&mu_);
          const rpc::TaskSpec& spec = grant->pending.request.resource_spec();
          const int rank = spec.type() != rpc::TaskSpec::NORMAL_TASK ? 2
                           : spec.max_retries() > 0                  ? 0
                                                                     : 1;
          leases_[lease_id] = {*worker,       grant->allocation, false,
                               grant->bundle, next_order_++,     rank};
          if (spec.type() == rpc::TaskSpec::NORMAL_TASK) {
            leases_[lease_id].owner = spec.caller_worker_id();
            owner_gone = dead_owners_.contains(spec.caller_worker_id());
          }
          lease_of_worker_[(*worker)->worker_id] = lease_id;
        }
        if (owner_gone) {  // nobody will push a task to it or return it
          (void)ReturnWorker(lease_id, /*disconnect_worker=*/true);
          return grant->pending.done(Rejected("the task's owner exited before its worker started"));
        }
        reply.set_worker_address((*worker)->address);
        reply.set_worker_id((*worker)->worker_id.Binary());
        reply.set_lease_id(lease_id);
        reply.set_node_id(local_node_.Binary());
        reply.set_worker_pid((*worker)->pid);
        for (int id : grant->gpu_ids) reply.add_gpu_ids(id);
        reply.set_bundle_index(grant->bundle_index);
        grant->pending.done(reply);
      });
}

void LeaseManager::ReleaseLocked(const std::string& lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  if (it->second.blocked && it->second.bundle.empty()) {
    resources_.ReacquireCpus(it->second.allocation);
  }
  FreeLocked(it->second.bundle, it->second.allocation);
  lease_of_worker_.erase(it->second.worker->worker_id);
  leases_.erase(it);
}

absl::Status LeaseManager::ReturnWorker(const std::string& lease_id, bool disconnect_worker) {
  std::shared_ptr<Worker> worker;
  std::vector<WorkerId> bundle_workers;
  bool was_reservation = false;
  bool being_killed = false;  // its kill is already on its way: neither pushed back nor killed
  {
    absl::MutexLock lock(&mu_);
    if (auto bundle = bundles_.find(lease_id); bundle != bundles_.end()) {
      // A reservation: the group leaves this node, and its workers here go with it.
      was_reservation = true;
      resources_.Free(bundle->second.node_allocation);
      for (auto& [id, lease] : leases_) {
        if (lease.bundle != lease_id) continue;
        // Marked now, under the lock: a holder returning this lease before (or while) the kill
        // below lands must not put the dying worker back in the pool.
        lease.killing = true;
        bundle_workers.push_back(lease.worker->worker_id);
      }
      bundles_.erase(bundle);
    } else {
      auto it = leases_.find(lease_id);
      if (it == leases_.end()) {
        constexpr size_t kMaxRemembered = 10000;
        if (returned_unknown_.insert(lease_id).second) {
          returned_unknown_order_.push_back(lease_id);
          if (returned_unknown_order_.size() > kMaxRemembered) {
            returned_unknown_.erase(returned_unknown_order_.front());
            returned_unknown_order_.pop_front();
          }
        }
        return absl::NotFoundError("unknown lease (already returned?)");
      }
      worker = it->second.worker;
      being_killed = it->second.killing;
      ReleaseLocked(lease_id);
    }
  }
  if (was_reservation) {
    for (const auto& id : bundle_workers) launcher_->KillWorker(id);
  } else if (being_killed) {
    // Nothing: the worker exits, and the launcher forgets it then.
  } else if (disconnect_worker) {
    // Not a failure (its job ended, or its holder gave up on it): it may report its task events.
    launcher_->StopWorker(worker->worker_id);
  } else {
    launcher_->PushWorker(worker);
  }
  Dispatch();
  return absl::OkStatus();
}

absl::Status LeaseManager::KillLeasedWorker(const std::string& lease_id) {
  WorkerId worker_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return absl::NotFoundError("unknown lease");
    it->second.killing = true;
    worker_id = it->second.worker->worker_id;
  }
  launcher_->KillWorker(worker_id);  // the lease is released when the process is seen exiting
  return absl::OkStatus();
}

void LeaseManager::OnWorkerExit(const Worker& worker) {
  const std::string owner = worker.worker_id.Binary();
  std::vector<std::string> orphaned;
  std::vector<Pending> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = lease_of_worker_.find(worker.worker_id); it != lease_of_worker_.end()) {
      ReleaseLocked(it->second);
    }
    if (dead_owners_.insert(owner).second) {
      dead_owner_order_.push_back(owner);
      if (dead_owner_order_.size() > kRememberedDeadOwners) {
        dead_owners_.erase(dead_owner_order_.front());
        dead_owner_order_.pop_front();
      }
    }
    for (const auto& [id, lease] : leases_) {
      if (lease.owner == owner && !lease.killing) orphaned.push_back(id);
    }
    for (auto it = queue_.begin(); it != queue_.end();) {
      const rpc::TaskSpec& spec = it->request.resource_spec();
      if (spec.type() == rpc::TaskSpec::NORMAL_TASK && spec.caller_worker_id() == owner) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Pending& pending : dropped) pending.done(Rejected("the task's owner exited"));
  for (const std::string& lease_id : orphaned) {
    if (auto status = ReturnWorker(lease_id, /*disconnect_worker=*/true); !status.ok()) {
      TROUPE_LOG(Warning) << "returning a lease of an exited owner: " << status.message();
    } else {
      TROUPE_LOG(Info) << "returned a lease whose owner (worker " << worker.worker_id.Hex()
                       << ") exited; its worker is stopped";
    }
  }
  Dispatch();
}

void LeaseManager::NotifyBlocked(const WorkerId& worker_id, bool blocked) {
  {
    absl::MutexLock lock(&mu_);
    auto it = lease_of_worker_.find(worker_id);
    if (it == lease_of_worker_.end()) return;
    Lease& lease = leases_[it->second];
    if (lease.blocked == blocked || !lease.bundle.empty()) return;  // bundles keep their CPUs
    lease.blocked = blocked;
    if (blocked) {
      resources_.ReleaseCpus(lease.allocation);
    } else {
      resources_.ReacquireCpus(lease.allocation);
    }
  }
  if (blocked) Dispatch();
}

void LeaseManager::UpdateClusterView(const std::vector<rpc::ResourceUsage>& cluster) {
  std::vector<Pending> moved;
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    cluster_ = NodeViewsFromUsage(cluster);
    // Queued requests that another node can serve right now go there.
    const std::vector<NodeView> views = ViewsLocked();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->request.grant_or_reject() || it->demand.IsSubsetOf(resources_.available())) {
        ++it;
        continue;
      }
      SchedulingDecision decision = ChooseNode(it->demand, it->request.resource_spec().strategy(),
                                               local_node_, views, &spread_counter_);
      if (decision.kind == SchedulingDecision::Kind::kRemote) {
        addresses.push_back(decision.raylet_address);
        moved.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (size_t i = 0; i < moved.size(); ++i) {
    rpc::RequestWorkerLeaseReply reply;
    reply.set_retry_at_raylet_address(addresses[i]);
    moved[i].done(reply);
  }
}

void LeaseManager::MarkNodeDead(const NodeId& node_id) {
  absl::MutexLock lock(&mu_);
  dead_nodes_.insert(node_id);
}

void LeaseManager::RejectAllPending(const std::string& why) {
  std::deque<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    pending.swap(queue_);
  }
  for (auto& request : pending) request.done(Rejected(why));
}

std::shared_ptr<Worker> LeaseManager::NewestLeasedWorker() const {
  absl::MutexLock lock(&mu_);
  const Lease* newest = nullptr;
  for (const auto& [id, lease] : leases_) {
    if (newest == nullptr || lease.memory_kill_rank < newest->memory_kill_rank ||
        (lease.memory_kill_rank == newest->memory_kill_rank && lease.order > newest->order)) {
      newest = &lease;
    }
  }
  return newest ? newest->worker : nullptr;
}

ResourceSet LeaseManager::Available() const {
  absl::MutexLock lock(&mu_);
  return resources_.available();
}

std::vector<std::string> LeaseManager::InfeasibleDemands() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> recent;
  const absl::Time now = clock_->Now();
  for (const auto& [entry, last_asked] : infeasible_) {
    if (now - last_asked < kInfeasibleDemandMemory) recent.push_back(entry);
  }
  return recent;
}

int LeaseManager::num_leased() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(leases_.size());
}

int LeaseManager::num_pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace troupe
