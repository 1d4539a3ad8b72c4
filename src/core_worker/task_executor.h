// Worker mode: the queue of tasks pushed to this worker and the threads that run them.
// Actor calls are deduplicated and ordered per caller (the caller's worker ID), by the caller's
// sequence numbers: exactly once per actor incarnation (this process), in order.
//   - A call runs only after every lower-numbered call of its caller was admitted: calls that
//     arrive early wait for their turn ("never n+1 before n").
//   - A call that arrives again (a resend after a transport error: the reply was lost, or the
//     channel reset after delivery) is not run again: it gets the reply of the first delivery,
//     at once if that call has finished, else when it does.
//   - Each push carries the caller's first unanswered sequence number: every reply below it has
//     reached the caller, so those cached replies are dropped (memory stays bounded by the
//     caller's calls in flight), and a restarted actor (a new process, empty state) starts that
//     caller's order there. Across incarnations resent calls run again (at-least-once).
// Normal tasks run in the order their caller pushed them to this lease (lease_sequence): one that
// arrives before an earlier one (two calls in flight can reach the queue in either order) waits
// for it, at most `lease_order_hold`, so that a task never waits behind a later one whose result
// it needs.
// An actor created with max_concurrency > 1 gets extra executor threads taking from the same
// queue (calls are still admitted in order and deduplicated, but run in parallel, unordered).
// Concurrency groups (the creation task's concurrency_groups): each named group has a queue and
// threads of its own (as many as its limit); an admitted call goes to its group's queue (a call
// naming a group the actor lacks goes to the default group, whose run refuses it).
// Async actors (the creation task's async_actor): no extra threads. The thread in RunLoop is the
// actor's event loop: a call may return without answering (run_ hands it a Finish to call
// later); while up to the group's limit of calls are in flight, the loop starts more of them and
// runs the closures posted to it (ActorCall::Post, from any thread, e.g. when an awaited object
// becomes ready) and its timers (ActorCall::PostAfter), each as part of its call: the call's
// ID and cancel flag read as current while it runs. Cancelling such a call also runs the
// callback it registered (ActorCall::OnCancel), so a call waiting for something wakes up.
// Holds no gRPC types: a push is a request plus a completion callback; the gRPC service
// (core_worker_grpc_service.h) wraps the reactor in that callback.
// Owned by CoreWorker; owns the extra executor threads. Thread-safe: Enqueue runs on gRPC
// threads, RunLoop on the worker's main thread (and the extra executors); `done` callbacks run on
// the executor thread that ran (or finished) the task, or on the caller's thread when the task
// will not run (or its reply is already known), never with the executor's lock held.
// Cancellation (Cancel, from the owner's CancelTask): a queued task is answered as cancelled at
// once and never runs (an actor call keeps its place in its caller's order: later calls still
// run); a running one sees CurrentTaskCancelled() (troupe::IsCancelled) turn true, and whatever
// it returns is answered as cancelled.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "src/common/ids.h"

namespace troupe {

class TaskExecutor {
 public:
  // Answers a push: the reply (the task ran; its returns may hold an application error), or why
  // it did not run (UNAVAILABLE: the worker is exiting; ABORTED: an actor call its caller has
  // already been answered for, or gave up on — it is not run again).
  using Done = std::function<void(absl::StatusOr<rpc::PushTaskReply>)>;
  // Runs one task on the calling thread.
  using RunTask = std::function<rpc::PushTaskReply(const rpc::PushTaskRequest&)>;
  // Answers a task that was run: exactly once, at once or later (an async actor call, from its
  // event loop thread).
  using Finish = std::function<void(rpc::PushTaskReply)>;
  // Starts one task on the calling thread; it is answered when `finish` is called.
  using StartTask = std::function<void(const rpc::PushTaskRequest&, Finish finish)>;

  // An actor call that is running on this executor (started, maybe waiting for something), as
  // its code sees it: the way back onto its event loop. Thread-safe. Must not be used after the
  // executor is destroyed.
  class ActorCall {
   public:
    virtual ~ActorCall() = default;
    // Runs `fn` on the event loop thread as part of this call; dropped once the loop ended.
    virtual void Post(std::function<void()> fn) = 0;
    // Runs `fn` there after `delay`.
    virtual void PostAfter(absl::Duration delay, std::function<void()> fn) = 0;
    // `on_cancel` runs once (on the canceller's thread, or at once if the call was cancelled
    // already) when the call's owner cancels it; replaces the one registered before; nullptr
    // clears it.
    virtual void OnCancel(std::function<void()> on_cancel) = 0;
  };

  // `lease_order_hold`: how long a normal task that arrived before an earlier push of its lease
  // waits for it (a push that never comes — its call failed — must not hold the rest forever).
  explicit TaskExecutor(RunTask run, absl::Duration lease_order_hold = absl::Seconds(1));
  explicit TaskExecutor(StartTask start, absl::Duration lease_order_hold = absl::Seconds(1));
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

  // What Cancel found of a task.
  enum class CancelOutcome {
    kQueued,   // it was waiting here: answered now as cancelled (reply.cancelled), never run
    kRunning,  // it runs: its IsCancelled flag is set and its reply will be marked cancelled
    kNotHere,  // not here (yet, or any more): if it arrives later it is answered as cancelled
  };
  // The task's owner cancelled task `task_id` (binary). Any thread; `done` callbacks of the
  // answered task run on this thread. Remembers at most kMaxEarlyCancels tasks not here yet.
  CancelOutcome Cancel(const std::string& task_id) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxEarlyCancels = 10000;
  // On the thread running a task (an executor thread, inside run_): its task ID (binary) and
  // whether it was cancelled. "" and false on any other thread.
  static std::string CurrentTaskId();
  static bool CurrentTaskCancelled();
  // On the thread running a task: its spec (valid until it is answered); null elsewhere.
  static const rpc::TaskSpec* CurrentTaskSpec();
  // On the thread running an actor call (or a closure posted to it): the call; null elsewhere.
  static std::shared_ptr<ActorCall> CurrentCall();
  // Whether the actor has concurrency group `name` ("" always). Any thread.
  bool HasConcurrencyGroup(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  // Started calls not answered yet, over all groups (tests).
  int num_in_flight() const ABSL_LOCKS_EXCLUDED(mu_);

  // Inside an actor: its ID once the creation task succeeded; nil elsewhere. Any thread.
  ActorId current_actor_id() const {
    absl::MutexLock lock(&mu_);
    return current_actor_;
  }
  // Tasks waiting to run, not counting early actor calls (tests).
  size_t num_queued() const;
  // Actor-call replies kept for possible resends, over all callers (tests: bounded memory).
  size_t num_cached_replies() const;

 private:
  struct CallerOrder;
  struct Push {
    const rpc::PushTaskRequest* request = nullptr;
    Done done;
    CallerOrder* caller = nullptr;  // actor calls: whose reply to remember (node_hash_map: stable)
    int64_t seq = -1;
    bool cancelled = false;  // set by Take: answer as cancelled, do not run
    uint64_t order = 0;      // admission order (an async loop starts the earliest first)
    std::string group;       // its concurrency group's queue ("": the default)
  };
  // A task started and not answered yet (shared with the closures posted to its loop).
  struct RunningTask;
  // The task the current thread runs (set around run_ and around closures posted to it).
  static thread_local RunningTask* current_task_;
  // A concurrency group: its queue, its limit of calls at once, the calls in flight.
  struct Group {
    std::deque<Push> queue;
    int limit = 1;
    int running = 0;
  };
  // What an executor thread takes next: a task, or a closure posted to the loop.
  struct Work {
    Push push;
    std::shared_ptr<RunningTask> call;  // set for a posted closure
    std::function<void()> posted;
  };
  struct Posted {
    std::shared_ptr<RunningTask> call;
    std::function<void()> fn;
  };
  // An admitted actor call whose reply the caller has not acknowledged yet: running (no reply;
  // resends wait in `duplicates`) or finished (the reply, for resends).
  struct Admitted {
    std::optional<rpc::PushTaskReply> reply;
    std::vector<Done> duplicates;
  };
  // Per caller: the next sequence number to admit, calls that arrived early (a resend of an
  // early call waits beside it), and the admitted calls not acknowledged yet.
  struct CallerOrder {
    int64_t next = -1;
    std::multimap<int64_t, Push> early;
    std::map<int64_t, Admitted> admitted;
  };
  // The normal tasks of the lease being served (a worker serves one lease at a time): the next
  // lease sequence number to queue, and pushes that arrived before it, with their arrival time.
  struct LeaseOrder {
    std::string lease_id;
    int64_t next = 0;
    std::map<int64_t, std::pair<Push, absl::Time>> early;
  };
  // Answers to give once the lock is released.
  using Answers = std::vector<std::pair<Done, absl::StatusOr<rpc::PushTaskReply>>>;
  // Routes one actor call: admits it (queues it), holds it, or answers it from the cache.
  void EnqueueActorCallLocked(Push push, Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits an actor call: queues it, or answers it (into `answers`) if it was cancelled.
  void AdmitLocked(CallerOrder& order, Push push, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a leased normal task in its lease's order, or holds it until its turn.
  void EnqueueLeaseTaskLocked(Push push) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues held lease tasks whose turn has come, and (`now` given) those held past the limit.
  void QueueHeldLocked(std::optional<absl::Time> now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues an admitted push in its group (the default one for a group not known here).
  void QueueLocked(Push push) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The group a thread serving `group` takes from next (the async loop serves them all, each
  // while it has room); nullptr when none has work.
  Group* PickGroupLocked(const std::string& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next work for a thread serving `group`; blocks for some when `block`. False once
  // exit is requested (or, not blocking, when there is none).
  bool Take(bool block, const std::string& group, Work* work) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps an actor call's reply for resends and hands over the resends waiting for it.
  void RememberReplyLocked(const Push& push, rpc::PushTaskReply reply,
                           std::vector<Done>* duplicates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts it (it is answered through Answer, maybe later).
  void RunOne(Push push) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers a started task (once; later calls are ignored).
  void Answer(const std::shared_ptr<RunningTask>& running, rpc::PushTaskReply reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Serves `group` on this thread until exit is requested.
  void Serve(const std::string& group);
  // ActorCall, for RunningTask: posts `fn` (at `at`: a timer) to the loop as part of `call`.
  void PostFor(std::shared_ptr<RunningTask> call, std::function<void()> fn,
               std::optional<absl::Time> at) ABSL_LOCKS_EXCLUDED(mu_);
  void SetOnCancel(RunningTask* call, std::function<void()> on_cancel) ABSL_LOCKS_EXCLUDED(mu_);

  const StartTask start_;
  const absl::Duration lease_order_hold_;
  mutable absl::Mutex mu_;
  absl::CondVar queued_;
  // The default group ("") and the actor's named ones.
  absl::flat_hash_map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool async_ ABSL_GUARDED_BY(mu_) = false;  // an async actor (its event loop runs here)
  std::deque<Posted> posted_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, Posted> timers_ ABSL_GUARDED_BY(mu_);
  bool exit_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_after_task_ ABSL_GUARDED_BY(mu_) = false;
  absl::node_hash_map<std::string, CallerOrder> caller_order_ ABSL_GUARDED_BY(mu_);
  LeaseOrder lease_order_ ABSL_GUARDED_BY(mu_);
  ActorId current_actor_ ABSL_GUARDED_BY(mu_);
  // Tasks running now (started, not answered), by task ID (binary), and cancelled tasks that
  // had not arrived (FIFO).
  absl::flat_hash_map<std::string, std::shared_ptr<RunningTask>> running_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> early_cancels_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> early_cancel_order_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> extra_executors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
