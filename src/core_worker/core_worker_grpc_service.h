// CoreWorkerService: the gRPC face of a core worker (pushes from callers, queries from
// borrowers, borrower bookkeeping). Logic stays in CoreWorker; handlers run on gRPC threads.
// Internal to the core worker (included by core_worker.cc only).
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/worker.grpc.pb.h"
#include "src/core_worker/core_worker.h"
#include "src/rpc/server.h"

namespace troupe {

// gRPC glue of CoreWorkerService.
class CoreWorker::GrpcService : public rpc::CoreWorkerService::CallbackService {
 public:
  explicit GrpcService(CoreWorker* worker) : w_(worker) {}

  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* context,
                                     const rpc::PushTaskRequest* request,
                                     rpc::PushTaskReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status auth = w_->auth_->Check(*context); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    if (w_->options_.is_driver) {
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "a driver does not execute pushed tasks"));
      return reactor;
    }
    w_->EnqueuePush(std::make_shared<PendingPush>(PendingPush{request, reply, reactor}));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetObjectStatus(grpc::CallbackServerContext* context,
                                            const rpc::GetObjectStatusRequest* request,
                                            rpc::GetObjectStatusReply* reply) override {
    return RespondAsync(context, *w_->auth_, [&](auto done) {
      auto id = ObjectId::FromBinary(request->object_id());
      if (!id.ok()) return done(id.status());
      if (!w_->references_.IsTracked(*id) && !w_->memory_store_.IsReady(*id)) {
        reply->set_status(rpc::GetObjectStatusReply::FREED);
        return done(absl::OkStatus());
      }
      w_->memory_store_.OnReady(
          *id, absl::Now() + absl::Milliseconds(request->timeout_ms()),
          [reply, done](std::optional<StoredObject> object) {
            if (!object) {
              reply->set_status(rpc::GetObjectStatusReply::PENDING);
            } else {
              reply->set_status(object->error == StoredObject::Error::kNone
                                    ? rpc::GetObjectStatusReply::READY
                                    : rpc::GetObjectStatusReply::FAILED);
              *reply->mutable_object() = object->value;
              if (object->error != StoredObject::Error::kNone &&
                  object->error != StoredObject::Error::kApplication) {
                reply->mutable_object()->set_error_message(object->error_message);
              }
              for (const auto& copy : object->copy_raylet_addresses) {
                reply->add_copy_raylet_addresses(copy);
              }
            }
            done(absl::OkStatus());
          });
    });
  }

  grpc::ServerUnaryReactor* AddObjectLocation(grpc::CallbackServerContext* context,
                                              const rpc::AddObjectLocationRequest* request,
                                              rpc::AddObjectLocationReply*) override {
    return Respond(context, *w_->auth_, [&]() -> absl::Status {
      auto id = ObjectId::FromBinary(request->object_id());
      if (!id.ok()) return id.status();
      if (w_->references_.IsTracked(*id)) {
        w_->memory_store_.AddCopy(*id, request->raylet_address());
      } else {
        // Freed meanwhile: drop the new copy too.
        w_->raylets_.Get(request->raylet_address())->FreeObjectsAsync({request->object_id()});
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* AddBorrowers(grpc::CallbackServerContext* context,
                                         const rpc::AddBorrowersRequest* request,
                                         rpc::AddBorrowersReply*) override {
    return Respond(context, *w_->auth_, [&] {
      for (const auto& binary : request->object_ids()) {
        if (auto id = ObjectId::FromBinary(binary); id.ok()) {
          w_->references_.AddBorrower(*id, request->borrower_address());
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* RemoveBorrowers(grpc::CallbackServerContext* context,
                                            const rpc::RemoveBorrowersRequest* request,
                                            rpc::RemoveBorrowersReply*) override {
    return Respond(context, *w_->auth_, [&] {
      for (const auto& binary : request->object_ids()) {
        if (auto id = ObjectId::FromBinary(binary); id.ok()) {
          w_->references_.RemoveBorrower(*id, request->borrower_address());
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Exit(grpc::CallbackServerContext* context, const rpc::ExitRequest*,
                                 rpc::ExitReply* reply) override {
    return Respond(context, *w_->auth_, [&] {
      absl::MutexLock lock(&w_->queue_mu_);
      w_->exit_requested_ = true;
      w_->queue_cv_.Signal();
      reply->set_success(true);
      return absl::OkStatus();
    });
  }

 private:
  CoreWorker* w_;
};

}  // namespace troupe
