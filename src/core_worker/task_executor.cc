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

struct TaskExecutor::RunningTask : TaskExecutor::ActorCall,
                                   std::enable_shared_from_this<TaskExecutor::RunningTask> {
  TaskExecutor* executor = nullptr;
  std::string task_id;
  std::atomic<bool> cancelled{false};
  bool ran = false;  // started (not answered unrun as cancelled)
  std::chrono::steady_clock::time_point started;
  // Set before the task is shared; `push.done` is taken (under the executor's lock) by whoever
  // answers. The rest: under the executor's lock.
  Push push;
  bool answered = false;
  bool suspended = false;  // the start returned without answering (an async call waits)
  std::function<void()> on_cancel;

  void Post(std::function<void()> fn) override {
    executor->PostFor(shared_from_this(), std::move(fn), std::nullopt);
  }
  void PostAfter(absl::Duration delay, std::function<void()> fn) override {
    executor->PostFor(shared_from_this(), std::move(fn), absl::Now() + delay);
  }
  void OnCancel(std::function<void()> on_cancel) override {
    executor->SetOnCancel(this, std::move(on_cancel));
  }
};

thread_local TaskExecutor::RunningTask* TaskExecutor::current_task_ = nullptr;

std::string TaskExecutor::CurrentTaskId() {
  return current_task_ != nullptr ? current_task_->task_id : std::string();
}

bool TaskExecutor::CurrentTaskCancelled() {
  return current_task_ != nullptr && current_task_->cancelled.load(std::memory_order_relaxed);
}

const rpc::TaskSpec* TaskExecutor::CurrentTaskSpec() {
  if (current_task_ == nullptr || current_task_->push.request == nullptr) return nullptr;
  return &current_task_->push.request->task();
}

std::shared_ptr<TaskExecutor::ActorCall> TaskExecutor::CurrentCall() {
  if (current_task_ == nullptr) return nullptr;
  {
    // Only an async actor's loop runs what is posted to it.
    absl::MutexLock lock(&current_task_->executor->mu_);
    if (!current_task_->executor->async_) return nullptr;
  }
  return current_task_->shared_from_this();
}

void TaskExecutor::PostFor(std::shared_ptr<RunningTask> call, std::function<void()> fn,
                           std::optional<absl::Time> at) {
  absl::MutexLock lock(&mu_);
  if (exit_requested_) return;  // the loop is gone: nothing runs it
  if (at.has_value()) {
    timers_.emplace(*at, Posted{std::move(call), std::move(fn)});
  } else {
    posted_.push_back(Posted{std::move(call), std::move(fn)});
  }
  queued_.SignalAll();
}

void TaskExecutor::SetOnCancel(RunningTask* call, std::function<void()> on_cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (!call->cancelled.load(std::memory_order_relaxed) || call->answered || !on_cancel) {
      call->on_cancel = std::move(on_cancel);
      return;
    }
    call->on_cancel = nullptr;
  }
  on_cancel();  // cancelled already
}

bool TaskExecutor::HasConcurrencyGroup(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return name.empty() || groups_.contains(name);
}

int TaskExecutor::num_in_flight() const {
  absl::MutexLock lock(&mu_);
  int in_flight = 0;
  for (const auto& [name, group] : groups_) in_flight += group.running;
  return in_flight;
}

TaskExecutor::CancelOutcome TaskExecutor::Cancel(const std::string& task_id) {
  std::optional<Push> dropped;
  std::vector<Done> duplicates;
  const rpc::PushTaskReply reply = CancelledReply();
  std::function<void()> on_cancel;
  {
    absl::MutexLock lock(&mu_);
    if (auto running = running_.find(task_id); running != running_.end()) {
      running->second->cancelled.store(true, std::memory_order_relaxed);
      // A call waiting for something (an async call) wakes up to see it (below, unlocked).
      on_cancel = std::move(running->second->on_cancel);
      running->second->on_cancel = nullptr;
    } else {
      std::deque<Push>* queue = nullptr;
      std::deque<Push>::iterator it;
      for (auto& [name, group] : groups_) {
        it = std::find_if(group.queue.begin(), group.queue.end(), [&](const Push& push) {
          return push.request != nullptr && push.request->task().task_id() == task_id;
        });
        if (it != group.queue.end()) {
          queue = &group.queue;
          break;
        }
      }
      if (queue == nullptr) {
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
      queue->erase(it);
      RememberReplyLocked(*dropped, reply, &duplicates);
    }
  }
  if (!dropped.has_value()) {
    if (on_cancel) on_cancel();
    return CancelOutcome::kRunning;
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
    : TaskExecutor([run = std::move(run)](const rpc::PushTaskRequest& request,
                                          Finish finish) { finish(run(request)); },
                   lease_order_hold) {}

TaskExecutor::TaskExecutor(StartTask start, absl::Duration lease_order_hold)
    : start_(std::move(start)), lease_order_hold_(lease_order_hold) {
  absl::MutexLock lock(&mu_);
  groups_[""];
}

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
        QueueLocked(std::move(push));
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
  const uint64_t queued_before = next_order_;
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
  if (next_order_ > queued_before) queued_.SignalAll();
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
  push.group = spec.concurrency_group();
  QueueLocked(std::move(push));
}

void TaskExecutor::QueueLocked(Push push) {
  push.order = next_order_++;
  auto group = groups_.find(push.group);
  if (group == groups_.end()) {
    push.group.clear();  // not a group of this actor: its run refuses it
    group = groups_.find("");
  }
  group->second.queue.push_back(std::move(push));
}

void TaskExecutor::EnqueueLeaseTaskLocked(Push push) {
  const rpc::PushTaskRequest& request = *push.request;
  if (request.lease_id() != lease_order_.lease_id) {
    // A new lease: what the last one still held runs now, and this one's order starts at 0.
    for (auto& [seq, held] : lease_order_.early) QueueLocked(std::move(held.first));
    lease_order_ = LeaseOrder{request.lease_id()};
  }
  const int64_t seq = request.lease_sequence();
  if (seq > lease_order_.next) {
    if (lease_order_.early.count(seq) == 0) {
      lease_order_.early.emplace(seq, std::make_pair(std::move(push), absl::Now()));
    } else {
      QueueLocked(std::move(push));  // a second push at one place (a broken caller): run it
    }
    return;
  }
  QueueLocked(std::move(push));
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
    QueueLocked(std::move(first->second.first));
    early.erase(first);
  }
}

TaskExecutor::Group* TaskExecutor::PickGroupLocked(const std::string& group) {
  if (!async_ || !group.empty()) {
    auto it = groups_.find(group);
    return it == groups_.end() || it->second.queue.empty() ? nullptr : &it->second;
  }
  // The event loop: the earliest admitted call of a group with room.
  Group* best = nullptr;
  for (auto& [name, candidate] : groups_) {
    if (candidate.queue.empty() || candidate.running >= candidate.limit) continue;
    if (best == nullptr || candidate.queue.front().order < best->queue.front().order) {
      best = &candidate;
    }
  }
  return best;
}

bool TaskExecutor::Take(bool block, const std::string& group, Work* work) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!lease_order_.early.empty()) QueueHeldLocked(absl::Now());
    if (exit_requested_) return false;
    const bool loop = async_ && group.empty();
    if (loop) {
      // What calls in flight wait for comes first: it finishes them (and frees their room).
      const absl::Time now = absl::Now();
      while (!timers_.empty() && timers_.begin()->first <= now) {
        posted_.push_back(std::move(timers_.begin()->second));
        timers_.erase(timers_.begin());
      }
      if (!posted_.empty()) {
        work->call = std::move(posted_.front().call);
        work->posted = std::move(posted_.front().fn);
        posted_.pop_front();
        return true;
      }
    }
    if (Group* picked = PickGroupLocked(group); picked != nullptr) {
      work->call = nullptr;
      work->posted = nullptr;
      work->push = std::move(picked->queue.front());
      picked->queue.pop_front();
      ++picked->running;
      // Cancelled before it arrived (an actor call waiting for an earlier one, a push on its way).
      const rpc::TaskSpec& spec = work->push.request->task();
      if (spec.cancelled() ||
          (!early_cancels_.empty() && early_cancels_.erase(spec.task_id()) > 0)) {
        work->push.cancelled = true;
      }
      return true;
    }
    if (!block) return false;
    absl::Time deadline = absl::InfiniteFuture();
    if (!lease_order_.early.empty()) deadline = absl::Now() + lease_order_hold_ / 4;
    if (loop && !timers_.empty()) deadline = std::min(deadline, timers_.begin()->first);
    queued_.WaitWithDeadline(&mu_, deadline);
  }
}

void TaskExecutor::RunOne(Push push) {
  auto running = std::make_shared<RunningTask>();
  running->executor = this;
  running->task_id = push.request->task().task_id();
  const bool cancelled = push.cancelled;
  running->push = std::move(push);
  if (cancelled) {
    Answer(running, CancelledReply());
    return;
  }
  const rpc::PushTaskRequest& request = *running->push.request;
  MarkTaskStart(request.task());
  {
    absl::MutexLock lock(&mu_);
    running_[running->task_id] = running;
  }
  running->ran = true;
  running->started = std::chrono::steady_clock::now();
  current_task_ = running.get();
  start_(request, [this, running](rpc::PushTaskReply reply) { Answer(running, std::move(reply)); });
  current_task_ = nullptr;
  absl::MutexLock lock(&mu_);
  if (!running->answered) running->suspended = true;
}

void TaskExecutor::Answer(const std::shared_ptr<RunningTask>& running, rpc::PushTaskReply reply) {
  if (running->ran) {
    reply.set_run_us(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - running->started)
                         .count());
  }
  Done done;
  std::vector<Done> duplicates;
  {
    absl::MutexLock lock(&mu_);
    if (running->answered) return;  // answered at Shutdown
    running->answered = true;
    running->on_cancel = nullptr;
    const Push& push = running->push;
    if (auto it = running_.find(running->task_id); it != running_.end() && it->second == running) {
      running_.erase(it);
    }
    if (auto group = groups_.find(push.group); group != groups_.end()) --group->second.running;
    // Cancelled while it ran: whatever it returned, its owner reports TaskCancelledError.
    if (running->cancelled.load(std::memory_order_relaxed)) reply.set_cancelled(true);
    // An actor call's reply is kept until its caller acknowledges it.
    if (push.caller != nullptr) RememberReplyLocked(push, reply, &duplicates);
    const rpc::TaskSpec& spec = push.request->task();
    if (spec.type() == rpc::TaskSpec::ACTOR_CREATION_TASK && !reply.cancelled() &&
        reply.returns_size() > 0 && !reply.returns(0).is_application_error()) {
      current_actor_ = *ActorId::FromBinary(spec.actor_id());
      async_ = spec.async_actor();
      const int max_concurrency = std::max(1, spec.max_concurrency());
      groups_[""].limit = max_concurrency;
      for (const auto& [name, limit] : spec.concurrency_groups()) {
        groups_[name].limit = std::max(1, limit);
      }
      // A threaded actor: each group's threads take from its queue (this thread serves the
      // default group). An async actor's calls all run on this thread, its event loop.
      for (const auto& [name, group] : groups_) {
        if (async_ || exit_requested_) break;
        for (int i = name.empty() ? 1 : 0; i < group.limit; ++i) {
          extra_executors_.emplace_back([this, name = name] { Serve(name); });
        }
      }
    }
    if (exit_after_task_) exit_requested_ = true;
    queued_.SignalAll();
    done = std::move(running->push.done);
  }
  for (Done& waiting : duplicates) waiting(reply);
  done(std::move(reply));
}

void TaskExecutor::Serve(const std::string& group) {
  Work work;
  while (Take(/*block=*/true, group, &work)) {
    if (work.posted) {
      current_task_ = work.call.get();
      work.posted();
      current_task_ = nullptr;
      work = Work();
      continue;
    }
    RunOne(std::move(work.push));
  }
}

void TaskExecutor::RunLoop() { Serve(""); }

bool TaskExecutor::RunNext() {
  Work work;
  if (!Take(/*block=*/false, "", &work)) return false;
  if (work.posted) {
    current_task_ = work.call.get();
    work.posted();
    current_task_ = nullptr;
    return true;
  }
  RunOne(std::move(work.push));
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
  std::deque<Posted> posted;
  std::multimap<absl::Time, Posted> timers;
  {
    absl::MutexLock lock(&mu_);
    exit_requested_ = true;
    for (auto& [name, group] : groups_) {
      for (Push& push : group.queue) unrun.push_back(std::move(push));
      group.queue.clear();
    }
    // Async calls waiting for something: nothing will resume them now.
    for (auto& [id, running] : running_) {
      if (!running->suspended || running->answered) continue;
      running->answered = true;
      unrun.push_back(Push{nullptr, std::move(running->push.done)});
    }
    posted.swap(posted_);
    timers.swap(timers_);
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
  size_t queued = 0;
  for (const auto& [name, group] : groups_) queued += group.queue.size();
  return queued;
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
