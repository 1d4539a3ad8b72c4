// CoreWorkerService: the gRPC face of a core worker (pushes from callers, queries from
// borrowers, borrower bookkeeping, Exit). Only glue: checks the cluster token and the request
// (src/rpc/request_validation.h: INVALID_ARGUMENT naming the field) and hands each call
// to the TaskExecutor or the ObjectService as a plain request plus a completion callback that
// finishes the gRPC reactor. Handlers run on gRPC threads.
// Owned by CoreWorker; uses (does not own) the authenticator, executor and object service.
// Internal to the core worker (included by core_worker.cc only).
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/worker.grpc.pb.h"
#include "src/common/status_macros.h"
#include "src/core_worker/object_service.h"
#include "src/core_worker/task_executor.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

class CoreWorkerGrpcService : public rpc::CoreWorkerService::CallbackService {
 public:
  // `executor` is null in a driver (it executes no pushed tasks).
  CoreWorkerGrpcService(const TokenAuthenticator* auth, TaskExecutor* executor,
                        ObjectService* objects)
      : auth_(auth), executor_(executor), objects_(objects) {}

  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* context,
                                     const rpc::PushTaskRequest* request,
                                     rpc::PushTaskReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status auth = auth_->Check(*context); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    if (absl::Status valid = ValidateRequest(*request); !valid.ok()) {
      reactor->Finish(ToGrpcStatus(valid));
      return reactor;
    }
    if (executor_ == nullptr) {
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "a driver does not execute pushed tasks"));
      return reactor;
    }
    executor_->Enqueue(request, [reactor, reply](absl::StatusOr<rpc::PushTaskReply> result) {
      if (!result.ok()) return reactor->Finish(ToGrpcStatus(result.status()));
      *reply = std::move(*result);
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetObjectStatus(grpc::CallbackServerContext* context,
                                            const rpc::GetObjectStatusRequest* request,
                                            rpc::GetObjectStatusReply* reply) override {
    return RespondAsync(context, *auth_, [&](auto done) {
      if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return done(valid);
      objects_->HandleGetObjectStatus(*request, reply, std::move(done));
    });
  }

  grpc::ServerUnaryReactor* AddObjectLocation(grpc::CallbackServerContext* context,
                                              const rpc::AddObjectLocationRequest* request,
                                              rpc::AddObjectLocationReply*) override {
    return Respond(context, *auth_, [&] {
      TROUPE_RETURN_IF_ERROR(ValidateRequest(*request));
      return objects_->HandleAddObjectLocation(*request);
    });
  }

  grpc::ServerUnaryReactor* AddBorrowers(grpc::CallbackServerContext* context,
                                         const rpc::AddBorrowersRequest* request,
                                         rpc::AddBorrowersReply*) override {
    return Respond(context, *auth_, [&]() -> absl::Status {
      TROUPE_RETURN_IF_ERROR(ValidateRequest(*request));
      objects_->HandleAddBorrowers(*request);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* RemoveBorrowers(grpc::CallbackServerContext* context,
                                            const rpc::RemoveBorrowersRequest* request,
                                            rpc::RemoveBorrowersReply*) override {
    return Respond(context, *auth_, [&]() -> absl::Status {
      TROUPE_RETURN_IF_ERROR(ValidateRequest(*request));
      objects_->HandleRemoveBorrowers(*request);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Exit(grpc::CallbackServerContext* context, const rpc::ExitRequest*,
                                 rpc::ExitReply* reply) override {
    return Respond(context, *auth_, [&] {
      if (executor_ != nullptr) executor_->RequestExit();
      reply->set_success(true);
      return absl::OkStatus();
    });
  }

 private:
  const TokenAuthenticator* auth_;
  TaskExecutor* executor_;
  ObjectService* objects_;
};

}  // namespace troupe
