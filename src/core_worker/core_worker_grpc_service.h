// CoreWorkerService: the gRPC face of a core worker (pushes from callers, queries from
// borrowers, borrower bookkeeping, Exit). Only glue: checks the cluster token and the request
// (src/rpc/request_validation.h: INVALID_ARGUMENT naming the field) and hands each call
// to the TaskExecutor or the ObjectService as a plain request plus a completion callback that
// finishes the gRPC reactor. Handlers run on gRPC threads.
// Owned by CoreWorker; uses (does not own) the authenticator, executor and object service.
// Internal to the core worker (included by core_worker.cc only).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <utility>

#include "proto/worker.grpc.pb.h"
#include "src/common/status_macros.h"
#include "src/core_worker/object_service.h"
#include "src/core_worker/task_executor.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

// One PushTasks stream, worker side: queues every push on the executor, in order; each outcome
// is written as soon as no write is in flight (outcomes that come meanwhile go together in the
// next message; the last ones together with the stream's end), so a task's result never waits
// for the rest of its batch. Carries a leased worker's tasks or one caller's actor calls.
// Finishes once every push has been answered (the executor answers each exactly once, also when
// the worker exits), so the request outlives every queued push. Deletes itself when gRPC is done
// with it (OnDone, on any thread): the write or finish that may end the stream is started after
// the lock is released, and nothing of the reactor is touched after it.
class PushTasksReactor : public grpc::ServerWriteReactor<rpc::PushTaskResults> {
 public:
  PushTasksReactor(TaskExecutor* executor, const rpc::PushTasksRequest* request)
      : unanswered_(request->pushes_size()) {
    const int pushes = request->pushes_size();
    for (int i = 0; i < pushes; ++i) {
      executor->Enqueue(&request->pushes(i), [this, i](absl::StatusOr<rpc::PushTaskReply> reply) {
        OnResult(i, std::move(reply));
      });
    }
  }
  void OnWriteDone(bool ok) override {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      broken_ |= !ok;  // the caller is gone: the rest is answered to no one
      step = NextStepLocked();
    }
    Take(step);
  }
  void OnDone() override { delete this; }

 private:
  enum class Step { kNone, kWrite, kWriteAndFinish, kFinishOk, kFinishCancelled };

  void OnResult(int index, absl::StatusOr<rpc::PushTaskReply> reply) {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      --unanswered_;
      if (!broken_) {
        rpc::PushTaskResult* result = pending_.add_results();
        result->set_index(index);
        if (reply.ok()) {
          *result->mutable_reply() = std::move(*reply);
        } else {
          result->set_error_code(static_cast<int>(reply.status().code()));
          result->set_error_message(std::string(reply.status().message()));
        }
      }
      step = NextStepLocked();
    }
    Take(step);
  }
  // What to start now; the state says it is started (Take starts it, without the lock).
  Step NextStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return Step::kNone;
    if (!broken_ && pending_.results_size() > 0) {
      writing_message_.Swap(&pending_);
      pending_.Clear();
      if (unanswered_ == 0) {
        finished_ = true;
        return Step::kWriteAndFinish;  // the last results travel with the stream's end
      }
      writing_ = true;
      return Step::kWrite;
    }
    if (unanswered_ > 0) return Step::kNone;
    finished_ = true;
    return broken_ ? Step::kFinishCancelled : Step::kFinishOk;
  }
  // `writing_message_` is not touched by others until OnWriteDone (writing_) or ever again
  // (finished_). After a finish, OnDone may already have deleted this.
  void Take(Step step) {
    switch (step) {
      case Step::kNone:
        return;
      case Step::kWrite:
        return StartWrite(&writing_message_);
      case Step::kWriteAndFinish:
        return StartWriteAndFinish(&writing_message_, grpc::WriteOptions(), grpc::Status::OK);
      case Step::kFinishOk:
        return Finish(grpc::Status::OK);
      case Step::kFinishCancelled:
        return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
    }
  }

  absl::Mutex mu_;
  int unanswered_ ABSL_GUARDED_BY(mu_);
  rpc::PushTaskResults pending_ ABSL_GUARDED_BY(mu_);
  rpc::PushTaskResults writing_message_;  // see Take
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// A PushTasks stream that ends at once with `status`.
class FailedPushTasks : public grpc::ServerWriteReactor<rpc::PushTaskResults> {
 public:
  explicit FailedPushTasks(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class CoreWorkerGrpcService : public rpc::CoreWorkerService::CallbackService {
 public:
  // `executor` is null in a driver (it executes no pushed tasks). `cancel_task` handles
  // CancelTask (the core worker: the executor, and the task's children when recursive); null:
  // CancelTask does nothing.
  // `report_stream_item` handles ReportStreamItem (the StreamTracker; it may answer later);
  // null: refused (UNIMPLEMENTED).
  using CancelTaskHandler = std::function<void(const rpc::CancelTaskRequest&)>;
  using StreamItemHandler =
      std::function<void(const rpc::ReportStreamItemRequest&, rpc::ReportStreamItemReply*,
                         std::function<void(absl::Status)> done)>;
  CoreWorkerGrpcService(const TokenAuthenticator* auth, TaskExecutor* executor,
                        ObjectService* objects, CancelTaskHandler cancel_task = nullptr,
                        StreamItemHandler report_stream_item = nullptr)
      : auth_(auth),
        executor_(executor),
        objects_(objects),
        cancel_task_(std::move(cancel_task)),
        report_stream_item_(std::move(report_stream_item)) {}

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

  grpc::ServerWriteReactor<rpc::PushTaskResults>* PushTasks(
      grpc::CallbackServerContext* context, const rpc::PushTasksRequest* request) override {
    if (grpc::Status auth = auth_->Check(*context); !auth.ok()) return new FailedPushTasks(auth);
    if (absl::Status valid = ValidateRequest(*request); !valid.ok()) {
      return new FailedPushTasks(ToGrpcStatus(valid));
    }
    if (executor_ == nullptr) {
      return new FailedPushTasks(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                              "a driver does not execute pushed tasks"));
    }
    return new PushTasksReactor(executor_, request);
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

  grpc::ServerUnaryReactor* CancelTask(grpc::CallbackServerContext* context,
                                       const rpc::CancelTaskRequest* request,
                                       rpc::CancelTaskReply*) override {
    return Respond(context, *auth_, [&]() -> absl::Status {
      TROUPE_RETURN_IF_ERROR(ValidateRequest(*request));
      if (cancel_task_) cancel_task_(*request);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* ReportStreamItem(grpc::CallbackServerContext* context,
                                             const rpc::ReportStreamItemRequest* request,
                                             rpc::ReportStreamItemReply* reply) override {
    return RespondAsync(context, *auth_, [&](auto done) {
      if (absl::Status valid = ValidateRequest(*request); !valid.ok()) return done(valid);
      if (!report_stream_item_) {
        return done(absl::UnimplementedError("this process reads no streams"));
      }
      report_stream_item_(*request, reply, std::move(done));
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
  CancelTaskHandler cancel_task_;
  StreamItemHandler report_stream_item_;
};

}  // namespace troupe
