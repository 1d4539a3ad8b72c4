// The gRPC implementations of the peer-client interfaces (peer_clients.h): one client per peer
// address, shared by every call to it (ClientPool), each call carrying the cluster token.
// Thread-safe. The only place the GCS managers' and the submitters' outbound calls touch gRPC.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  void KillLeasedWorker(const std::string& raylet_address, const std::string& lease_id,
                        KillCallback done) override;

  void ReserveBundle(const std::string& raylet_address, const PlacementGroupId& placement_group_id,
                     int bundle_index, const std::map<std::string, double>& resources,
                     const std::string& reservation_id, ReserveCallback done) override;
  void ReturnBundles(const std::string& raylet_address,
                     const std::vector<std::string>& reservation_ids, ReturnCallback done) override;

 private:
  ClientPool<RayletClient>* raylets_;
};

// Test-only faults a GrpcTaskPushClient injects (all off by default).
struct PushFaultInjection {
  // The probability that the reply to an actor call is dropped after the actor ran it: the
  // caller sees UNAVAILABLE, as when a connection resets after delivery. Set from
  // $TROUPE_TESTING_DROP_ACTOR_REPLIES by the composition root (ParseDropProbability).
  double drop_actor_reply_probability = 0;
  uint32_t seed = 0;  // of the drop decisions
};

// Reads a probability in [0, 1] ("" is 0), naming `what` in the error.
absl::StatusOr<double> ParseDropProbability(const std::string& what, const std::string& value);

class GrpcTaskPushClient : public TaskPushClient {
 public:
  // Uses `workers` (not owned; must outlive this).
  explicit GrpcTaskPushClient(ClientPool<CoreWorkerClient>* workers, PushFaultInjection faults = {})
      : workers_(workers), faults_(faults), random_(faults.seed) {}

  CallCanceller PushTask(const std::string& worker_address, rpc::PushTaskRequest request,
                         PushCallback done) override;
  CallCanceller PushTasks(const std::string& worker_address, rpc::PushTasksRequest request,
                          PushResultsCallback done) override;

 private:
  bool DropThisReply();

  ClientPool<CoreWorkerClient>* workers_;
  const PushFaultInjection faults_;
  absl::Mutex random_mu_;
  std::mt19937 random_ ABSL_GUARDED_BY(random_mu_);
};

class GrpcActorDirectory : public ActorDirectory {
 public:
  // Uses `gcs` (not owned; must outlive this).
  explicit GrpcActorDirectory(GcsClient* gcs) : gcs_(gcs) {}
  absl::StatusOr<rpc::ActorInfo> GetActorInfo(const ActorId& actor_id) override;
  // One GetAllActorInfo call carrying the IDs.
  absl::StatusOr<std::vector<rpc::ActorInfo>> GetActorInfos(
      const std::vector<ActorId>& ids) override;

 private:
  GcsClient* gcs_;
};

}  // namespace troupe
