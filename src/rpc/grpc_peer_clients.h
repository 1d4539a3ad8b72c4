// The gRPC implementations of the peer-client interfaces (peer_clients.h): one client per peer
// address, shared by every call to it (ClientPool), each call carrying the cluster token.
// Thread-safe. The only place the GCS managers' and the submitters' outbound calls touch gRPC.
#pragma once

#include <string>

#include "src/rpc/core_worker_client.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/peer_clients.h"
#include "src/rpc/raylet_client.h"

namespace troupe {

class GrpcLeaseClient : public LeaseClient, public BundleClient {
 public:
  // Uses `raylets` (not owned; must outlive this).
  explicit GrpcLeaseClient(ClientPool<RayletClient>* raylets) : raylets_(raylets) {}

  CallCanceller RequestWorkerLease(const std::string& raylet_address,
                                   const rpc::RequestWorkerLeaseRequest& request,
                                   LeaseCallback done) override;
  void ReturnWorker(const std::string& raylet_address, const std::string& lease_id,
                    bool disconnect) override;
  absl::Status ReturnWorkerAndWait(const std::string& raylet_address, const std::string& lease_id,
                                   bool disconnect) override;
  absl::Status KillLeasedWorker(const std::string& raylet_address,
                                const std::string& lease_id) override;

  void ReserveBundle(const std::string& raylet_address, const PlacementGroupId& placement_group_id,
                     int bundle_index, const std::map<std::string, double>& resources,
                     ReserveCallback done) override;
  void ReturnBundle(const std::string& raylet_address, const std::string& reservation_id) override;

 private:
  ClientPool<RayletClient>* raylets_;
};

class GrpcTaskPushClient : public TaskPushClient {
 public:
  // Uses `workers` (not owned; must outlive this).
  explicit GrpcTaskPushClient(ClientPool<CoreWorkerClient>* workers) : workers_(workers) {}

  CallCanceller PushTask(const std::string& worker_address, rpc::PushTaskRequest request,
                         PushCallback done) override;

 private:
  ClientPool<CoreWorkerClient>* workers_;
};

class GrpcActorDirectory : public ActorDirectory {
 public:
  // Uses `gcs` (not owned; must outlive this).
  explicit GrpcActorDirectory(GcsClient* gcs) : gcs_(gcs) {}
  absl::StatusOr<rpc::ActorInfo> GetActorInfo(const ActorId& actor_id) override;

 private:
  GcsClient* gcs_;
};

}  // namespace troupe
