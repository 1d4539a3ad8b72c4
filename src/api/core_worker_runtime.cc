#include "src/api/core_worker_runtime.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_replace.h"
#include "src/api/status_exceptions.h"
#include "src/api/throw_stacks.h"
#include "troupe/api.h"
#include "troupe/errors.h"
#include "troupe/runtime_context.h"

namespace troupe::internal {

std::string DemangledName(const char* mangled);  // api_support.cc

namespace {

ObjectRefInfo ToCore(const RefInfo& ref) {
  auto id = ObjectId::FromBinary(ref.object_id);
  if (!id.ok()) throw TroupeError("not an ObjectRef: " + std::string(id.status().message()));
  return {*id, ref.owner_address};
}

RefInfo ToApi(const ObjectRefInfo& ref) { return {ref.id.Binary(), ref.owner_address}; }

// The references to a task's `num_returns` results, given its first (ObjectId index 1; the
// others follow it: index 2, 3, ...).
std::vector<RefInfo> ReturnsOf(const ObjectRefInfo& first, int num_returns) {
  std::vector<RefInfo> refs;
  const TaskId task = first.id.CreatingTaskId();
  for (int i = 0; i < std::max(1, num_returns); ++i) {
    refs.push_back({ObjectId::FromIndex(task, first.id.Index() + i).Binary(), first.owner_address});
  }
  return refs;
}

absl::Time DeadlineOf(int64_t timeout_ms) {
  return timeout_ms < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(timeout_ms);
}

rpc::SchedulingStrategy ToStrategy(const SchedulingStrategy& strategy) {
  rpc::SchedulingStrategy out;
  switch (strategy.kind) {
    case SchedulingStrategy::Kind::kDefault:
      break;
    case SchedulingStrategy::Kind::kSpread:
      out.set_kind(rpc::SchedulingStrategy::SPREAD);
      break;
    case SchedulingStrategy::Kind::kNodeAffinity: {
      auto node = NodeId::FromHex(strategy.node_id_hex);
      if (!node.ok()) throw TroupeError("NodeAffinity: " + std::string(node.status().message()));
      out.set_kind(rpc::SchedulingStrategy::NODE_AFFINITY);
      out.set_node_id(node->Binary());
      out.set_soft(strategy.soft);
      break;
    }
  }
  return out;
}

rpc::LabelSelector ToLabelSelector(const std::vector<LabelConstraint>& constraints, bool soft) {
  rpc::LabelSelector out;
  for (const LabelConstraint& constraint : constraints) {
    rpc::LabelConstraint* c = out.add_constraints();
    c->set_key(constraint.key);
    c->set_op(static_cast<rpc::LabelConstraint::Operator>(constraint.op));
    for (const auto& value : constraint.values) c->add_values(value);
  }
  if (!constraints.empty()) out.set_soft(soft);
  return out;
}

// A task or actor inside a placement group runs in its bundle: selectors go on bundles.
void CheckNoSelectorInGroup(const std::vector<LabelConstraint>& selector,
                            const std::string& placement_group_id) {
  if (!selector.empty() && !placement_group_id.empty()) {
    throw InvalidArgumentError(
        "SetLabelSelector with SetPlacementGroup: a task or actor in a placement group runs on "
        "its bundle's node; select nodes for the bundles instead "
        "(PlacementGroupOptions::bundle_label_selectors)");
  }
}

std::vector<TaskArgSpec> ToArgSpecs(std::vector<TaskArgument> args) {
  std::vector<TaskArgSpec> specs;
  specs.reserve(args.size());
  for (auto& arg : args) {
    TaskArgSpec spec;
    spec.by_reference = arg.by_reference;
    if (arg.by_reference) {
      spec.ref = ToCore(arg.ref);
    } else {
      spec.value = std::move(arg.value);
    }
    for (const auto& inner : arg.contained) spec.contained.push_back(ToCore(inner));
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

std::vector<RefInfo> CoreWorkerRuntime::SubmitTask(const std::string& function_name,
                                                   std::vector<TaskArgument> args,
                                                   const TaskOptions& options) {
  std::vector<TaskArgSpec> specs = ToArgSpecs(std::move(args));
  TaskSubmitOptions submit;
  submit.name = options.name;
  submit.resources = options.resources;
  submit.max_retries = options.max_retries;
  submit.retry_exceptions = options.retry_exceptions;
  CheckNoSelectorInGroup(options.label_selector, options.placement_group_id);
  submit.strategy = ToStrategy(options.strategy);
  *submit.strategy.mutable_label_selector() =
      ToLabelSelector(options.label_selector, options.label_selector_soft);
  submit.placement_group_id = options.placement_group_id;
  submit.bundle_index = options.bundle_index;
  submit.num_returns = options.num_returns;
  submit.streaming = options.streaming;
  submit.stream_backpressure = options.stream_backpressure;
  auto ref = core_->SubmitTask(function_name, std::move(specs), submit);
  if (!ref.ok()) ThrowFor(ref.status());
  return ReturnsOf(*ref, options.num_returns);
}

RefInfo CoreWorkerRuntime::Put(size_t size, const std::function<void(char*)>& write,
                               std::vector<RefInfo> contained) {
  std::vector<ObjectRefInfo> inner;
  for (const auto& ref : contained) inner.push_back(ToCore(ref));
  auto ref = core_->Put(size, write, std::move(inner));
  if (!ref.ok()) ThrowFor(ref.status());
  return ToApi(*ref);
}

std::vector<Buffer> CoreWorkerRuntime::Get(const std::vector<RefInfo>& refs, int64_t timeout_ms) {
  std::vector<ObjectRefInfo> core_refs;
  core_refs.reserve(refs.size());
  for (const auto& ref : refs) core_refs.push_back(ToCore(ref));
  auto results = core_->Get(core_refs, DeadlineOf(timeout_ms));
  if (!results.ok()) ThrowFor(results.status());
  std::vector<Buffer> buffers;
  buffers.reserve(results->size());
  for (auto& result : *results) {
    if (result.error != StoredObject::Error::kNone) ThrowFor(result);
    buffers.push_back({result.buffer.data, result.buffer.size, std::move(result.buffer.holder)});
  }
  return buffers;
}

std::vector<bool> CoreWorkerRuntime::Wait(const std::vector<RefInfo>& refs, int num_ready,
                                          int64_t timeout_ms, bool fetch_local) {
  std::vector<ObjectRefInfo> core_refs;
  for (const auto& ref : refs) core_refs.push_back(ToCore(ref));
  const absl::Time deadline = DeadlineOf(timeout_ms);
  std::vector<bool> ready = core_->Wait(core_refs, num_ready, deadline);
  if (!fetch_local) return ready;
  // Ray's fetch_local: the ready ones are read here (a Get that keeps nothing), which pulls those
  // on other nodes into this node's store; one not here by the deadline counts as unready. A
  // failed object is ready (its error is here).
  std::vector<ObjectRefInfo> to_fetch;
  for (size_t i = 0; i < core_refs.size(); ++i) {
    if (ready[i]) to_fetch.push_back(core_refs[i]);
  }
  if (to_fetch.empty()) return ready;
  auto fetched = core_->Get(to_fetch, deadline);
  if (fetched.ok()) return ready;
  if (fetched.status().code() != absl::StatusCode::kDeadlineExceeded) ThrowFor(fetched.status());
  // Out of time: which of them are here already.
  for (size_t i = 0; i < core_refs.size(); ++i) {
    if (!ready[i]) continue;
    auto here = core_->Get({core_refs[i]}, absl::Now());
    if (!here.ok()) {
      if (here.status().code() != absl::StatusCode::kDeadlineExceeded) ThrowFor(here.status());
      ready[i] = false;
    }
  }
  return ready;
}

bool CoreWorkerRuntime::IsCancelled() { return CoreWorker::IsCurrentTaskCancelled(); }

void CoreWorkerRuntime::Cancel(const RefInfo& ref, bool force, bool recursive) {
  core_->Cancel(ToCore(ref), force, recursive);
}

std::string CoreWorkerRuntime::CreateActor(const std::string& factory_name,
                                           std::vector<TaskArgument> args,
                                           const ActorOptions& options) {
  TaskSubmitOptions submit;
  submit.resources = options.resources;
  CheckNoSelectorInGroup(options.label_selector, options.placement_group_id);
  submit.strategy = ToStrategy(options.strategy);
  *submit.strategy.mutable_label_selector() =
      ToLabelSelector(options.label_selector, options.label_selector_soft);
  rpc::ActorInfo info;
  info.set_name(options.name);
  info.set_namespace_name(options.namespace_name);
  info.set_max_restarts(options.max_restarts);
  info.set_max_task_retries(options.max_task_retries);
  info.set_max_concurrency(options.max_concurrency);
  info.mutable_concurrency_groups()->insert(options.concurrency_groups.begin(),
                                            options.concurrency_groups.end());
  info.set_async_actor(options.async_actor);
  info.set_detached(options.detached);
  info.set_placement_group_id(options.placement_group_id);
  info.set_bundle_index(options.bundle_index);
  if (!options.class_type_name.empty()) {
    // "Store", "ns::Store"; a class in an anonymous namespace without that prefix.
    info.set_class_name(absl::StrReplaceAll(DemangledName(options.class_type_name.c_str()),
                                            {{"(anonymous namespace)::", ""}}));
  }
  if (!options.get_if_exists) {
    auto id = core_->CreateActor(factory_name, ToArgSpecs(std::move(args)), submit, info);
    if (!id.ok()) ThrowFor(id.status());
    return id->Binary();
  }
  if (options.name.empty()) {
    throw InvalidArgumentError(
        "SetGetIfExists needs a name: call SetName(\"...\") on the actor too (an actor without "
        "a name cannot be found again)");
  }
  // Look up, else create; a creation that loses a race to another creator finds the winner. An
  // actor that dies between the two steps frees its name: try again (a few times).
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto existing = core_->GetNamedActor(options.name, options.namespace_name);
    if (!existing.ok()) ThrowFor(existing.status());
    if (existing->has_value()) return (*existing)->Binary();
    auto id = core_->CreateActor(factory_name, ToArgSpecs(args), submit, info);
    if (id.ok()) return id->Binary();
    if (id.status().code() != absl::StatusCode::kAlreadyExists) ThrowFor(id.status());
    last = id.status();
  }
  ThrowFor(last);
}

std::vector<RefInfo> CoreWorkerRuntime::SubmitActorTask(const std::string& actor_id,
                                                        const std::string& method_name,
                                                        std::vector<TaskArgument> args,
                                                        const ActorCallOptions& options) {
  auto id = ActorId::FromBinary(actor_id);
  if (!id.ok()) throw TroupeError("not an actor handle: " + std::string(id.status().message()));
  ActorCallSubmitOptions submit;
  submit.name = options.name;
  submit.concurrency_group = options.concurrency_group;
  submit.num_returns = options.num_returns;
  submit.streaming = options.streaming;
  submit.stream_backpressure = options.stream_backpressure;
  return ReturnsOf(core_->SubmitActorTask(*id, method_name, ToArgSpecs(std::move(args)), submit),
                   options.num_returns);
}

void CoreWorkerRuntime::ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                                         std::vector<RefInfo> contained) {
  std::vector<ObjectRefInfo> inner;
  for (const auto& ref : contained) inner.push_back(ToCore(ref));
  absl::Status status = core_->ReportStreamItem(size, write, std::move(inner));
  if (status.code() == absl::StatusCode::kCancelled) {
    throw TaskCancelledError(std::string(status.message()));
  }
  if (!status.ok()) ThrowFor(status);
}

std::optional<RefInfo> CoreWorkerRuntime::NextStreamItem(const RefInfo& stream,
                                                         int64_t timeout_ms) {
  auto item = core_->NextStreamItem(ToCore(stream), DeadlineOf(timeout_ms));
  if (!item.ok()) ThrowFor(item.status());
  if (!item->has_value()) return std::nullopt;
  return ToApi(**item);
}

int64_t CoreWorkerRuntime::NumUnreadStreamItems(const RefInfo& stream) {
  return core_->NumUnreadStreamItems(ToCore(stream));
}

void CoreWorkerRuntime::KillActor(const std::string& actor_id, bool no_restart) {
  auto id = ActorId::FromBinary(actor_id);
  if (!id.ok()) throw TroupeError("not an actor handle");
  if (auto status = core_->KillActor(*id, no_restart); !status.ok()) ThrowFor(status);
}

std::string CoreWorkerRuntime::GetNamedActor(const std::string& name, const std::string& ns) {
  auto id = core_->GetNamedActor(name, ns);
  if (!id.ok()) ThrowFor(id.status());
  return id->has_value() ? (*id)->Binary() : "";
}

void CoreWorkerRuntime::ExitActor() { core_->ExitActorAfterCurrentTask(); }

bool CoreWorkerRuntime::WasCurrentActorRestarted() {
  return actor_restarted_ != nullptr && actor_restarted_();
}

std::string CoreWorkerRuntime::CreatePlacementGroup(const PlacementGroupSpec& spec) {
  rpc::PlacementGroupInfo group;
  group.set_name(spec.name);
  group.set_strategy(static_cast<rpc::PlacementGroupInfo::Strategy>(spec.strategy));
  group.set_detached(spec.detached);
  for (size_t i = 0; i < spec.bundles.size(); ++i) {
    rpc::Bundle* out = group.add_bundles();
    for (const auto& [name, amount] : spec.bundles[i]) (*out->mutable_resources())[name] = amount;
    if (i < spec.bundle_label_selectors.size()) {
      *out->mutable_label_selector() =
          ToLabelSelector(spec.bundle_label_selectors[i], spec.bundle_labels_soft);
    }
  }
  auto id = core_->CreatePlacementGroup(std::move(group));
  if (!id.ok()) ThrowFor(id.status());
  return id->Binary();
}

void CoreWorkerRuntime::RemovePlacementGroup(const std::string& id) {
  auto group = PlacementGroupId::FromBinary(id);
  if (!group.ok()) throw TroupeError("not a placement group");
  if (auto status = core_->RemovePlacementGroup(*group); !status.ok()) ThrowFor(status);
}

bool CoreWorkerRuntime::WaitPlacementGroup(const std::string& id, int64_t timeout_ms) {
  auto group = PlacementGroupId::FromBinary(id);
  if (!group.ok()) throw TroupeError("not a placement group");
  auto placed = core_->WaitPlacementGroup(*group, DeadlineOf(timeout_ms));
  if (!placed.ok()) ThrowFor(placed.status());
  return *placed;
}

std::string CoreWorkerRuntime::GetPlacementGroup(const std::string& name) {
  auto id = core_->GetPlacementGroup(name);
  if (!id.ok()) ThrowFor(id.status());
  return id->has_value() ? (*id)->Binary() : "";
}

namespace {

PlacementGroupInfo ToApi(const rpc::PlacementGroupInfo& group) {
  PlacementGroupInfo info;
  info.id = BytesToHex(group.placement_group_id());
  info.name = group.name();
  info.strategy = static_cast<PlacementStrategy>(group.strategy());
  switch (group.state()) {
    case rpc::PlacementGroupInfo::CREATED:
      info.state = PlacementGroupState::kCreated;
      break;
    case rpc::PlacementGroupInfo::REMOVED:
      info.state = PlacementGroupState::kRemoved;
      break;
    case rpc::PlacementGroupInfo::RESCHEDULING:
      info.state = PlacementGroupState::kRescheduling;
      break;
    default:
      info.state = PlacementGroupState::kPending;
  }
  for (const auto& bundle : group.bundles()) {
    info.bundles.push_back({bundle.resources().begin(), bundle.resources().end()});
    info.bundle_node_ids.push_back(BytesToHex(bundle.node_id()));
  }
  info.pending_reason = group.pending_reason();
  info.creator_job_id = BytesToHex(group.creator_job_id());
  info.detached = group.detached();
  return info;
}

}  // namespace

std::vector<PlacementGroupInfo> CoreWorkerRuntime::ListPlacementGroups() {
  auto groups = core_->gcs().GetAllPlacementGroups();
  if (!groups.ok()) ThrowFor(groups.status());
  std::vector<PlacementGroupInfo> out;
  out.reserve(groups->size());
  for (const auto& group : *groups) out.push_back(ToApi(group));
  return out;
}

std::optional<PlacementGroupInfo> CoreWorkerRuntime::GetPlacementGroupInfo(const std::string& id) {
  auto group_id = PlacementGroupId::FromBinary(id);
  if (!group_id.ok()) throw InvalidArgumentError("not a placement group ID");
  rpc::GetPlacementGroupRequest request;
  request.set_placement_group_id(id);
  auto group = core_->gcs().GetPlacementGroup(request);
  if (absl::IsNotFound(group.status())) return std::nullopt;
  if (!group.ok()) ThrowFor(group.status());
  return ToApi(*group);
}

std::optional<std::string> CoreWorkerRuntime::KvGet(const std::string& ns, const std::string& key) {
  auto value = core_->gcs().KVGet(ns, key);
  if (!value.ok()) ThrowFor(value.status());
  return *value;
}

bool CoreWorkerRuntime::KvPut(const std::string& ns, const std::string& key,
                              const std::string& value, bool overwrite) {
  auto added = core_->gcs().KVPut(ns, key, value, overwrite);
  // The KV's quota is not the object store's: say what the GCS said, not ObjectStoreFullError.
  if (absl::IsResourceExhausted(added.status())) {
    throw TroupeError(std::string(added.status().message()));
  }
  if (!added.ok()) ThrowFor(added.status());
  return *added;
}

int64_t CoreWorkerRuntime::KvDelete(const std::string& ns, const std::string& key, bool by_prefix) {
  auto deleted = core_->gcs().KVDel(ns, key, by_prefix);
  if (!deleted.ok()) ThrowFor(deleted.status());
  return *deleted;
}

bool CoreWorkerRuntime::KvExists(const std::string& ns, const std::string& key) {
  auto exists = core_->gcs().KVExists(ns, key);
  if (!exists.ok()) ThrowFor(exists.status());
  return *exists;
}

std::vector<std::string> CoreWorkerRuntime::KvKeys(const std::string& ns,
                                                   const std::string& prefix) {
  auto keys = core_->gcs().KVKeys(ns, prefix);
  if (!keys.ok()) ThrowFor(keys.status());
  return *std::move(keys);
}

std::string CoreWorkerRuntime::JobNamespace() { return JobKvNamespace(core_->job_id()); }

std::string CoreWorkerRuntime::CurrentActorId() {
  const ActorId& id = core_->current_actor_id();
  return id.IsNil() ? "" : id.Binary();
}

std::string CoreWorkerRuntime::NodeIp() { return core_->node_ip(); }

RuntimeContext CoreWorkerRuntime::GetRuntimeContext() {
  RuntimeContext context;
  context.job_id = core_->job_id().Hex();
  context.node_id = core_->node_id().Hex();
  const ActorId actor = core_->current_actor_id();
  if (!actor.IsNil()) context.actor_id = actor.Hex();
  context.namespace_name = core_->namespace_name();
  context.gpu_ids = troupe::GetGpuIds();
  if (describe_task_ != nullptr) describe_task_(&context);
  return context;
}

std::vector<NodeInfo> CoreWorkerRuntime::Nodes() {
  auto nodes = core_->gcs().GetAllNodeInfo();
  if (!nodes.ok()) ThrowFor(nodes.status());
  auto usages = core_->gcs().GetAllResourceUsage();
  if (!usages.ok()) ThrowFor(usages.status());
  std::map<std::string, const rpc::ResourceUsage*> usage_by_node;
  for (const auto& usage : *usages) usage_by_node[usage.node_id()] = &usage;
  std::vector<NodeInfo> out;
  for (const auto& node : *nodes) {
    NodeInfo info;
    info.node_id = BytesToHex(node.node_id());
    info.node_ip = node.node_ip();
    info.hostname = node.hostname();
    info.alive = node.state() == rpc::NodeInfo::ALIVE;
    info.is_head = node.is_head();
    info.total_resources = {node.resources_total().begin(), node.resources_total().end()};
    if (auto it = usage_by_node.find(node.node_id()); info.alive && it != usage_by_node.end()) {
      info.available_resources = {it->second->available().begin(), it->second->available().end()};
    }
    info.labels = {node.labels().begin(), node.labels().end()};
    info.death_reason = node.death_reason();
    out.push_back(std::move(info));
  }
  // As `troupe status` orders them: the head first, then alive before dead, by start time.
  std::vector<size_t> order(out.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const rpc::NodeInfo& x = (*nodes)[a];
    const rpc::NodeInfo& y = (*nodes)[b];
    return std::make_tuple(!x.is_head(), x.state(), x.start_time_ms()) <
           std::make_tuple(!y.is_head(), y.state(), y.start_time_ms());
  });
  std::vector<NodeInfo> sorted;
  sorted.reserve(out.size());
  for (size_t i : order) sorted.push_back(std::move(out[i]));
  return sorted;
}

rpc::UserMetricDefinition ToMetricDefinition(const MetricSpec& spec) {
  rpc::UserMetricDefinition definition;
  definition.set_kind(spec.kind == MetricSpec::Kind::kGauge ? rpc::UserMetricDefinition::GAUGE
                      : spec.kind == MetricSpec::Kind::kHistogram
                          ? rpc::UserMetricDefinition::HISTOGRAM
                          : rpc::UserMetricDefinition::COUNTER);
  definition.set_name(spec.name);
  definition.set_description(spec.description);
  definition.set_unit(spec.unit);
  for (double bound : spec.boundaries) definition.add_boundaries(bound);
  for (const std::string& key : spec.tag_keys) definition.add_tag_keys(key);
  return definition;
}

void CoreWorkerRuntime::RecordMetric(const MetricSpec& metric, double value,
                                     const std::map<std::string, std::string>& tags) {
  if (auto status = core_->RecordMetric(ToMetricDefinition(metric), value, tags); !status.ok()) {
    ThrowFor(status);
  }
}

namespace {

// The API's view of an async actor call: closures posted to it run with a ThrowStackCapture, so
// an exception that ends the coroutine there reports where it was thrown.
class CoreAsyncCall final : public AsyncCall {
 public:
  explicit CoreAsyncCall(std::shared_ptr<TaskExecutor::ActorCall> call) : call_(std::move(call)) {}
  void Post(std::function<void()> fn) override { call_->Post(Captured(std::move(fn))); }
  void PostAfter(int64_t delay_us, std::function<void()> fn) override {
    call_->PostAfter(absl::Microseconds(std::max<int64_t>(0, delay_us)), Captured(std::move(fn)));
  }
  void OnCancel(std::function<void()> on_cancel) override { call_->OnCancel(std::move(on_cancel)); }

 private:
  static std::function<void()> Captured(std::function<void()> fn) {
    return [fn = std::move(fn)] {
      ThrowStackCapture capture;
      fn();
    };
  }
  const std::shared_ptr<TaskExecutor::ActorCall> call_;
};

}  // namespace

std::shared_ptr<AsyncCall> CoreWorkerRuntime::CurrentAsyncCall() {
  auto call = CoreWorker::CurrentActorCall();
  if (call == nullptr) return nullptr;
  return std::make_shared<CoreAsyncCall>(std::move(call));
}

void CoreWorkerRuntime::NotifyWhenReady(const RefInfo& ref, std::function<void()> ready) {
  core_->NotifyWhenReady(ToCore(ref), std::move(ready));
}

void CoreWorkerRuntime::AddLocalRef(const RefInfo& ref) { core_->AddLocalRef(ToCore(ref)); }

void CoreWorkerRuntime::RemoveLocalRef(const std::string& object_id) {
  if (auto id = ObjectId::FromBinary(object_id); id.ok()) core_->RemoveLocalRef(*id);
}

}  // namespace troupe::internal
