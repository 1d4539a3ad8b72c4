#include "src/core_worker/core_worker.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "proto/schema.pb.h"
#include "src/common/logging.h"
#include "src/common/process_state.h"
#include "src/core_worker/core_worker_grpc_service.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

// Each liveness probe's deadline.
constexpr absl::Duration kProbeTimeout = absl::Seconds(2);

ObjectId ReturnIdOf(const rpc::TaskSpec& spec) {
  return ObjectId::FromIndex(*TaskId::FromBinary(spec.task_id()), 1);
}

}  // namespace

namespace {
// The streaming generator running on this thread (ExecuteTask), if any: its spec and the items
// it reported. (File-local, so libtroupe does not export it.)
struct RunningStream {
  const rpc::TaskSpec* spec;
  int64_t next_index = 0;
};
thread_local RunningStream* running_stream = nullptr;
}  // namespace

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &real_clock_),
      raylets_(options_.token),
      workers_(options_.token),
      lease_client_(&raylets_),
      parent_pid_(options_.is_driver ? 0 : getppid()),
      pid_(getpid()) {
  if (!options_.warn) {
    options_.warn = [](const std::string& message) {
      fprintf(stderr, "troupe: warning: %s\n", message.c_str());
    };
  }
  objects_ = std::make_unique<ObjectService>(
      ObjectService::Options{options_.raylet_address, options_.worker_id, options_.is_driver,
                             options_.max_inline_bytes},
      &raylets_, &workers_, clock_);
  objects_->memory_store().SetTimedWaiterListener([this] { WakeTimer(); });
  streams_ = std::make_unique<StreamTracker>(objects_.get());
  executor_ = std::make_unique<TaskExecutor>([this](const rpc::PushTaskRequest& request,
                                                    TaskExecutor::Finish finish) {
    ExecuteTask(request, [this, &request, finish = std::move(finish)](rpc::PushTaskReply reply) {
      // For recursive Cancel (the request lives until it is answered).
      submission_->ForgetChildren(request.task().task_id());
      finish(std::move(reply));
    });
  });
}

CoreWorker::~CoreWorker() { Shutdown(); }

absl::Status CoreWorker::Start() {
  auto token = ClusterToken::Parse(options_.token);
  if (!token.ok()) return token.status();
  token_ = std::make_unique<ClusterToken>(*token);
  auth_ = std::make_unique<TokenAuthenticator>(*token);
  service_ = std::make_unique<CoreWorkerGrpcService>(
      auth_.get(), options_.is_driver ? nullptr : executor_.get(), objects_.get(),
      [this](const rpc::CancelTaskRequest& request) { HandleCancelTask(request); },
      [this](const rpc::ReportStreamItemRequest& request, rpc::ReportStreamItemReply* reply,
             std::function<void(absl::Status)> done) {
        streams_->HandleReport(request, reply, std::move(done));
      });
  int port = 0;
  auto server = StartGrpcServer(options_.node_ip, 0, {service_.get()}, &port);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  address_ = absl::StrCat(options_.node_ip, ":", port);

  raylet_ = raylets_.Get(options_.raylet_address);
  rpc::RegisterWorkerRequest request;
  request.set_worker_id(options_.worker_id.Binary());
  request.set_pid(getpid());
  request.set_port(port);
  request.set_job_id(options_.job_id.Binary());
  request.set_is_driver(options_.is_driver);
  // A busy raylet (or one that just started) may take a moment to answer.
  absl::StatusOr<rpc::RegisterWorkerReply> reply;
  const absl::Time give_up = clock_->Now() + absl::Seconds(30);
  while (true) {
    reply = raylet_->RegisterWorker(request);
    if (reply.ok() || clock_->Now() > give_up ||
        (reply.status().code() != absl::StatusCode::kUnavailable &&
         reply.status().code() != absl::StatusCode::kDeadlineExceeded)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!reply.ok()) return reply.status();
  node_id_ = *NodeId::FromBinary(reply->node_id());
  objects_->SetIdentity(address_, node_id_);

  auto drop = ParseDropProbability("TROUPE_TESTING_DROP_ACTOR_REPLIES",
                                   options_.testing_drop_actor_replies);
  if (!drop.ok()) return drop.status();
  push_client_ = std::make_unique<GrpcTaskPushClient>(
      &workers_, PushFaultInjection{*drop, std::random_device()()});

  submitter_ = std::make_unique<TaskSubmitter>(
      TaskSubmitterOptions{options_.raylet_address}, &lease_client_, push_client_.get(), clock_,
      TaskSubmitter::Callbacks{
          [this](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
            submission_->OnTaskReply(spec, reply);
          },
          [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message) {
            submission_->OnTaskFailure(spec, error, message);
          },
          options_.warn,
          [this](const std::string& worker_address) -> std::optional<std::string> {
            auto cause = background_gcs_->KVGet(kWorkerKillsNamespace, worker_address);
            if (!cause.ok()) return std::nullopt;
            return *cause;
          },
          [this](const rpc::TaskSpec& spec, const std::string& why) {
            submission_->OnTaskRetry(spec, why);
          },
          [this] { WakeTimer(); }});
  gcs_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token);
  if (options_.cluster_reconnect_timeout > absl::ZeroDuration()) {
    // A call that waited out the whole reconnect limit ends as the cluster being unreachable
    // (ClusterUnreachableError), whether the GCS refused (down) or never answered (hung).
    gcs_->SetRetry(
        options_.cluster_reconnect_timeout, [this] { return cluster_status(); },
        [this](const absl::Status& last) {
          return ClusterUnreachableStatus(absl::StrCat(
              "a call to the GCS at ", options_.gcs_address, " has not gone through for ",
              absl::FormatDuration(options_.cluster_reconnect_timeout),
              " (last error: ", last.message(),
              "), so it cannot complete. Check that the cluster is running (`troupe status "
              "--address=",
              options_.gcs_address,
              "`); a cluster that takes longer to come back needs a larger reconnect limit "
              "(troupe::Config::gcs_reconnect_timeout_s or $TROUPE_GCS_RECONNECT_TIMEOUT_S)"));
        });
  }
  background_gcs_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token);
  actor_directory_ = std::make_unique<GrpcActorDirectory>(background_gcs_.get());
  actor_submitter_ = std::make_unique<ActorTaskSubmitter>(
      actor_directory_.get(), push_client_.get(), clock_, options_.worker_id.Binary(),
      ActorTaskSubmitter::Callbacks{
          [this](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
            submission_->OnTaskReply(spec, reply);
          },
          [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message) {
            submission_->OnTaskFailure(spec, error, message);
          },
          [this] { WakeTimer(); }});
  // Task events: one buffer per process, flushed to the GCS by the reporter.
  if (options_.record_task_events) {
    TaskEventBuffer::Options event_options;
    event_options.node_id = node_id_;
    event_options.worker_id = options_.worker_id;
    event_options.pid = pid_;
    task_events_ = std::make_unique<TaskEventBuffer>(
        event_options, [this](const rpc::AddTaskEventDataRequest& request) {
          if (!cluster_status().ok()) return cluster_status();  // do not wait on a dead GCS
          return background_gcs_->AddTaskEventData(request);
        });
    reporter_.Add(event_options.flush_interval, [this] { task_events_->Flush(); });
  }
  submission_ = std::make_unique<SubmissionFacade>(
      SubmissionFacade::Options{options_.job_id, options_.max_lineage_bytes, options_.warn,
                                [this](const PlacementGroupId& id, absl::Time deadline) {
                                  return WaitPlacementGroup(id, deadline);
                                },
                                task_events_.get(), [] { return TaskExecutor::CurrentTaskId(); },
                                streams_.get()},
      objects_.get(), submitter_.get(), actor_submitter_.get(), gcs_.get(), clock_);
  submission_->SetIdentity(address_, node_id_);
  if (options_.is_driver && options_.cluster_reconnect_timeout > absl::ZeroDuration()) {
    probe_gcs_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token, kProbeTimeout);
    liveness_ = std::make_unique<ClusterLiveness>(
        ClusterLiveness::Options{options_.gcs_address, options_.cluster_reconnect_timeout}, clock_,
        [this] { return probe_gcs_->GetClusterInfo().status(); },
        [this] {
          auto result = std::make_shared<absl::Status>();
          auto done = std::make_shared<absl::Notification>();
          raylet_->HealthCheckAsync(kProbeTimeout, [result, done](absl::Status status) {
            *result = std::move(status);
            done->Notify();
          });
          done->WaitForNotification();  // the call's deadline bounds the wait
          return *result;
        },
        [this](const absl::Status& status) { OnClusterUnreachable(status); });
    const absl::Duration interval =
        std::min(absl::Milliseconds(500), options_.cluster_reconnect_timeout / 4);
    liveness_thread_ = std::thread([this, interval] {
      while (!stop_timer_.WaitForNotificationWithTimeout(interval)) liveness_->Check();
    });
  }
  objects_->SetReconstructor(submission_.get());
  // Drivers own tasks from the start; workers only once they submit (most never do).
  if (options_.is_driver) WatchNodeDeaths();
  bool start_timer = options_.is_driver;
  {
    absl::MutexLock lock(&timer_mu_);
    timer_startable_ = true;
    start_timer |= timer_wanted_;
  }
  if (start_timer) WakeTimer();
  reporter_.Add(kTaskCountersInterval, [this] { ReportTaskCounters(); });
  reporter_.Add(kUserMetricsInterval, [this] { FlushUserMetrics(); });
  reporter_.Start();
  return absl::OkStatus();
}

void CoreWorker::OnClusterUnreachable(const absl::Status& status) {
  options_.warn(std::string(status.message()));
  submission_->FailAllAsUnreachable(std::string(status.message()));
}

void CoreWorker::WatchNodeDeaths() {
  if (watching_nodes_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&node_watch_mu_);
  if (node_watcher_ || stop_timer_.HasBeenNotified()) return;
  node_watcher_ = std::make_unique<NodeDeathWatcher>(
      NodeDeathWatcher::Options{},
      [this](const rpc::PollRequest& request, NodeDeathWatcher::PollDone done) {
        return background_gcs_->PollAsync(request, std::move(done));
      },
      [this] { return background_gcs_->GetAllNodeInfo(); },
      [this](const NodeId& node_id, const std::string& raylet_address) {
        OnNodeDead(node_id, raylet_address);
      });
  node_watcher_thread_ = std::thread([watcher = node_watcher_.get()] { watcher->Run(); });
  watching_nodes_.store(true, std::memory_order_release);
}

void CoreWorker::WakeTimer() {
  EnsureTimer();
  timer_wakeup_.Wake();
}

void CoreWorker::EnsureTimer() {
  if (timer_started_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&timer_mu_);
  timer_wanted_ = true;
  if (timer_startable_ && !timer_.joinable() && !stop_timer_.HasBeenNotified()) {
    timer_ = std::thread([this] { TimerLoop(); });
    timer_started_.store(true, std::memory_order_release);
  }
}

void CoreWorker::OnNodeDead(const NodeId& node_id, const std::string& raylet_address) {
  // Copies there are not read any more; then calls in flight there fail over.
  objects_->OnNodeDead(node_id, raylet_address);
  submitter_->OnNodeDead(node_id, raylet_address);
  actor_submitter_->OnNodeDead(node_id);
}

void CoreWorker::ReportTaskCounters() {
  if (!cluster_status().ok()) return;  // nobody to report to; do not wait on a dead GCS
  const TaskSubmitter::Counters& c = submitter_->counters();
  const TaskSubmitter::Counters& a = actor_submitter_->counters();
  rpc::TaskCounters counters;
  counters.set_tasks_submitted(c.submitted.load());
  counters.set_tasks_finished(c.finished.load());
  counters.set_tasks_failed(c.failed.load());
  counters.set_tasks_retried(c.retried.load());
  counters.set_tasks_reconstructed(submission_->reconstructions());
  counters.set_actor_calls_submitted(a.submitted.load());
  counters.set_actor_calls_finished(a.finished.load());
  counters.set_actor_calls_failed(a.failed.load());
  const std::string value = counters.SerializeAsString();
  if (value == last_reported_counters_ || c.submitted.load() + a.submitted.load() == 0) return;
  // One key per process that submitted tasks; the head's /metrics adds them up.
  if (background_gcs_->KVPut(kTaskCountersNamespace, options_.worker_id.Hex(), value, true).ok()) {
    last_reported_counters_ = value;
  }
}

void CoreWorker::FlushUserMetrics() {
  rpc::ReportUserMetricsRequest batch = user_metrics_.TakeBatch();
  if (batch.points().empty()) return;
  batch.set_worker_id(options_.worker_id.Binary());
  // Not sent (the raylet restarts, or is gone): kept for the next push.
  if (!raylet_->ReportUserMetrics(batch).ok()) user_metrics_.Restore(batch);
}

void CoreWorker::Shutdown() {
  if (!server_) return;
  std::thread node_watcher_thread;
  std::thread timer;
  {
    absl::MutexLock watch_lock(&node_watch_mu_);
    absl::MutexLock timer_lock(&timer_mu_);
    stop_timer_.Notify();  // under the locks: no watcher nor timer starts after this
    timer_wakeup_.Wake();  // the timer may be sleeping
    if (node_watcher_) node_watcher_->Stop();
    node_watcher_thread = std::move(node_watcher_thread_);
    timer = std::move(timer_);
  }
  if (node_watcher_thread.joinable()) node_watcher_thread.join();
  if (timer.joinable()) timer.join();
  if (liveness_thread_.joinable()) liveness_thread_.join();
  reporter_.Stop();
  // What the last moments recorded counts too (not waiting on a raylet known to be gone).
  if (raylet_ && cluster_status().ok()) FlushUserMetrics();
  if (submitter_) ReportTaskCounters();  // a short-lived driver's tasks count too
  if (submitter_) submitter_->Shutdown();
  if (actor_submitter_) actor_submitter_->Shutdown();
  // Answers every call this worker holds: the gRPC server's shutdown waits for them all.
  executor_->Shutdown();
  streams_->StopAll();  // producers waiting for this reader are answered (stop)
  objects_->Shutdown();
  if (task_events_) task_events_->Flush();  // after the executor: its last task's end counts
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  server_.reset();
}

void CoreWorker::TimerLoop() {
  // Ticks every 10 ms while something waits on time (a lease lingering or a task waiting for
  // one, an actor being looked up, a callback with a deadline); otherwise sleeps until the part
  // that gets such work wakes it. An idle worker process thus wakes about once a second here
  // instead of 100 times (kIdleTimerCheck only guards against a wake-up this loop is not told of).
  while (!stop_timer_.HasBeenNotified()) {
    if (!submitter_->NeedsTick() && !actor_submitter_->NeedsTick() &&
        !objects_->memory_store().HasTimedWaiters()) {
      timer_wakeup_.Sleep(kIdleTimerCheck);
      continue;
    }
    if (stop_timer_.WaitForNotificationWithTimeout(kTimerTick)) break;
    submitter_->Tick();
    actor_submitter_->Tick();
    objects_->memory_store().ExpireWaiters(clock_->Now());
  }
}

// ---- Forwarding to the parts ----

absl::StatusOr<ObjectRefInfo> CoreWorker::SubmitTask(const std::string& function_name,
                                                     std::vector<TaskArgSpec> args,
                                                     const TaskSubmitOptions& options) {
  WatchNodeDeaths();
  EnsureTimer();  // a worker's first submission: its leases linger, returned by the timer
  return submission_->SubmitTask(function_name, std::move(args), options);
}

absl::StatusOr<ObjectRefInfo> CoreWorker::Put(size_t size, const std::function<void(char*)>& write,
                                              std::vector<ObjectRefInfo> contained) {
  // Large values go to the raylet's store, which is gone with the cluster.
  if (auto status = cluster_status();
      !status.ok() && static_cast<int64_t>(size) > options_.max_inline_bytes) {
    return status;
  }
  return objects_->Put(size, write, std::move(contained));
}

absl::StatusOr<std::vector<GetResult>> CoreWorker::Get(const std::vector<ObjectRefInfo>& refs,
                                                       absl::Time deadline) {
  return objects_->Get(refs, deadline);
}

std::vector<bool> CoreWorker::Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                                   absl::Time deadline) {
  return objects_->Wait(refs, num_ready, deadline);
}

void CoreWorker::Cancel(const ObjectRefInfo& ref, bool force, bool recursive) {
  submission_->Cancel(ref, force, recursive);
  // A stream's producer waiting for its reader (backpressure) stops at once.
  if (objects_->references().OwnedByMe(ref)) streams_->Stop(ref.id.CreatingTaskId());
}

absl::StatusOr<std::optional<ObjectRefInfo>> CoreWorker::NextStreamItem(const ObjectRefInfo& stream,
                                                                        absl::Time deadline) {
  if (!objects_->references().OwnedByMe(stream)) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream ", stream.id.Hex(),
                     " can only be read by the process that started it (its owner at ",
                     stream.owner_address, ")"));
  }
  return streams_->Next(stream.id.CreatingTaskId(), deadline);
}

int64_t CoreWorker::NumUnreadStreamItems(const ObjectRefInfo& stream) {
  return streams_->NumUnread(stream.id.CreatingTaskId());
}

absl::Status CoreWorker::ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                                          std::vector<ObjectRefInfo> contained) {
  RunningStream* stream = running_stream;
  if (stream == nullptr) {
    return absl::FailedPreconditionError(
        "StreamWriter::Yield was called outside the streaming generator it was given to (on "
        "another thread, or after the generator returned)");
  }
  if (TaskExecutor::CurrentTaskCancelled()) {
    return absl::CancelledError("the stream was cancelled (troupe::Cancel)");
  }
  const rpc::TaskSpec& spec = *stream->spec;
  const int64_t index = stream->next_index + 1;
  rpc::ReportStreamItemRequest request;
  request.set_task_id(spec.task_id());
  request.set_index(index);
  request.set_worker_address(address_);
  rpc::ReturnObject* item = request.mutable_item();
  item->set_object_id(
      ObjectId::FromIndex(ReturnIdOf(spec).CreatingTaskId(), static_cast<uint32_t>(index + 1))
          .Binary());
  item->set_function_name(spec.function_name());
  item->set_node_id(node_id_.Binary());
  item->set_pid(getpid());
  rpc::PushTaskReply handed_over;  // collects the refs inside the item
  TROUPE_RETURN_IF_ERROR(StoreValue(spec, size, write, contained, 0, item, &handed_over));
  *request.mutable_contained_refs() = handed_over.return_contained_refs();
  auto reply = workers_.Get(spec.caller_address())->ReportStreamItem(request);
  if (!reply.ok()) {
    return absl::UnavailableError(absl::StrCat("the stream's reader (at ", spec.caller_address(),
                                               ") did not take item ", index, ": ",
                                               reply.status().message()));
  }
  stream->next_index = index;
  if (reply->stop()) {
    return absl::CancelledError(
        "the stream was cancelled, or its reader let go of it: the generator should stop");
  }
  return absl::OkStatus();
}

void CoreWorker::HandleCancelTask(const rpc::CancelTaskRequest& request) {
  if (options_.is_driver) return;  // a driver runs no pushed tasks
  // Only a running task has children (and it runs only once Start is done: submission_ is set).
  if (executor_->Cancel(request.task_id()) == TaskExecutor::CancelOutcome::kRunning &&
      request.recursive()) {
    submission_->CancelChildren(request.task_id());
  }
}

absl::StatusOr<ActorId> CoreWorker::CreateActor(const std::string& factory_name,
                                                std::vector<TaskArgSpec> args,
                                                const TaskSubmitOptions& options,
                                                const rpc::ActorInfo& actor_options) {
  if (auto status = cluster_status(); !status.ok()) return status;
  return submission_->CreateActor(factory_name, std::move(args), options, actor_options,
                                  this->namespace_name());
}

ObjectRefInfo CoreWorker::SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                                          std::vector<TaskArgSpec> args,
                                          const ActorCallSubmitOptions& options) {
  WatchNodeDeaths();
  EnsureTimer();  // a worker's first call: the actor may need looking up
  return submission_->SubmitActorTask(actor_id, method_name, std::move(args), options);
}

absl::Status CoreWorker::KillActor(const ActorId& actor_id, bool no_restart) {
  if (auto status = cluster_status(); !status.ok()) return status;
  return submission_->KillActor(actor_id, no_restart);
}

absl::StatusOr<std::optional<ActorId>> CoreWorker::GetNamedActor(
    const std::string& name, const std::string& namespace_name) {
  if (auto status = cluster_status(); !status.ok()) return status;
  return submission_->GetNamedActor(
      name, namespace_name.empty() ? this->namespace_name() : namespace_name);
}

absl::StatusOr<PlacementGroupId> CoreWorker::CreatePlacementGroup(rpc::PlacementGroupInfo group) {
  if (auto status = cluster_status(); !status.ok()) return status;
  return submission_->CreatePlacementGroup(std::move(group));
}

absl::Status CoreWorker::RemovePlacementGroup(const PlacementGroupId& id) {
  return submission_->RemovePlacementGroup(id);
}

absl::StatusOr<bool> CoreWorker::WaitPlacementGroup(const PlacementGroupId& id,
                                                    absl::Time deadline) {
  // The GCS answers as soon as the group is placed or removed (a long poll, not polling).
  return gcs_->WaitPlacementGroupUntilReady(id.Binary(), deadline);
}

absl::StatusOr<std::optional<PlacementGroupId>> CoreWorker::GetPlacementGroup(
    const std::string& name) {
  return submission_->GetPlacementGroup(name);
}

void CoreWorker::ExitActorAfterCurrentTask() {
  const ActorId actor = executor_->current_actor_id();
  if (!actor.IsNil()) (void)gcs_->ReportActorExit(actor.Binary(), worker_id().Binary());
  executor_->ExitAfterCurrentTask();
}

// ---- Executing (worker mode) ----

void CoreWorker::RunTaskLoop() { executor_->RunLoop(); }

void CoreWorker::RequestStop() {
  if (task_events_) task_events_->Flush();
  executor_->RequestExit();
}

void CoreWorker::ExecuteTask(const rpc::PushTaskRequest& request, TaskExecutor::Finish finish) {
  objects_->SetExecuting(true);
  struct Done {
    ObjectService* objects;
    ~Done() { objects->SetExecuting(false); }
  } done{objects_.get()};
  const rpc::TaskSpec& spec = request.task();
  rpc::PushTaskReply reply;
  reply.set_worker_address(address_);
  // One return object per spec.num_returns() (ObjectId indices 1..n); a failure fails them all.
  const TaskId task_id = ReturnIdOf(spec).CreatingTaskId();
  for (int i = 0; i < std::max(1, spec.num_returns()); ++i) {
    rpc::ReturnObject* out = reply.add_returns();
    out->set_object_id(ObjectId::FromIndex(task_id, i + 1).Binary());
    out->set_function_name(spec.function_name());
    out->set_node_id(node_id_.Binary());
    out->set_pid(getpid());
  }
  const uint64_t execution = BeginExecution(spec);
  // The outcome of a task that does not run (its caller learns why; the log does not).
  auto refuse = [&](const std::string& type, const std::string& message) {
    TaskOutcome outcome;
    outcome.threw = true;
    outcome.exception_type = type;
    outcome.exception_message = message;
    return outcome;
  };
  if (spec.type() == rpc::TaskSpec::ACTOR_TASK &&
      !executor_->HasConcurrencyGroup(spec.concurrency_group())) {
    finish(CompleteTask(
        spec, /*ran=*/false,
        refuse("troupe::InvalidArgumentError",
               absl::StrCat("actor method ", spec.function_name(),
                            " was called in concurrency group \"", spec.concurrency_group(),
                            "\", which this actor does not have; name one given to "
                            "troupe::Actor(...).SetConcurrencyGroups at its creation")),
        std::move(reply), execution, {}));
    return;
  }

  std::vector<ObjectBuffer> args;
  std::vector<ObjectRefInfo> held;
  for (int i = 0; i < spec.args_size(); ++i) {
    const rpc::TaskArg& arg = spec.args(i);
    if (arg.object_id().empty()) {
      args.push_back({arg.inline_value().data(), arg.inline_value().size(), nullptr});
      continue;
    }
    ObjectRefInfo ref{*ObjectId::FromBinary(arg.object_id()), arg.owner_address()};
    objects_->references().AddLocal(ref);
    held.push_back(ref);
    auto results = objects_->Get({ref}, absl::InfiniteFuture());
    if (!results.ok() || (*results)[0].error != StoredObject::Error::kNone) {
      const std::string why = !results.ok() ? std::string(results.status().message())
                              : (*results)[0].error == StoredObject::Error::kApplication
                                  ? (*results)[0].error_detail.exception_type() + ": " +
                                        (*results)[0].error_detail.error_message()
                                  : (*results)[0].error_message;
      args.clear();
      finish(CompleteTask(spec, /*ran=*/false,
                          refuse("troupe::TaskFailedError",
                                 absl::StrCat("argument ", i + 1, " could not be read: ", why)),
                          std::move(reply), execution, held));
      return;
    }
    args.push_back((*results)[0].buffer);
  }
  TaskOutcome outcome;
  {
    // A streaming generator reports its items from inside `execute` (ReportStreamItem); it is
    // never an async method, so it never leaves a pending outcome.
    RunningStream this_stream{&spec};
    struct StreamScope {
      explicit StreamScope(RunningStream* stream) { running_stream = stream; }
      ~StreamScope() { running_stream = nullptr; }
    } stream_scope(spec.streaming() ? &this_stream : nullptr);
    outcome = options_.execute(spec, args);
  }
  args.clear();
  if (outcome.pending) {
    // An async actor call waits for something: the rest runs when it finishes, on its loop.
    // (The arguments were decoded into the call: it holds its own copies.)
    auto pending = std::move(outcome.pending);
    pending([this, &spec, reply = std::move(reply), execution, held,
             finish = std::move(finish)](TaskOutcome final_outcome) mutable {
      finish(CompleteTask(spec, /*ran=*/true, std::move(final_outcome), std::move(reply), execution,
                          held));
    });
    return;
  }
  finish(CompleteTask(spec, /*ran=*/true, std::move(outcome), std::move(reply), execution, held));
}

rpc::PushTaskReply CoreWorker::CompleteTask(const rpc::TaskSpec& spec, bool ran,
                                            TaskOutcome outcome, rpc::PushTaskReply reply,
                                            uint64_t execution,
                                            const std::vector<ObjectRefInfo>& held) {
  const int num_returns = std::max(1, spec.num_returns());
  rpc::ReturnObject* ret = reply.mutable_returns(0);
  auto fail = [&](const std::string& type, const std::string& message) {
    for (rpc::ReturnObject& out : *reply.mutable_returns()) {
      out.set_is_application_error(true);
      out.set_exception_type(type);
      out.set_error_message(message);
      out.clear_inline_value();  // a copy already stored stays listed: the owner frees it
    }
  };
  // Stores one return's value: inline in the reply when small, else in this node's store.
  auto store = [&](int index, size_t size, const std::function<void(char*)>& write,
                   const std::vector<ObjectRefInfo>& contained) {
    absl::Status stored =
        StoreValue(spec, size, write, contained, index, reply.mutable_returns(index), &reply);
    if (!stored.ok()) {
      fail(stored.code() == absl::StatusCode::kResourceExhausted ? "troupe::ObjectStoreFullError"
                                                                 : "troupe::TroupeError",
           std::string(stored.message()));
    }
    return stored.ok();
  };
  if (outcome.threw && !ran) {
    fail(outcome.exception_type, outcome.exception_message);
  } else if (outcome.threw) {
    fail(outcome.exception_type, outcome.exception_message);
    for (rpc::ReturnObject& out : *reply.mutable_returns()) {
      out.set_remote_stack(outcome.exception_stack);
    }
    // The worker's log (shown by the driver, `troupe logs`) has it too.
    std::fprintf(stderr, "task %s threw %s: %s\n%s", spec.function_name().c_str(),
                 outcome.exception_type.c_str(), outcome.exception_message.c_str(),
                 outcome.exception_stack.empty()
                     ? ""
                     : ("remote stack (the throw first):\n" + outcome.exception_stack).c_str());
  } else if (num_returns == 1) {
    store(0, outcome.size, outcome.write, outcome.contained);
  } else if (outcome.parts.size() != static_cast<size_t>(num_returns)) {
    fail("troupe::TroupeError",
         absl::StrCat("the call asked for ", num_returns, " return objects and task ",
                      spec.function_name(), " produced ", outcome.parts.size()));
  } else {
    for (int i = 0; i < num_returns; ++i) {
      const TaskOutcome::Part& part = outcome.parts[i];
      if (!store(i, part.size, part.write, part.contained)) break;
    }
  }
  if (ret->is_application_error() && ProcessIsExiting(parent_pid_)) {
    // The raylet that started this worker is dying (SIGKILL closes its sockets before the
    // kernel sends us its death signal), and the failure is most likely its doing: an argument
    // that could not be fetched, a result that could not be stored. Such a failure must not
    // reach the caller as the task's result; exiting unanswered makes it a worker death, which
    // the caller retries (or reports as one).
    fprintf(stderr,
            "troupe: the raylet (pid %d) died while task %s ran (%s); exiting without an answer\n",
            parent_pid_, spec.function_name().c_str(), ret->error_message().c_str());
    _exit(1);
  }
  if (task_events_) {
    task_events_->EndRunning(
        execution, ret->is_application_error() ? rpc::TaskEvent::FAILED : rpc::TaskEvent::FINISHED,
        clock_->Now(),
        ret->is_application_error()
            ? absl::StrCat(ret->exception_type(), ": ", ret->error_message())
            : "");
  }
  // The result (and the references it holds) goes now, before the borrows this task still holds
  // are collected for the reply: a reference released after that would never be reported.
  outcome = TaskOutcome();
  for (const auto& ref : held) objects_->references().RemoveLocal(ref.id);
  for (const auto& borrowed : objects_->references().TakeUnreportedBorrows()) {
    rpc::BorrowedRef* out = reply.add_borrowed_refs();
    out->set_object_id(borrowed.id.Binary());
    out->set_owner_address(borrowed.owner_address);
  }
  return reply;
}

absl::Status CoreWorker::StoreValue(const rpc::TaskSpec& spec, size_t size,
                                    const std::function<void(char*)>& write,
                                    const std::vector<ObjectRefInfo>& contained, int return_index,
                                    rpc::ReturnObject* out, rpc::PushTaskReply* reply) {
  if (static_cast<int64_t>(size) <= options_.max_inline_bytes) {
    std::string bytes(size, '\0');
    if (size > 0) write(bytes.data());
    out->set_inline_value(std::move(bytes));
    HandOverContained(spec, contained, return_index, reply);
    return absl::OkStatus();
  }
  // The caller owns the value: the store frees it if the caller goes away holding it.
  auto stored = objects_->StoreTaskReturn(*ObjectId::FromBinary(out->object_id()), size, write,
                                          spec.caller_worker_id(), spec.caller_node_id());
  if (!stored.ok()) return stored.status();
  out->set_in_plasma(true);
  out->set_raylet_address(stored->raylet_address());
  out->set_size(stored->size());
  HandOverContained(spec, contained, return_index, reply);
  return absl::OkStatus();
}

uint64_t CoreWorker::BeginExecution(const rpc::TaskSpec& spec) {
  if (!task_events_) return 0;
  TaskStateEvent event = TaskStateEventOf(spec);
  event.time = clock_->Now();
  // What the owner's SUBMITTED says too: the record is complete even if that one is lost.
  event.name = TaskDisplayNameOf(spec);
  event.type = spec.type();
  return task_events_->BeginRunning(std::move(event));
}

void CoreWorker::HandOverContained(const rpc::TaskSpec& spec,
                                   const std::vector<ObjectRefInfo>& contained, int return_index,
                                   rpc::PushTaskReply* reply) {
  const std::string& caller = spec.caller_address();
  for (const auto& inner : contained) {
    rpc::BorrowedRef* out = reply->add_return_contained_refs();
    out->set_object_id(inner.id.Binary());
    out->set_owner_address(inner.owner_address);
    if (spec.num_returns() > 1) reply->add_return_contained_return_index(return_index);
    if (inner.owner_address == caller || caller.empty()) continue;  // the caller owns it
    if (objects_->references().OwnedByMe(inner)) {
      // Ours (e.g. a Put inside the task): the caller becomes a borrower before our own
      // reference (held by the result value) goes.
      objects_->references().AddBorrower(inner.id, caller);
    } else {
      // A third party's: tell its owner, and wait, so that our own borrow's release (after
      // this reply) cannot reach the owner first. An owner that does not answer is gone: the
      // caller will learn that when it reads the object (OwnerDiedError).
      (void)workers_.Get(inner.owner_address)
          ->AddBorrowers({inner.id.Binary()}, caller, absl::Seconds(10));
    }
  }
}

}  // namespace troupe
