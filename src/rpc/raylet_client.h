// Client for a raylet's NodeManagerService (proto/raylet.proto). HealthCheckAsync is what the
// GCS health checker uses; GetNodeStats serves the CLI and tests. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/raylet.grpc.pb.h"

namespace troupe {

class RayletClient {
 public:
  RayletClient(std::string address, std::string token);

  // Calls `done` (on a gRPC thread) with OK if the raylet answered within `timeout`.
  void HealthCheckAsync(absl::Duration timeout, std::function<void(absl::Status)> done);
  absl::StatusOr<rpc::GetNodeStatsReply> GetNodeStats(absl::Duration timeout = absl::Seconds(10));

 private:
  std::string address_;
  std::string token_;
  std::unique_ptr<rpc::NodeManagerService::Stub> stub_;
};

}  // namespace troupe
