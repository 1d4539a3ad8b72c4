// Converts between absl::Status and grpc::Status, once, at the RPC boundary. Both use the same
// canonical codes. Stateless.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"

namespace troupe {

grpc::Status ToGrpcStatus(const absl::Status& status);

// `peer` names what was called ("GCS at 127.0.0.1:6380") so errors say where they came from;
// UNAVAILABLE and DEADLINE_EXCEEDED get a hint about reachability.
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& peer);

}  // namespace troupe
