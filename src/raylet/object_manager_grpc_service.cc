#include "src/raylet/object_manager_grpc_service.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

namespace {

// A data message as ObjectChunk's wire format: offset (field 3), then data (field 4) whose bytes
// are `data` itself, not a copy.
grpc::ByteBuffer DataMessage(int64_t offset, const char* data, int64_t length,
                             const std::shared_ptr<const void>& mapping) {
  using google::protobuf::internal::WireFormatLite;
  std::string head;
  {
    google::protobuf::io::StringOutputStream stream(&head);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.WriteTag(WireFormatLite::MakeTag(rpc::ObjectChunk::kOffsetFieldNumber,
                                         WireFormatLite::WIRETYPE_VARINT));
    out.WriteVarint64(static_cast<uint64_t>(offset));
    out.WriteTag(WireFormatLite::MakeTag(rpc::ObjectChunk::kDataFieldNumber,
                                         WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(length));
  }
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      grpc::Slice(const_cast<char*>(data), static_cast<size_t>(length),
                  [](void* holder) { delete static_cast<std::shared_ptr<const void>*>(holder); },
                  new std::shared_ptr<const void>(mapping))};
  return grpc::ByteBuffer(slices, 2);
}

// One PullObject stream: ServeObject runs on a thread of its own and blocks in each write until
// gRPC reports it done. Deletes itself when gRPC is done with the call.
class PullReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public ChunkWriter {
 public:
  PullReactor(ObjectManager* objects, const ObjectId& id, rpc::PullObjectRequest request,
              int data_port)
      : objects_(objects), id_(id), request_(std::move(request)), data_port_(data_port) {
    std::thread([this] {
      absl::Status status = objects_->ServeObject(id_, request_.offset(), request_.length(),
                                                  request_.chunk_size(), this);
      Finish(ToGrpcStatus(status));  // the last use of `this` on this thread
    }).detach();
  }

  bool WriteHeader(const rpc::ObjectChunk& header) override {
    rpc::ObjectChunk with_port = header;
    with_port.set_data_port(data_port_);
    grpc::ByteBuffer message;
    bool own_buffer;
    grpc::SerializationTraits<rpc::ObjectChunk>::Serialize(with_port, &message, &own_buffer);
    return Write(std::move(message));
  }

  bool WriteData(int64_t offset, const char* data, int64_t length,
                 const std::shared_ptr<const void>& mapping) override {
    return Write(DataMessage(offset, data, length, mapping));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    writing_ = false;
  }

  void OnDone() override { delete this; }

 private:
  bool Write(grpc::ByteBuffer message) {
    absl::MutexLock lock(&mu_);
    message_ = std::move(message);
    writing_ = true;
    StartWrite(&message_);
    mu_.Await(absl::Condition(
        +[](bool* writing) { return !*writing; }, &writing_));
    message_.Clear();  // drops our reference to the slices (gRPC keeps its own while sending)
    return write_ok_;
  }

  ObjectManager* const objects_;
  const ObjectId id_;
  const rpc::PullObjectRequest request_;
  const int data_port_;
  absl::Mutex mu_;
  grpc::ByteBuffer message_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
};

// A stream that ends at once with `status`.
class FailedReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* ObjectManagerGrpcService::PullObject(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes) {
  if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return new FailedReactor(auth);
  rpc::PullObjectRequest request;
  grpc::ByteBuffer copy(*request_bytes);  // Deserialize consumes its buffer
  if (!grpc::SerializationTraits<rpc::PullObjectRequest>::Deserialize(&copy, &request).ok()) {
    return new FailedReactor(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a malformed PullObjectRequest"));
  }
  if (absl::Status valid = ValidateRequest(request); !valid.ok()) {
    return new FailedReactor(ToGrpcStatus(valid));
  }
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return new FailedReactor(ToGrpcStatus(id.status()));
  return new PullReactor(objects_, *id, std::move(request), data_port_);
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
