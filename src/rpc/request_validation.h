// Checks of every request a daemon accepts, at the gRPC boundary, before any handler runs: IDs of
// the right size, resource maps that src/common/resources.h accepts (names non-empty and bounded,
// quantities finite, >= 0 and bounded), strings and repeated fields within the limits below.
// Each ValidateRequest returns OK or INVALID_ARGUMENT naming the field and what is allowed, e.g.
//   "actor.required_resources['GPU'] is -1; resource quantities must be finite, >= 0 and <= 1e+14".
// Plain functions over the protobuf messages (no gRPC types); the gRPC services of the GCS
// (src/gcs/gcs_grpc_services.cc), the raylet (src/raylet/raylet_grpc_service.cc,
// object_manager_grpc_service.cc) and the core worker (src/core_worker/core_worker_grpc_service.h)
// call them first thing.
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "proto/gcs.pb.h"
#include "proto/raylet.pb.h"
#include "proto/worker.pb.h"

namespace troupe {

// Limits. Generous: they stop garbage and resource exhaustion, never a legitimate caller.
struct RequestLimits {
  // Actor, placement-group and job names, namespaces, class and function names, hostnames,
  // addresses.
  static constexpr size_t kMaxNameBytes = 4096;
  static constexpr size_t kMaxResourceNameBytes = 256;
  static constexpr size_t kMaxResourcesPerMap = 1024;
  // 1e14 of anything (about 91 TiB of memory) — far above any node, far below where the fixed
  // point of resources.h overflows.
  static constexpr double kMaxResourceQuantity = 1e14;
  // Free text: reasons, exit descriptions, entrypoints, labels' values, log lines.
  static constexpr size_t kMaxTextBytes = 1 << 20;
  static constexpr size_t kMaxKvKeyBytes = 64 << 10;
  // KV values hold executables and working-directory packages; the gRPC message limit
  // (512 MiB, src/rpc/server.cc) is the real bound.
  static constexpr size_t kMaxKvValueBytes = 512u << 20;
  static constexpr int kMaxBundles = 10000;
  // Entries of any other repeated or map field (object IDs, argv, labels, log lines, ...).
  static constexpr int kMaxRepeated = 1 << 20;
  // Copies one FetchObjectRequest may name (from_raylet_address and other_raylet_addresses):
  // each is a connection the raylet may try. RayletClient::FetchObject sends the first ones.
  static constexpr int kMaxFetchSources = 64;
  // Chunks a puller may ask for when copying an object between nodes.
  static constexpr int64_t kMaxChunkBytes = 256 << 20;
};

// GCS (proto/gcs.proto).
absl::Status ValidateRequest(const rpc::GetClusterInfoRequest& request);
absl::Status ValidateRequest(const rpc::IssueNodeCertificateRequest& request);
absl::Status ValidateRequest(const rpc::RegisterNodeRequest& request);
absl::Status ValidateRequest(const rpc::UnregisterNodeRequest& request);
absl::Status ValidateRequest(const rpc::GetAllNodeInfoRequest& request);
absl::Status ValidateRequest(const rpc::ReportResourceUsageRequest& request);
absl::Status ValidateRequest(const rpc::GetAllResourceUsageRequest& request);
absl::Status ValidateRequest(const rpc::AddJobRequest& request);
absl::Status ValidateRequest(const rpc::MarkJobFinishedRequest& request);
absl::Status ValidateRequest(const rpc::GetAllJobInfoRequest& request);
absl::Status ValidateRequest(const rpc::KVGetRequest& request);
absl::Status ValidateRequest(const rpc::KVPutRequest& request);
absl::Status ValidateRequest(const rpc::KVDelRequest& request);
absl::Status ValidateRequest(const rpc::KVExistsRequest& request);
absl::Status ValidateRequest(const rpc::KVKeysRequest& request);
absl::Status ValidateRequest(const rpc::PollRequest& request);
absl::Status ValidateRequest(const rpc::PublishLogsRequest& request);
absl::Status ValidateRequest(const rpc::RegisterActorRequest& request);
absl::Status ValidateRequest(const rpc::GetActorInfoRequest& request);
absl::Status ValidateRequest(const rpc::GetAllActorInfoRequest& request);
absl::Status ValidateRequest(const rpc::KillActorRequest& request);
absl::Status ValidateRequest(const rpc::ReportWorkerExitRequest& request);
absl::Status ValidateRequest(const rpc::ReportActorExitRequest& request);
absl::Status ValidateRequest(const rpc::CreatePlacementGroupRequest& request);
absl::Status ValidateRequest(const rpc::RemovePlacementGroupRequest& request);
absl::Status ValidateRequest(const rpc::GetPlacementGroupRequest& request);
absl::Status ValidateRequest(const rpc::GetAllPlacementGroupRequest& request);
absl::Status ValidateRequest(const rpc::WaitPlacementGroupUntilReadyRequest& request);
absl::Status ValidateRequest(const rpc::AddTaskEventDataRequest& request);
absl::Status ValidateRequest(const rpc::GetTaskEventsRequest& request);

// Raylet (proto/raylet.proto, NodeManagerService).
absl::Status ValidateRequest(const rpc::HealthCheckRequest& request);
absl::Status ValidateRequest(const rpc::GetNodeStatsRequest& request);
absl::Status ValidateRequest(const rpc::RegisterWorkerRequest& request);
absl::Status ValidateRequest(const rpc::NotifyBlockedRequest& request);
absl::Status ValidateRequest(const rpc::ReportUserMetricsRequest& request);
absl::Status ValidateRequest(const rpc::RequestWorkerLeaseRequest& request);
absl::Status ValidateRequest(const rpc::ReturnWorkerRequest& request);
absl::Status ValidateRequest(const rpc::KillLeasedWorkerRequest& request);
absl::Status ValidateRequest(const rpc::CreateObjectRequest& request);
absl::Status ValidateRequest(const rpc::SealObjectRequest& request);
absl::Status ValidateRequest(const rpc::GetObjectsRequest& request);
absl::Status ValidateRequest(const rpc::ReleaseObjectsRequest& request);
absl::Status ValidateRequest(const rpc::FetchObjectRequest& request);
// Raylet (proto/raylet.proto, ObjectManagerService).
absl::Status ValidateRequest(const rpc::PullObjectRequest& request);
absl::Status ValidateRequest(const rpc::FreeObjectsRequest& request);
// Core worker (proto/worker.proto, CoreWorkerService).
absl::Status ValidateRequest(const rpc::PushTaskRequest& request);
// At least one push, each valid, all normal tasks or all actor calls.
absl::Status ValidateRequest(const rpc::PushTasksRequest& request);
absl::Status ValidateRequest(const rpc::GetObjectStatusRequest& request);
absl::Status ValidateRequest(const rpc::AddObjectLocationRequest& request);
absl::Status ValidateRequest(const rpc::AddBorrowersRequest& request);
absl::Status ValidateRequest(const rpc::RemoveBorrowersRequest& request);
absl::Status ValidateRequest(const rpc::CancelTaskRequest& request);
absl::Status ValidateRequest(const rpc::ReportStreamItemRequest& request);

}  // namespace troupe
