#include "src/api/core_worker_runtime.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_replace.h"
#include "src/api/status_exceptions.h"
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
  submit.strategy = ToStrategy(options.strategy);
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
                                          int64_t timeout_ms) {
  std::vector<ObjectRefInfo> core_refs;
  for (const auto& ref : refs) core_refs.push_back(ToCore(ref));
  return core_->Wait(core_refs, num_ready, DeadlineOf(timeout_ms));
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
  submit.strategy = ToStrategy(options.strategy);
  rpc::ActorInfo info;
  info.set_name(options.name);
  info.set_namespace_name(options.namespace_name);
  info.set_max_restarts(options.max_restarts);
  info.set_max_task_retries(options.max_task_retries);
  info.set_max_concurrency(options.max_concurrency);
  info.set_detached(options.detached);
  info.set_placement_group_id(options.placement_group_id);
  info.set_bundle_index(options.bundle_index);
  if (!options.class_type_name.empty()) {
    // "Store", "ns::Store"; a class in an anonymous namespace without that prefix.
    info.set_class_name(absl::StrReplaceAll(DemangledName(options.class_type_name.c_str()),
                                            {{"(anonymous namespace)::", ""}}));
  }
  auto id = core_->CreateActor(factory_name, ToArgSpecs(std::move(args)), submit, info);
  if (!id.ok()) ThrowFor(id.status());
  return id->Binary();
}

std::vector<RefInfo> CoreWorkerRuntime::SubmitActorTask(const std::string& actor_id,
                                                        const std::string& method_name,
                                                        std::vector<TaskArgument> args,
                                                        const ActorCallOptions& options) {
  auto id = ActorId::FromBinary(actor_id);
  if (!id.ok()) throw TroupeError("not an actor handle: " + std::string(id.status().message()));
  ActorCallSubmitOptions submit;
  submit.name = options.name;
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
  for (const auto& bundle : spec.bundles) {
    rpc::Bundle* out = group.add_bundles();
    for (const auto& [name, amount] : bundle) (*out->mutable_resources())[name] = amount;
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

std::optional<std::string> CoreWorkerRuntime::KvGet(const std::string& ns, const std::string& key) {
  auto value = core_->gcs().KVGet(ns, key);
  if (!value.ok()) ThrowFor(value.status());
  return *value;
}

bool CoreWorkerRuntime::KvPut(const std::string& ns, const std::string& key,
                              const std::string& value, bool overwrite) {
  auto added = core_->gcs().KVPut(ns, key, value, overwrite);
  if (!added.ok()) ThrowFor(added.status());
  return *added;
}

int64_t CoreWorkerRuntime::KvDelete(const std::string& ns, const std::string& key, bool by_prefix) {
  auto deleted = core_->gcs().KVDel(ns, key, by_prefix);
  if (!deleted.ok()) ThrowFor(deleted.status());
  return *deleted;
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

void CoreWorkerRuntime::AddLocalRef(const RefInfo& ref) { core_->AddLocalRef(ToCore(ref)); }

void CoreWorkerRuntime::RemoveLocalRef(const std::string& object_id) {
  if (auto id = ObjectId::FromBinary(object_id); id.ok()) core_->RemoveLocalRef(*id);
}

}  // namespace troupe::internal
