#include "src/raylet/object_manager_grpc_service.h"

#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

grpc::Status ObjectManagerGrpcService::PullObject(grpc::ServerContext* context,
                                                  const rpc::PullObjectRequest* request,
                                                  grpc::ServerWriter<rpc::ObjectChunk>* writer) {
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return auth;
  if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return ToGrpcStatus(valid);
  auto id = ObjectId::FromBinary(request->object_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  return ToGrpcStatus(objects_->ServeObject(
      *id, request->chunk_size(),
      [writer](const rpc::ObjectChunk& chunk) { return writer->Write(chunk); }));
}

grpc::Status ObjectManagerGrpcService::FreeObjects(grpc::ServerContext* context,
                                                   const rpc::FreeObjectsRequest* request,
                                                   rpc::FreeObjectsReply*) {
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return auth;
  if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return ToGrpcStatus(valid);
  for (const auto& binary : request->object_ids()) {
    if (auto id = ObjectId::FromBinary(binary); id.ok()) objects_->Free(*id);
  }
  return grpc::Status::OK;
}

}  // namespace troupe
