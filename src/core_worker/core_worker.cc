#include "src/core_worker/core_worker.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/schema.pb.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/core_worker/core_worker_grpc_service.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

ObjectId ReturnIdOf(const rpc::TaskSpec& spec) {
  return ObjectId::FromIndex(*TaskId::FromBinary(spec.task_id()), 1);
}

}  // namespace

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)),
      raylets_(options_.token),
      workers_(options_.token),
      references_(
          [this](const ObjectId& id, std::vector<ObjectRefInfo> contained) {
            OnOwnedFree(id, std::move(contained));
          },
          [this](const ObjectId& id, const std::string& owner, bool owner_knows) {
            OnBorrowedRelease(id, owner, owner_knows);
          }) {
  if (!options_.warn) {
    options_.warn = [](const std::string& message) {
      fprintf(stderr, "troupe: warning: %s\n", message.c_str());
    };
  }
}

CoreWorker::~CoreWorker() { Shutdown(); }

absl::Status CoreWorker::Start() {
  auto token = ClusterToken::Parse(options_.token);
  if (!token.ok()) return token.status();
  token_ = std::make_unique<ClusterToken>(*token);
  auth_ = std::make_unique<TokenAuthenticator>(*token);
  service_ = std::make_unique<GrpcService>(this);
  int port = 0;
  auto server = StartGrpcServer(options_.node_ip, 0, {service_.get()}, &port);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  address_ = absl::StrCat(options_.node_ip, ":", port);
  references_.SetSelfAddress(address_);

  raylet_ = raylets_.Get(options_.raylet_address);
  rpc::RegisterWorkerRequest request;
  request.set_worker_id(options_.worker_id.Binary());
  request.set_pid(getpid());
  request.set_port(port);
  request.set_job_id(options_.job_id.Binary());
  request.set_is_driver(options_.is_driver);
  // A busy raylet (or one that just started) may take a moment to answer.
  absl::StatusOr<rpc::RegisterWorkerReply> reply;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (true) {
    reply = raylet_->RegisterWorker(request);
    if (reply.ok() || absl::Now() > give_up ||
        (reply.status().code() != absl::StatusCode::kUnavailable &&
         reply.status().code() != absl::StatusCode::kDeadlineExceeded)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!reply.ok()) return reply.status();
  node_id_ = *NodeId::FromBinary(reply->node_id());

  submitter_ = std::make_unique<TaskSubmitter>(
      TaskSubmitterOptions{options_.raylet_address}, &raylets_, &workers_,
      TaskSubmitter::Callbacks{
          [this](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
            StoreReturns(spec, reply);
          },
          [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message) {
            FailTask(spec, error, message);
          },
          options_.warn});
  gcs_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token);
  actor_submitter_ = std::make_unique<ActorTaskSubmitter>(
      gcs_.get(), &workers_, options_.worker_id.Binary(),
      ActorTaskSubmitter::Callbacks{
          [this](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
            bool threw = false;
            for (const auto& ret : reply.returns()) threw |= ret.is_application_error();
            ++(threw ? actor_calls_.failed : actor_calls_.finished);
            StoreReturns(spec, reply);
          },
          [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message) {
            ++actor_calls_.failed;
            FailTask(spec, error, message);
          }});
  timer_ = std::thread([this] { TimerLoop(); });
  metrics_reporter_ = std::thread([this] {
    while (!stop_timer_.WaitForNotificationWithTimeout(absl::Seconds(2))) ReportTaskCounters();
  });
  return absl::OkStatus();
}

void CoreWorker::ReportTaskCounters() {
  const TaskSubmitter::Counters& c = submitter_->counters();
  const TaskSubmitter::Counters& a = actor_calls_;
  rpc::TaskCounters counters;
  counters.set_tasks_submitted(c.submitted.load());
  counters.set_tasks_finished(c.finished.load());
  counters.set_tasks_failed(c.failed.load());
  counters.set_tasks_retried(c.retried.load());
  counters.set_actor_calls_submitted(a.submitted.load());
  counters.set_actor_calls_finished(a.finished.load());
  counters.set_actor_calls_failed(a.failed.load());
  const std::string value = counters.SerializeAsString();
  if (value == last_reported_counters_ || c.submitted.load() + a.submitted.load() == 0) return;
  // One key per process that submitted tasks; the head's /metrics adds them up.
  if (gcs_->KVPut(kTaskCountersNamespace, options_.worker_id.Hex(), value, true).ok()) {
    last_reported_counters_ = value;
  }
}

void CoreWorker::Shutdown() {
  if (!server_) return;
  stop_timer_.Notify();
  if (timer_.joinable()) timer_.join();
  if (metrics_reporter_.joinable()) metrics_reporter_.join();
  ReportTaskCounters();  // a short-lived driver's tasks count too
  if (submitter_) submitter_->Shutdown();
  if (actor_submitter_) actor_submitter_->Shutdown();
  // Every call this worker holds gets an answer: the gRPC server's shutdown waits for them all.
  std::deque<std::shared_ptr<PendingPush>> unrun;
  {
    absl::MutexLock lock(&queue_mu_);
    exit_requested_ = true;
    unrun.swap(queue_);
    for (auto& [caller, order] : caller_order_) {
      for (auto& [seq, push] : order.early) unrun.push_back(std::move(push));
      order.early.clear();
    }
    queue_cv_.SignalAll();
  }
  for (auto& push : unrun) {
    push->reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is exiting"));
  }
  memory_store_.ExpireWaiters(absl::InfiniteFuture());
  {
    absl::MutexLock lock(&mappings_mu_);
    for (const WriteMapping& mapping : write_mappings_) {
      munmap(mapping.address, mapping.size);
      close(mapping.fd);
    }
    write_mappings_.clear();
  }
  for (auto& executor : extra_executors_) {
    if (executor.joinable()) executor.join();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  server_.reset();
}

void CoreWorker::TimerLoop() {
  while (!stop_timer_.WaitForNotificationWithTimeout(absl::Milliseconds(10))) {
    submitter_->Tick();
    actor_submitter_->Tick();
    memory_store_.ExpireWaiters(absl::Now());
  }
}

// ---- Submitting ----

rpc::TaskSpec CoreWorker::BuildTaskSpec(const TaskId& task_id, const std::string& function_name,
                                        std::vector<TaskArgSpec> args,
                                        std::vector<ObjectId>* owned_dependencies) {
  rpc::TaskSpec spec;
  spec.set_task_id(task_id.Binary());
  spec.set_job_id(options_.job_id.Binary());
  spec.set_function_name(function_name);
  spec.set_num_returns(1);
  spec.set_caller_address(address_);
  spec.set_caller_node_id(node_id_.Binary());
  std::vector<ObjectRefInfo> held;
  for (auto& arg : args) {
    rpc::TaskArg* out = spec.add_args();
    std::optional<StoredObject> ready;
    if (arg.by_reference && references_.OwnedByMe(arg.ref))
      ready = memory_store_.GetIfReady(arg.ref.id);
    if (ready && ready->error == StoredObject::Error::kNone && !ready->value.in_plasma()) {
      // A small value we own and already have travels inline: the worker need not ask for it.
      // The reference is still held until the task is done (values inside it may be borrowed).
      out->set_inline_value(ready->value.inline_value());
      held.push_back(arg.ref);
    } else if (arg.by_reference) {
      out->set_object_id(arg.ref.id.Binary());
      out->set_owner_address(arg.ref.owner_address);
      held.push_back(arg.ref);
      if (owned_dependencies && references_.OwnedByMe(arg.ref) &&
          !memory_store_.IsReady(arg.ref.id)) {
        owned_dependencies->push_back(arg.ref.id);
      }
    } else {
      out->set_inline_value(std::move(arg.value));
    }
    for (auto& inner : arg.contained) held.push_back(std::move(inner));
  }
  for (const auto& ref : held) references_.AddSubmitted(ref);
  if (!held.empty()) {
    absl::MutexLock lock(&tasks_mu_);
    task_refs_[task_id] = std::move(held);
  }
  return spec;
}

ObjectRefInfo CoreWorker::SubmitTask(const std::string& function_name,
                                     std::vector<TaskArgSpec> args,
                                     const TaskSubmitOptions& options) {
  const TaskId task_id = TaskId::FromRandom();
  const ObjectRefInfo result{ObjectId::FromIndex(task_id, 1), address_};
  references_.AddLocal(result);
  std::vector<ObjectId> owned_dependencies;
  rpc::TaskSpec spec = BuildTaskSpec(task_id, function_name, std::move(args), &owned_dependencies);
  spec.set_type(rpc::TaskSpec::NORMAL_TASK);
  for (const auto& [name, amount] : options.resources) {
    (*spec.mutable_required_resources())[name] = amount;
  }
  spec.set_max_retries(options.max_retries);
  spec.set_retry_exceptions(options.retry_exceptions);
  spec.set_name(options.name);
  *spec.mutable_strategy() = options.strategy;
  if (!options.placement_group_id.empty()) {
    // Into a bundle: lease where the bundle is; that raylet hands out its reserved resources.
    auto bundle = ResolveBundle(options.placement_group_id, options.bundle_index);
    if (!bundle.ok()) {
      FailTask(spec, StoredObject::Error::kTaskFailed,
               absl::StrCat("task ", function_name,
                            " cannot run in its placement group: ", bundle.status().message()));
      return result;
    }
    spec.set_placement_group_id(options.placement_group_id);
    spec.set_bundle_index(bundle->second);
    spec.mutable_strategy()->set_kind(rpc::SchedulingStrategy::NODE_AFFINITY);
    spec.mutable_strategy()->set_node_id(bundle->first.Binary());
    spec.mutable_strategy()->set_soft(false);
  }
  if (owned_dependencies.empty()) {
    submitter_->Submit(std::move(spec));
    return result;
  }
  // Lease a worker only once the arguments exist, so workers never sit waiting for them.
  auto shared = std::make_shared<rpc::TaskSpec>(std::move(spec));
  auto remaining = std::make_shared<std::atomic<size_t>>(owned_dependencies.size());
  for (const auto& dependency : owned_dependencies) {
    memory_store_.OnReady(dependency, absl::InfiniteFuture(),
                          [this, shared, remaining](std::optional<StoredObject>) {
                            if (--*remaining == 0) submitter_->Submit(std::move(*shared));
                          });
  }
  return result;
}

// ---- Actors ----

absl::StatusOr<ActorId> CoreWorker::CreateActor(const std::string& factory_name,
                                                std::vector<TaskArgSpec> args,
                                                const TaskSubmitOptions& options,
                                                const rpc::ActorInfo& actor_options) {
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
  rpc::RegisterActorRequest request;
  *request.mutable_creation_task() = spec;
  rpc::ActorInfo* info = request.mutable_actor();
  *info = actor_options;
  info->set_actor_id(actor_id.Binary());
  info->set_job_id(options_.job_id.Binary());
  info->set_class_name(factory_name);
  info->set_owner_address(address_);
  if (info->namespace_name().empty()) info->set_namespace_name(namespace_name_);
  *info->mutable_required_resources() = spec.required_resources();
  TROUPE_RETURN_IF_ERROR(gcs_->RegisterActor(request));
  return actor_id;
}

ObjectRefInfo CoreWorker::SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                                          std::vector<TaskArgSpec> args) {
  const TaskId task_id = TaskId::FromRandom();
  const ObjectRefInfo result{ObjectId::FromIndex(task_id, 1), address_};
  references_.AddLocal(result);
  ++actor_calls_.submitted;
  rpc::TaskSpec spec = BuildTaskSpec(task_id, method_name, std::move(args), nullptr);
  spec.set_type(rpc::TaskSpec::ACTOR_TASK);
  spec.set_actor_id(actor_id.Binary());
  actor_submitter_->Submit(actor_id, std::move(spec));
  return result;
}

absl::StatusOr<std::pair<NodeId, int>> CoreWorker::ResolveBundle(const std::string& group_id,
                                                                 int index) {
  rpc::GetPlacementGroupRequest request;
  request.set_placement_group_id(group_id);
  for (int attempt = 0;; ++attempt) {
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
    if (attempt == 250)
      options_.warn("waiting for a placement group to be placed before submitting");
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<PlacementGroupId> CoreWorker::CreatePlacementGroup(rpc::PlacementGroupInfo group) {
  const PlacementGroupId id = PlacementGroupId::FromRandom();
  group.set_placement_group_id(id.Binary());
  group.set_creator_job_id(options_.job_id.Binary());
  TROUPE_RETURN_IF_ERROR(gcs_->CreatePlacementGroup(group));
  return id;
}

absl::Status CoreWorker::RemovePlacementGroup(const PlacementGroupId& id) {
  return gcs_->RemovePlacementGroup(id.Binary());
}

absl::StatusOr<bool> CoreWorker::WaitPlacementGroup(const PlacementGroupId& id,
                                                    absl::Time deadline) {
  rpc::GetPlacementGroupRequest request;
  request.set_placement_group_id(id.Binary());
  while (true) {
    auto group = gcs_->GetPlacementGroup(request);
    if (!group.ok()) return group.status();
    if (group->state() == rpc::PlacementGroupInfo::CREATED) return true;
    if (group->state() == rpc::PlacementGroupInfo::REMOVED || absl::Now() >= deadline) return false;
    absl::SleepFor(std::min(absl::Milliseconds(20), deadline - absl::Now()));
  }
}

absl::StatusOr<std::optional<PlacementGroupId>> CoreWorker::GetPlacementGroup(
    const std::string& name) {
  rpc::GetPlacementGroupRequest request;
  request.set_name(name);
  auto group = gcs_->GetPlacementGroup(request);
  if (group.status().code() == absl::StatusCode::kNotFound)
    return std::optional<PlacementGroupId>();
  if (!group.ok()) return group.status();
  return std::optional<PlacementGroupId>(
      *PlacementGroupId::FromBinary(group->placement_group_id()));
}

absl::Status CoreWorker::KillActor(const ActorId& actor_id, bool no_restart) {
  return gcs_->KillActor(actor_id.Binary(), no_restart);
}

absl::StatusOr<std::optional<ActorId>> CoreWorker::GetNamedActor(
    const std::string& name, const std::string& namespace_name) {
  rpc::GetActorInfoRequest request;
  request.set_name(name);
  request.set_namespace_name(namespace_name.empty() ? namespace_name_ : namespace_name);
  auto info = gcs_->GetActorInfo(request);
  if (info.status().code() == absl::StatusCode::kNotFound) return std::optional<ActorId>();
  if (!info.ok()) return info.status();
  return std::optional<ActorId>(*ActorId::FromBinary(info->actor_id()));
}

void CoreWorker::ExitActorAfterCurrentTask() {
  if (!current_actor_.IsNil()) (void)gcs_->ReportActorExit(current_actor_.Binary());
  absl::MutexLock lock(&queue_mu_);
  exit_after_task_ = true;
}

void CoreWorker::EnqueuePush(std::shared_ptr<PendingPush> push) {
  const rpc::TaskSpec& spec = push->request->task();
  absl::MutexLock lock(&queue_mu_);
  if (exit_requested_) {
    // Leaving (ExitActor, or shutting down): nothing will run it. Answer now — a call left
    // unanswered would hold the gRPC server's shutdown, and this process, forever.
    push->reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is exiting"));
    return;
  }
  if (spec.type() != rpc::TaskSpec::ACTOR_TASK) {
    queue_.push_back(std::move(push));
    queue_cv_.Signal();
    return;
  }
  // Actor calls of one caller run in sequence order: hold early arrivals until their turn.
  CallerOrder& order = caller_order_[spec.caller_worker_id()];
  order.next = std::max(order.next, spec.caller_first_unanswered());
  const int64_t seq = spec.sequence_number();
  if (seq > order.next) {
    order.early[seq] = std::move(push);
  } else {
    queue_.push_back(std::move(push));  // its turn (or a resend of an earlier call)
    if (seq == order.next) order.next++;
  }
  for (auto it = order.early.begin(); it != order.early.end() && it->first <= order.next;) {
    if (it->first == order.next) order.next++;
    queue_.push_back(std::move(it->second));
    it = order.early.erase(it);
  }
  queue_cv_.SignalAll();
}

void CoreWorker::ReleaseTaskReferences(const rpc::TaskSpec& spec) {
  std::vector<ObjectRefInfo> held;
  {
    absl::MutexLock lock(&tasks_mu_);
    auto it = task_refs_.find(*TaskId::FromBinary(spec.task_id()));
    if (it == task_refs_.end()) return;
    held = std::move(it->second);
    task_refs_.erase(it);
  }
  for (const auto& ref : held) references_.RemoveSubmitted(ref.id);
}

void CoreWorker::StoreReturns(const rpc::TaskSpec& spec, const rpc::PushTaskReply& reply) {
  for (const auto& ret : reply.returns()) {
    auto id = ObjectId::FromBinary(ret.object_id());
    if (!id.ok()) continue;
    if (!references_.IsTracked(*id)) {
      // Nobody holds the result any more: drop its stored copy right away.
      if (ret.in_plasma()) raylets_.Get(ret.raylet_address())->FreeObjectsAsync({ret.object_id()});
      continue;
    }
    StoredObject object;
    object.value = ret;
    if (ret.is_application_error()) object.error = StoredObject::Error::kApplication;
    if (ret.in_plasma()) object.copy_raylet_addresses.push_back(ret.raylet_address());
    memory_store_.Put(*id, std::move(object));
  }
  // Objects the worker kept references to stay alive for it.
  for (const auto& borrowed : reply.borrowed_refs()) {
    auto id = ObjectId::FromBinary(borrowed.object_id());
    if (!id.ok()) continue;
    if (borrowed.owner_address() == address_) {
      references_.AddBorrower(*id, reply.worker_address());
    } else {
      workers_.Get(borrowed.owner_address())
          ->AddBorrowersAsync({borrowed.object_id()}, reply.worker_address());
    }
  }
  ReleaseTaskReferences(spec);
}

void CoreWorker::FailTask(const rpc::TaskSpec& spec, StoredObject::Error error,
                          const std::string& message) {
  StoredObject object;
  object.error = error;
  object.error_message = message;
  object.value.set_function_name(spec.function_name());
  memory_store_.Put(ReturnIdOf(spec), std::move(object));
  ReleaseTaskReferences(spec);
}

void CoreWorker::Cancel(const ObjectRefInfo& ref, bool force) {
  if (!references_.OwnedByMe(ref) || memory_store_.IsReady(ref.id)) return;
  submitter_->Cancel(ref.id.CreatingTaskId(), force);
}

// ---- Executing (worker mode) ----

void CoreWorker::RunTaskLoop() {
  while (true) {
    std::shared_ptr<PendingPush> push;
    {
      absl::MutexLock lock(&queue_mu_);
      while (queue_.empty() && !exit_requested_) queue_cv_.Wait(&queue_mu_);
      if (exit_requested_) return;
      push = queue_.front();
      queue_.pop_front();
    }
    executing_ = true;
    *push->reply = ExecuteTask(*push->request);
    executing_ = false;
    // Read what is needed before answering: the request and reply are gone after Finish.
    const rpc::TaskSpec& spec = push->request->task();
    const bool created = spec.type() == rpc::TaskSpec::ACTOR_CREATION_TASK &&
                         !push->reply->returns(0).is_application_error();
    const std::string actor_id = spec.actor_id();
    const int concurrency = spec.max_concurrency();
    push->reactor->Finish(grpc::Status::OK);
    if (created) {
      current_actor_ = *ActorId::FromBinary(actor_id);
      // More calls at once: extra threads take from the same queue (order is then not kept).
      for (int i = 1; i < concurrency; ++i) {
        extra_executors_.emplace_back([this] { RunTaskLoop(); });
      }
    }
    absl::MutexLock lock(&queue_mu_);
    if (exit_after_task_) {
      exit_requested_ = true;
      queue_cv_.SignalAll();
      return;
    }
  }
}

rpc::PushTaskReply CoreWorker::ExecuteTask(const rpc::PushTaskRequest& request) {
  const rpc::TaskSpec& spec = request.task();
  rpc::PushTaskReply reply;
  reply.set_worker_address(address_);
  rpc::ReturnObject* ret = reply.add_returns();
  ret->set_object_id(ReturnIdOf(spec).Binary());
  ret->set_function_name(spec.function_name());
  ret->set_node_id(node_id_.Binary());
  ret->set_pid(getpid());
  auto fail = [&](const std::string& type, const std::string& message) {
    ret->set_is_application_error(true);
    ret->set_exception_type(type);
    ret->set_error_message(message);
  };

  std::vector<ObjectBuffer> args;
  std::vector<ObjectRefInfo> held;
  bool arguments_ok = true;
  for (int i = 0; i < spec.args_size() && arguments_ok; ++i) {
    const rpc::TaskArg& arg = spec.args(i);
    if (arg.object_id().empty()) {
      args.push_back({arg.inline_value().data(), arg.inline_value().size(), nullptr});
      continue;
    }
    ObjectRefInfo ref{*ObjectId::FromBinary(arg.object_id()), arg.owner_address()};
    references_.AddLocal(ref);
    held.push_back(ref);
    auto results = Get({ref}, absl::InfiniteFuture());
    if (!results.ok() || (*results)[0].error != StoredObject::Error::kNone) {
      const std::string why = !results.ok() ? std::string(results.status().message())
                              : (*results)[0].error == StoredObject::Error::kApplication
                                  ? (*results)[0].error_detail.exception_type() + ": " +
                                        (*results)[0].error_detail.error_message()
                                  : (*results)[0].error_message;
      fail("troupe::TaskFailedError",
           absl::StrCat("argument ", i + 1, " could not be read: ", why));
      arguments_ok = false;
      break;
    }
    args.push_back((*results)[0].buffer);
  }
  if (arguments_ok) {
    TaskOutcome outcome = options_.execute(spec, args);
    if (outcome.threw) {
      fail(outcome.exception_type, outcome.exception_message);
    } else if (static_cast<int64_t>(outcome.size) <= options_.max_inline_bytes) {
      std::string bytes(outcome.size, '\0');
      if (outcome.size > 0) outcome.write(bytes.data());
      ret->set_inline_value(std::move(bytes));
    } else {
      auto stored = StoreTaskReturn(ReturnIdOf(spec), outcome.size, outcome.write);
      if (stored.ok()) {
        ret->set_in_plasma(true);
        ret->set_raylet_address(stored->raylet_address());
        ret->set_size(stored->size());
      } else {
        fail(stored.status().code() == absl::StatusCode::kResourceExhausted
                 ? "troupe::ObjectStoreFullError"
                 : "troupe::TroupeError",
             std::string(stored.status().message()));
      }
    }
  }
  args.clear();
  for (const auto& ref : held) references_.RemoveLocal(ref.id);
  for (const auto& borrowed : references_.TakeUnreportedBorrows()) {
    rpc::BorrowedRef* out = reply.add_borrowed_refs();
    out->set_object_id(borrowed.id.Binary());
    out->set_owner_address(borrowed.owner_address);
  }
  return reply;
}

}  // namespace troupe
