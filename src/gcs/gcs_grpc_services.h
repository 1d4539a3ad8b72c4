// gRPC glue of the GCS: each class turns calls of one service in proto/gcs.proto into calls on
// the managers, after the token check. No logic lives here. Handlers run on gRPC's callback
// threads; the managers are thread-safe.
#pragma once

#include <string>

#include "proto/gcs.grpc.pb.h"
#include "src/gcs/actor_manager.h"
#include "src/gcs/job_manager.h"
#include "src/gcs/kv_manager.h"
#include "src/gcs/node_manager.h"
#include "src/gcs/placement_group_manager.h"
#include "src/gcs/publisher.h"
#include "src/gcs/task_event_manager.h"
#include "src/rpc/auth.h"
#include "src/tls/certificates.h"

namespace troupe {

class ClusterInfoGrpcService : public rpc::ClusterInfoService::CallbackService {
 public:
  // `ca`: signs node certificates (null: the cluster runs without TLS).
  ClusterInfoGrpcService(const TokenAuthenticator* auth, rpc::GetClusterInfoReply info,
                         const CertificateAuthority* ca)
      : auth_(auth), info_(std::move(info)), ca_(ca) {}
  grpc::ServerUnaryReactor* GetClusterInfo(grpc::CallbackServerContext* context,
                                           const rpc::GetClusterInfoRequest* request,
                                           rpc::GetClusterInfoReply* reply) override;
  grpc::ServerUnaryReactor* IssueNodeCertificate(grpc::CallbackServerContext* context,
                                                 const rpc::IssueNodeCertificateRequest* request,
                                                 rpc::IssueNodeCertificateReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  const rpc::GetClusterInfoReply info_;
  const CertificateAuthority* ca_;
};

// ReportResourceUsage is served raw (bytes in, bytes out): its reply is assembled from view
// entries serialized once per change (NodeManager::ResourceViewSinceWire), the same bytes a
// ReportResourceUsageReply would serialize to.
class NodeInfoGrpcService : public rpc::NodeInfoService::WithRawCallbackMethod_ReportResourceUsage<
                                rpc::NodeInfoService::CallbackService> {
 public:
  NodeInfoGrpcService(const TokenAuthenticator* auth, NodeManager* nodes,
                      int64_t health_check_period_ms)
      : auth_(auth), nodes_(nodes), health_check_period_ms_(health_check_period_ms) {}
  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* context,
                                         const rpc::RegisterNodeRequest* request,
                                         rpc::RegisterNodeReply* reply) override;
  grpc::ServerUnaryReactor* UnregisterNode(grpc::CallbackServerContext* context,
                                           const rpc::UnregisterNodeRequest* request,
                                           rpc::UnregisterNodeReply* reply) override;
  grpc::ServerUnaryReactor* GetAllNodeInfo(grpc::CallbackServerContext* context,
                                           const rpc::GetAllNodeInfoRequest* request,
                                           rpc::GetAllNodeInfoReply* reply) override;
  grpc::ServerUnaryReactor* ReportResourceUsage(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* reply) override;
  grpc::ServerUnaryReactor* GetAllResourceUsage(grpc::CallbackServerContext* context,
                                                const rpc::GetAllResourceUsageRequest* request,
                                                rpc::GetAllResourceUsageReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  NodeManager* nodes_;
  const int64_t health_check_period_ms_;
};

class JobInfoGrpcService : public rpc::JobInfoService::CallbackService {
 public:
  JobInfoGrpcService(const TokenAuthenticator* auth, JobManager* jobs) : auth_(auth), jobs_(jobs) {}
  grpc::ServerUnaryReactor* AddJob(grpc::CallbackServerContext* context,
                                   const rpc::AddJobRequest* request,
                                   rpc::AddJobReply* reply) override;
  grpc::ServerUnaryReactor* MarkJobFinished(grpc::CallbackServerContext* context,
                                            const rpc::MarkJobFinishedRequest* request,
                                            rpc::MarkJobFinishedReply* reply) override;
  grpc::ServerUnaryReactor* GetAllJobInfo(grpc::CallbackServerContext* context,
                                          const rpc::GetAllJobInfoRequest* request,
                                          rpc::GetAllJobInfoReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  JobManager* jobs_;
};

class TaskInfoGrpcService : public rpc::TaskInfoService::CallbackService {
 public:
  TaskInfoGrpcService(const TokenAuthenticator* auth, TaskEventManager* tasks)
      : auth_(auth), tasks_(tasks) {}
  grpc::ServerUnaryReactor* AddTaskEventData(grpc::CallbackServerContext* context,
                                             const rpc::AddTaskEventDataRequest* request,
                                             rpc::AddTaskEventDataReply* reply) override;
  grpc::ServerUnaryReactor* GetTaskEvents(grpc::CallbackServerContext* context,
                                          const rpc::GetTaskEventsRequest* request,
                                          rpc::GetTaskEventsReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  TaskEventManager* tasks_;
};

class InternalKvGrpcService : public rpc::InternalKVService::CallbackService {
 public:
  InternalKvGrpcService(const TokenAuthenticator* auth, KvManager* kv) : auth_(auth), kv_(kv) {}
  grpc::ServerUnaryReactor* KVGet(grpc::CallbackServerContext* context,
                                  const rpc::KVGetRequest* request,
                                  rpc::KVGetReply* reply) override;
  grpc::ServerUnaryReactor* KVPut(grpc::CallbackServerContext* context,
                                  const rpc::KVPutRequest* request,
                                  rpc::KVPutReply* reply) override;
  grpc::ServerUnaryReactor* KVDel(grpc::CallbackServerContext* context,
                                  const rpc::KVDelRequest* request,
                                  rpc::KVDelReply* reply) override;
  grpc::ServerUnaryReactor* KVExists(grpc::CallbackServerContext* context,
                                     const rpc::KVExistsRequest* request,
                                     rpc::KVExistsReply* reply) override;
  grpc::ServerUnaryReactor* KVKeys(grpc::CallbackServerContext* context,
                                   const rpc::KVKeysRequest* request,
                                   rpc::KVKeysReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  KvManager* kv_;
};

class PubSubGrpcService : public rpc::PubSubService::CallbackService {
 public:
  PubSubGrpcService(const TokenAuthenticator* auth, Publisher* publisher, Publisher* log_publisher)
      : auth_(auth), publisher_(publisher), log_publisher_(log_publisher) {}
  grpc::ServerUnaryReactor* Poll(grpc::CallbackServerContext* context,
                                 const rpc::PollRequest* request, rpc::PollReply* reply) override;
  grpc::ServerUnaryReactor* PublishLogs(grpc::CallbackServerContext* context,
                                        const rpc::PublishLogsRequest* request,
                                        rpc::PublishLogsReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  Publisher* publisher_;
  Publisher* log_publisher_;
};

class ActorInfoGrpcService : public rpc::ActorInfoService::CallbackService {
 public:
  ActorInfoGrpcService(const TokenAuthenticator* auth, ActorManager* actors)
      : auth_(auth), actors_(actors) {}
  grpc::ServerUnaryReactor* RegisterActor(grpc::CallbackServerContext* context,
                                          const rpc::RegisterActorRequest* request,
                                          rpc::RegisterActorReply* reply) override;
  grpc::ServerUnaryReactor* GetActorInfo(grpc::CallbackServerContext* context,
                                         const rpc::GetActorInfoRequest* request,
                                         rpc::GetActorInfoReply* reply) override;
  grpc::ServerUnaryReactor* GetAllActorInfo(grpc::CallbackServerContext* context,
                                            const rpc::GetAllActorInfoRequest* request,
                                            rpc::GetAllActorInfoReply* reply) override;
  grpc::ServerUnaryReactor* KillActor(grpc::CallbackServerContext* context,
                                      const rpc::KillActorRequest* request,
                                      rpc::KillActorReply* reply) override;
  grpc::ServerUnaryReactor* ReportWorkerExit(grpc::CallbackServerContext* context,
                                             const rpc::ReportWorkerExitRequest* request,
                                             rpc::ReportWorkerExitReply* reply) override;
  grpc::ServerUnaryReactor* ReportActorExit(grpc::CallbackServerContext* context,
                                            const rpc::ReportActorExitRequest* request,
                                            rpc::ReportActorExitReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  ActorManager* actors_;
};

class PlacementGroupGrpcService : public rpc::PlacementGroupService::CallbackService {
 public:
  PlacementGroupGrpcService(const TokenAuthenticator* auth, PlacementGroupManager* groups,
                            const Clock* clock)
      : auth_(auth), groups_(groups), clock_(clock) {}
  grpc::ServerUnaryReactor* CreatePlacementGroup(grpc::CallbackServerContext* context,
                                                 const rpc::CreatePlacementGroupRequest* request,
                                                 rpc::CreatePlacementGroupReply* reply) override;
  grpc::ServerUnaryReactor* RemovePlacementGroup(grpc::CallbackServerContext* context,
                                                 const rpc::RemovePlacementGroupRequest* request,
                                                 rpc::RemovePlacementGroupReply* reply) override;
  grpc::ServerUnaryReactor* GetPlacementGroup(grpc::CallbackServerContext* context,
                                              const rpc::GetPlacementGroupRequest* request,
                                              rpc::GetPlacementGroupReply* reply) override;
  grpc::ServerUnaryReactor* GetAllPlacementGroup(grpc::CallbackServerContext* context,
                                                 const rpc::GetAllPlacementGroupRequest* request,
                                                 rpc::GetAllPlacementGroupReply* reply) override;
  grpc::ServerUnaryReactor* WaitPlacementGroupUntilReady(
      grpc::CallbackServerContext* context, const rpc::WaitPlacementGroupUntilReadyRequest* request,
      rpc::WaitPlacementGroupUntilReadyReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  PlacementGroupManager* groups_;
  const Clock* clock_;
};

}  // namespace troupe
