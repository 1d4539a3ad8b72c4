#include "src/core_worker/submission_facade.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/resources.h"
#include "src/common/status_macros.h"
#include "src/rpc/gcs_client.h"

namespace troupe {
namespace {

// The task's first return (index 1); the others follow it (ReturnIdsOf).
ObjectId ReturnIdOf(const rpc::TaskSpec& spec) {
  return ObjectId::FromIndex(*TaskId::FromBinary(spec.task_id()), 1);
}

std::vector<ObjectId> ReturnIdsOf(const TaskId& task_id, int num_returns) {
  std::vector<ObjectId> ids;
  for (int i = 1; i <= std::max(1, num_returns); ++i)
    ids.push_back(ObjectId::FromIndex(task_id, i));
  return ids;
}

std::vector<ObjectId> ReturnIdsOf(const rpc::TaskSpec& spec) {
  return ReturnIdsOf(*TaskId::FromBinary(spec.task_id()), spec.num_returns());
}

}  // namespace

SubmissionFacade::SubmissionFacade(Options options, ObjectService* objects, TaskSubmitter* tasks,
                                   ActorTaskSubmitter* actor_calls, GcsClient* gcs,
                                   const Clock* clock)
    : options_(std::move(options)),
      objects_(objects),
      tasks_(tasks),
      actor_calls_(actor_calls),
      gcs_(gcs),
      clock_(clock),
      lineage_(Lineage::Options{options_.max_lineage_bytes}) {}

void SubmissionFacade::SetIdentity(const std::string& address, const NodeId& node_id) {
  address_ = address;
  node_id_ = node_id;
}

rpc::TaskSpec SubmissionFacade::BuildTaskSpec(const TaskId& task_id,
                                              const std::string& function_name,
                                              std::vector<TaskArgSpec> args,
                                              std::vector<ObjectId>* owned_dependencies) {
  ReferenceCounter& references = objects_->references();
  MemoryStore& store = objects_->memory_store();
  rpc::TaskSpec spec;
  spec.set_task_id(task_id.Binary());
  spec.set_job_id(options_.job_id.Binary());
  spec.set_function_name(function_name);
  spec.set_num_returns(1);
  spec.set_caller_address(address_);
  spec.set_caller_node_id(node_id_.Binary());
  spec.set_caller_worker_id(objects_->worker_id().Binary());
  std::vector<ObjectRefInfo> held;
  for (auto& arg : args) {
    rpc::TaskArg* out = spec.add_args();
    std::optional<StoredObject> ready;
    if (arg.by_reference && references.OwnedByMe(arg.ref)) ready = store.GetIfReady(arg.ref.id);
    if (ready && ready->error == StoredObject::Error::kNone && !ready->value.in_plasma()) {
      // A small value we own and already have travels inline: the worker need not ask for it.
      // The reference is still held until the task is done (values inside it may be borrowed).
      out->set_inline_value(ready->value.inline_value());
      held.push_back(arg.ref);
    } else if (arg.by_reference) {
      out->set_object_id(arg.ref.id.Binary());
      out->set_owner_address(arg.ref.owner_address);
      held.push_back(arg.ref);
      if (owned_dependencies && references.OwnedByMe(arg.ref) && !store.IsReady(arg.ref.id)) {
        owned_dependencies->push_back(arg.ref.id);
      }
    } else {
      out->set_inline_value(std::move(arg.value));
    }
    for (auto& inner : arg.contained) held.push_back(std::move(inner));
  }
  for (const auto& ref : held) references.AddSubmitted(ref);
  if (!held.empty()) {
    absl::MutexLock lock(&mu_);
    task_refs_[task_id] = std::move(held);
  }
  return spec;
}

absl::StatusOr<ObjectRefInfo> SubmissionFacade::SubmitTask(const std::string& function_name,
                                                           std::vector<TaskArgSpec> args,
                                                           const TaskSubmitOptions& options) {
  TROUPE_RETURN_IF_ERROR(
      CheckResourceDemand(absl::StrCat("task ", function_name, ": resources"), options.resources));
  if (options.num_returns < 1) {
    return absl::InvalidArgumentError(absl::StrCat("task ", function_name, ": num_returns is ",
                                                   options.num_returns, "; it must be at least 1"));
  }
  if (options.streaming && (options_.streams == nullptr || options.num_returns != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task ", function_name,
        ": a streaming generator has one return (its end) and needs a process that reads "
        "streams"));
  }
  const TaskId task_id = TaskId::FromRandom();
  const ObjectRefInfo result{ObjectId::FromIndex(task_id, 1), address_};
  for (const ObjectId& id : ReturnIdsOf(task_id, options.num_returns)) {
    objects_->references().AddLocal({id, address_});
  }
  std::vector<ObjectId> owned_dependencies;
  rpc::TaskSpec spec = BuildTaskSpec(task_id, function_name, std::move(args), &owned_dependencies);
  spec.set_type(rpc::TaskSpec::NORMAL_TASK);
  spec.set_num_returns(options.num_returns);
  if (options.streaming) {
    spec.set_streaming(true);
    spec.set_stream_backpressure(std::max<int64_t>(0, options.stream_backpressure));
    options_.streams->Register(task_id, spec.stream_backpressure());
  }
  for (const auto& [name, amount] : options.resources) {
    (*spec.mutable_required_resources())[name] = amount;
  }
  spec.set_max_retries(options.max_retries);
  spec.set_retry_exceptions(options.retry_exceptions);
  spec.set_name(options.name);
  *spec.mutable_strategy() = options.strategy;
  if (!TrackPending(spec)) return result;
  RecordChild(spec);
  const absl::Time submitted = clock_->Now();
  if (!options.placement_group_id.empty()) {
    // Into a bundle: lease where the bundle is; that raylet hands out its reserved resources.
    auto bundle = ResolveBundle(options.placement_group_id, options.bundle_index);
    if (!bundle.ok()) {
      RecordSubmission(spec, rpc::TaskEvent::SUBMITTED, submitted);
      OnTaskFailure(spec, StoredObject::Error::kTaskFailed,
                    absl::StrCat("task ", function_name, " cannot run in its placement group: ",
                                 bundle.status().message()));
      return result;
    }
    spec.set_placement_group_id(options.placement_group_id);
    spec.set_bundle_index(bundle->second);
    spec.mutable_strategy()->set_kind(rpc::SchedulingStrategy::NODE_AFFINITY);
    spec.mutable_strategy()->set_node_id(bundle->first.Binary());
    spec.mutable_strategy()->set_soft(false);
  }
  if (!spec.streaming()) {
    // Kept so the result can be rebuilt if it is lost (and, for that, its owned arguments).
    std::vector<ObjectId> owned_args;
    for (const auto& arg : spec.args()) {
      if (!arg.object_id().empty() && arg.owner_address() == address_) {
        owned_args.push_back(*ObjectId::FromBinary(arg.object_id()));
      }
    }
    lineage_.Record(spec, owned_args);
  }
  if (owned_dependencies.empty()) {
    RecordSubmission(spec, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, submitted);
    tasks_->Submit(std::move(spec));
    return result;
  }
  RecordSubmission(spec, rpc::TaskEvent::PENDING_ARGS_AVAIL, submitted);
  // Lease a worker only once the arguments exist, so workers never sit waiting for them.
  auto shared = std::make_shared<rpc::TaskSpec>(std::move(spec));
  auto remaining = std::make_shared<std::atomic<size_t>>(owned_dependencies.size());
  for (const auto& dependency : owned_dependencies) {
    objects_->memory_store().OnReady(dependency, absl::InfiniteFuture(),
                                     [this, shared, remaining](std::optional<StoredObject>) {
                                       if (--*remaining != 0) return;
                                       RecordEvent(*shared, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT,
                                                   /*describe=*/false);
                                       tasks_->Submit(std::move(*shared));
                                     });
  }
  return result;
}

void SubmissionFacade::Cancel(const ObjectRefInfo& ref, bool force, bool recursive) {
  if (!objects_->references().OwnedByMe(ref)) return;
  CancelOwned(ref.id, force, recursive);
}

void SubmissionFacade::CancelOwned(const ObjectId& id, bool force, bool recursive) {
  if (objects_->memory_store().IsReady(id)) return;
  const TaskId task_id = id.CreatingTaskId();
  if (tasks_->Cancel(task_id, force, recursive)) return;
  ActorId actor_id;
  if (actor_calls_->Cancel(task_id, force, recursive, &actor_id) !=
      ActorTaskSubmitter::CancelOutcome::kKillActor) {
    return;
  }
  // As troupe::Kill does (restart rules apply); the call fails as cancelled once the actor's
  // death is known.
  if (absl::Status killed = KillActor(actor_id, /*no_restart=*/false); !killed.ok()) {
    TROUPE_LOG(Warning) << "cancelling a call with force could not kill actor "
                        << actor_id.Hex().substr(0, 8) << ": " << killed;
  }
}

void SubmissionFacade::RecordChild(const rpc::TaskSpec& spec) {
  if (!options_.current_task) return;
  std::string parent = options_.current_task();
  if (parent.empty()) return;
  absl::MutexLock lock(&mu_);
  children_[parent].push_back(ReturnIdOf(spec));
}

void SubmissionFacade::CancelChildren(const std::string& parent) {
  std::vector<ObjectId> children;
  {
    absl::MutexLock lock(&mu_);
    auto it = children_.find(parent);
    if (it == children_.end()) return;
    children = it->second;
  }
  for (const ObjectId& child : children) CancelOwned(child, /*force=*/false, /*recursive=*/true);
}

void SubmissionFacade::ForgetChildren(const std::string& parent) {
  absl::MutexLock lock(&mu_);
  children_.erase(parent);
}

bool SubmissionFacade::TrackPending(const rpc::TaskSpec& spec) {
  std::string unreachable;
  {
    absl::MutexLock lock(&mu_);
    if (!unreachable_.has_value()) {
      pending_returns_[ReturnIdOf(spec)] = {spec.function_name(), spec.num_returns()};
      return true;
    }
    unreachable = *unreachable_;
  }
  for (const ObjectId& id : ReturnIdsOf(spec)) {
    objects_->StoreError(id, spec.function_name(), StoredObject::Error::kClusterUnreachable,
                         unreachable);
  }
  ReleaseTaskReferences(spec);
  return false;
}

void SubmissionFacade::FailAllAsUnreachable(const std::string& message) {
  absl::flat_hash_map<ObjectId, PendingReturns> pending;
  {
    absl::MutexLock lock(&mu_);
    if (unreachable_.has_value()) return;
    unreachable_ = message;
    pending.swap(pending_returns_);
  }
  for (const auto& [return_id, returns] : pending) {
    for (const ObjectId& id : ReturnIdsOf(return_id.CreatingTaskId(), returns.num_returns)) {
      objects_->StoreError(id, returns.function_name, StoredObject::Error::kClusterUnreachable,
                           message);
    }
  }
}

void SubmissionFacade::OnTaskReply(const rpc::TaskSpec& spec, const rpc::PushTaskReply& reply) {
  {
    absl::MutexLock lock(&mu_);
    pending_returns_.erase(ReturnIdOf(spec));
  }
  objects_->StoreReturns(reply);
  lineage_.Finished(spec);
  ReleaseTaskReferences(spec);
}

void SubmissionFacade::OnTaskFailure(const rpc::TaskSpec& spec, StoredObject::Error error,
                                     const std::string& message) {
  const ObjectId return_id = ReturnIdOf(spec);
  bool already_failed;
  {
    absl::MutexLock lock(&mu_);
    // Failed as unreachable already: keep that error (the reader saw it first).
    already_failed = pending_returns_.erase(return_id) == 0 && unreachable_.has_value();
  }
  const bool rebuilding =
      error != StoredObject::Error::kCancelled && lineage_.IsBeingRebuilt(return_id);
  for (const ObjectId& id : ReturnIdsOf(spec)) {
    if (already_failed) break;
    if (rebuilding) {
      // A run meant to rebuild a lost object: its readers learn the object is gone for good.
      // Another return of the task that still has its value keeps it.
      std::optional<StoredObject> current = objects_->memory_store().GetIfReady(id);
      if (current && current->error == StoredObject::Error::kNone) continue;
      objects_->StoreError(
          id, spec.function_name(), StoredObject::Error::kReconstructionFailed,
          absl::StrCat("object ", id.Hex(), " was lost and rebuilding it by ", "running task ",
                       spec.function_name(), " again failed: ", message));
    } else {
      objects_->StoreError(id, spec.function_name(), error, message);
    }
  }
  RecordEvent(spec, rpc::TaskEvent::FAILED, /*describe=*/false, message);
  lineage_.Finished(spec);
  ReleaseTaskReferences(spec);
}

void SubmissionFacade::OnTaskRetry(const rpc::TaskSpec& spec, const std::string& why) {
  if (!why.empty()) RecordEvent(spec, rpc::TaskEvent::FAILED, /*describe=*/false, why);
  rpc::TaskSpec next;
  next.set_task_id(spec.task_id());
  next.set_job_id(spec.job_id());
  next.set_function_name(spec.function_name());
  next.set_name(spec.name());
  next.set_attempt(spec.attempt() + 1);
  RecordSubmission(next, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, clock_->Now());
}

void SubmissionFacade::RecordEvent(const rpc::TaskSpec& spec, rpc::TaskEvent::State state,
                                   bool describe, std::string error_message) {
  if (options_.task_events == nullptr) return;
  TaskStateEvent event = TaskStateEventOf(spec);
  event.state = state;
  event.time = clock_->Now();
  if (describe) {
    event.name = TaskDisplayNameOf(spec);
    event.type = spec.type();
    if (auto actor_id = ActorId::FromBinary(spec.actor_id()); actor_id.ok()) {
      event.actor_id = *actor_id;
    }
  }
  event.error_message = std::move(error_message);
  options_.task_events->Record(std::move(event));
}

void SubmissionFacade::RecordSubmission(const rpc::TaskSpec& spec, rpc::TaskEvent::State state,
                                        absl::Time submitted) {
  if (options_.task_events == nullptr) return;
  TaskStateEvent event = TaskStateEventOf(spec);
  event.state = state;
  event.time = state == rpc::TaskEvent::SUBMITTED ? submitted : clock_->Now();
  if (state != rpc::TaskEvent::SUBMITTED) event.submitted_time = submitted;
  event.name = TaskDisplayNameOf(spec);
  event.type = spec.type();
  if (auto actor_id = ActorId::FromBinary(spec.actor_id()); actor_id.ok()) {
    event.actor_id = *actor_id;
  }
  options_.task_events->Record(std::move(event));
}

void SubmissionFacade::ReleaseLineage(const ObjectId& id) {
  lineage_.ReleaseObject(id);
  // A stream's end object: the reader let go of the stream.
  if (options_.streams != nullptr && id.Index() == 1)
    options_.streams->Release(id.CreatingTaskId());
}

void SubmissionFacade::Reconstruct(const ObjectId& id, const std::string& what_happened) {
  if (options_.streams != nullptr && !objects_->IsPut(id) && options_.streams->IsStreamItem(id)) {
    objects_->StoreError(
        id, "", StoredObject::Error::kReconstructionFailed,
        absl::StrCat("object ", id.Hex(), " (item ", id.Index() - 1,
                     " of a streaming generator's stream) ", what_happened,
                     ", and cannot be rebuilt: items of streaming generators are not rebuilt "
                     "(read them while their node lives, or keep what must survive a node's "
                     "death with troupe::Put)"));
    return;
  }
  // Another return of the same task was lost too and its task runs again already: that run
  // stores every return of the task, this one included.
  if (lineage_.IsBeingRebuilt(id)) return;
  Lineage::Plan plan = lineage_.PlanReconstruction(id, objects_->IsPut(id), what_happened);
  if (!plan.resubmit) {
    objects_->StoreError(id, "", plan.error, plan.message);
    return;
  }
  options_.warn(absl::StrCat("object ", id.Hex(), " ", what_happened, "; rebuilding it by running ",
                             plan.spec.function_name(), " again (attempt ", plan.spec.attempt() + 1,
                             ")"));
  ++reconstructions_;
  Resubmit(std::move(plan.spec), id);
}

void SubmissionFacade::Resubmit(rpc::TaskSpec spec, const ObjectId& return_id) {
  ReferenceCounter& references = objects_->references();
  MemoryStore& store = objects_->memory_store();
  const TaskId task_id = *TaskId::FromBinary(spec.task_id());
  std::vector<ObjectRefInfo> held;
  std::vector<ObjectId> owned_dependencies;
  for (const auto& arg : spec.args()) {
    if (arg.object_id().empty()) continue;
    const ObjectRefInfo ref{*ObjectId::FromBinary(arg.object_id()), arg.owner_address()};
    references.AddSubmitted(ref);  // first, so a rebuilt argument is kept until this runs
    held.push_back(ref);
    if (references.OwnedByMe(ref) && !store.IsReady(ref.id)) {
      owned_dependencies.push_back(ref.id);
    }
  }
  if (!held.empty()) {
    absl::MutexLock lock(&mu_);
    task_refs_[task_id] = std::move(held);
  }
  for (const auto& dependency : owned_dependencies) {
    // Freed after this task first ran: rebuild it too (unless that is under way already).
    if (!lineage_.IsBeingRebuilt(dependency)) {
      Reconstruct(dependency, absl::StrCat("was freed after use and is needed to rebuild object ",
                                           return_id.Hex()));
    }
  }
  if (owned_dependencies.empty()) {
    tasks_->Submit(std::move(spec));
    return;
  }
  auto shared = std::make_shared<rpc::TaskSpec>(std::move(spec));
  auto remaining = std::make_shared<std::atomic<size_t>>(owned_dependencies.size());
  for (const auto& dependency : owned_dependencies) {
    store.OnReady(
        dependency, absl::InfiniteFuture(),
        [this, shared, remaining, dependency, return_id](std::optional<StoredObject> object) {
          if (object && object->error != StoredObject::Error::kNone &&
              object->error != StoredObject::Error::kApplication) {
            // The argument cannot be had: neither can this object. (The last callback still
            // finds the spec; the failure is stored once.)
            if (!objects_->memory_store().IsReady(return_id)) {
              objects_->StoreError(
                  return_id, shared->function_name(), StoredObject::Error::kReconstructionFailed,
                  absl::StrCat("object ", return_id.Hex(),
                               " was lost and cannot be rebuilt: ", "its argument ",
                               dependency.Hex(), " cannot be had: ", object->error_message));
            }
          }
          if (--*remaining != 0) return;
          if (objects_->memory_store().IsReady(return_id)) {
            lineage_.Finished(*shared);
            ReleaseTaskReferences(*shared);
            return;
          }
          tasks_->Submit(std::move(*shared));
        });
  }
}

void SubmissionFacade::ReleaseTaskReferences(const rpc::TaskSpec& spec) {
  std::vector<ObjectRefInfo> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = task_refs_.find(*TaskId::FromBinary(spec.task_id()));
    if (it == task_refs_.end()) return;
    held = std::move(it->second);
    task_refs_.erase(it);
  }
  for (const auto& ref : held) objects_->references().RemoveSubmitted(ref.id);
}

// ---- Actors ----

absl::StatusOr<ActorId> SubmissionFacade::CreateActor(const std::string& factory_name,
                                                      std::vector<TaskArgSpec> args,
                                                      const TaskSubmitOptions& options,
                                                      const rpc::ActorInfo& actor_options,
                                                      const std::string& namespace_name) {
  TROUPE_RETURN_IF_ERROR(
      CheckResourceDemand(absl::StrCat("actor ", factory_name, ": resources"), options.resources));
  const ActorId actor_id = ActorId::FromRandom();
  // The creation task keeps its argument references for the actor's whole life: a restart
  // runs it again.
  rpc::TaskSpec spec = BuildTaskSpec(TaskId::FromRandom(), factory_name, std::move(args), nullptr);
  spec.set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
  spec.set_actor_id(actor_id.Binary());
  for (const auto& [name, amount] : options.resources) {
    (*spec.mutable_required_resources())[name] = amount;
  }
  *spec.mutable_strategy() = options.strategy;
  spec.set_max_concurrency(std::max(1, actor_options.max_concurrency()));
  *spec.mutable_concurrency_groups() = actor_options.concurrency_groups();
  spec.set_async_actor(actor_options.async_actor());
  rpc::RegisterActorRequest request;
  *request.mutable_creation_task() = spec;
  rpc::ActorInfo* info = request.mutable_actor();
  *info = actor_options;
  info->set_actor_id(actor_id.Binary());
  info->set_job_id(options_.job_id.Binary());
  // The caller names the class (e.g. "Store"); otherwise the factory ("Store::Create") stands in.
  if (info->class_name().empty()) info->set_class_name(factory_name);
  info->set_owner_address(address_);
  if (info->namespace_name().empty()) info->set_namespace_name(namespace_name);
  *info->mutable_required_resources() = spec.required_resources();
  TROUPE_RETURN_IF_ERROR(gcs_->RegisterActor(request));
  RecordEvent(spec, rpc::TaskEvent::SUBMITTED, /*describe=*/true);
  return actor_id;
}

ObjectRefInfo SubmissionFacade::SubmitActorTask(const ActorId& actor_id,
                                                const std::string& method_name,
                                                std::vector<TaskArgSpec> args,
                                                const ActorCallSubmitOptions& options) {
  const TaskId task_id = TaskId::FromRandom();
  const ObjectRefInfo result{ObjectId::FromIndex(task_id, 1), address_};
  const int num_returns = std::max(1, options.num_returns);
  for (const ObjectId& id : ReturnIdsOf(task_id, num_returns)) {
    objects_->references().AddLocal({id, address_});
  }
  rpc::TaskSpec spec = BuildTaskSpec(task_id, method_name, std::move(args), nullptr);
  spec.set_type(rpc::TaskSpec::ACTOR_TASK);
  spec.set_num_returns(num_returns);
  if (options.streaming && options_.streams != nullptr && num_returns == 1) {
    spec.set_streaming(true);
    spec.set_stream_backpressure(std::max<int64_t>(0, options.stream_backpressure));
    options_.streams->Register(task_id, spec.stream_backpressure());
  }
  spec.set_actor_id(actor_id.Binary());
  spec.set_name(options.name);
  spec.set_concurrency_group(options.concurrency_group);
  if (!TrackPending(spec)) return result;
  RecordEvent(spec, rpc::TaskEvent::SUBMITTED, /*describe=*/true);
  RecordChild(spec);
  actor_calls_->Submit(actor_id, std::move(spec));
  return result;
}

absl::Status SubmissionFacade::KillActor(const ActorId& actor_id, bool no_restart) {
  return gcs_->KillActor(actor_id.Binary(), no_restart);
}

absl::StatusOr<std::optional<ActorId>> SubmissionFacade::GetNamedActor(
    const std::string& name, const std::string& namespace_name) {
  rpc::GetActorInfoRequest request;
  request.set_name(name);
  request.set_namespace_name(namespace_name);
  auto info = gcs_->GetActorInfo(request);
  if (info.status().code() == absl::StatusCode::kNotFound) return std::optional<ActorId>();
  if (!info.ok()) return info.status();
  return std::optional<ActorId>(*ActorId::FromBinary(info->actor_id()));
}

// ---- Placement groups ----

absl::StatusOr<std::pair<NodeId, int>> SubmissionFacade::ResolveBundle(const std::string& group_id,
                                                                       int index) {
  auto id = PlacementGroupId::FromBinary(group_id);
  if (!id.ok()) return id.status();
  rpc::GetPlacementGroupRequest request;
  request.set_placement_group_id(group_id);
  const absl::Time warn_at = clock_->Now() + absl::Seconds(5);
  bool warned = false;
  while (true) {
    auto group = gcs_->GetPlacementGroup(request);
    if (!group.ok()) return group.status();
    if (group->state() == rpc::PlacementGroupInfo::REMOVED) {
      return absl::NotFoundError("the placement group was removed");
    }
    if (index >= group->bundles_size()) {
      return absl::NotFoundError(absl::StrCat("the placement group has no bundle ", index));
    }
    if (group->state() == rpc::PlacementGroupInfo::CREATED) {
      const int chosen =
          index >= 0 ? index : static_cast<int>(next_bundle_++ % group->bundles_size());
      auto node = NodeId::FromBinary(group->bundles(chosen).node_id());
      if (!node.ok()) return node.status();
      return std::make_pair(*node, index >= 0 ? index : chosen);
    }
    if (!warned && clock_->Now() >= warn_at) {
      warned = true;
      options_.warn("waiting for a placement group to be placed before submitting");
    }
    // Until it is placed (or removed); then read where its bundles are.
    auto placed = options_.wait_placement_group(*id, warned ? absl::InfiniteFuture() : warn_at);
    if (!placed.ok()) return placed.status();
  }
}

absl::StatusOr<PlacementGroupId> SubmissionFacade::CreatePlacementGroup(
    rpc::PlacementGroupInfo group) {
  for (int i = 0; i < group.bundles_size(); ++i) {
    const auto& resources = group.bundles(i).resources();
    TROUPE_RETURN_IF_ERROR(CheckResourceDemand(absl::StrCat("placement group bundles[", i, "]"),
                                               {resources.begin(), resources.end()}));
  }
  const PlacementGroupId id = PlacementGroupId::FromRandom();
  group.set_placement_group_id(id.Binary());
  group.set_creator_job_id(options_.job_id.Binary());
  TROUPE_RETURN_IF_ERROR(gcs_->CreatePlacementGroup(group));
  return id;
}

absl::Status SubmissionFacade::RemovePlacementGroup(const PlacementGroupId& id) {
  return gcs_->RemovePlacementGroup(id.Binary());
}

absl::StatusOr<std::optional<PlacementGroupId>> SubmissionFacade::GetPlacementGroup(
    const std::string& name) {
  rpc::GetPlacementGroupRequest request;
  request.set_name(name);
  auto group = gcs_->GetPlacementGroup(request);
  if (group.status().code() == absl::StatusCode::kNotFound) {
    return std::optional<PlacementGroupId>();
  }
  if (!group.ok()) return group.status();
  return std::optional<PlacementGroupId>(
      *PlacementGroupId::FromBinary(group->placement_group_id()));
}

}  // namespace troupe
