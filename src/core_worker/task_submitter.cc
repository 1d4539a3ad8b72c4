#include "src/core_worker/task_submitter.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {

TaskSubmitter::TaskSubmitter(TaskSubmitterOptions options, LeaseClient* leases,
                             TaskPushClient* pushes, const Clock* clock, Callbacks callbacks)
    : options_(std::move(options)),
      leases_(leases),
      pushes_(pushes),
      clock_(clock),
      callbacks_(std::move(callbacks)) {}

int TaskSubmitter::PipelineDepth(const rpc::TaskSpec& lease_spec, double average_run_ms) const {
  // SPREAD tasks go one per worker, so each one's lease decides where it runs.
  if (lease_spec.strategy().kind() == rpc::SchedulingStrategy::SPREAD) return 1;
  if (average_run_ms < 0) return 1;  // nothing known yet
  const int most = options_.max_tasks_in_flight_per_worker;
  if (average_run_ms * most <= options_.max_backlog_ms) return most;
  return std::max(1, static_cast<int>(options_.max_backlog_ms / average_run_ms));
}

std::string TaskSubmitter::KeyOf(const rpc::TaskSpec& spec) {
  std::map<std::string, double> resources(spec.required_resources().begin(),
                                          spec.required_resources().end());
  std::string key = spec.job_id();
  for (const auto& [name, amount] : resources) absl::StrAppend(&key, "|", name, "=", amount);
  absl::StrAppend(&key, "|", spec.strategy().kind(), "/", spec.strategy().node_id(), "/",
                  spec.strategy().soft(), "|", spec.placement_group_id(), "/", spec.bundle_index());
  // Workers leased for one label selector must not run tasks of another.
  if (spec.strategy().has_label_selector()) {
    absl::StrAppend(&key, "|", spec.strategy().label_selector().SerializeAsString());
  }
  return key;
}

bool TaskSubmitter::IsDeadLocked(const std::string& node_id,
                                 const std::string& raylet_address) const {
  return (!node_id.empty() && dead_nodes_.contains(node_id)) ||
         dead_raylets_.contains(raylet_address);
}

bool TaskSubmitter::BeginCall(const std::string& raylet_address, const std::string& node_id,
                              uint64_t* call_id) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return false;
  *call_id = next_call_id_++;
  calls_[*call_id] = Call{nullptr, raylet_address, node_id, IsDeadLocked(node_id, raylet_address)};
  return true;
}

void TaskSubmitter::SetCanceller(uint64_t call_id, std::function<void()> cancel) {
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return;  // answered already
    if (!it->second.doomed) {
      it->second.cancel = std::move(cancel);
      return;
    }
  }
  // Its node died between the send and now: nothing will answer it.
  cancel();
}

void TaskSubmitter::EndCall(uint64_t call_id) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call_id);
}

void TaskSubmitter::Submit(rpc::TaskSpec spec) {
  if (spec.attempt() == 0) ++counters_.submitted;
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    const std::string key = KeyOf(spec);
    Queue& queue = queues_[key];
    if (queue.lease_spec.job_id().empty()) {
      queue.lease_spec.set_job_id(spec.job_id());
      *queue.lease_spec.mutable_required_resources() = spec.required_resources();
      *queue.lease_spec.mutable_strategy() = spec.strategy();
      queue.lease_spec.set_function_name(spec.function_name());
      queue.lease_spec.set_placement_group_id(spec.placement_group_id());
      queue.lease_spec.set_bundle_index(spec.bundle_index());
      // The lease's owner: when this process dies, its raylet returns the lease (a killed actor
      // that submitted tasks would otherwise keep their CPUs leased for good).
      queue.lease_spec.set_caller_worker_id(spec.caller_worker_id());
    }
    queue.tasks.push_back(std::move(spec));
    ScheduleLocked(key, &actions);
  }
  Run(std::move(actions));
}

void TaskSubmitter::ScheduleLocked(const std::string& key, Actions* actions) {
  Queue& queue = queues_[key];
  // Every task queued and every lease granted or freed comes through here.
  if (callbacks_.wake_timer && (!queue.tasks.empty() || !queue.workers.empty())) {
    callbacks_.wake_timer();
  }
  // Fill leased workers, least busy first, each up to its pipeline depth, in one call per
  // worker and pass. Beyond max_calls_in_flight_per_worker, tasks wait for a call to end and
  // then leave together.
  const int depth = PipelineDepth(queue.lease_spec, queue.average_run_ms);
  while (!queue.tasks.empty()) {
    std::shared_ptr<LeasedWorker> least;
    for (const auto& worker : queue.workers) {
      if (worker->pushes_in_flight >= options_.max_calls_in_flight_per_worker ||
          worker->in_flight >= depth)
        continue;
      if (!least || worker->in_flight < least->in_flight) least = worker;
    }
    if (!least) break;
    least->pushes_in_flight++;
    PlannedPush& push = actions->pushes.emplace_back();
    push.worker = least;
    push.first_sequence = least->next_sequence;
    while (!queue.tasks.empty() && least->in_flight < depth) {
      least->in_flight++;
      least->next_sequence++;
      running_[*TaskId::FromBinary(queue.tasks.front().task_id())] = {key, least};
      push.specs.push_back(std::move(queue.tasks.front()));
      queue.tasks.pop_front();
    }
  }
  // Ask for more workers while tasks wait.
  if (queue.tasks.empty() || clock_->Now() < queue.retry_leases_at) return;
  const int wanted =
      std::min<int>(static_cast<int>(queue.tasks.size()), options_.max_pending_lease_requests);
  while (queue.pending_lease_requests < wanted) {
    queue.pending_lease_requests++;
    actions->lease_requests.emplace_back(key, queue.lease_spec);
  }
}

void TaskSubmitter::Run(Actions actions) {
  for (auto& [key, spec] : actions.lease_requests) {
    RequestLease(key, spec, options_.local_raylet_address, /*grant_or_reject=*/false);
  }
  for (PlannedPush& push : actions.pushes) Push(std::move(push));
}

void TaskSubmitter::RequestLease(const std::string& key, const rpc::TaskSpec& spec,
                                 const std::string& raylet_address, bool grant_or_reject) {
  rpc::RequestWorkerLeaseRequest request;
  *request.mutable_resource_spec() = spec;
  request.set_grant_or_reject(grant_or_reject);
  uint64_t call_id;
  if (!BeginCall(raylet_address, /*node_id=*/"", &call_id)) return;
  SetCanceller(call_id, leases_->RequestWorkerLease(
                            raylet_address, request,
                            [this, key, spec, raylet_address,
                             call_id](absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
                              OnLeaseReply(key, spec, raylet_address, std::move(reply));
                              EndCall(call_id);
                            }));
}

void TaskSubmitter::OnLeaseReply(const std::string& key, const rpc::TaskSpec& spec,
                                 const std::string& raylet_address,
                                 absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
  bool fenced = false, spill_to_dead = false;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      // Granted after we stopped: give it straight back.
      if (reply.ok() && !reply->lease_id().empty()) {
        leases_->ReturnWorker(raylet_address, reply->lease_id(), /*disconnect=*/false);
      }
      return;
    }
    // A dead node's answer (or its cancelled request) counts for nothing: its grant is void.
    fenced = IsDeadLocked(reply.ok() ? reply->node_id() : "", raylet_address);
    spill_to_dead = reply.ok() && IsDeadLocked("", reply->retry_at_raylet_address());
  }
  if ((fenced || spill_to_dead) && raylet_address != options_.local_raylet_address) {
    return RequestLease(key, spec, options_.local_raylet_address, /*grant_or_reject=*/false);
  }
  if (fenced) reply = absl::UnavailableError("this node's raylet was declared dead");
  if (reply.ok() && !reply->retry_at_raylet_address().empty()) {
    if (spill_to_dead) reply = absl::UnavailableError("spillback to a node declared dead");
  }
  if (reply.ok() && !reply->retry_at_raylet_address().empty()) {
    return RequestLease(key, spec, reply->retry_at_raylet_address(), /*grant_or_reject=*/true);
  }
  if (reply.ok() && reply->rejected() && reply->failure_message().empty()) {
    // The other node filled up meanwhile: start over at our own raylet.
    return RequestLease(key, spec, options_.local_raylet_address, /*grant_or_reject=*/false);
  }
  Actions actions;
  std::vector<rpc::TaskSpec> failed;
  std::string failure, warning;
  {
    absl::MutexLock lock(&mu_);
    Queue& queue = queues_[key];
    queue.pending_lease_requests--;
    if (!reply.ok() && absl::IsInvalidArgument(reply.status())) {
      // The raylet refused the request itself (a bad resource map, say): asking again would
      // be refused again, forever. The queue's tasks fail with why.
      failure = std::string(reply.status().message());
      failed.assign(std::make_move_iterator(queue.tasks.begin()),
                    std::make_move_iterator(queue.tasks.end()));
      queue.tasks.clear();
    } else if (!reply.ok()) {
      warning = absl::StrCat("cannot lease a worker from the raylet at ", raylet_address, ": ",
                             reply.status().message(), "; retrying");
      queue.retry_leases_at = clock_->Now() + options_.infeasible_retry;
    } else if (reply->infeasible()) {
      if (!queue.warned_infeasible) {
        queue.warned_infeasible = true;
        warning = absl::StrCat("task ", spec.function_name(),
                               " cannot be scheduled yet: ", reply->failure_message(),
                               ". It stays pending until a node with these resources joins.");
      }
      queue.retry_leases_at = clock_->Now() + options_.infeasible_retry;
    } else if (reply->rejected()) {
      failure = reply->failure_message();
      failed.assign(std::make_move_iterator(queue.tasks.begin()),
                    std::make_move_iterator(queue.tasks.end()));
      queue.tasks.clear();
    } else {
      auto worker = std::make_shared<LeasedWorker>();
      worker->lease_id = reply->lease_id();
      worker->worker_address = reply->worker_address();
      worker->raylet_address = raylet_address;
      worker->node_id = reply->node_id();
      worker->gpu_ids.assign(reply->gpu_ids().begin(), reply->gpu_ids().end());
      worker->bundle_index = reply->bundle_index();
      worker->idle_since = clock_->Now();
      queue.workers.push_back(worker);
      queue.warned_infeasible = false;
    }
    ScheduleLocked(key, &actions);
  }
  if (!warning.empty()) callbacks_.warn(warning);
  for (const auto& task : failed) {
    ++counters_.failed;
    callbacks_.on_failure(task, StoredObject::Error::kTaskFailed,
                          absl::StrCat("task ", task.function_name(), " cannot run: ", failure));
  }
  Run(std::move(actions));
}

void TaskSubmitter::Push(PlannedPush planned) {
  const std::shared_ptr<LeasedWorker>& worker = planned.worker;
  std::vector<rpc::TaskSpec>& specs = planned.specs;
  auto batch = std::make_shared<Batch>();
  batch->unanswered = specs.size();
  uint64_t call_id;
  if (!BeginCall(worker->raylet_address, worker->node_id, &call_id)) return;
  auto on_results = [this, worker, batch, call_id](TaskPushClient::PushResults results) {
    OnPushResults(worker, batch.get(), call_id, std::move(results));
  };
  // Each task says its place in the lease's order: the worker runs them in it, whichever of
  // the calls in flight reaches it first.
  auto fill = [&](rpc::PushTaskRequest* request, size_t index) {
    *request->mutable_task() = specs[index];
    // Tasks that asked for any bundle of their group learn the one their lease came from
    // (GetRuntimeContext); every task of a lease runs in the same bundle.
    if (!request->task().placement_group_id().empty()) {
      request->mutable_task()->set_bundle_index(worker->bundle_index);
    }
    for (int id : worker->gpu_ids) request->add_gpu_ids(id);
    request->set_lease_id(worker->lease_id);
    request->set_lease_sequence(planned.first_sequence + static_cast<int64_t>(index));
  };
  if (specs.size() == 1) {
    // A single task goes as a plain unary call: cheaper than a stream (a synchronous caller's
    // round trip).
    rpc::PushTaskRequest request;
    fill(&request, 0);
    batch->specs = std::move(specs);
    SetCanceller(call_id, pushes_->PushTask(worker->worker_address, std::move(request),
                                            [on_results = std::move(on_results)](
                                                absl::StatusOr<rpc::PushTaskReply> reply) {
                                              TaskPushClient::PushResults results;
                                              results.emplace_back(0, std::move(reply));
                                              on_results(std::move(results));
                                            }));
    return;
  }
  rpc::PushTasksRequest request;
  for (size_t i = 0; i < specs.size(); ++i) fill(request.add_pushes(), i);
  batch->specs = std::move(specs);
  SetCanceller(call_id, pushes_->PushTasks(worker->worker_address, std::move(request), on_results));
}

void TaskSubmitter::OnPushResults(const std::shared_ptr<LeasedWorker>& worker, Batch* batch,
                                  uint64_t call_id, TaskPushClient::PushResults results) {
  std::vector<std::pair<rpc::TaskSpec, absl::StatusOr<rpc::PushTaskReply>>> outcomes;
  outcomes.reserve(results.size());
  for (auto& [index, reply] : results) {
    outcomes.emplace_back(std::move(batch->specs.at(index)), std::move(reply));
  }
  batch->unanswered -= results.size();
  const bool last = batch->unanswered == 0;
  OnPushReplies(worker, std::move(outcomes), /*call_ended=*/last);
  if (last) EndCall(call_id);
}

void TaskSubmitter::OnPushReplies(
    const std::shared_ptr<LeasedWorker>& worker,
    std::vector<std::pair<rpc::TaskSpec, absl::StatusOr<rpc::PushTaskReply>>> outcomes,
    bool call_ended) {
  Actions actions;
  std::vector<bool> cancelled(outcomes.size(), false);
  bool node_died = false;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    // Fencing: once its node is declared dead, a worker's answer is refused, even one that
    // raced the cancellation; the task was (or is now) retried elsewhere or failed.
    node_died = worker->on_dead_node;
    if (call_ended) worker->pushes_in_flight--;
    // Every task of a batch has the same key (one worker serves one queue): found once.
    std::optional<std::string> key;
    Queue* queue = nullptr;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      auto& [spec, reply] = outcomes[i];
      if (node_died && reply.ok()) {
        reply = absl::UnavailableError("the reply came from a node declared dead; refused");
      }
      const TaskId task_id = *TaskId::FromBinary(spec.task_id());
      auto running = running_.find(task_id);
      if (!key) {
        key = running != running_.end() ? running->second.key : KeyOf(spec);
        queue = &queues_[*key];
      }
      if (running != running_.end()) running_.erase(running);
      if (reply.ok()) {
        const double run_ms = reply->run_us() / 1000.0;
        double& average = queue->average_run_ms;
        average = average < 0 ? run_ms : 0.8 * average + 0.2 * run_ms;
      }
      cancelled[i] = cancelled_.erase(task_id) > 0;
      worker->in_flight--;
      if (worker->in_flight == 0) worker->idle_since = clock_->Now();
      if (!reply.ok()) {
        // The worker is gone (or unreachable): its lease is void; never push to it again.
        auto it = std::find(queue->workers.begin(), queue->workers.end(), worker);
        if (it != queue->workers.end()) {
          queue->workers.erase(it);
          leases_->ReturnWorker(worker->raylet_address, worker->lease_id, /*disconnect=*/true);
        }
      }
    }
    if (key) ScheduleLocked(*key, &actions);
  }
  for (size_t i = 0; i < outcomes.size(); ++i) {
    FinishPush(*worker, std::move(outcomes[i].first), std::move(outcomes[i].second), cancelled[i],
               node_died);
  }
  Run(std::move(actions));
}

void TaskSubmitter::FinishPush(const LeasedWorker& worker, rpc::TaskSpec spec,
                               absl::StatusOr<rpc::PushTaskReply> reply, bool cancelled,
                               bool node_died) {
  if (!reply.ok()) {
    if (cancelled) {
      ++counters_.failed;
      callbacks_.on_failure(spec, StoredObject::Error::kCancelled,
                            absl::StrCat("task ", spec.function_name(), " was cancelled"));
    } else if (node_died) {
      RetryOrFail(
          std::move(spec), StoredObject::Error::kTaskFailed,
          absl::StrCat("the node running task ", spec.function_name(), " (node ",
                       BytesToHex(worker.node_id).substr(0, 8), ", raylet ", worker.raylet_address,
                       ") was declared dead by the GCS (it crashed or is unreachable)"));
    } else if (auto oom = callbacks_.oom_cause ? callbacks_.oom_cause(worker.worker_address)
                                               : std::nullopt) {
      RetryOrFail(std::move(spec), StoredObject::Error::kOutOfMemory,
                  absl::StrCat("task ", spec.function_name(), " ran out of memory: ", *oom));
    } else {
      RetryOrFail(std::move(spec), StoredObject::Error::kTaskFailed,
                  absl::StrCat("the worker running task ", spec.function_name(),
                               " died or became unreachable (", reply.status().message(), ")"));
    }
    return;
  }
  if (reply->cancelled()) {  // Cancel reached the worker: never retried
    ++counters_.failed;
    callbacks_.on_failure(spec, StoredObject::Error::kCancelled,
                          absl::StrCat("task ", spec.function_name(), " was cancelled"));
    return;
  }
  bool threw = false;
  for (const auto& ret : reply->returns()) threw |= ret.is_application_error();
  if (threw && spec.retry_exceptions() &&
      (spec.max_retries() < 0 || spec.attempt() < spec.max_retries())) {
    RetryOrFail(std::move(spec), StoredObject::Error::kApplication, "");
  } else {
    ++(threw ? counters_.failed : counters_.finished);
    callbacks_.on_reply(spec, std::move(*reply));
  }
}

void TaskSubmitter::RetryOrFail(rpc::TaskSpec spec, StoredObject::Error error,
                                const std::string& message) {
  if (spec.max_retries() >= 0 && spec.attempt() >= spec.max_retries()) {
    ++counters_.failed;
    callbacks_.on_failure(spec, error,
                          absl::StrCat(message, "; gave up after ", spec.attempt() + 1,
                                       " attempt(s) (SetMaxRetries raises the limit)"));
    return;
  }
  if (!message.empty()) {
    TROUPE_LOG(Warning) << message << "; retrying (attempt " << spec.attempt() + 2 << ")";
  }
  if (callbacks_.on_retry) callbacks_.on_retry(spec, message);
  spec.set_attempt(spec.attempt() + 1);
  ++counters_.retried;
  Submit(std::move(spec));
}

bool TaskSubmitter::Cancel(const TaskId& task_id, bool force, bool recursive) {
  std::optional<rpc::TaskSpec> dropped;
  std::shared_ptr<LeasedWorker> kill;
  std::shared_ptr<LeasedWorker> tell;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, queue] : queues_) {
      auto it = std::find_if(queue.tasks.begin(), queue.tasks.end(), [&](const rpc::TaskSpec& s) {
        return s.task_id() == task_id.Binary();
      });
      if (it != queue.tasks.end()) {
        dropped = std::move(*it);
        queue.tasks.erase(it);
        break;
      }
    }
    if (!dropped) {
      auto running = running_.find(task_id);
      if (running == running_.end()) return false;
      if (force) {
        cancelled_.insert(task_id);
        kill = running->second.worker;
      } else {
        tell = running->second.worker;
      }
    }
  }
  if (dropped) {
    ++counters_.failed;
    callbacks_.on_failure(*dropped, StoredObject::Error::kCancelled,
                          absl::StrCat("task ", dropped->function_name(), " was cancelled"));
    return true;
  }
  if (kill) {
    // Its exit fails the task as cancelled (cancelled_); the raylet's answer adds nothing.
    leases_->KillLeasedWorker(kill->raylet_address, kill->lease_id, [](absl::Status) {});
    return true;
  }
  // The worker's answer (reply.cancelled) fails the task as cancelled, in FinishPush.
  pushes_->CancelTask(tell->worker_address, task_id.Binary(), recursive);
  return true;
}

void TaskSubmitter::OnNodeDead(const NodeId& node_id, const std::string& raylet_address) {
  std::vector<std::function<void()>> cancels;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || !dead_nodes_.insert(node_id.Binary()).second) return;
    if (!raylet_address.empty()) dead_raylets_.insert(raylet_address);
    for (auto& [key, queue] : queues_) {
      for (auto it = queue.workers.begin(); it != queue.workers.end();) {
        if (!IsDeadLocked((*it)->node_id, (*it)->raylet_address)) {
          ++it;
          continue;
        }
        // Void with its node: never pushed to or returned again.
        (*it)->on_dead_node = true;
        it = queue.workers.erase(it);
      }
    }
    for (auto& [id, call] : calls_) {
      if (!IsDeadLocked(call.node_id, call.raylet_address)) continue;
      call.doomed = true;
      if (call.cancel) cancels.push_back(call.cancel);
    }
  }
  if (!cancels.empty()) {
    TROUPE_LOG(Warning) << "node " << node_id.ShortHex() << " (raylet " << raylet_address
                        << ") was declared dead: cancelling " << cancels.size()
                        << " call(s) to it; their tasks are retried or fail";
  }
  // Each cancelled call's callback runs with CANCELLED and takes the worker-death path.
  for (auto& cancel : cancels) cancel();
}

void TaskSubmitter::Tick() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [key, queue] : queues_) {
      for (auto it = queue.workers.begin(); it != queue.workers.end();) {
        const auto& worker = *it;
        if (queue.tasks.empty() && worker->in_flight == 0 &&
            now - worker->idle_since >= options_.lease_linger) {
          leases_->ReturnWorker(worker->raylet_address, worker->lease_id, /*disconnect=*/false);
          it = queue.workers.erase(it);
        } else {
          ++it;
        }
      }
      if (!queue.tasks.empty()) ScheduleLocked(key, &actions);
    }
  }
  Run(std::move(actions));
}

bool TaskSubmitter::NeedsTick() const {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return false;
  for (const auto& [key, queue] : queues_) {
    if (!queue.tasks.empty() || !queue.workers.empty()) return true;
  }
  return false;
}

void TaskSubmitter::Shutdown() {
  std::vector<std::function<void()>> cancels;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& [id, call] : calls_) {
      if (call.cancel) cancels.push_back(call.cancel);
    }
  }
  for (auto& cancel : cancels) cancel();
  // Callbacks of cancelled calls still run; wait for them so none outlives this object.
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(10))) {
    TROUPE_LOG(Warning) << calls_.size() << " calls still in flight at shutdown";
  }
  for (auto& [key, queue] : queues_) {
    for (const auto& worker : queue.workers) {
      // Synchronous, so the node's resources are free once Shutdown returns.
      (void)leases_->ReturnWorkerAndWait(worker->raylet_address, worker->lease_id,
                                         /*disconnect=*/false);
    }
    queue.workers.clear();
  }
}

}  // namespace troupe
