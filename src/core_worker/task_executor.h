// Worker mode: the queue of tasks pushed to this worker and the threads that run them. Actor
// calls of each caller run in the caller's sequence order: calls that arrive early wait for
// their turn, and the caller's "first unanswered" number tells a restarted actor where that
// caller's order begins. An actor created with max_concurrency > 1 gets extra executor threads
// taking from the same queue (order across them is then not kept).
// Holds no gRPC types: a push is a request plus a completion callback; the gRPC service
// (core_worker_grpc_service.h) wraps the reactor in that callback.
// Owned by CoreWorker; owns the extra executor threads. Thread-safe: Enqueue runs on gRPC
// threads, RunLoop on the worker's main thread (and the extra executors); `done` callbacks run on
// the executor thread that ran the task, or on the caller's thread when the task will not run.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/worker.pb.h"
#include "src/common/ids.h"

namespace troupe {

class TaskExecutor {
 public:
  // Answers a push: the reply (the task ran; its returns may hold an application error), or why
  // it did not run (UNAVAILABLE: the worker is exiting).
  using Done = std::function<void(absl::StatusOr<rpc::PushTaskReply>)>;
  // Runs one task on the calling thread.
  using RunTask = std::function<rpc::PushTaskReply(const rpc::PushTaskRequest&)>;

  explicit TaskExecutor(RunTask run);
  // Shuts down (answers what never ran, joins the extra executors).
  ~TaskExecutor();

  // Queues a pushed task; `request` must stay valid until `done` has run. While the worker is
  // exiting, answers at once: an unanswered call would hold the gRPC server's shutdown.
  void Enqueue(const rpc::PushTaskRequest* request, Done done);
  // Runs queued tasks on this thread until exit is requested.
  void RunLoop();
  // Runs the next queued task on this thread, if there is one (tests; never blocks). False when
  // nothing was queued or exit was requested.
  bool RunNext();
  // The Exit RPC: the loop returns after the task it is running.
  void RequestExit();
  // ExitActor: once the current task has been answered, the loop returns.
  void ExitAfterCurrentTask();
  // Requests exit, answers every task that will not run (UNAVAILABLE) and joins the extra
  // executors. The thread in RunLoop returns by itself.
  void Shutdown();

  // Inside an actor: its ID once the creation task succeeded; nil elsewhere. Any thread.
  ActorId current_actor_id() const {
    absl::MutexLock lock(&mu_);
    return current_actor_;
  }
  // Tasks waiting to run, not counting early actor calls (tests).
  size_t num_queued() const;

 private:
  struct Push {
    const rpc::PushTaskRequest* request;
    Done done;
  };
  // Takes the next task; blocks for one when `block`. False once exit is requested (or, not
  // blocking, when nothing is queued).
  bool Take(bool block, Push* push) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs and answers it; false when the loop must end (ExitAfterCurrentTask).
  bool RunOne(Push push) ABSL_LOCKS_EXCLUDED(mu_);

  const RunTask run_;
  mutable absl::Mutex mu_;
  absl::CondVar queued_;
  std::deque<Push> queue_ ABSL_GUARDED_BY(mu_);
  bool exit_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_after_task_ ABSL_GUARDED_BY(mu_) = false;
  // Per caller: the next actor-call sequence number to run, and calls that arrived early.
  struct CallerOrder {
    int64_t next = -1;
    std::map<int64_t, Push> early;
  };
  absl::flat_hash_map<std::string, CallerOrder> caller_order_ ABSL_GUARDED_BY(mu_);
  ActorId current_actor_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> extra_executors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
