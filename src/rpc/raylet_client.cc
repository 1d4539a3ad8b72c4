#include "src/rpc/raylet_client.h"

#include "absl/strings/str_cat.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {

RayletClient::RayletClient(std::string address, std::string token)
    : address_(std::move(address)),
      token_(std::move(token)),
      stub_(rpc::NodeManagerService::NewStub(MakeChannel(address_))) {}

void RayletClient::HealthCheckAsync(absl::Duration timeout,
                                    std::function<void(absl::Status)> done) {
  struct Call {
    grpc::ClientContext context;
    rpc::HealthCheckRequest request;
    rpc::HealthCheckReply reply;
  };
  auto call = std::make_shared<Call>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  stub_->async()->HealthCheck(
      &call->context, &call->request, &call->reply,
      [call, done = std::move(done), peer = absl::StrCat("raylet at ", address_)](
          grpc::Status status) { done(FromGrpcStatus(status, peer)); });
}

absl::StatusOr<rpc::GetNodeStatsReply> RayletClient::GetNodeStats(absl::Duration timeout) {
  grpc::ClientContext context;
  AttachToken(&context, token_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  rpc::GetNodeStatsReply reply;
  grpc::Status status = stub_->GetNodeStats(&context, rpc::GetNodeStatsRequest(), &reply);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("raylet at ", address_));
  return reply;
}

}  // namespace troupe
