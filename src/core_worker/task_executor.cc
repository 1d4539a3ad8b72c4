#include "src/core_worker/task_executor.h"

#include <algorithm>

namespace troupe {
namespace {

absl::Status Exiting() { return absl::UnavailableError("the worker is exiting"); }

}  // namespace

TaskExecutor::TaskExecutor(RunTask run) : run_(std::move(run)) {}

TaskExecutor::~TaskExecutor() { Shutdown(); }

void TaskExecutor::Enqueue(const rpc::PushTaskRequest* request, Done done) {
  const rpc::TaskSpec& spec = request->task();
  Push push{request, std::move(done)};
  {
    absl::MutexLock lock(&mu_);
    if (!exit_requested_) {
      if (spec.type() != rpc::TaskSpec::ACTOR_TASK) {
        queue_.push_back(std::move(push));
        queued_.Signal();
        return;
      }
      // Actor calls of one caller run in sequence order: hold early arrivals until their turn.
      CallerOrder& order = caller_order_[spec.caller_worker_id()];
      order.next = std::max(order.next, spec.caller_first_unanswered());
      const int64_t seq = spec.sequence_number();
      if (seq > order.next) {
        order.early[seq] = std::move(push);
      } else {
        queue_.push_back(std::move(push));  // its turn (or a resend of an earlier call)
        if (seq == order.next) order.next++;
      }
      for (auto it = order.early.begin(); it != order.early.end() && it->first <= order.next;) {
        if (it->first == order.next) order.next++;
        queue_.push_back(std::move(it->second));
        it = order.early.erase(it);
      }
      queued_.SignalAll();
      return;
    }
  }
  // Leaving (ExitActor, or shutting down): nothing will run it. Answer now.
  push.done(Exiting());
}

bool TaskExecutor::Take(bool block, Push* push) {
  absl::MutexLock lock(&mu_);
  while (block && queue_.empty() && !exit_requested_) queued_.Wait(&mu_);
  if (exit_requested_ || queue_.empty()) return false;
  *push = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool TaskExecutor::RunOne(Push push) {
  rpc::PushTaskReply reply = run_(*push.request);
  // Read what is needed before answering: the request is gone after `done`.
  const rpc::TaskSpec& spec = push.request->task();
  const bool created = spec.type() == rpc::TaskSpec::ACTOR_CREATION_TASK &&
                       reply.returns_size() > 0 && !reply.returns(0).is_application_error();
  const std::string actor_id = spec.actor_id();
  const int concurrency = spec.max_concurrency();
  push.done(std::move(reply));
  absl::MutexLock lock(&mu_);
  if (created) {
    current_actor_ = *ActorId::FromBinary(actor_id);
    // More calls at once: extra threads take from the same queue.
    for (int i = 1; i < concurrency && !exit_requested_; ++i) {
      extra_executors_.emplace_back([this] { RunLoop(); });
    }
  }
  if (exit_after_task_) {
    exit_requested_ = true;
    queued_.SignalAll();
    return false;
  }
  return true;
}

void TaskExecutor::RunLoop() {
  Push push;
  while (Take(/*block=*/true, &push)) {
    if (!RunOne(std::move(push))) return;
  }
}

bool TaskExecutor::RunNext() {
  Push push;
  if (!Take(/*block=*/false, &push)) return false;
  RunOne(std::move(push));
  return true;
}

void TaskExecutor::RequestExit() {
  absl::MutexLock lock(&mu_);
  exit_requested_ = true;
  queued_.SignalAll();
}

void TaskExecutor::ExitAfterCurrentTask() {
  absl::MutexLock lock(&mu_);
  exit_after_task_ = true;
}

void TaskExecutor::Shutdown() {
  std::deque<Push> unrun;
  std::vector<std::thread> executors;
  {
    absl::MutexLock lock(&mu_);
    exit_requested_ = true;
    unrun.swap(queue_);
    for (auto& [caller, order] : caller_order_) {
      for (auto& [seq, push] : order.early) unrun.push_back(std::move(push));
      order.early.clear();
    }
    executors.swap(extra_executors_);
    queued_.SignalAll();
  }
  // Every call this worker holds gets an answer: the gRPC server's shutdown waits for them all.
  for (auto& push : unrun) push.done(Exiting());
  for (auto& executor : executors) {
    if (executor.joinable()) executor.join();
  }
}

size_t TaskExecutor::num_queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace troupe
