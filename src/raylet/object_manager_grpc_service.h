// ObjectManagerService: the gRPC face of the ObjectManager (other raylets' PullObject streams,
// FreeObjects). Only glue: checks the cluster token and the request
// (src/rpc/request_validation.h: INVALID_ARGUMENT naming the field), then calls the
// ObjectManager and converts its absl::Status. The pull client is GrpcObjectPuller.
// Synchronous handlers on gRPC's threads. Owned by the raylet's server (raylet_server.cc);
// borrows the authenticator and the ObjectManager (both must outlive it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "proto/raylet.grpc.pb.h"
#include "src/raylet/object_manager.h"
#include "src/rpc/auth.h"

namespace troupe {

class ObjectManagerGrpcService : public rpc::ObjectManagerService::Service {
 public:
  ObjectManagerGrpcService(const TokenAuthenticator* auth, ObjectManager* objects)
      : auth_(auth), objects_(objects) {}

  grpc::Status PullObject(grpc::ServerContext* context, const rpc::PullObjectRequest* request,
                          grpc::ServerWriter<rpc::ObjectChunk>* writer) override;
  grpc::Status FreeObjects(grpc::ServerContext* context, const rpc::FreeObjectsRequest* request,
                           rpc::FreeObjectsReply* reply) override;

 private:
  const TokenAuthenticator* const auth_;
  ObjectManager* const objects_;
};

}  // namespace troupe
