#include "src/raylet/simulated_node_reporter.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/client_unary_call.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/gcs.grpc.pb.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {

using google::protobuf::internal::WireFormatLite;

absl::StatusOr<ReportAnswer> ReadReportReply(absl::string_view wire) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  ReportAnswer answer;
  const int cluster = rpc::ReportResourceUsageReply::kClusterFieldNumber;
  const int view_version = rpc::ReportResourceUsageReply::kViewVersionFieldNumber;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    if (field == cluster && type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.Skip(static_cast<int>(length))) break;
      ++answer.entries;
    } else if (field == view_version && type == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t version = 0;
      if (!in.ReadVarint64(&version)) break;
      answer.view_version = static_cast<int64_t>(version);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  if (!in.ConsumedEntireMessage() || in.CurrentPosition() != static_cast<int>(wire.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ReportResourceUsage reply that does not parse (", wire.size(),
                     " bytes, stopped at byte ", in.CurrentPosition(), ")"));
  }
  return answer;
}

SimulatedNodeReporter::SimulatedNodeReporter(const std::string& gcs_address, std::string token)
    : peer_(absl::StrCat("GCS at ", gcs_address)),
      token_(std::move(token)),
      method_name_(
          absl::StrCat("/", rpc::NodeInfoService::service_full_name(), "/ReportResourceUsage")),
      channel_(MakeChannel(gcs_address)),
      method_(std::make_unique<grpc::internal::RpcMethod>(
          method_name_.c_str(), grpc::internal::RpcMethod::NORMAL_RPC, channel_)) {}

absl::StatusOr<ReportAnswer> SimulatedNodeReporter::Report(const rpc::ResourceUsage& usage,
                                                           int64_t known_view_version) {
  rpc::ReportResourceUsageRequest request;
  *request.mutable_usage() = usage;
  request.set_known_view_version(known_view_version);
  grpc::ClientContext context;
  AttachToken(&context, token_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::ByteBuffer reply;
  grpc::Status status =
      grpc::internal::BlockingUnaryCall<rpc::ReportResourceUsageRequest, grpc::ByteBuffer>(
          channel_.get(), *method_, &context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, peer_);
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) return absl::InternalError("could not read the reply's bytes");
  if (slices.size() == 1) {
    return ReadReportReply(
        absl::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size()));
  }
  std::string wire;
  wire.reserve(reply.Length());
  for (const auto& slice : slices)
    wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return ReadReportReply(wire);
}

}  // namespace troupe
