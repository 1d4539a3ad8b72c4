// ObjectManagerService: the gRPC face of the ObjectManager (other raylets' PullObject streams,
// FreeObjects). Only glue: checks the cluster token and the request
// (src/rpc/request_validation.h: INVALID_ARGUMENT naming the field), then calls the
// ObjectManager and converts its absl::Status. The pull client is GrpcObjectPuller.
// PullObject is a raw callback method: each data message is a small encoded head (offset, data
// length) plus a gRPC slice that points into the object's read-only mapping, so a chunk goes from
// shared memory to the socket without a copy in user space; the slice holds the mapping (and the
// store's pin) until gRPC has sent it. Each stream runs ObjectManager::ServeObject on a thread of
// its own, which waits for each write to complete before the next (one chunk in flight per
// stream beyond gRPC's flow-control window). FreeObjects is a synchronous handler.
// Owned by the raylet's server (raylet_server.cc); borrows the authenticator and the
// ObjectManager (both must outlive it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "proto/raylet.grpc.pb.h"
#include "src/raylet/object_manager.h"
#include "src/rpc/auth.h"

namespace troupe {

class ObjectManagerGrpcService : public rpc::ObjectManagerService::WithRawCallbackMethod_PullObject<
                                     rpc::ObjectManagerService::Service> {
 public:
  // `data_port`: the raylet's object data port, named in every PullObject header (0: none).
  ObjectManagerGrpcService(const TokenAuthenticator* auth, ObjectManager* objects, int data_port)
      : auth_(auth), objects_(objects), data_port_(data_port) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullObject(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request) override;
  grpc::Status FreeObjects(grpc::ServerContext* context, const rpc::FreeObjectsRequest* request,
                           rpc::FreeObjectsReply* reply) override;

 private:
  const TokenAuthenticator* const auth_;
  ObjectManager* const objects_;
  const int data_port_;
};

}  // namespace troupe
