#include "src/raylet/raylet_grpc_service.h"

#include "src/common/status_macros.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

namespace {
// Respond (src/rpc/server.h) with the request checked after the token: a malformed request is
// answered INVALID_ARGUMENT before the raylet sees it. `handle` is a Raylet::Handle* method.
template <typename Request, typename Reply>
ServerUnaryReactor* Answer(CallbackServerContext* context, const TokenAuthenticator& auth,
                           Raylet* raylet, absl::Status (Raylet::*handle)(const Request&, Reply*),
                           const Request* request, Reply* reply) {
  return Respond(context, auth, [&]() -> absl::Status {
    TROUPE_RETURN_IF_ERROR(ValidateRequest(*request));
    return (raylet->*handle)(*request, reply);
  });
}
}  // namespace

ServerUnaryReactor* RayletGrpcService::HealthCheck(CallbackServerContext* context,
                                                   const rpc::HealthCheckRequest* request,
                                                   rpc::HealthCheckReply* reply) {
  // HealthCheck and GetNodeStats carry nothing to validate.
  return Respond(context, *auth_, [&] { return raylet_->HandleHealthCheck(*request, reply); });
}

ServerUnaryReactor* RayletGrpcService::GetNodeStats(CallbackServerContext* context,
                                                    const rpc::GetNodeStatsRequest* request,
                                                    rpc::GetNodeStatsReply* reply) {
  return Respond(context, *auth_, [&] { return raylet_->HandleGetNodeStats(*request, reply); });
}

ServerUnaryReactor* RayletGrpcService::RegisterWorker(CallbackServerContext* context,
                                                      const rpc::RegisterWorkerRequest* request,
                                                      rpc::RegisterWorkerReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleRegisterWorker, request, reply);
}

ServerUnaryReactor* RayletGrpcService::ReportUserMetrics(
    CallbackServerContext* context, const rpc::ReportUserMetricsRequest* request,
    rpc::ReportUserMetricsReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleReportUserMetrics, request, reply);
}

ServerUnaryReactor* RayletGrpcService::NotifyBlocked(CallbackServerContext* context,
                                                     const rpc::NotifyBlockedRequest* request,
                                                     rpc::NotifyBlockedReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleNotifyBlocked, request, reply);
}

ServerUnaryReactor* RayletGrpcService::RequestWorkerLease(
    CallbackServerContext* context, const rpc::RequestWorkerLeaseRequest* request,
    rpc::RequestWorkerLeaseReply* reply) {
  return RespondAsync(context, *auth_, [&](auto done) {
    if (auto invalid = ValidateRequest(*request); !invalid.ok()) return done(invalid);
    // The reactor (and so `context` and `reply`) lives until `done` runs.
    raylet_->HandleRequestWorkerLease(
        *request, [context] { return context->IsCancelled(); },
        [reply, done](rpc::RequestWorkerLeaseReply result) {
          *reply = std::move(result);
          done(absl::OkStatus());
        });
  });
}

ServerUnaryReactor* RayletGrpcService::ReturnWorker(CallbackServerContext* context,
                                                    const rpc::ReturnWorkerRequest* request,
                                                    rpc::ReturnWorkerReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleReturnWorker, request, reply);
}

ServerUnaryReactor* RayletGrpcService::KillLeasedWorker(CallbackServerContext* context,
                                                        const rpc::KillLeasedWorkerRequest* request,
                                                        rpc::KillLeasedWorkerReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleKillLeasedWorker, request, reply);
}

ServerUnaryReactor* RayletGrpcService::CreateObject(CallbackServerContext* context,
                                                    const rpc::CreateObjectRequest* request,
                                                    rpc::CreateObjectReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleCreateObject, request, reply);
}

ServerUnaryReactor* RayletGrpcService::SealObject(CallbackServerContext* context,
                                                  const rpc::SealObjectRequest* request,
                                                  rpc::SealObjectReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleSealObject, request, reply);
}

ServerUnaryReactor* RayletGrpcService::GetObjects(CallbackServerContext* context,
                                                  const rpc::GetObjectsRequest* request,
                                                  rpc::GetObjectsReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleGetObjects, request, reply);
}

ServerUnaryReactor* RayletGrpcService::ReleaseObjects(CallbackServerContext* context,
                                                      const rpc::ReleaseObjectsRequest* request,
                                                      rpc::ReleaseObjectsReply* reply) {
  return Answer(context, *auth_, raylet_, &Raylet::HandleReleaseObjects, request, reply);
}

ServerUnaryReactor* RayletGrpcService::FetchObject(CallbackServerContext* context,
                                                   const rpc::FetchObjectRequest* request,
                                                   rpc::FetchObjectReply*) {
  return RespondAsync(context, *auth_, [&](auto done) {
    if (auto invalid = ValidateRequest(*request); !invalid.ok()) return done(invalid);
    raylet_->HandleFetchObject(*request, std::move(done));
  });
}

// The introspection calls carry nothing to validate but ReadLogFile's name, which
// ReadLogFile (node_logs.h) checks itself (INVALID_ARGUMENT for anything but a plain name).
ServerUnaryReactor* RayletGrpcService::ListStoreObjects(CallbackServerContext* context,
                                                        const rpc::ListStoreObjectsRequest* request,
                                                        rpc::ListStoreObjectsReply* reply) {
  return Respond(context, *auth_, [&] { return raylet_->HandleListStoreObjects(*request, reply); });
}

ServerUnaryReactor* RayletGrpcService::ListNodeWorkers(CallbackServerContext* context,
                                                       const rpc::ListNodeWorkersRequest* request,
                                                       rpc::ListNodeWorkersReply* reply) {
  return Respond(context, *auth_, [&] { return raylet_->HandleListNodeWorkers(*request, reply); });
}

ServerUnaryReactor* RayletGrpcService::ListLogFiles(CallbackServerContext* context,
                                                    const rpc::ListLogFilesRequest* request,
                                                    rpc::ListLogFilesReply* reply) {
  return Respond(context, *auth_, [&] { return raylet_->HandleListLogFiles(*request, reply); });
}

ServerUnaryReactor* RayletGrpcService::ReadLogFile(CallbackServerContext* context,
                                                   const rpc::ReadLogFileRequest* request,
                                                   rpc::ReadLogFileReply* reply) {
  return Respond(context, *auth_, [&] { return raylet_->HandleReadLogFile(*request, reply); });
}

}  // namespace troupe
