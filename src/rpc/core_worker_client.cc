#include "src/rpc/core_worker_client.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "src/rpc/async_call.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {

CoreWorkerClient::CoreWorkerClient(std::string address, std::string token)
    : address_(std::move(address)),
      token_(std::move(token)),
      peer_name_(absl::StrCat("worker at ", address_)),
      stub_(rpc::CoreWorkerService::NewStub(MakeChannel(address_))) {}

std::function<void()> CoreWorkerClient::PushTaskAsync(
    rpc::PushTaskRequest request, std::function<void(absl::StatusOr<rpc::PushTaskReply>)> done) {
  auto call = std::make_shared<AsyncCall<rpc::PushTaskRequest, rpc::PushTaskReply>>();
  AttachToken(&call->context, token_);
  call->request = std::move(request);
  stub_->async()->PushTask(&call->context, &call->request, &call->reply,
                           [call, self = shared_from_this(), done = std::move(done),
                            peer = peer_name_](grpc::Status status) {
                             if (!status.ok()) return done(FromGrpcStatus(status, peer));
                             done(std::move(call->reply));
                           });
  std::weak_ptr<AsyncCall<rpc::PushTaskRequest, rpc::PushTaskReply>> weak = call;
  return [weak] {
    if (auto live = weak.lock()) live->context.TryCancel();
  };
}

namespace {

// One PushTasks stream, client side: delivers each message's results as they arrive and, when
// the stream ends, the stream's error to every push still without an outcome. Owns itself
// (`self_`) until gRPC is done with it.
class PushTasksCall : public grpc::ClientReadReactor<rpc::PushTaskResults> {
 public:
  using PushResults = CoreWorkerClient::PushResults;

  static std::function<void()> Start(rpc::CoreWorkerService::Stub* stub, const std::string& token,
                                     std::string peer, std::shared_ptr<CoreWorkerClient> client,
                                     rpc::PushTasksRequest request,
                                     std::function<void(PushResults)> on_results) {
    auto call = std::shared_ptr<PushTasksCall>(new PushTasksCall(
        std::move(peer), std::move(client), std::move(request), std::move(on_results)));
    call->self_ = call;
    AttachToken(&call->context_, token);
    stub->async()->PushTasks(&call->context_, &call->request_, call.get());
    call->StartRead(&call->message_);
    call->StartCall();
    std::weak_ptr<PushTasksCall> weak = call;
    return [weak] {
      if (auto live = weak.lock()) live->context_.TryCancel();
    };
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    PushResults results;
    results.reserve(message_.results_size());
    for (rpc::PushTaskResult& result : *message_.mutable_results()) {
      const size_t index = static_cast<size_t>(result.index());
      if (result.index() < 0 || index >= answered_.size() || answered_[index]) continue;
      answered_[index] = true;
      if (result.error_code() != 0) {
        results.emplace_back(index, absl::Status(static_cast<absl::StatusCode>(result.error_code()),
                                                 result.error_message()));
      } else {
        results.emplace_back(index, std::move(*result.mutable_reply()));
      }
    }
    if (!results.empty()) on_results_(std::move(results));
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override {
    const absl::Status why =
        status.ok() ? absl::InternalError(absl::StrCat(
                          "the ", peer_, " ended the batch without a result for this task"))
                    : FromGrpcStatus(status, peer_);
    PushResults missing;
    for (size_t i = 0; i < answered_.size(); ++i) {
      if (!answered_[i]) missing.emplace_back(i, why);
    }
    if (!missing.empty()) on_results_(std::move(missing));
    self_.reset();  // may delete this
  }

 private:
  PushTasksCall(std::string peer, std::shared_ptr<CoreWorkerClient> client,
                rpc::PushTasksRequest request, std::function<void(PushResults)> on_results)
      : peer_(std::move(peer)),
        client_(std::move(client)),
        request_(std::move(request)),
        on_results_(std::move(on_results)),
        answered_(request_.pushes_size(), false) {}

  const std::string peer_;
  const std::shared_ptr<CoreWorkerClient> client_;  // keeps the stub alive
  grpc::ClientContext context_;
  const rpc::PushTasksRequest request_;
  const std::function<void(PushResults)> on_results_;
  std::vector<bool> answered_;  // only touched by the serialized reactions
  rpc::PushTaskResults message_;
  std::shared_ptr<PushTasksCall> self_;
};

}  // namespace

std::function<void()> CoreWorkerClient::PushTasksAsync(
    rpc::PushTasksRequest request, std::function<void(PushResults)> on_results) {
  return PushTasksCall::Start(stub_.get(), token_, peer_name_, shared_from_this(),
                              std::move(request), std::move(on_results));
}

absl::StatusOr<rpc::GetObjectStatusReply> CoreWorkerClient::GetObjectStatus(
    const std::string& object_id, absl::Duration wait,
    const std::vector<std::string>& lost_copies) {
  grpc::ClientContext context;
  AttachToken(&context, token_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + wait + absl::Seconds(10)));
  rpc::GetObjectStatusRequest request;
  request.set_object_id(object_id);
  request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
  for (const auto& copy : lost_copies) request.add_lost_copy_raylet_addresses(copy);
  rpc::GetObjectStatusReply reply;
  grpc::Status status = stub_->GetObjectStatus(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("owner at ", address_));
  return reply;
}

std::function<void()> CoreWorkerClient::GetObjectStatusAsync(
    const std::string& object_id, absl::Duration wait,
    std::function<void(absl::StatusOr<rpc::GetObjectStatusReply>)> done) {
  auto call = std::make_shared<AsyncCall<rpc::GetObjectStatusRequest, rpc::GetObjectStatusReply>>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + wait + absl::Seconds(10)));
  call->request.set_object_id(object_id);
  call->request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
  stub_->async()->GetObjectStatus(
      &call->context, &call->request, &call->reply,
      [call, self = shared_from_this(), done = std::move(done)](grpc::Status status) {
        if (!status.ok()) return done(FromGrpcStatus(status, "owner at " + self->address_));
        done(std::move(call->reply));
      });
  std::weak_ptr<AsyncCall<rpc::GetObjectStatusRequest, rpc::GetObjectStatusReply>> weak = call;
  return [weak] {
    if (auto live = weak.lock()) live->context.TryCancel();
  };
}

void CoreWorkerClient::AddObjectLocationAsync(const std::string& object_id,
                                              const std::string& raylet_address,
                                              const std::string& node_id) {
  auto call =
      std::make_shared<AsyncCall<rpc::AddObjectLocationRequest, rpc::AddObjectLocationReply>>();
  AttachToken(&call->context, token_);
  call->request.set_object_id(object_id);
  call->request.set_raylet_address(raylet_address);
  call->request.set_node_id(node_id);
  stub_->async()->AddObjectLocation(&call->context, &call->request, &call->reply,
                                    [call, self = shared_from_this()](grpc::Status) {});
}

void CoreWorkerClient::AddBorrowersAsync(const std::vector<std::string>& ids,
                                         const std::string& borrower) {
  auto call = std::make_shared<AsyncCall<rpc::AddBorrowersRequest, rpc::AddBorrowersReply>>();
  AttachToken(&call->context, token_);
  for (const auto& id : ids) call->request.add_object_ids(id);
  call->request.set_borrower_address(borrower);
  stub_->async()->AddBorrowers(&call->context, &call->request, &call->reply,
                               [call, self = shared_from_this()](grpc::Status) {});
}

absl::Status CoreWorkerClient::AddBorrowers(const std::vector<std::string>& ids,
                                            const std::string& borrower, absl::Duration timeout) {
  grpc::ClientContext context;
  AttachToken(&context, token_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  rpc::AddBorrowersRequest request;
  for (const auto& id : ids) request.add_object_ids(id);
  request.set_borrower_address(borrower);
  rpc::AddBorrowersReply reply;
  grpc::Status status = stub_->AddBorrowers(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("owner at ", address_));
  return absl::OkStatus();
}

void CoreWorkerClient::RemoveBorrowersAsync(const std::vector<std::string>& ids,
                                            const std::string& borrower) {
  auto call = std::make_shared<AsyncCall<rpc::RemoveBorrowersRequest, rpc::RemoveBorrowersReply>>();
  AttachToken(&call->context, token_);
  for (const auto& id : ids) call->request.add_object_ids(id);
  call->request.set_borrower_address(borrower);
  stub_->async()->RemoveBorrowers(&call->context, &call->request, &call->reply,
                                  [call, self = shared_from_this()](grpc::Status) {});
}

absl::StatusOr<rpc::ReportStreamItemReply> CoreWorkerClient::ReportStreamItem(
    const rpc::ReportStreamItemRequest& request) {
  grpc::ClientContext context;
  AttachToken(&context, token_);
  rpc::ReportStreamItemReply reply;
  grpc::Status status = stub_->ReportStreamItem(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("stream owner at ", address_));
  return reply;
}

void CoreWorkerClient::CancelTaskAsync(const std::string& task_id, bool recursive) {
  auto call = std::make_shared<AsyncCall<rpc::CancelTaskRequest, rpc::CancelTaskReply>>();
  AttachToken(&call->context, token_);
  call->request.set_task_id(task_id);
  call->request.set_recursive(recursive);
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  stub_->async()->CancelTask(&call->context, &call->request, &call->reply,
                             [call, self = shared_from_this()](grpc::Status) {});
}

void CoreWorkerClient::ExitAsync() {
  auto call = std::make_shared<AsyncCall<rpc::ExitRequest, rpc::ExitReply>>();
  AttachToken(&call->context, token_);
  stub_->async()->Exit(&call->context, &call->request, &call->reply,
                       [call, self = shared_from_this()](grpc::Status) {});
}

}  // namespace troupe
