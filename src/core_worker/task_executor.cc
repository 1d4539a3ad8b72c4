#include "src/core_worker/task_executor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

absl::Status Exiting() { return absl::UnavailableError("the worker is exiting"); }

absl::Status Abandoned(int64_t seq) {
  return absl::AbortedError(absl::StrCat(
      "actor call ", seq,
      " was already answered to its caller, or its caller gave up on it; it is not run again"));
}

// In a worker process (whose stdout and stderr go to its log file), marks where a task's output
// begins: `troupe logs --task-id` prints the lines between a task's marker and the next one.
// What was printed before is flushed first so it lands before the marker. Output of actor calls
// running concurrently (max_concurrency > 1) interleaves and cannot be told apart.
void MarkTaskStart(const rpc::TaskSpec& spec) {
  static const bool in_worker = std::getenv("TROUPE_WORKER_MODE") != nullptr;
  if (!in_worker) return;
  static const bool same_file = [] {
    struct stat out, err;
    return fstat(1, &out) == 0 && fstat(2, &err) == 0 && out.st_dev == err.st_dev &&
           out.st_ino == err.st_ino;
  }();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  const std::string marker =
      absl::StrCat(":troupe task ", BytesToHex(spec.task_id()), " ", spec.function_name(), ":\n");
  (void)!write(1, marker.data(), marker.size());
  if (!same_file) (void)!write(2, marker.data(), marker.size());
}

// What an owner gets for a task cancelled before it ran.
rpc::PushTaskReply CancelledReply() {
  rpc::PushTaskReply reply;
  reply.set_cancelled(true);
  return reply;
}

}  // namespace

struct TaskExecutor::RunningTask {
  std::string task_id;
  std::atomic<bool> cancelled{false};
};

thread_local const TaskExecutor::RunningTask* TaskExecutor::current_task_ = nullptr;

std::string TaskExecutor::CurrentTaskId() {
  return current_task_ != nullptr ? current_task_->task_id : std::string();
}

bool TaskExecutor::CurrentTaskCancelled() {
  return current_task_ != nullptr && current_task_->cancelled.load(std::memory_order_relaxed);
}

TaskExecutor::CancelOutcome TaskExecutor::Cancel(const std::string& task_id) {
  std::optional<Push> dropped;
  std::vector<Done> duplicates;
  const rpc::PushTaskReply reply = CancelledReply();
  {
    absl::MutexLock lock(&mu_);
    if (auto running = running_.find(task_id); running != running_.end()) {
      running->second->cancelled.store(true, std::memory_order_relaxed);
      return CancelOutcome::kRunning;
    }
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Push& push) {
      return push.request != nullptr && push.request->task().task_id() == task_id;
    });
    if (it == queue_.end()) {
      if (early_cancels_.insert(task_id).second) {
        early_cancel_order_.push_back(task_id);
        if (early_cancel_order_.size() > kMaxEarlyCancels) {
          early_cancels_.erase(early_cancel_order_.front());
          early_cancel_order_.pop_front();
        }
      }
      return CancelOutcome::kNotHere;
    }
    dropped = std::move(*it);
    queue_.erase(it);
    RememberReplyLocked(*dropped, reply, &duplicates);
  }
  for (Done& waiting : duplicates) waiting(reply);
  dropped->done(reply);
  return CancelOutcome::kQueued;
}

void TaskExecutor::RememberReplyLocked(const Push& push, rpc::PushTaskReply reply,
                                       std::vector<Done>* duplicates) {
  if (push.caller == nullptr) return;
  auto it = push.caller->admitted.find(push.seq);
  if (it == push.caller->admitted.end()) return;  // acknowledged or given up on meanwhile
  it->second.reply = std::move(reply);
  duplicates->swap(it->second.duplicates);
}

TaskExecutor::TaskExecutor(RunTask run, absl::Duration lease_order_hold)
    : run_(std::move(run)), lease_order_hold_(lease_order_hold) {}

TaskExecutor::~TaskExecutor() { Shutdown(); }

void TaskExecutor::Enqueue(const rpc::PushTaskRequest* request, Done done) {
  Push push{request, std::move(done)};
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (request->task().type() == rpc::TaskSpec::ACTOR_TASK) {
      EnqueueActorCallLocked(std::move(push), &answers);
    } else if (!exit_requested_) {
      if (request->lease_id().empty()) {
        queue_.push_back(std::move(push));
      } else {
        EnqueueLeaseTaskLocked(std::move(push));
      }
      queued_.Signal();
      return;
    } else {
      // Leaving (ExitActor, or shutting down): nothing will run it. Answer now.
      answers.emplace_back(std::move(push.done), Exiting());
    }
  }
  for (auto& [answer_done, answer] : answers) answer_done(std::move(answer));
}

void TaskExecutor::EnqueueActorCallLocked(Push push, Answers* answers) {
  const rpc::TaskSpec& spec = push.request->task();
  push.seq = spec.sequence_number();
  CallerOrder& order = caller_order_[spec.caller_worker_id()];
  // Every reply below the caller's first unanswered call has reached it: forget them. (One still
  // running was given up on by its caller; resends of it waiting here end too.)
  const int64_t acked = spec.caller_first_unanswered();
  for (auto it = order.admitted.begin(); it != order.admitted.end() && it->first < acked;) {
    for (Done& waiting : it->second.duplicates) {
      answers->emplace_back(std::move(waiting), Abandoned(it->first));
    }
    it = order.admitted.erase(it);
  }
  if (acked > order.next) {
    // This caller's order starts at `acked` here (a restarted actor), or the caller gave up on
    // calls that never arrived: those never run.
    for (auto it = order.early.begin(); it != order.early.end() && it->first < acked;) {
      answers->emplace_back(std::move(it->second.done), Abandoned(it->first));
      it = order.early.erase(it);
    }
    order.next = acked;
  }
  if (push.seq < order.next) {
    // Delivered before: answer with the first delivery's reply, never run it again.
    auto it = order.admitted.find(push.seq);
    if (it == order.admitted.end()) {
      answers->emplace_back(std::move(push.done), Abandoned(push.seq));
    } else if (it->second.reply.has_value()) {
      answers->emplace_back(std::move(push.done), *it->second.reply);
    } else if (exit_requested_) {
      answers->emplace_back(std::move(push.done), Exiting());  // it may never finish
    } else {
      it->second.duplicates.push_back(std::move(push.done));  // answered when it finishes
    }
    return;
  }
  if (exit_requested_) {
    answers->emplace_back(std::move(push.done), Exiting());
    return;
  }
  const size_t queued_before = queue_.size();
  if (push.seq > order.next) {
    order.early.emplace(push.seq, std::move(push));  // waits for its turn
  } else {
    AdmitLocked(order, std::move(push), answers);
  }
  // Calls whose turn has come: after this one, or at the caller's new start.
  for (auto it = order.early.begin(); it != order.early.end() && it->first <= order.next;) {
    if (it->first == order.next) {
      AdmitLocked(order, std::move(it->second), answers);
    } else if (auto admitted = order.admitted.find(it->first); admitted != order.admitted.end()) {
      // A resend that waited beside the call just admitted.
      admitted->second.duplicates.push_back(std::move(it->second.done));
    } else {
      answers->emplace_back(std::move(it->second.done), Abandoned(it->first));
    }
    it = order.early.erase(it);
  }
  if (queue_.size() > queued_before) queued_.SignalAll();
}

void TaskExecutor::AdmitLocked(CallerOrder& order, Push push, Answers* answers) {
  order.next = push.seq + 1;
  order.admitted.try_emplace(push.seq);
  push.caller = &order;
  const rpc::TaskSpec& spec = push.request->task();
  if (spec.cancelled() || (!early_cancels_.empty() && early_cancels_.erase(spec.task_id()) > 0)) {
    // Cancelled before it came (by its caller, or a CancelTask that overtook the push): it
    // takes its turn without running, and its answer goes out now.
    std::vector<Done> duplicates;  // none yet: it was just admitted
    RememberReplyLocked(push, CancelledReply(), &duplicates);
    answers->emplace_back(std::move(push.done), CancelledReply());
    return;
  }
  queue_.push_back(std::move(push));
}

void TaskExecutor::EnqueueLeaseTaskLocked(Push push) {
  const rpc::PushTaskRequest& request = *push.request;
  if (request.lease_id() != lease_order_.lease_id) {
    // A new lease: what the last one still held runs now, and this one's order starts at 0.
    for (auto& [seq, held] : lease_order_.early) queue_.push_back(std::move(held.first));
    lease_order_ = LeaseOrder{request.lease_id()};
  }
  const int64_t seq = request.lease_sequence();
  if (seq > lease_order_.next) {
    if (lease_order_.early.count(seq) == 0) {
      lease_order_.early.emplace(seq, std::make_pair(std::move(push), absl::Now()));
    } else {
      queue_.push_back(std::move(push));  // a second push at one place (a broken caller): run it
    }
    return;
  }
  queue_.push_back(std::move(push));
  lease_order_.next = std::max(lease_order_.next, seq + 1);
  QueueHeldLocked(std::nullopt);
}

void TaskExecutor::QueueHeldLocked(std::optional<absl::Time> now) {
  auto& early = lease_order_.early;
  while (!early.empty()) {
    auto first = early.begin();
    const bool overdue = now.has_value() && *now - first->second.second >= lease_order_hold_;
    if (first->first > lease_order_.next && !overdue) return;
    lease_order_.next = std::max(lease_order_.next, first->first + 1);
    queue_.push_back(std::move(first->second.first));
    early.erase(first);
  }
}

bool TaskExecutor::Take(bool block, Push* push) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!lease_order_.early.empty()) QueueHeldLocked(absl::Now());
    if (!block || !queue_.empty() || exit_requested_) break;
    if (lease_order_.early.empty()) {
      queued_.Wait(&mu_);
    } else {
      queued_.WaitWithTimeout(&mu_, lease_order_hold_ / 4);
    }
  }
  if (exit_requested_ || queue_.empty()) return false;
  *push = std::move(queue_.front());
  queue_.pop_front();
  // Cancelled before it arrived (an actor call waiting for an earlier one, a push on its way).
  if (push->request->task().cancelled() ||
      (!early_cancels_.empty() && early_cancels_.erase(push->request->task().task_id()) > 0)) {
    push->cancelled = true;
  }
  return true;
}

bool TaskExecutor::RunOne(Push push) {
  rpc::PushTaskReply reply;
  if (push.cancelled) {
    reply = CancelledReply();
  } else {
    MarkTaskStart(push.request->task());
    RunningTask running;
    running.task_id = push.request->task().task_id();
    {
      absl::MutexLock lock(&mu_);
      running_[running.task_id] = &running;
    }
    const auto started = std::chrono::steady_clock::now();
    current_task_ = &running;
    reply = run_(*push.request);
    current_task_ = nullptr;
    reply.set_run_us(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - started)
                         .count());
    {
      absl::MutexLock lock(&mu_);
      running_.erase(running.task_id);
    }
    // Cancelled while it ran: whatever it returned, its owner reports TaskCancelledError.
    if (running.cancelled.load(std::memory_order_relaxed)) reply.set_cancelled(true);
  }
  // Read what is needed before answering: the request is gone after `done`.
  const rpc::TaskSpec& spec = push.request->task();
  const bool created = spec.type() == rpc::TaskSpec::ACTOR_CREATION_TASK && !reply.cancelled() &&
                       reply.returns_size() > 0 && !reply.returns(0).is_application_error();
  // An actor call's reply is kept (copied outside the lock) until its caller acknowledges it.
  std::optional<rpc::PushTaskReply> cached;
  if (push.caller != nullptr) cached = reply;
  std::vector<Done> duplicates;
  bool keep_running = true;
  {
    absl::MutexLock lock(&mu_);
    if (cached) RememberReplyLocked(push, *std::move(cached), &duplicates);
    if (created) {
      current_actor_ = *ActorId::FromBinary(spec.actor_id());
      // More calls at once: extra threads take from the same queue.
      for (int i = 1; i < spec.max_concurrency() && !exit_requested_; ++i) {
        extra_executors_.emplace_back([this] { RunLoop(); });
      }
    }
    if (exit_after_task_) {
      exit_requested_ = true;
      queued_.SignalAll();
      keep_running = false;
    }
  }
  for (Done& waiting : duplicates) waiting(reply);
  push.done(std::move(reply));
  return keep_running;
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
    for (auto& [seq, held] : lease_order_.early) unrun.push_back(std::move(held.first));
    lease_order_.early.clear();
    for (auto& [caller, order] : caller_order_) {
      for (auto& [seq, push] : order.early) unrun.push_back(std::move(push));
      order.early.clear();
      for (auto& [seq, admitted] : order.admitted) {
        for (Done& waiting : admitted.duplicates) {
          unrun.push_back(Push{nullptr, std::move(waiting)});
        }
        admitted.duplicates.clear();
      }
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

size_t TaskExecutor::num_cached_replies() const {
  absl::MutexLock lock(&mu_);
  size_t cached = 0;
  for (const auto& [caller, order] : caller_order_) {
    for (const auto& [seq, admitted] : order.admitted) cached += admitted.reply.has_value();
  }
  return cached;
}

}  // namespace troupe
