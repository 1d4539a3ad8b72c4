// SimulatedNodeReporter: how a simulated node (simulated_nodes.h) sends its resource report to
// the GCS — the real ReportResourceUsage call, with the request a raylet sends — and reads the
// reply without parsing it: a simulated node keeps no cluster view, so it only needs the reply's
// view version, and counts the view entries the delta carried by walking the wire bytes
// (ReadReportReply). The GCS does all of its work (it builds and serializes the whole delta);
// what is skipped is the reporter's share, which real raylets pay on their own machines but
// which the simulator would pay on the GCS's machine for a thousand nodes at once.
// One per simulated node. Thread-safe (gRPC channels are); Report blocks.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/gcs.pb.h"

namespace troupe {

// What a simulated node reads of a ReportResourceUsageReply.
struct ReportAnswer {
  int64_t view_version = 0;
  int64_t entries = 0;  // nodes in `cluster` (the delta, or the whole view)
};

// Reads the view version and counts the `cluster` entries of a serialized
// ReportResourceUsageReply without parsing the entries. InvalidArgument for bytes that are not
// a well-formed message.
absl::StatusOr<ReportAnswer> ReadReportReply(absl::string_view wire);

class SimulatedNodeReporter {
 public:
  SimulatedNodeReporter(const std::string& gcs_address, std::string token);
  // The GCS's canonical errors as GcsClient::ReportResourceUsage returns them (NotFound: register
  // again; FailedPrecondition: declared dead).
  absl::StatusOr<ReportAnswer> Report(const rpc::ResourceUsage& usage, int64_t known_view_version);

 private:
  const std::string peer_;
  const std::string token_;
  const std::string method_name_;  // RpcMethod keeps a pointer to it
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::internal::RpcMethod> method_;
};

}  // namespace troupe
