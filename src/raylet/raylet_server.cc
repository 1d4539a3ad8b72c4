#include "src/raylet/raylet_server.h"

#include <grpcpp/grpcpp.h>

#include "src/raylet/object_manager_grpc_service.h"
#include "src/raylet/raylet_grpc_service.h"
#include "src/rpc/auth.h"
#include "src/rpc/server.h"

namespace troupe {

// Declared in this order so that the server goes first, then the services it called.
struct RayletServer::Grpc {
  Grpc(const ClusterToken& token, Raylet* raylet, ObjectManager* objects, int object_data_port)
      : auth(token),
        node_manager(&auth, raylet),
        object_manager(&auth, objects, object_data_port) {}

  TokenAuthenticator auth;
  RayletGrpcService node_manager;
  ObjectManagerGrpcService object_manager;
  std::unique_ptr<grpc::Server> server;
};

absl::StatusOr<std::unique_ptr<RayletServer>> RayletServer::Start(const std::string& host, int port,
                                                                  const ClusterToken& token,
                                                                  Raylet* raylet,
                                                                  ObjectManager* objects,
                                                                  int object_data_port,
                                                                  int* bound_port) {
  auto grpc = std::make_unique<Grpc>(token, raylet, objects, object_data_port);
  auto server =
      StartGrpcServer(host, port, {&grpc->node_manager, &grpc->object_manager}, bound_port);
  if (!server.ok()) return server.status();
  grpc->server = std::move(*server);
  return std::unique_ptr<RayletServer>(new RayletServer(std::move(grpc)));
}

RayletServer::RayletServer(std::unique_ptr<Grpc> grpc) : grpc_(std::move(grpc)) {}

RayletServer::~RayletServer() = default;

void RayletServer::Shutdown(absl::Time deadline) {
  grpc_->server->Shutdown(absl::ToChronoTime(deadline));
}

}  // namespace troupe
