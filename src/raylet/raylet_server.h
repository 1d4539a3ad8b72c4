// RayletServer: the raylet's running gRPC server (NodeManagerService for workers and drivers,
// ObjectManagerService for other raylets), seen from the raylet's logic without gRPC types.
// Start builds the gRPC services of raylet_grpc_service.h and object_manager_grpc_service.h,
// which check the cluster token and the request and then call the Raylet's Handle* methods and
// the ObjectManager; gRPC itself stays in raylet_server.cc and those services.
// Owned by the Raylet; borrows the Raylet and the ObjectManager (both must outlive it).
// Thread-safety: Start and Shutdown from the raylet's thread; handlers run on gRPC's threads.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

class ObjectManager;
class Raylet;

class RayletServer {
 public:
  // Listens on host:port (port 0: any free port, reported in *bound_port) and serves both
  // services; every call must carry `token`. PullObject headers name `object_data_port`.
  // Fails if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<RayletServer>> Start(const std::string& host, int port,
                                                             const ClusterToken& token,
                                                             Raylet* raylet, ObjectManager* objects,
                                                             int object_data_port,
                                                             int* bound_port);
  ~RayletServer();  // call Shutdown first

  // Stops taking calls; calls still running get until `deadline` (real time), then are
  // cancelled. Returns when the server has stopped.
  void Shutdown(absl::Time deadline);

 private:
  struct Grpc;  // the gRPC server and services (raylet_server.cc)
  explicit RayletServer(std::unique_ptr<Grpc> grpc);

  std::unique_ptr<Grpc> grpc_;
};

}  // namespace troupe
