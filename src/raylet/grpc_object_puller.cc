#include "src/raylet/grpc_object_puller.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "proto/raylet.pb.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr char kPullObjectMethod[] = "/troupe.rpc.ObjectManagerService/PullObject";
constexpr size_t kMaxCachedChannels = 256;

// One streaming call driven synchronously over its own completion queue: each operation is
// started, then waited for.
class SyncStream {
 public:
  SyncStream(grpc::GenericStub* stub, grpc::ClientContext* context)
      : call_(stub->PrepareCall(context, kPullObjectMethod, &queue_)) {}
  ~SyncStream() {
    queue_.Shutdown();
    void* tag;
    bool ok;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  bool Start() {
    call_->StartCall(this);
    return Wait();
  }
  bool Send(const grpc::ByteBuffer& message) {
    call_->WriteLast(message, grpc::WriteOptions(), this);
    return Wait();
  }
  // False at the end of the stream (or when it broke: Finish says which).
  bool Read(grpc::ByteBuffer* message) {
    call_->Read(message, this);
    return Wait();
  }
  grpc::Status Finish() {
    grpc::Status status;
    call_->Finish(&status, this);
    Wait();
    return status;
  }

 private:
  bool Wait() {
    void* tag;
    bool ok = false;
    return queue_.Next(&tag, &ok) && ok;
  }

  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

// Parses one data message (offset = 3, data = 4; fields are serialized in number order, so the
// offset comes first) and copies its data straight to where `sink` places it.
absl::Status ReadData(grpc::ByteBuffer* message, ChunkSink* sink) {
  grpc::ProtoBufferReader reader(message);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  int64_t offset = 0;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    if (field == rpc::ObjectChunk::kOffsetFieldNumber && type == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t value;
      if (!in.ReadVarint64(&value)) break;
      offset = static_cast<int64_t>(value);
    } else if (field == rpc::ObjectChunk::kDataFieldNumber &&
               type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length;
      if (!in.ReadVarint32(&length)) break;
      auto place = sink->Place(offset, length);
      if (!place.ok()) return place.status();
      if (!in.ReadRaw(*place, static_cast<int>(length))) break;
      sink->Placed(offset, length);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  if (!in.ConsumedEntireMessage()) {
    return absl::DataLossError("a malformed object chunk message");
  }
  return absl::OkStatus();
}

absl::Status ReadHeader(grpc::ByteBuffer* message, ChunkSink* sink) {
  rpc::ObjectChunk header;
  grpc::ProtoBufferReader reader(message);
  if (!header.ParseFromZeroCopyStream(&reader)) {
    return absl::DataLossError("a malformed object header message");
  }
  return sink->OnHeader(header);
}

}  // namespace

std::shared_ptr<grpc::Channel> GrpcObjectPuller::Channel(const std::string& address,
                                                         int connection) {
  absl::MutexLock lock(&mu_);
  auto& channel = channels_[{address, connection}];
  if (channel == nullptr) {
    if (channels_.size() > kMaxCachedChannels) {
      channels_.clear();
      return Channel(address, connection);  // re-locks: absl::Mutex is not reentrant
    }
    channel = MakeChannel(address, {/*own_connection=*/true});
  }
  return channel;
}

absl::Status GrpcObjectPuller::Pull(const PullRange& range, ChunkSink* sink) {
  grpc::GenericStub stub(Channel(range.address, range.connection));
  grpc::ClientContext context;
  AttachToken(&context, token_);
  rpc::PullObjectRequest request;
  request.set_object_id(range.id.Binary());
  request.set_chunk_size(range.chunk_size);
  request.set_offset(range.offset);
  request.set_length(range.length);
  grpc::ByteBuffer request_bytes;
  bool own_buffer;
  grpc::SerializationTraits<rpc::PullObjectRequest>::Serialize(request, &request_bytes,
                                                               &own_buffer);
  SyncStream stream(&stub, &context);
  absl::Status status;
  if (stream.Start() && stream.Send(request_bytes)) {
    grpc::ByteBuffer message;
    for (bool header = true; status.ok() && stream.Read(&message); header = false) {
      status = header ? ReadHeader(&message, sink) : ReadData(&message, sink);
      message.Clear();
    }
  }
  if (!status.ok()) context.TryCancel();
  grpc::Status finish = stream.Finish();
  if (status.ok() && !finish.ok()) {
    status = FromGrpcStatus(finish, absl::StrCat("raylet at ", range.address));
  }
  return status;
}

}  // namespace troupe
