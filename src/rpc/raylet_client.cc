#include "src/rpc/raylet_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/rpc/async_call.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

RayletClient::RayletClient(std::string address, std::string token)
    : address_(std::move(address)),
      token_(std::move(token)),
      peer_name_(absl::StrCat("raylet at ", address_)) {
  auto channel = MakeChannel(address_);
  stub_ = rpc::NodeManagerService::NewStub(channel);
  object_stub_ = rpc::ObjectManagerService::NewStub(channel);
}

template <typename Request, typename Reply>
absl::StatusOr<Reply> RayletClient::Call(grpc::Status (rpc::NodeManagerService::Stub::*method)(
                                             grpc::ClientContext*, const Request&, Reply*),
                                         const Request& request, absl::Duration timeout) {
  grpc::ClientContext context;
  AttachToken(&context, token_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Reply reply;
  grpc::Status status = (stub_.get()->*method)(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, peer_name_);
  return reply;
}

void RayletClient::HealthCheckAsync(absl::Duration timeout,
                                    std::function<void(absl::Status)> done) {
  auto call = std::make_shared<AsyncCall<rpc::HealthCheckRequest, rpc::HealthCheckReply>>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  stub_->async()->HealthCheck(
      &call->context, &call->request, &call->reply,
      [call, self = shared_from_this(), done = std::move(done),
       peer = peer_name_](grpc::Status status) { done(FromGrpcStatus(status, peer)); });
}

absl::StatusOr<rpc::GetNodeStatsReply> RayletClient::GetNodeStats(absl::Duration timeout) {
  return Call(&rpc::NodeManagerService::Stub::GetNodeStats, rpc::GetNodeStatsRequest(), timeout);
}

absl::StatusOr<rpc::ListStoreObjectsReply> RayletClient::ListStoreObjects(absl::Duration timeout) {
  return Call(&rpc::NodeManagerService::Stub::ListStoreObjects, rpc::ListStoreObjectsRequest(),
              timeout);
}

absl::StatusOr<rpc::ListNodeWorkersReply> RayletClient::ListNodeWorkers(absl::Duration timeout) {
  return Call(&rpc::NodeManagerService::Stub::ListNodeWorkers, rpc::ListNodeWorkersRequest(),
              timeout);
}

absl::StatusOr<rpc::ListLogFilesReply> RayletClient::ListLogFiles(absl::Duration timeout) {
  return Call(&rpc::NodeManagerService::Stub::ListLogFiles, rpc::ListLogFilesRequest(), timeout);
}

absl::StatusOr<rpc::ReadLogFileReply> RayletClient::ReadLogFile(
    const rpc::ReadLogFileRequest& request, absl::Duration timeout) {
  return Call(&rpc::NodeManagerService::Stub::ReadLogFile, request, timeout);
}

absl::StatusOr<rpc::RegisterWorkerReply> RayletClient::RegisterWorker(
    const rpc::RegisterWorkerRequest& request) {
  return Call(&rpc::NodeManagerService::Stub::RegisterWorker, request, absl::Seconds(30));
}

std::function<void()> RayletClient::RequestWorkerLeaseAsync(
    const rpc::RequestWorkerLeaseRequest& request,
    std::function<void(absl::StatusOr<rpc::RequestWorkerLeaseReply>)> done) {
  auto call =
      std::make_shared<AsyncCall<rpc::RequestWorkerLeaseRequest, rpc::RequestWorkerLeaseReply>>();
  AttachToken(&call->context, token_);
  call->request = request;
  stub_->async()->RequestWorkerLease(&call->context, &call->request, &call->reply,
                                     [call, self = shared_from_this(), done = std::move(done),
                                      peer = peer_name_](grpc::Status status) {
                                       if (!status.ok()) return done(FromGrpcStatus(status, peer));
                                       done(std::move(call->reply));
                                     });
  std::weak_ptr<AsyncCall<rpc::RequestWorkerLeaseRequest, rpc::RequestWorkerLeaseReply>> weak =
      call;
  return [weak] {
    if (auto live = weak.lock()) live->context.TryCancel();
  };
}

void RayletClient::ReturnWorkerAsync(const std::string& lease_id, bool disconnect) {
  auto call = std::make_shared<AsyncCall<rpc::ReturnWorkerRequest, rpc::ReturnWorkerReply>>();
  AttachToken(&call->context, token_);
  call->request.set_lease_id(lease_id);
  call->request.set_disconnect_worker(disconnect);
  stub_->async()->ReturnWorker(&call->context, &call->request, &call->reply,
                               [call, self = shared_from_this()](grpc::Status) {});
}

void RayletClient::ReturnReservationsAsync(const std::vector<std::string>& reservation_ids,
                                           std::function<void(absl::Status)> done) {
  auto call = std::make_shared<AsyncCall<rpc::ReturnWorkerRequest, rpc::ReturnWorkerReply>>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  for (const auto& id : reservation_ids) call->request.add_reservation_ids(id);
  stub_->async()->ReturnWorker(
      &call->context, &call->request, &call->reply,
      [call, self = shared_from_this(), done = std::move(done)](grpc::Status status) {
        done(status.ok() ? absl::OkStatus() : FromGrpcStatus(status, self->peer_name_));
      });
}

absl::Status RayletClient::ReturnWorker(const std::string& lease_id, bool disconnect) {
  rpc::ReturnWorkerRequest request;
  request.set_lease_id(lease_id);
  request.set_disconnect_worker(disconnect);
  return Call(&rpc::NodeManagerService::Stub::ReturnWorker, request, absl::Seconds(5)).status();
}

void RayletClient::KillLeasedWorkerAsync(const std::string& lease_id,
                                         std::function<void(absl::Status)> done) {
  auto call =
      std::make_shared<AsyncCall<rpc::KillLeasedWorkerRequest, rpc::KillLeasedWorkerReply>>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  call->request.set_lease_id(lease_id);
  stub_->async()->KillLeasedWorker(
      &call->context, &call->request, &call->reply,
      [call, self = shared_from_this(), done = std::move(done)](grpc::Status status) {
        done(status.ok() ? absl::OkStatus() : FromGrpcStatus(status, self->peer_name_));
      });
}

absl::Status RayletClient::NotifyBlocked(const std::string& worker_id, bool blocked) {
  rpc::NotifyBlockedRequest request;
  request.set_worker_id(worker_id);
  request.set_blocked(blocked);
  return Call(&rpc::NodeManagerService::Stub::NotifyBlocked, request, absl::Seconds(5)).status();
}

absl::Status RayletClient::ReportUserMetrics(const rpc::ReportUserMetricsRequest& request) {
  return Call(&rpc::NodeManagerService::Stub::ReportUserMetrics, request, absl::Seconds(5))
      .status();
}

absl::StatusOr<std::string> RayletClient::CreateObject(const std::string& object_id, int64_t size,
                                                       bool primary,
                                                       const std::string& owner_worker_id,
                                                       const std::string& owner_node_id) {
  rpc::CreateObjectRequest request;
  request.set_object_id(object_id);
  request.set_size(size);
  request.set_primary(primary);
  request.set_owner_worker_id(owner_worker_id);
  request.set_owner_node_id(owner_node_id);
  auto reply = Call(&rpc::NodeManagerService::Stub::CreateObject, request, absl::Seconds(120));
  if (!reply.ok()) return reply.status();
  return reply->path();
}

absl::Status RayletClient::SealObject(const std::string& object_id) {
  rpc::SealObjectRequest request;
  request.set_object_id(object_id);
  return Call(&rpc::NodeManagerService::Stub::SealObject, request, absl::Seconds(30)).status();
}

absl::StatusOr<std::vector<rpc::LocalObject>> RayletClient::GetObjects(
    const std::vector<std::string>& ids, const std::string& worker_id) {
  rpc::GetObjectsRequest request;
  for (const auto& id : ids) request.add_object_ids(id);
  request.set_worker_id(worker_id);
  auto reply = Call(&rpc::NodeManagerService::Stub::GetObjects, request, absl::Seconds(120));
  if (!reply.ok()) return reply.status();
  return std::vector<rpc::LocalObject>(reply->objects().begin(), reply->objects().end());
}

void RayletClient::ReleaseObjectsAsync(const std::vector<std::string>& ids,
                                       const std::string& worker_id) {
  auto call = std::make_shared<AsyncCall<rpc::ReleaseObjectsRequest, rpc::ReleaseObjectsReply>>();
  AttachToken(&call->context, token_);
  for (const auto& id : ids) call->request.add_object_ids(id);
  call->request.set_worker_id(worker_id);
  stub_->async()->ReleaseObjects(&call->context, &call->request, &call->reply,
                                 [call, self = shared_from_this()](grpc::Status) {});
}

absl::Status RayletClient::ReleaseObjects(const std::vector<std::string>& ids,
                                          const std::string& worker_id) {
  rpc::ReleaseObjectsRequest request;
  for (const auto& id : ids) request.add_object_ids(id);
  request.set_worker_id(worker_id);
  return Call(&rpc::NodeManagerService::Stub::ReleaseObjects, request, absl::Seconds(2)).status();
}

absl::Status RayletClient::FetchObject(const std::string& object_id,
                                       const std::vector<std::string>& sources,
                                       absl::Duration timeout) {
  rpc::FetchObjectRequest request;
  request.set_object_id(object_id);
  if (!sources.empty()) request.set_from_raylet_address(sources[0]);
  // The raylet takes at most kMaxFetchSources copies; the first ones are tried first anyway.
  const size_t count = std::min<size_t>(sources.size(), RequestLimits::kMaxFetchSources);
  for (size_t i = 1; i < count; ++i) request.add_other_raylet_addresses(sources[i]);
  return Call(&rpc::NodeManagerService::Stub::FetchObject, request, timeout).status();
}

void RayletClient::FreeObjectsAsync(const std::vector<std::string>& ids) {
  auto call = std::make_shared<AsyncCall<rpc::FreeObjectsRequest, rpc::FreeObjectsReply>>();
  AttachToken(&call->context, token_);
  for (const auto& id : ids) call->request.add_object_ids(id);
  object_stub_->async()->FreeObjects(&call->context, &call->request, &call->reply,
                                     [call, self = shared_from_this()](grpc::Status) {});
}

}  // namespace troupe
