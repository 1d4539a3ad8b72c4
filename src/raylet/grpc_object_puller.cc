#include "src/raylet/grpc_object_puller.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "proto/raylet.grpc.pb.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {

absl::Status GrpcObjectPuller::Pull(const std::string& address, const ObjectId& id,
                                    int64_t chunk_size, const ChunkHandler& on_chunk) {
  auto stub = rpc::ObjectManagerService::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  AttachToken(&context, token_);
  rpc::PullObjectRequest request;
  request.set_object_id(id.Binary());
  request.set_chunk_size(chunk_size);
  auto reader = stub->PullObject(&context, request);
  rpc::ObjectChunk chunk;
  absl::Status status;
  while (reader->Read(&chunk)) {
    status = on_chunk(chunk);
    if (!status.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status finish = reader->Finish();
  if (status.ok() && !finish.ok()) {
    status = FromGrpcStatus(finish, absl::StrCat("raylet at ", address));
  }
  return status;
}

}  // namespace troupe
