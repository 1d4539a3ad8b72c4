#include "src/raylet/object_manager_grpc_service.h"

#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

namespace {

// Writes ServeObject's messages to the stream; each data message takes one copy of the chunk.
class StreamChunkWriter : public ChunkWriter {
 public:
  explicit StreamChunkWriter(grpc::ServerWriter<rpc::ObjectChunk>* stream) : stream_(stream) {}

  bool WriteHeader(const rpc::ObjectChunk& header) override { return stream_->Write(header); }

  bool WriteData(int64_t offset, const char* data, int64_t length) override {
    chunk_.set_offset(offset);
    chunk_.mutable_data()->assign(data, length);
    return stream_->Write(chunk_);
  }

 private:
  grpc::ServerWriter<rpc::ObjectChunk>* const stream_;
  rpc::ObjectChunk chunk_;  // reused: its string keeps its capacity from chunk to chunk
};

}  // namespace

grpc::Status ObjectManagerGrpcService::PullObject(grpc::ServerContext* context,
                                                  const rpc::PullObjectRequest* request,
                                                  grpc::ServerWriter<rpc::ObjectChunk>* writer) {
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return auth;
  if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return ToGrpcStatus(valid);
  auto id = ObjectId::FromBinary(request->object_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  StreamChunkWriter chunks(writer);
  return ToGrpcStatus(objects_->ServeObject(*id, request->offset(), request->length(),
                                            request->chunk_size(), &chunks));
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
