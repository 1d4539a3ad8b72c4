#include "src/rpc/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace troupe {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& peer) {
  if (status.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(status.error_code());
  std::string message = absl::StrCat(peer, ": ", status.error_message());
  if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
    absl::StrAppend(&message, " (is it running and reachable from here?)");
  }
  return absl::Status(code, message);
}

}  // namespace troupe
