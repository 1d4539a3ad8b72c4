// NodeManagerService: the gRPC face of the raylet for workers and drivers (registration, leases,
// the local object store, fetches from other nodes, stats, health checks). Only glue: checks the
// cluster token and the request (src/rpc/request_validation.h: INVALID_ARGUMENT naming the field),
// then calls the Raylet's Handle* method and converts its absl::Status with ToGrpcStatus.
// Handlers run on gRPC's callback threads. Owned by RayletServer (raylet_server.cc); borrows the
// authenticator and the Raylet (both must outlive it). Internal to the raylet target.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/raylet.grpc.pb.h"
#include "src/raylet/raylet.h"
#include "src/rpc/auth.h"

namespace troupe {

class RayletGrpcService : public rpc::NodeManagerService::CallbackService {
 public:
  RayletGrpcService(const TokenAuthenticator* auth, Raylet* raylet)
      : auth_(auth), raylet_(raylet) {}

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const rpc::HealthCheckRequest* request,
                                        rpc::HealthCheckReply* reply) override;
  grpc::ServerUnaryReactor* GetNodeStats(grpc::CallbackServerContext* context,
                                         const rpc::GetNodeStatsRequest* request,
                                         rpc::GetNodeStatsReply* reply) override;
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const rpc::RegisterWorkerRequest* request,
                                           rpc::RegisterWorkerReply* reply) override;
  grpc::ServerUnaryReactor* ReportUserMetrics(grpc::CallbackServerContext* context,
                                              const rpc::ReportUserMetricsRequest* request,
                                              rpc::ReportUserMetricsReply* reply) override;
  grpc::ServerUnaryReactor* NotifyBlocked(grpc::CallbackServerContext* context,
                                          const rpc::NotifyBlockedRequest* request,
                                          rpc::NotifyBlockedReply* reply) override;
  grpc::ServerUnaryReactor* RequestWorkerLease(grpc::CallbackServerContext* context,
                                               const rpc::RequestWorkerLeaseRequest* request,
                                               rpc::RequestWorkerLeaseReply* reply) override;
  grpc::ServerUnaryReactor* ReturnWorker(grpc::CallbackServerContext* context,
                                         const rpc::ReturnWorkerRequest* request,
                                         rpc::ReturnWorkerReply* reply) override;
  grpc::ServerUnaryReactor* KillLeasedWorker(grpc::CallbackServerContext* context,
                                             const rpc::KillLeasedWorkerRequest* request,
                                             rpc::KillLeasedWorkerReply* reply) override;
  grpc::ServerUnaryReactor* CreateObject(grpc::CallbackServerContext* context,
                                         const rpc::CreateObjectRequest* request,
                                         rpc::CreateObjectReply* reply) override;
  grpc::ServerUnaryReactor* SealObject(grpc::CallbackServerContext* context,
                                       const rpc::SealObjectRequest* request,
                                       rpc::SealObjectReply* reply) override;
  grpc::ServerUnaryReactor* GetObjects(grpc::CallbackServerContext* context,
                                       const rpc::GetObjectsRequest* request,
                                       rpc::GetObjectsReply* reply) override;
  grpc::ServerUnaryReactor* ReleaseObjects(grpc::CallbackServerContext* context,
                                           const rpc::ReleaseObjectsRequest* request,
                                           rpc::ReleaseObjectsReply* reply) override;
  grpc::ServerUnaryReactor* FetchObject(grpc::CallbackServerContext* context,
                                        const rpc::FetchObjectRequest* request,
                                        rpc::FetchObjectReply* reply) override;
  grpc::ServerUnaryReactor* ListStoreObjects(grpc::CallbackServerContext* context,
                                             const rpc::ListStoreObjectsRequest* request,
                                             rpc::ListStoreObjectsReply* reply) override;
  grpc::ServerUnaryReactor* ListNodeWorkers(grpc::CallbackServerContext* context,
                                            const rpc::ListNodeWorkersRequest* request,
                                            rpc::ListNodeWorkersReply* reply) override;
  grpc::ServerUnaryReactor* ListLogFiles(grpc::CallbackServerContext* context,
                                         const rpc::ListLogFilesRequest* request,
                                         rpc::ListLogFilesReply* reply) override;
  grpc::ServerUnaryReactor* ReadLogFile(grpc::CallbackServerContext* context,
                                        const rpc::ReadLogFileRequest* request,
                                        rpc::ReadLogFileReply* reply) override;

 private:
  const TokenAuthenticator* const auth_;
  Raylet* const raylet_;
};

}  // namespace troupe
