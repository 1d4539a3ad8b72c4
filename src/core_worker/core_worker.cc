#include "src/core_worker/core_worker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

ObjectId ReturnIdOf(const rpc::TaskSpec& spec) {
  return ObjectId::FromIndex(*TaskId::FromBinary(spec.task_id()), 1);
}

StoredObject FromStatusReply(const rpc::GetObjectStatusReply& reply) {
  StoredObject object;
  object.value = reply.object();
  object.copy_raylet_addresses.assign(reply.copy_raylet_addresses().begin(),
                                      reply.copy_raylet_addresses().end());
  if (reply.status() == rpc::GetObjectStatusReply::FAILED) {
    object.error = reply.object().is_application_error() ? StoredObject::Error::kApplication
                                                         : StoredObject::Error::kTaskFailed;
    object.error_message = reply.object().error_message();
  }
  return object;
}

}  // namespace

// A PushTask waiting for the task loop; finished by it.
struct CoreWorker::PendingPush {
  const rpc::PushTaskRequest* request;
  rpc::PushTaskReply* reply;
  grpc::ServerUnaryReactor* reactor;
};

// gRPC glue of CoreWorkerService.
class CoreWorker::GrpcService : public rpc::CoreWorkerService::CallbackService {
 public:
  explicit GrpcService(CoreWorker* worker) : w_(worker) {}

  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* context,
                                     const rpc::PushTaskRequest* request,
                                     rpc::PushTaskReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status auth = w_->auth_->Check(*context); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    if (w_->options_.is_driver) {
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "a driver does not execute pushed tasks"));
      return reactor;
    }
    w_->EnqueuePush(std::make_shared<PendingPush>(PendingPush{request, reply, reactor}));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetObjectStatus(grpc::CallbackServerContext* context,
                                            const rpc::GetObjectStatusRequest* request,
                                            rpc::GetObjectStatusReply* reply) override {
    return RespondAsync(context, *w_->auth_, [&](auto done) {
      auto id = ObjectId::FromBinary(request->object_id());
      if (!id.ok()) return done(id.status());
      if (!w_->references_.IsTracked(*id) && !w_->memory_store_.IsReady(*id)) {
        reply->set_status(rpc::GetObjectStatusReply::FREED);
        return done(absl::OkStatus());
      }
      w_->memory_store_.OnReady(
          *id, absl::Now() + absl::Milliseconds(request->timeout_ms()),
          [reply, done](std::optional<StoredObject> object) {
            if (!object) {
              reply->set_status(rpc::GetObjectStatusReply::PENDING);
            } else {
              reply->set_status(object->error == StoredObject::Error::kNone
                                    ? rpc::GetObjectStatusReply::READY
                                    : rpc::GetObjectStatusReply::FAILED);
              *reply->mutable_object() = object->value;
              if (object->error != StoredObject::Error::kNone &&
                  object->error != StoredObject::Error::kApplication) {
                reply->mutable_object()->set_error_message(object->error_message);
              }
              for (const auto& copy : object->copy_raylet_addresses) {
                reply->add_copy_raylet_addresses(copy);
              }
            }
            done(absl::OkStatus());
          });
    });
  }

  grpc::ServerUnaryReactor* AddObjectLocation(grpc::CallbackServerContext* context,
                                              const rpc::AddObjectLocationRequest* request,
                                              rpc::AddObjectLocationReply*) override {
    return Respond(context, *w_->auth_, [&]() -> absl::Status {
      auto id = ObjectId::FromBinary(request->object_id());
      if (!id.ok()) return id.status();
      if (w_->references_.IsTracked(*id)) {
        w_->memory_store_.AddCopy(*id, request->raylet_address());
      } else {
        // Freed meanwhile: drop the new copy too.
        w_->raylets_.Get(request->raylet_address())->FreeObjectsAsync({request->object_id()});
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* AddBorrowers(grpc::CallbackServerContext* context,
                                         const rpc::AddBorrowersRequest* request,
                                         rpc::AddBorrowersReply*) override {
    return Respond(context, *w_->auth_, [&] {
      for (const auto& binary : request->object_ids()) {
        if (auto id = ObjectId::FromBinary(binary); id.ok()) {
          w_->references_.AddBorrower(*id, request->borrower_address());
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* RemoveBorrowers(grpc::CallbackServerContext* context,
                                            const rpc::RemoveBorrowersRequest* request,
                                            rpc::RemoveBorrowersReply*) override {
    return Respond(context, *w_->auth_, [&] {
      for (const auto& binary : request->object_ids()) {
        if (auto id = ObjectId::FromBinary(binary); id.ok()) {
          w_->references_.RemoveBorrower(*id, request->borrower_address());
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Exit(grpc::CallbackServerContext* context, const rpc::ExitRequest*,
                                 rpc::ExitReply* reply) override {
    return Respond(context, *w_->auth_, [&] {
      absl::MutexLock lock(&w_->queue_mu_);
      w_->exit_requested_ = true;
      w_->queue_cv_.Signal();
      reply->set_success(true);
      return absl::OkStatus();
    });
  }

 private:
  CoreWorker* w_;
};

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
            StoreReturns(spec, reply);
          },
          [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message) {
            FailTask(spec, error, message);
          }});
  timer_ = std::thread([this] { TimerLoop(); });
  return absl::OkStatus();
}

void CoreWorker::Shutdown() {
  if (!server_) return;
  stop_timer_.Notify();
  if (timer_.joinable()) timer_.join();
  if (submitter_) submitter_->Shutdown();
  if (actor_submitter_) actor_submitter_->Shutdown();
  std::deque<std::shared_ptr<PendingPush>> unrun;
  {
    absl::MutexLock lock(&queue_mu_);
    exit_requested_ = true;
    unrun.swap(queue_);
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
    if (arg.by_reference && references_.OwnedByMe(arg.ref)) ready = memory_store_.GetIfReady(arg.ref.id);
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
  rpc::TaskSpec spec = BuildTaskSpec(task_id, method_name, std::move(args), nullptr);
  spec.set_type(rpc::TaskSpec::ACTOR_TASK);
  spec.set_actor_id(actor_id.Binary());
  actor_submitter_->Submit(actor_id, std::move(spec));
  return result;
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

// ---- Objects ----

void CoreWorker::OnOwnedFree(const ObjectId& id, std::vector<ObjectRefInfo> contained) {
  std::optional<StoredObject> object = memory_store_.GetIfReady(id);
  memory_store_.Erase(id);
  if (object && object->value.in_plasma()) {
    for (const auto& copy : object->copy_raylet_addresses) {
      raylets_.Get(copy)->FreeObjectsAsync({id.Binary()});
    }
  }
  for (const auto& inner : contained) references_.RemoveLocal(inner.id);
}

void CoreWorker::OnBorrowedRelease(const ObjectId& id, const std::string& owner,
                                   bool owner_knows) {
  memory_store_.Erase(id);
  if (owner_knows) workers_.Get(owner)->RemoveBorrowersAsync({id.Binary()}, address_);
}

absl::StatusOr<ObjectRefInfo> CoreWorker::Put(size_t size, const std::function<void(char*)>& write,
                                              std::vector<ObjectRefInfo> contained) {
  const ObjectId id = ObjectId::FromIndex(put_task_id_, ++put_index_);
  StoredObject object;
  if (static_cast<int64_t>(size) <= options_.max_inline_bytes) {
    std::string bytes(size, '\0');
    write(bytes.data());
    object.value.set_inline_value(std::move(bytes));
  } else {
    auto stored = StoreTaskReturn(id, size, write);
    if (!stored.ok()) return stored.status();
    object.value = std::move(*stored);
    object.copy_raylet_addresses.push_back(options_.raylet_address);
  }
  object.value.set_object_id(id.Binary());
  const ObjectRefInfo ref{id, address_};
  references_.AddLocal(ref);
  if (!contained.empty()) references_.SetContained(id, std::move(contained));
  memory_store_.Put(id, std::move(object));
  return ref;
}

absl::StatusOr<rpc::ReturnObject> CoreWorker::StoreTaskReturn(
    const ObjectId& id, size_t size, const std::function<void(char*)>& write) {
  auto path = raylet_->CreateObject(id.Binary(), static_cast<int64_t>(size), /*primary=*/true);
  if (!path.ok()) return path.status();
  auto target = MapForWrite(*path, size);
  if (!target.ok()) return target.status();
  write(target->address);
  if (!target->cached && size > 0) munmap(target->address, size);
  if (auto status = raylet_->SealObject(id.Binary()); !status.ok()) return status;
  rpc::ReturnObject ret;
  ret.set_object_id(id.Binary());
  ret.set_in_plasma(true);
  ret.set_node_id(node_id_.Binary());
  ret.set_raylet_address(options_.raylet_address);
  ret.set_size(static_cast<int64_t>(size));
  return ret;
}

namespace {
constexpr size_t kCachedMappingMinBytes = 8 << 20;
constexpr size_t kCachedMappingMaxTotal = 512 << 20;
}  // namespace

absl::StatusOr<CoreWorker::WriteTarget> CoreWorker::MapForWrite(const std::string& path,
                                                                   size_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  const bool cacheable = size >= kCachedMappingMinBytes;
  if (cacheable) {
    absl::MutexLock lock(&mappings_mu_);
    for (const WriteMapping& mapping : write_mappings_) {
      if (mapping.device == st.st_dev && mapping.inode == st.st_ino && mapping.size == size) {
        close(fd);  // the cached mapping keeps its own descriptor
        return WriteTarget{mapping.address, /*cached=*/true};
      }
    }
  }
  void* mapped = size == 0 ? nullptr
                           : mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_POPULATE, fd, 0);
  if (mapped == MAP_FAILED) {
    close(fd);
    return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
  }
  if (!cacheable) {
    close(fd);
    return WriteTarget{static_cast<char*>(mapped), /*cached=*/false};
  }
  absl::MutexLock lock(&mappings_mu_);
  write_mappings_.push_back({st.st_dev, st.st_ino, size, static_cast<char*>(mapped), fd});
  size_t total = 0;
  for (const WriteMapping& mapping : write_mappings_) total += mapping.size;
  while (total > kCachedMappingMaxTotal && write_mappings_.size() > 1) {
    const WriteMapping& oldest = write_mappings_.front();
    munmap(oldest.address, oldest.size);
    close(oldest.fd);
    total -= oldest.size;
    write_mappings_.pop_front();
  }
  return WriteTarget{static_cast<char*>(mapped), /*cached=*/true};
}

void CoreWorker::SetBlocked(bool blocked) {
  if (options_.is_driver || !executing_) return;
  if (blocked) {
    if (blocked_depth_++ == 0) raylet_->NotifyBlocked(options_.worker_id.Binary(), true);
  } else {
    if (--blocked_depth_ == 0) raylet_->NotifyBlocked(options_.worker_id.Binary(), false);
  }
}

absl::StatusOr<std::optional<StoredObject>> CoreWorker::Resolve(const ObjectRefInfo& ref,
                                                                 absl::Time deadline) {
  if (auto ready = memory_store_.GetIfReady(ref.id)) return ready;
  if (references_.OwnedByMe(ref)) {
    if (!references_.IsTracked(ref.id)) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("object ", ref.id.Hex(), " was already freed");
      return std::optional<StoredObject>(lost);
    }
    return memory_store_.Wait(ref.id, deadline);
  }
  // Borrowed: ask the owner, in slices so a deadline far away still notices a dead owner.
  std::optional<StoredObject> result;
  absl::Status failure;
  while (true) {
    const absl::Duration wait =
        std::max(absl::ZeroDuration(), std::min(deadline - absl::Now(), absl::Seconds(10)));
    auto reply = workers_.Get(ref.owner_address)->GetObjectStatus(ref.id.Binary(), wait);
    if (!reply.ok()) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("the owner of object ", ref.id.Hex(), " (at ",
                                        ref.owner_address, ") is gone: ", reply.status().message());
      result = lost;
      break;
    }
    if (reply->status() == rpc::GetObjectStatusReply::FREED) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("object ", ref.id.Hex(), " was freed by its owner");
      result = lost;
      break;
    }
    if (reply->status() != rpc::GetObjectStatusReply::PENDING) {
      result = FromStatusReply(*reply);
      if (references_.IsTracked(ref.id)) memory_store_.Put(ref.id, *result);  // cache
      break;
    }
    if (absl::Now() >= deadline) break;
  }
  return result;
}

absl::StatusOr<ObjectBuffer> CoreWorker::MapLocalObject(const ObjectId& id) {
  auto objects = raylet_->GetObjects({id.Binary()});
  if (!objects.ok()) return objects.status();
  if (objects->empty() || !(*objects)[0].found()) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not on this node"));
  }
  const rpc::LocalObject& local = (*objects)[0];
  std::shared_ptr<RayletClient> raylet = raylet_;
  const std::string binary = id.Binary();
  ObjectBuffer buffer;
  buffer.size = static_cast<size_t>(local.size());
  if (buffer.size == 0) {
    raylet->ReleaseObjectsAsync({binary});
    buffer.holder = std::make_shared<char>(0);
    buffer.data = static_cast<const char*>(buffer.holder.get());
    return buffer;
  }
  int fd = open(local.path().c_str(), O_RDONLY | O_CLOEXEC);
  void* mapped = fd < 0 ? MAP_FAILED : mmap(nullptr, buffer.size, PROT_READ, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (mapped == MAP_FAILED) {
    raylet->ReleaseObjectsAsync({binary});
    return absl::InternalError(absl::StrCat("cannot map ", local.path(), ": ", std::strerror(errno)));
  }
  const size_t size = buffer.size;
  buffer.data = static_cast<const char*>(mapped);
  // Unmapped and unpinned when the last reader lets go. The unpin is synchronous so the store
  // can reuse the memory at once (a put right after a read must not find it still pinned).
  buffer.holder = std::shared_ptr<const void>(mapped, [raylet, binary, size](const void* p) {
    munmap(const_cast<void*>(p), size);
    (void)raylet->ReleaseObjects({binary});
  });
  return buffer;
}

GetResult CoreWorker::Materialize(const ObjectRefInfo& ref, const StoredObject& object) {
  GetResult result;
  if (object.error != StoredObject::Error::kNone) {
    result.error = object.error;
    result.error_message = object.error_message;
    result.error_detail = object.value;
    return result;
  }
  if (!object.value.in_plasma()) {
    auto holder = std::make_shared<std::string>(object.value.inline_value());
    result.buffer = {holder->data(), holder->size(), holder};
    return result;
  }
  auto mapped = MapLocalObject(ref.id);
  if (mapped.status().code() == absl::StatusCode::kNotFound) {
    // Not on this node: copy it here from a node that has it.
    std::vector<std::string> sources = object.copy_raylet_addresses;
    if (sources.empty()) sources.push_back(object.value.raylet_address());
    absl::Status fetched = absl::NotFoundError("no copy to fetch from");
    for (const auto& source : sources) {
      if (source == options_.raylet_address) continue;
      fetched = raylet_->FetchObject(ref.id.Binary(), source, absl::Minutes(10));
      if (fetched.ok()) break;
    }
    if (fetched.ok()) {
      if (references_.OwnedByMe(ref)) {
        memory_store_.AddCopy(ref.id, options_.raylet_address);
      } else {
        workers_.Get(ref.owner_address)
            ->AddObjectLocationAsync(ref.id.Binary(), options_.raylet_address, node_id_.Binary());
      }
      mapped = MapLocalObject(ref.id);
    } else {
      mapped = absl::NotFoundError(fetched.message());
    }
  }
  if (!mapped.ok()) {
    result.error = StoredObject::Error::kLost;
    result.error_message = absl::StrCat("object ", ref.id.Hex(), " is lost: every copy is gone (",
                                        mapped.status().message(), ")");
    return result;
  }
  result.buffer = std::move(*mapped);
  return result;
}

absl::StatusOr<std::vector<GetResult>> CoreWorker::Get(const std::vector<ObjectRefInfo>& refs,
                                                       absl::Time deadline) {
  std::vector<GetResult> results;
  results.reserve(refs.size());
  // A worker waiting here gives its CPUs back meanwhile, so the tasks it waits for can run.
  bool blocked = false;
  struct Unblock {
    CoreWorker* worker;
    bool* blocked;
    ~Unblock() {
      if (*blocked) worker->SetBlocked(false);
    }
  } unblock{this, &blocked};
  for (const auto& ref : refs) {
    if (!blocked && !memory_store_.IsReady(ref.id)) {
      SetBlocked(true);
      blocked = true;
    }
    auto object = Resolve(ref, deadline);
    if (!object.ok()) return object.status();
    if (!object->has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("object ", ref.id.Hex(), " was not ready before the timeout"));
    }
    results.push_back(Materialize(ref, **object));
  }
  return results;
}

std::vector<bool> CoreWorker::Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                                   absl::Time deadline) {
  std::vector<ObjectId> ids;
  bool all_owned = true;
  for (const auto& ref : refs) {
    ids.push_back(ref.id);
    all_owned &= references_.OwnedByMe(ref);
  }
  if (all_owned) return memory_store_.WaitMany(ids, static_cast<size_t>(num_ready), deadline);
  // Some are borrowed: ask around until enough are ready.
  std::vector<bool> ready(refs.size(), false);
  while (true) {
    int count = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (!ready[i]) {
        auto object = Resolve(refs[i], absl::Now());
        ready[i] = object.ok() && object->has_value();
      }
      count += ready[i];
    }
    if (count >= std::min<int>(num_ready, static_cast<int>(refs.size())) || absl::Now() >= deadline) {
      return ready;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
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
