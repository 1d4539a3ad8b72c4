#include "src/raylet/simulated_node_services.h"

#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

// A task's return value as the C++ API encodes it (src/api/include/troupe/serialization.h): the
// msgpack format byte, then msgpack nil. A Get of a nil_t result reads it; any other type fails
// to decode, which is honest: nothing computed a value.
constexpr char kNilValue[] = {0x00, static_cast<char>(0xc0)};

}  // namespace

// ---------------------------------------------------------------------------- DelayedRunner

DelayedRunner::DelayedRunner() : thread_([this] { Loop(); }) {}

DelayedRunner::~DelayedRunner() { Stop(); }

void DelayedRunner::RunAt(absl::Time when, std::function<void()> closure) {
  absl::MutexLock lock(&mu_);
  waiting_.emplace(when, std::move(closure));
  changed_.Signal();
}

void DelayedRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

void DelayedRunner::Loop() {
  mu_.Lock();
  while (!stopping_ || !waiting_.empty()) {
    if (waiting_.empty()) {
      changed_.Wait(&mu_);
      continue;
    }
    auto first = waiting_.begin();
    if (!stopping_ && first->first > absl::Now()) {
      changed_.WaitWithDeadline(&mu_, first->first);
      continue;  // an earlier one may have come meanwhile
    }
    std::function<void()> closure = std::move(first->second);
    waiting_.erase(first);
    mu_.Unlock();
    closure();
    mu_.Lock();
  }
  mu_.Unlock();
}

// --------------------------------------------------------------------- SimulatedNodeService

grpc::ServerUnaryReactor* SimulatedNodeService::HealthCheck(grpc::CallbackServerContext* context,
                                                            const rpc::HealthCheckRequest*,
                                                            rpc::HealthCheckReply* reply) {
  return Respond(context, *auth_, [&] {
    reply->set_node_id(node_.node_id());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SimulatedNodeService::GetNodeStats(grpc::CallbackServerContext* context,
                                                             const rpc::GetNodeStatsRequest*,
                                                             rpc::GetNodeStatsReply* reply) {
  return Respond(context, *auth_, [&] {
    *reply->mutable_node() = node_;
    reply->mutable_usage()->set_node_id(node_.node_id());
    *reply->mutable_usage()->mutable_total() = node_.resources_total();
    for (const auto& [name, amount] : resources_->Available().ToMap()) {
      (*reply->mutable_usage()->mutable_available())[name] = amount;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SimulatedNodeService::RequestWorkerLease(
    grpc::CallbackServerContext* context, const rpc::RequestWorkerLeaseRequest* request,
    rpc::RequestWorkerLeaseReply* reply) {
  return Respond(context, *auth_, [&]() -> absl::Status {
    const rpc::TaskSpec& spec = request->resource_spec();
    if (spec.bundle_reservation()) {
      ++counters_->leases_refused;
      reply->set_rejected(true);
      reply->set_failure_message("a simulated node holds no placement-group bundles");
      return absl::OkStatus();
    }
    std::map<std::string, double> amounts(spec.required_resources().begin(),
                                          spec.required_resources().end());
    auto demand = ResourceSet::FromMap(amounts);
    if (!demand.ok()) return absl::InvalidArgumentError(demand.status().message());
    std::optional<std::string> lease = resources_->Lease(*demand);
    if (!lease.has_value()) {
      // As a raylet answers after a spillback: no room now, the caller starts over at its own
      // raylet (an empty message means "full", not "failed").
      ++counters_->leases_refused;
      reply->set_rejected(true);
      return absl::OkStatus();
    }
    ++counters_->leases_granted;
    reply->set_lease_id(*lease);
    reply->set_worker_id(WorkerId::FromRandom().Binary());
    reply->set_worker_address(absl::StrCat(node_.node_ip(), ":", node_.raylet_port()));
    reply->set_node_id(node_.node_id());
    reply->set_worker_pid(getpid());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SimulatedNodeService::ReturnWorker(
    grpc::CallbackServerContext* context, const rpc::ReturnWorkerRequest* request,
    rpc::ReturnWorkerReply*) {
  return Respond(context, *auth_, [&]() -> absl::Status {
    if (request->lease_id().empty()) return absl::OkStatus();  // bundles: none held here
    if (!resources_->Return(request->lease_id())) {
      return absl::NotFoundError(absl::StrCat("simulated node ", node_.raylet_port(),
                                              " holds no lease ", BytesToHex(request->lease_id())));
    }
    ++counters_->leases_returned;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SimulatedNodeService::KillLeasedWorker(
    grpc::CallbackServerContext* context, const rpc::KillLeasedWorkerRequest* request,
    rpc::KillLeasedWorkerReply*) {
  // The pretend worker "dies": its lease's resources come back.
  return Respond(context, *auth_, [&]() -> absl::Status {
    if (!resources_->Return(request->lease_id())) {
      return absl::NotFoundError(
          absl::StrCat("simulated node holds no lease ", BytesToHex(request->lease_id())));
    }
    ++counters_->leases_returned;
    return absl::OkStatus();
  });
}

// ------------------------------------------------------------------- SimulatedWorkerService

namespace {

// A PushTasks stream whose results are all written, with the stream's end, at `when`. Deletes
// itself once gRPC is done with it; nothing touches it after StartWriteAndFinish.
class DelayedPushTasks : public grpc::ServerWriteReactor<rpc::PushTaskResults> {
 public:
  DelayedPushTasks(rpc::PushTaskResults results, absl::Time when, DelayedRunner* runner)
      : results_(std::move(results)) {
    runner->RunAt(
        when, [this] { StartWriteAndFinish(&results_, grpc::WriteOptions(), grpc::Status::OK); });
  }
  void OnDone() override { delete this; }

 private:
  rpc::PushTaskResults results_;
};

class FailedPushTasks : public grpc::ServerWriteReactor<rpc::PushTaskResults> {
 public:
  explicit FailedPushTasks(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::Status SimulatedWorkerService::Answer(const rpc::TaskSpec& task,
                                            rpc::PushTaskReply* reply) const {
  auto task_id = TaskId::FromBinary(task.task_id());
  if (!task_id.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("task_id: ", task_id.status().message()));
  }
  reply->set_worker_address(address_);
  reply->set_run_us(absl::ToInt64Microseconds(task_run_time_));
  rpc::ReturnObject* ret = reply->add_returns();
  ret->set_object_id(ObjectId::FromIndex(*task_id, 1).Binary());
  ret->set_inline_value(std::string(kNilValue, sizeof(kNilValue)));
  ret->set_function_name(task.function_name());
  ret->set_node_id(node_id_);
  ret->set_pid(getpid());
  ++counters_->tasks_run;
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SimulatedWorkerService::PushTask(grpc::CallbackServerContext* context,
                                                           const rpc::PushTaskRequest* request,
                                                           rpc::PushTaskReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  if (absl::Status answered = Answer(request->task(), reply); !answered.ok()) {
    reactor->Finish(ToGrpcStatus(answered));
    return reactor;
  }
  runner_->RunAt(absl::Now() + task_run_time_, [reactor] { reactor->Finish(grpc::Status::OK); });
  return reactor;
}

grpc::ServerWriteReactor<rpc::PushTaskResults>* SimulatedWorkerService::PushTasks(
    grpc::CallbackServerContext* context, const rpc::PushTasksRequest* request) {
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return new FailedPushTasks(auth);
  rpc::PushTaskResults results;
  for (int i = 0; i < request->pushes_size(); ++i) {
    rpc::PushTaskResult* result = results.add_results();
    result->set_index(i);
    if (absl::Status answered = Answer(request->pushes(i).task(), result->mutable_reply());
        !answered.ok()) {
      result->clear_reply();
      result->set_error_code(static_cast<int>(answered.code()));
      result->set_error_message(std::string(answered.message()));
    }
  }
  // The batch's tasks run one after another.
  const absl::Time done = absl::Now() + task_run_time_ * request->pushes_size();
  return new DelayedPushTasks(std::move(results), done, runner_);
}

}  // namespace troupe
