// Client for a raylet's NodeManagerService (proto/raylet.proto): the GCS's health checks, the
// CLI's stats, and everything a core worker asks its raylet (leases, the object store, fetches).
// Blocking calls take a timeout; the lease request is asynchronous because it may wait for
// resources. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/raylet.grpc.pb.h"

namespace troupe {

// Create with std::make_shared: asynchronous calls keep the client alive until they complete.
class RayletClient : public std::enable_shared_from_this<RayletClient> {
 public:
  RayletClient(std::string address, std::string token);

  const std::string& address() const { return address_; }

  // Calls `done` (on a gRPC thread) with OK if the raylet answered within `timeout`.
  void HealthCheckAsync(absl::Duration timeout, std::function<void(absl::Status)> done);
  absl::StatusOr<rpc::GetNodeStatsReply> GetNodeStats(absl::Duration timeout = absl::Seconds(10));

  absl::StatusOr<rpc::RegisterWorkerReply> RegisterWorker(
      const rpc::RegisterWorkerRequest& request);
  // `done` runs on a gRPC thread once the raylet grants, redirects or refuses. The returned
  // function cancels the request (done then runs with CANCELLED).
  std::function<void()> RequestWorkerLeaseAsync(
      const rpc::RequestWorkerLeaseRequest& request,
      std::function<void(absl::StatusOr<rpc::RequestWorkerLeaseReply>)> done);
  void ReturnWorkerAsync(const std::string& lease_id, bool disconnect);
  // Returns bundle reservations in one call; `done` runs on a gRPC thread with the outcome.
  void ReturnReservationsAsync(const std::vector<std::string>& reservation_ids,
                               std::function<void(absl::Status)> done);
  absl::Status ReturnWorker(const std::string& lease_id, bool disconnect);
  // `done` runs on a gRPC thread with the raylet's answer (10 s deadline).
  void KillLeasedWorkerAsync(const std::string& lease_id, std::function<void(absl::Status)> done);
  absl::Status NotifyBlocked(const std::string& worker_id, bool blocked);
  // Pushes user metrics recorded since the last push (src/metrics/metrics_recorder.h).
  absl::Status ReportUserMetrics(const rpc::ReportUserMetricsRequest& request);

  // `owner_worker_id`/`owner_node_id` (binary IDs, or empty): whose object it is; the store
  // frees it when that process or its node dies.
  absl::StatusOr<std::string> CreateObject(const std::string& object_id, int64_t size, bool primary,
                                           const std::string& owner_worker_id = "",
                                           const std::string& owner_node_id = "");
  absl::Status SealObject(const std::string& object_id);
  // Pins each found object for the reader `worker_id` (binary; "" for none), which must release
  // it; the raylet releases what a reader held when that reader dies.
  absl::StatusOr<std::vector<rpc::LocalObject>> GetObjects(const std::vector<std::string>& ids,
                                                           const std::string& worker_id = "");
  void ReleaseObjectsAsync(const std::vector<std::string>& ids, const std::string& worker_id = "");
  absl::Status ReleaseObjects(const std::vector<std::string>& ids,
                              const std::string& worker_id = "");
  // Copies the object into this raylet's store from the first of `sources` (raylet addresses,
  // at least one); if a source fails mid-transfer the rest comes from the next one.
  absl::Status FetchObject(const std::string& object_id, const std::vector<std::string>& sources,
                           absl::Duration timeout);
  // Introspection for the state API: the node's store contents, workers and log files.
  absl::StatusOr<rpc::ListStoreObjectsReply> ListStoreObjects(absl::Duration timeout);
  absl::StatusOr<rpc::ListNodeWorkersReply> ListNodeWorkers(absl::Duration timeout);
  absl::StatusOr<rpc::ListLogFilesReply> ListLogFiles(absl::Duration timeout);
  absl::StatusOr<rpc::ReadLogFileReply> ReadLogFile(const rpc::ReadLogFileRequest& request,
                                                    absl::Duration timeout);
  // ObjectManagerService on this raylet: drop its copies of these objects.
  void FreeObjectsAsync(const std::vector<std::string>& ids);

 private:
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (rpc::NodeManagerService::Stub::*method)(
                                 grpc::ClientContext*, const Request&, Reply*),
                             const Request& request, absl::Duration timeout);

  std::string address_;
  std::string token_;
  std::string peer_name_;
  std::unique_ptr<rpc::NodeManagerService::Stub> stub_;
  std::unique_ptr<rpc::ObjectManagerService::Stub> object_stub_;
};

}  // namespace troupe
